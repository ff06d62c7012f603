/* SPDX-License-Identifier: MIT */
/*
 * coll.c - the collectives object: what it wraps (a context it does not
 * own), its settings (segments, pieces, the algorithm), the groups of ranks
 * its rings run over, and the first error, which every later call returns
 * (a failed collective leaves the peers' sequence numbers out of step).
 *
 * The collectives themselves live beside it: exact.c (barrier, broadcast,
 * allgather), check.c (the call check and the slot streams), allreduce.c
 * (the allreduce and its halves) and the files it calls (coll_impl.h's map).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coll_impl.h"

int gw_coll_create(struct gw_ctx *ctx, struct gw_coll **out)
{
	struct gw_coll *c;

	*out = NULL;
	if (!ctx)
		return -EINVAL;
	/* Allreduce takes 2 (size - 1) steps of one stream. */
	if (gw_ctx_size(ctx) < 1 || gw_ctx_size(ctx) > (1 << (STEP_BITS - 1)))
		return -E2BIG;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->ctx = ctx;
	/* A rank gone ends the call on every rank at once, not only on its
	 * neighbours (the others would wait for ranks that gave up). */
	gw_ctx_lost_ends_all(ctx, true);
	c->rank = gw_ctx_rank(ctx);
	c->size = gw_ctx_size(ctx);
	c->seg_bytes = GW_COLL_SEGMENT_BYTES;
	c->piece_bytes = GW_COLL_PIECE_BYTES;
	c->world = (struct coll_group){ .size = c->size, .me = c->rank, .name = "allreduce" };
	c->world.rank = malloc((size_t)c->size * sizeof(int));
	if (!c->world.rank) {
		free(c);
		return -ENOMEM;
	}
	for (int r = 0; r < c->size; r++)
		c->world.rank[r] = r;
	coll_group_links(c, &c->world);
	*out = c;
	return 0;
}

void gw_coll_destroy(struct gw_coll *c)
{
	if (!c)
		return;
	free(c->reqs[0].req);
	free(c->reqs[1].req);
	free(c->msgs);
	free(c->offs);
	free(c->world.rank);
	coll_lowrank_fini(&c->lr);
	coll_hier_fini(&c->hier);
	coll_auto_fini(&c->au);
	free(c);
}

struct gw_ctx *gw_coll_ctx(const struct gw_coll *c)
{
	return c->ctx;
}

void gw_coll_set_segment(struct gw_coll *c, uint64_t bytes)
{
	c->seg_bytes = bytes;
}

void gw_coll_set_piece(struct gw_coll *c, uint64_t bytes)
{
	c->piece_bytes = bytes;
}

void gw_coll_set_algo(struct gw_coll *c, enum gw_coll_algo algo)
{
	c->hier.algo_set = algo;
	c->hier.decided = false; /* coll_decide() again, and the first lossy call's */
	c->agreed = false;	 /* agreement: it looks at the links that algorithm uses */
}

void coll_revoke(struct gw_coll *c)
{
	struct gw_tp *tp = gw_ctx_tp(c->ctx);

	if (gw_tp_lost_peer(tp) < 0)
		gw_tp_revoke(tp, c->errmsg);
}

/* Remember the first error and say where it happened, and with whom (and
 * why, when that rank revoked the context); then revoke it. */
int coll_fail(struct gw_coll *c, int rc, const char *what, int step)
{
	struct gw_tp *tp = gw_ctx_tp(c->ctx);
	bool receiving;
	int peer = gw_ctx_failed_peer(c->ctx, &receiving), lost = gw_tp_lost_peer(tp);
	const char *mine = gw_tp_revoked(tp), *why;

	if (lost >= 0) /* a post to any rank fails once one is gone: name that one */
		peer = lost;
	why = gw_tp_peer_why(tp, peer);
	char *m = c->errmsg;
	size_t len = sizeof(c->errmsg);

	if (!c->err) {
		c->err = rc;
		if (mine && rc == -ECONNABORTED)
			snprintf(m, len, "%s step %d failed: this rank revoked the context (%s)",
				 what, step, mine);
		else if (why)
			snprintf(m, len, "%s step %d failed: rank %d revoked the context (%s)",
				 what, step, peer, why);
		else if (peer >= 0)
			snprintf(m, len, "%s step %d failed: %s (%s rank %d)", what, step,
				 gw_strerror(rc), receiving ? "receiving from" : "sending to",
				 peer);
		else
			snprintf(m, len, "%s step %d failed: %s", what, step, gw_strerror(rc));
		coll_revoke(c);
	}
	gw_log(GW_LOG_ERROR, GW_LOG_ERROR, c->rank, "%s step %d failed: %s", what, step,
	       gw_strerror(rc));
	return rc;
}

const char *gw_coll_error(const struct gw_coll *c)
{
	return c->err ? c->errmsg : NULL;
}

void coll_group_links(const struct gw_coll *c, struct coll_group *g)
{
	struct gw_conn_stats s;

	g->shm = g->size > 1;
	for (int i = 0; i < g->size && g->shm; i++)
		if (g->rank[i] != c->rank &&
		    (gw_ctx_stats(c->ctx, g->rank[i], &s) || strcmp(s.provider, "shm")))
			g->shm = false;
}
