/* SPDX-License-Identifier: MIT */
/*
 * coll_direct.c - the direct reduce-scatter, which makes the direct lossy
 * allreduce (scatter-reduce-allgather, as in CGX): every value is
 * compressed twice, whatever the number of ranks.
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
 * It is the ring engine's other reduce-scatter: a run begun with
 * RING_DIRECT (coll_ring_begin()) does its reduce-scatter here, in rounds,
 * resumable like the ring's units (coll_ring_step() calls
 * coll_direct_step() until it returns 0), then its allgather as the ring.
 * So the flat allreduce, the hierarchical allreduce's phase across hosts
 * and the reduce_scatter collective (member i owning chunk i: struct
 * ring's delta -1) all use it the same way.
 *
 * Segments and slots. A chunk goes in the ring's segments (coll_ring_init()
 * cuts them for the codec's bytes per value), segment j of every chunk on
 * unit j of the run, i.e. slot_of(id, base + j) towards its owner: units of
 * the ring's first reduce-scatter step, which this run does not use, and
 * below the allgather's. So every (peer, slot) - a residual, a sequence, a
 * frame - meets the same segment of the same chunk at every call. Rounds
 * (segment j of every chunk) go ROUNDS at a time, fewer when their staged
 * residuals would exceed STAGED_MAX values.
 */
#include <string.h>
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

/* The requests of round j: 2 (size - 1) of g->rr, a bank per round in
 * flight (g->rr holds the ring's units, at least that many). */
static struct gw_ctx_req *bank(const struct ring *g, uint32_t j)
{
	return g->rr + (size_t)(j % g->rounds) * 2 * (size_t)(g->grp->size - 1);
}

/*
 * Post round j: the receives of segment j of this member's chunk from every
 * other member (added into place), then the sends of segment j of every
 * other chunk to its owner, nearest first.
 */
static int post_round(struct gw_coll *c, struct ring *g, uint32_t j, struct gw_ctx_req *r)
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
		g->moves += cnt != 0;
	}
	for (int i = 1; i < size; i++) {
		cnt = seg_span(g, mod(me + i + 1 + g->delta, size), j, &off);
		if (cnt && (rc = gw_ctx_isend(c->ctx, group_peer(grp, i), slot, g->buf + off, cnt,
					      g->lossy | GW_CTX_ZEROCOPY, &r[size - 2 + i])))
			return rc;
		g->moves += cnt != 0;
	}
	return 0;
}

/*
 * Finish round j once it is complete: at once while g may block (its wait
 * counts as one), else only when every request of it completed. Receives
 * first, in member order, so the owner's sum is the same at every call;
 * then their frames go back to the pool. Return: 0, RING_PENDING, or the
 * first error.
 */
static int finish_round(struct gw_coll *c, struct ring *g, uint32_t j, struct gw_ctx_req *r)
{
	const struct coll_group *grp = g->grp;
	size_t per = 2 * (size_t)(grp->size - 1);
	uint32_t slot = slot_of(g->id, g->base + j);
	int rc;

	if (!g->blocks) {
		for (size_t i = 0; i < per; i++)
			if (r[i].cs && (rc = gw_ctx_test(c->ctx, &r[i])) <= 0)
				return rc ? rc : RING_PENDING;
	} else if (g->blocks > 0) {
		g->blocks--;
	}
	rc = gw_ctx_waitall(c->ctx, r, per);
	if (rc)
		return rc;
	for (int i = 1; i < grp->size; i++) {
		gw_ctx_slot_trim(c->ctx, group_peer(grp, -i), slot, 0);
		gw_ctx_slot_trim(c->ctx, group_peer(grp, i), slot, 0);
	}
	g->moves++;
	return 0;
}

void coll_direct_begin(struct ring *g)
{
	uint64_t staged = (uint64_t)(g->grp->size - 1) * g->seg;

	g->rounds = staged * ROUNDS <= STAGED_MAX ? ROUNDS : 1;
	g->dposted = g->ddone = 0;
}

int coll_direct_step(struct gw_coll *c, struct ring *g)
{
	int rc;

	while (g->ddone < g->nseg) {
		while (g->dposted < g->nseg && g->dposted - g->ddone < g->rounds) {
			rc = post_round(c, g, g->dposted, bank(g, g->dposted));
			g->dposted++;
			if (rc)
				return rc;
		}
		rc = finish_round(c, g, g->ddone, bank(g, g->ddone));
		if (rc)
			return rc;
		g->ddone++;
	}
	return 0;
}
