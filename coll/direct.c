/* SPDX-License-Identifier: MIT */
/*
 * direct.c - the direct reduce-scatter, which makes the direct lossy
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
 *                   in a fixed order (the schedule's, below);
 *   allgather       the ring's (ring.c, RING_AG): the owner encodes its
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
 * RING_DIRECT (coll_ring_begin()) does its reduce-scatter here, in units,
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
 * frame - meets the same segment of the same chunk at every call.
 *
 * Schedule. Unit u is segment j = u / (size - 1) at step d = 1 + u %
 * (size - 1): this member receives segment j of its chunk from member me - d
 * and sends segment j of member me + d's chunk to it. When size is a power
 * of two the partner is me ^ d both ways instead, so members meet in pairs
 * that wait only on each other: with me - d and me + d a member waits on
 * two others and a step's waits chain round a cycle, in which one rank
 * descheduled (ranks that outnumber cores) holds up every other.
 * Up to WINDOW units are in flight (fewer when their staged residuals would
 * exceed STAGED_MAX values), so each member has a few peers at once, as
 * the ring has: sending to all size - 1 owners at once made many-to-one
 * copies through shm's shared buffers, far slower than the ring with ranks
 * that outnumber cores.
 *
 * Over shm (every member reached over it) one unit at a time. libfabric
 * 1.17's shm copies a message into the receiver's shared buffers holding
 * the receiver's region lock (a pthread spinlock, taken by every sender to
 * that rank and by the rank itself to copy out), a batch of up to 1 MiB at
 * a time. With a window of 8 units, which a chunk of one segment (16 MiB at
 * 8 ranks) fills with all size - 1 peers, every region had size - 1 writers
 * at once; with ranks that outnumber cores a writer preempted mid-copy left
 * the others spinning out their slices, and the direct allreduce spent far
 * more CPU and time than the ring. One unit in flight makes the exchange
 * pairwise in lockstep - a receiver copies a message out only once its
 * receive is posted, so a sender ahead waits - and each region has about
 * one writer, as in the ring, which brings it near the ring's time; two
 * units in flight were slower than one (see docs/performance.md, the table
 * "8 ranks on loopback (2 cores)": direct time and CPU against the ring's,
 * before and after).
 */
#include <string.h>
#include "coll_impl.h"

#define WINDOW 8		       /* units in flight, at most */
#define SHM_WINDOW 1		       /* the same over shm: see the top of this file */
#define STAGED_MAX (UINT64_C(8) << 20) /* values of staged residuals; as ring.c's */

/*
 * Unit u: segment u / (size - 1), with step d = 1 + u % (size - 1). Return
 * the segment; *from and *to are the members (as offsets from this one)
 * this member receives its chunk's segment from and sends theirs to: me - d
 * and me + d, or, when size is a power of two, both me ^ d (pairs that
 * wait only on each other: see the top of this file).
 */
static uint32_t unit_seg(const struct ring *g, uint32_t u, int *from, int *to)
{
	int size = g->grp->size, me = g->grp->me, d = 1 + (int)(u % (uint32_t)(size - 1));

	if (!(size & (size - 1))) {
		*from = *to = (me ^ d) - me;
	} else {
		*from = -d;
		*to = d;
	}
	return u / (uint32_t)(size - 1);
}

/* The requests of unit u, its receive then its send: two of g->rr, a pair
 * per unit in flight (g->rr holds the ring's units, at least that many). */
static struct gw_ctx_req *unit_reqs(const struct ring *g, uint32_t u)
{
	return g->rr + 2 * (size_t)(u % g->dwindow);
}

/*
 * Post unit u: the receive of segment j of this member's chunk from member
 * me + from (added into place), and the send of segment j of member me +
 * to's chunk to it.
 */
static int post_unit(struct gw_coll *c, struct ring *g, uint32_t u, struct gw_ctx_req *r)
{
	const struct coll_group *grp = g->grp;
	int size = grp->size, me = grp->me, from, to, rc;
	uint32_t j = unit_seg(g, u, &from, &to), slot = slot_of(g->id, g->base + j);
	uint64_t off, cnt;

	memset(r, 0, 2 * sizeof(*r));
	cnt = ring_seg_span(g, mod(me + 1 + g->delta, size), j, &off);
	if (cnt && (rc = gw_ctx_irecv(c->ctx, group_peer(grp, from), slot, g->buf + off, cnt,
				      GW_CTX_ADD, &r[0])))
		return rc;
	g->moves += cnt != 0;
	cnt = ring_seg_span(g, mod(me + to + 1 + g->delta, size), j, &off);
	if (cnt && (rc = gw_ctx_isend(c->ctx, group_peer(grp, to), slot, g->buf + off, cnt,
				      g->lossy | GW_CTX_ZEROCOPY |
					      coll_auto_flag(c, group_peer(grp, to), false),
				      &r[1])))
		return rc;
	g->moves += cnt != 0;
	return 0;
}

/*
 * Finish unit u once it is complete: at once while g may block (its wait
 * counts as one), else only when both its requests completed. Units finish
 * in order, so the owner adds its parts in the schedule's order and its sum
 * is the same at every call. Return: 0, RING_PENDING, or
 * the first error.
 */
static int finish_unit(struct gw_coll *c, struct ring *g, uint32_t u, struct gw_ctx_req *r)
{
	int from, to, rc;
	uint32_t slot = slot_of(g->id, g->base + unit_seg(g, u, &from, &to));

	if (!g->blocks) {
		for (int i = 0; i < 2; i++)
			if (r[i].cs && (rc = gw_ctx_test(c->ctx, &r[i])) <= 0)
				return rc ? rc : RING_PENDING;
	} else if (g->blocks > 0) {
		g->blocks--;
	}
	rc = gw_ctx_waitall(c->ctx, r, 2);
	if (rc)
		return rc;
	gw_ctx_slot_trim(c->ctx, group_peer(g->grp, from), slot, 0);
	if (to != from)
		gw_ctx_slot_trim(c->ctx, group_peer(g->grp, to), slot, 0);
	g->moves++;
	return 0;
}

void coll_direct_begin(struct ring *g)
{
	uint32_t units = (uint32_t)(g->grp->size - 1) * g->nseg;
	uint64_t most = g->seg ? STAGED_MAX / g->seg : WINDOW;

	g->dwindow = most < WINDOW ? (most ? (uint32_t)most : 1) : WINDOW;
	if (g->grp->shm && g->dwindow > SHM_WINDOW)
		g->dwindow = SHM_WINDOW;
	if (g->dwindow > units)
		g->dwindow = units;
	g->dposted = g->ddone = 0;
}

int coll_direct_step(struct gw_coll *c, struct ring *g)
{
	uint32_t units = (uint32_t)(g->grp->size - 1) * g->nseg;
	int rc;

	while (g->ddone < units) {
		while (g->dposted < units && g->dposted - g->ddone < g->dwindow) {
			rc = post_unit(c, g, g->dposted, unit_reqs(g, g->dposted));
			g->dposted++;
			if (rc)
				return rc;
		}
		rc = finish_unit(c, g, g->ddone, unit_reqs(g, g->ddone));
		if (rc)
			return rc;
		g->ddone++;
	}
	return 0;
}
