/* SPDX-License-Identifier: MIT */
/* map.c - see map.h. Linear probing; capacity a power of two. */
#include <errno.h>
#include <stdlib.h>
#include "map.h"

static size_t slot_of(const struct gw_map *m, uint64_t key)
{
	uint64_t h = key * UINT64_C(0x9E3779B97F4A7C15);
	size_t i = (size_t)(h ^ (h >> 29)) & (m->cap - 1);

	while (m->e[i].val && m->e[i].key != key)
		i = (i + 1) & (m->cap - 1);
	return i;
}

int gw_map_init(struct gw_map *m)
{
	m->cap = 16;
	m->count = 0;
	m->e = calloc(m->cap, sizeof(*m->e));
	return m->e ? 0 : -ENOMEM;
}

void gw_map_fini(struct gw_map *m)
{
	free(m->e);
	m->e = NULL;
	m->cap = m->count = 0;
}

void *gw_map_get(const struct gw_map *m, uint64_t key)
{
	return m->e[slot_of(m, key)].val;
}

int gw_map_put(struct gw_map *m, uint64_t key, void *val)
{
	if ((m->count + 1) * 2 > m->cap) {
		struct gw_map old = *m;

		m->e = calloc(old.cap * 2, sizeof(*m->e));
		if (!m->e) {
			*m = old;
			return -ENOMEM;
		}
		m->cap = old.cap * 2;
		for (size_t i = 0; i < old.cap; i++)
			if (old.e[i].val)
				m->e[slot_of(m, old.e[i].key)] = old.e[i];
		free(old.e);
	}
	m->e[slot_of(m, key)] = (struct gw_map_ent){ key, val };
	m->count++;
	return 0;
}
