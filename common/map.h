/* SPDX-License-Identifier: MIT */
/*
 * map.h - a small open-addressing hash map from u64 keys to pointers,
 * grown at half load. Values are caller-owned; NULL is not a value.
 * Used for per-(peer, slot) state, where lookups sit on the send path.
 */
#ifndef GW_MAP_H
#define GW_MAP_H

#include <stddef.h>
#include <stdint.h>

struct gw_map_ent {
	uint64_t key;
	void *val;
};

struct gw_map {
	struct gw_map_ent *e;
	size_t cap, count;
};

int gw_map_init(struct gw_map *m);
/** gw_map_fini() - free the table (not the values). */
void gw_map_fini(struct gw_map *m);
void *gw_map_get(const struct gw_map *m, uint64_t key);
/** gw_map_put() - insert key (absent) -> val. Return: 0 or -ENOMEM. */
int gw_map_put(struct gw_map *m, uint64_t key, void *val);

/* Walk: for (size_t i = 0; i < m->cap; i++) if (m->e[i].val) ... */

#endif
