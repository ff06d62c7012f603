/* SPDX-License-Identifier: MIT */
/*
 * coll_direct.c - the direct lossy allreduce (scatter-reduce-allgather, as
 * in CGX): every value is compressed twice, whatever the number of ranks.
 *
 * The ring's reduce-scatter encodes the running partial sum again at every
 * hop, so a value is compressed size - 1 times on its way to its owner and
 * one call's squared error grows as about (size + 1) / 2 times one
 * encoding's (tools/scale-sim.c models it to 1,024 ranks). Here:
 *
 *   reduce-scatter  member i owns chunk i + 1 (the ring's rule, so the
 *                   ring's allgather follows unchanged). Every member sends
 *                   its part of chunk k, encoded once with its residual for
 *                   (owner, slot), straight to owner k - 1; the owner adds
 *                   the decoded parts to its own values, exactly, in float32,
 *                   in a fixed order (member me - 1, me - 2, ...);
 *   allgather       the ring's (coll_ring.c, RING_AG): the owner encodes its
 *                   sum once and keeps what the next rank decodes, later
 *                   hops forward that payload byte for byte, so every rank
 *                   ends with the owner's bits.
 *
 * Each rank sends and receives the same bytes as in the ring (size - 1
 * parts of a chunk each way, then the allgather), and encodes and decodes
 * as often; only the pattern differs: size - 1 peers at once instead of one
 * neighbour, so a member's link to each peer carries 1 / (size - 1) of its
 * reduce-scatter.
 *
 * The reduce-scatter alone is the reduce_scatter collective
 * (coll_direct_rs(), exact or lossy), with member i owning chunk i
 * (struct ring's delta -1); the float allgather with the same owners is the
 * ring's allgather (coll_ring_run(..., RING_AG, -1)).
 *
 * Segments and slots. A chunk goes in the ring's segments (coll_ring_init()
 * cuts them for the codec's bytes per value), segment j of every chunk on
 * unit j of the stream, i.e. slot_of(id, j) towards its owner: the units of
 * the ring's first reduce-scatter step, which this run does not use, and
 * below the allgather's. So every (peer, slot) - a residual, a sequence, a
 * frame - meets the same segment of the same chunk at every call. Rounds
 * (segment j of every chunk) go ROUNDS at a time, fewer when their staged
 * residuals would exceed STAGED_MAX values.
 */
#include <string.h>
#include "../common/grow.h"
#include "coll_impl.h"

#define ROUNDS 2
#define STAGED_MAX (UINT64_C(8) << 20) /* values; as coll_ring.c's */

/* Offset and length of segment j of chunk k of the ring g's tensor. */
static uint64_t seg_span(const struct ring *g, int k, uint32_t j, uint64_t *off)
{
	uint64_t q = g->q, rem = g->rem, lo = (uint64_t)j * g->seg;

	*off = OFF(k) + lo;
	return lo >= CNT(k) ? 0 : CNT(k) - lo < g->seg ? CNT(k) - lo : g->seg;
}

/*
 * Post round j into r[0 .. 2 (size - 1)): the receives of segment j of this
 * member's chunk from every other member (added into place), then the sends
 * of segment j of every other chunk to its owner, nearest first.
 */
static int post_round(struct gw_coll *c, const struct ring *g, uint32_t j, struct gw_ctx_req *r)
{
	const struct coll_group *grp = g->grp;
	int size = grp->size, me = grp->me, rc;
	uint32_t slot = slot_of(g->id, g->base + j);
	uint64_t off, cnt;

	memset(r, 0, 2 * (size_t)(size - 1) * sizeof(*r));
	for (int i = 1; i < size; i++) {
		cnt = seg_span(g, mod(me + 1 + g->delta, size), j, &off);
		if (cnt && (rc = gw_ctx_irecv(c->ctx, group_peer(grp, -i), slot, g->buf + off, cnt,
					      GW_CTX_ADD, &r[i - 1])))
			return rc;
	}
	for (int i = 1; i < size; i++) {
		cnt = seg_span(g, mod(me + i + 1 + g->delta, size), j, &off);
		if (cnt && (rc = gw_ctx_isend(c->ctx, group_peer(grp, i), slot, g->buf + off, cnt,
					      g->lossy | GW_CTX_ZEROCOPY, &r[size - 2 + i])))
			return rc;
	}
	return 0;
}

