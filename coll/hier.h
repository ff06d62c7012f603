/* SPDX-License-Identifier: MIT */
/*
 * hier.h - the topology of the ranks and the hierarchical allreduce
 * (hier.c): the state struct gw_coll holds for them, and their calls.
 */
#ifndef GW_COLL_HIER_H
#define GW_COLL_HIER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include "coll.h"
#include "group.h"

/* The topology, decided at the first allreduce (coll_decide()), and the
 * hierarchical reduce-scatter's copy by slices. */
struct coll_hier {
	enum gw_coll_algo algo_set; /* what was asked for */
	bool decided;		    /* on, direct, the groups and the counts hold: */
	bool on;		    /* the hierarchical allreduce runs */
	bool direct;		    /* else lossy calls run direct.c's */
	uint8_t said[2];	    /* what coll_hier_for() logged for the allreduce,
				     * the reduce-scatter: 1 hierarchical, 2 flat */
	int nhosts, per_host;	    /* hosts, ranks on this rank's host */
	struct coll_group local;    /* the ranks of this host */
	struct coll_group cross;    /* the ranks of this local index, a host each */
	int *grid;		    /* nhosts * per_host: the rank of local index i
				     * on host h at [h * per_host + i] */
	struct hier_rs {	    /* the hierarchical reduce-scatter's: */
		float *tmp;	    /* the tensor by pieces, each by slices (rs_piece()) */
		uint64_t cap;	    /* values tmp holds */
		uint64_t *offs;	    /* per_host + 1 slices (the local ring's), per_host + 1
				     * (scratch), nhosts + 1 shards (the cross ring's) */
	} rs;
};

/* Free what h holds (gw_coll_destroy()). */
static inline void coll_hier_fini(struct coll_hier *h)
{
	free(h->local.rank);
	free(h->cross.rank);
	free(h->grid);
	free(h->rs.tmp);
	free(h->rs.offs);
}

struct gw_coll;

/* Decide the algorithm and build the groups, once (gw_coll_algo()).
 * Return: 0 or -ENOMEM. */
int coll_decide(struct gw_coll *c);
/* Whether a call (lossy or not) of what ("allreduce", "reduce-scatter")
 * runs hierarchically: c->hier.on, unless lossy with a sparse or 1-bit codec. */
bool coll_hier_for(struct gw_coll *c, unsigned lossy, const char *what);
/* The sum of buf[0..n) of the tensor key on every rank, by the algorithm
 * decided (coll_decide() must have run): the ring over c->world, or the
 * hierarchical allreduce (coll_hier_for()). Same contract as
 * coll_ring_allreduce(). */
int coll_sum(struct gw_coll *c, uint64_t key, float *buf, uint64_t n, unsigned lossy);
/* The reduce-scatter of buf[0..n) of the tensor key when c->hier.on, after
 * its call check: rank r ends with the sum of buf[offs[r], offs[r + 1])
 * (offs: size + 1 offsets, or NULL for the chunk rule), the rest of buf
 * undefined. Return: 0 or -errno (coll_fail() said where). */
int coll_hier_reduce_scatter(struct gw_coll *c, uint64_t key, float *buf, uint64_t n,
			     const uint64_t *offs, unsigned lossy);

#endif
