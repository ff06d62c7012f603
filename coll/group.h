/* SPDX-License-Identifier: MIT */
/*
 * group.h - a ring of ranks: every rank of the context (gw_coll's world),
 * or a sub-group of the hierarchical allreduce (hier.h: the ranks of this
 * host, or the ranks of the same local index on every host). The ring
 * engine (ring.c) runs over any of them.
 */
#ifndef GW_COLL_GROUP_H
#define GW_COLL_GROUP_H

#include <stdbool.h>

struct coll_group {
	int size;	  /* members */
	int me;		  /* this rank's position among them */
	int *rank;	  /* the context's rank of each member, in ring order */
	const char *name; /* for error messages, e.g. "allreduce" */
	bool shm;	  /* every member on this host, reached over shm (coll_group_links()) */
};

/* The context's rank of the member d places after this rank (d may be < 0). */
static inline int group_peer(const struct coll_group *g, int d)
{
	int i = ((g->me + d) % g->size + g->size) % g->size;

	return g->rank[i];
}

#endif