/* Wait for round j's requests (receives first, in member order, so the
 * owner's sum is the same at every call), then free their frames. */
static int finish_round(struct gw_coll *c, const struct ring *g, uint32_t j, struct gw_ctx_req *r)
{
	const struct coll_group *grp = g->grp;
	uint32_t slot = slot_of(g->id, g->base + j);
	int rc = gw_ctx_waitall(c->ctx, r, 2 * (size_t)(grp->size - 1));

	for (int i = 1; i < grp->size && !rc; i++) {
		gw_ctx_slot_trim(c->ctx, group_peer(grp, -i), slot, 0);
		gw_ctx_slot_trim(c->ctx, group_peer(grp, i), slot, 0);
	}
	return rc;
}

/* The direct reduce-scatter of g: afterwards member i holds the sum of
 * chunk i + 1 + g->delta. */
static int direct_rs(struct gw_coll *c, struct ring *g)
{
	size_t per = 2 * (size_t)(g->grp->size - 1);
	struct ring_reqs *m = &c->reqs[RING_REQS_MAIN];
	uint64_t staged = (uint64_t)(g->grp->size - 1) * g->seg;
	uint32_t rounds = staged * ROUNDS <= STAGED_MAX ? ROUNDS : 1, j;
	int rc = gw_grow((void **)&m->req, &m->cap, rounds * per * sizeof(*m->req));

	if (rc)
		return rc;
	memset(m->req, 0, rounds * per * sizeof(*m->req));
	/* Round j takes the requests of round j - rounds, once it is done. */
	for (j = 0; j < g->nseg; j++) {
		struct gw_ctx_req *r = m->req + j % rounds * per;

		if (j >= rounds && (rc = finish_round(c, g, j - rounds, r)))
			goto fail;
		if ((rc = post_round(c, g, j, r)))
			goto fail;
	}
	for (j = g->nseg > rounds ? g->nseg - rounds : 0; j < g->nseg; j++)
		if ((rc = finish_round(c, g, j, m->req + j % rounds * per)))
			goto fail;
	return 0;
fail:
	coll_fail(c, rc, "allreduce reduce-scatter (direct)", (int)j);
	for (size_t i = 0; i < rounds * per; i++)
		gw_ctx_abort_begin(c->ctx, &m->req[i]);
	for (size_t i = 0; i < rounds * per; i++)
		gw_ctx_abort(c->ctx, &m->req[i]);
	return rc;
}

int coll_direct_allreduce(struct gw_coll *c, const struct coll_group *grp, uint64_t key, float *buf,
			  uint64_t n)
{
	struct ring g;
	int rc;

	coll_ring_init(c, &g, grp, buf, n, GW_CTX_LOSSY, coll_stream_of(c, key), 0,
		       UINT32_C(1) << STEP_BITS);
	rc = direct_rs(c, &g);
	if (rc)
		return rc;
	rc = coll_ring_begin(c, &g, RING_AG, RING_REQS_MAIN);
	if (rc)
		return rc;
	rc = coll_ring_step(c, &g, -1);
	return rc ? coll_ring_fail(c, &g, rc) : 0;
}

int coll_direct_rs(struct gw_coll *c, const struct coll_group *grp, uint64_t key, float *buf,
		   uint64_t n, unsigned lossy)
{
	struct ring g;

	coll_ring_init(c, &g, grp, buf, n, lossy, coll_stream_of(c, key), 0,
		       UINT32_C(1) << STEP_BITS);
	g.delta = -1;
	return direct_rs(c, &g);
}
