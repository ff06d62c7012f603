/* SPDX-License-Identifier: MIT */
/*
 * coll_ring.c - the ring allreduce engine (coll_impl.h), used by
 * gw_coll_allreduce() (coll_allreduce.c) and by PowerSGD's exact sums of
 * its factors (coll_lowrank.c).
 *
 * Allreduce (ring) over a group of ranks (coll_impl.h: every rank, or a
 * sub-group of the hierarchical allreduce), "rank" and "size" below being
 * this rank's position in it and its size; the caller may run only the
 * reduce-scatter or only the allgather (RING_RS, RING_AG).
 * buf is cut into size chunks whose lengths differ by at
 * most one; chunk k starts at k * q + min(k, n % size). Ring step t sends
 * chunk (rank - t) to next and takes chunk (rank - t - 1) from prev: for
 * t < size - 1 it adds into place (reduce-scatter, GW_CTX_ADD), after which
 * rank r owns chunk r + 1; the next size - 1 steps overwrite (allgather).
 * Each chunk travels in segments of about gw_coll_set_segment() bytes on
 * the wire (1 MiB by default; see segment_values()),
 * and a segment moves on as soon as it has arrived (see ring_run()), so
 * encoding, the wire and decoding of different segments overlap. Every
 * (step, segment) unit has its own slot, hence its own error-feedback
 * residual. When lossy, the owner encodes its segments once at the first
 * allgather step and keeps what the next rank decodes; every later hop
 * forwards the payload it received byte for byte (gw_ctx_isend_fwd), so
 * every rank ends with the owner's bits. Empty segments (n < size, or a
 * short last chunk) are not sent: both sides know the lengths.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/grow.h"
#include "coll_impl.h"

/*
 * The ring as a pipeline of units. Unit u = t * nseg + j is segment j of the
 * chunk that ring step t moves: this rank sends segment j of chunk
 * (rank - t) to next and receives segment j of chunk (rank - t - 1) from
 * prev (steps t < size - 1 reduce-scatter with GW_CTX_ADD, the rest
 * allgather). The send of unit u needs the receive of unit u - nseg (the
 * same segment one step earlier), nothing else, so a segment goes on as soon
 * as it has arrived while the rest of its chunk is still on the wire.
 * Receives are posted up to WINDOW units ahead and at most WINDOW sends are
 * in flight; every rank walks the units in the same order.
 */
#define WINDOW 8
/* Values of lossy sends in flight, at most (beyond one): each holds a staged
 * residual of its length until it completes (conn.h), so a ring of few,
 * long segments (top-k's, about 1 MiB on the wire each) would otherwise
 * hold a second copy of its residuals. 32 MiB of floats keeps 8 int8 or
 * fp16 segments in flight. */
#define STAGED_MAX (UINT64_C(8) << 20)

struct ring {
	const struct coll_group *grp;
	int next, prev; /* the context's ranks of the neighbours */
	float *buf;
	uint64_t q, rem; /* chunk k: OFF(k), CNT(k) */
	uint64_t seg;	 /* values per segment */
	uint32_t nseg, units, id;
	uint32_t first, last; /* the units this run moves: [first, last) */
	unsigned lossy;
};

/* Offset and length of what unit u sends (recv = 0) or receives (1). */
static uint64_t unit_span(const struct ring *g, uint32_t u, int recv, uint64_t *off)
{
	uint64_t q = g->q, rem = g->rem, lo = (uint64_t)(u % g->nseg) * g->seg;
	int k = mod(g->grp->me - (int)(u / g->nseg) - recv, g->grp->size);

	*off = OFF(k) + lo;
	return lo >= CNT(k) ? 0 : CNT(k) - lo < g->seg ? CNT(k) - lo : g->seg;
}

/* Whether unit u belongs to the reduce-scatter phase (else the allgather). */
static bool in_reduce_phase(const struct ring *g, uint32_t u)
{
	return u / g->nseg < (uint32_t)g->grp->size - 1;
}

/* An exact ring's allgather receives land in the buffer as they arrive. */
static unsigned recv_flags(const struct ring *g)
{
	return g->lossy ? 0 : GW_CTX_ZEROCOPY;
}

static int post_recv(struct gw_coll *c, const struct ring *g, uint32_t u, struct gw_ctx_req *r)
{
	uint64_t off, cnt = unit_span(g, u, 1, &off);

	if (!cnt)
		return 0;
	return gw_ctx_irecv(c->ctx, g->prev, slot_of(g->id, u), g->buf + off, cnt,
			    in_reduce_phase(g, u) ? GW_CTX_ADD : recv_flags(g), r);
}

/*
 * Whether allgather unit u needs the lossy treatment: the owner's hop when
 * the link to next compresses a segment of cnt values, a later hop when the
 * payload it passes on is compressed. Otherwise the values travel exactly
 * (the same bits every rank holds), straight from the buffer.
 */
static bool lossy_hop(const struct gw_coll *c, int next, uint64_t cnt, const struct gw_ctx_req *got,
		      uint32_t u, const struct ring *g)
{
	struct gw_payload p;

	if (u / g->nseg == (uint32_t)g->grp->size - 1)
		return gw_ctx_compresses(c->ctx, next, cnt);
	return got->payload && !gw_payload_parse(got->payload, got->payload_len, &p) &&
	       p.id != GW_CODEC_NONE;
}

/*
 * Reduce-scatter units go out with the codec (and their own residual) when
 * lossy. In a lossy allgather the owner's unit is encoded once and the owner
 * keeps what the next rank decodes; later hops forward the payload they
 * received byte for byte (gw_ctx_isend_fwd), so every rank ends with the
 * owner's bits and every hop stays compressed; a link that negotiated
 * another codec gets the decoded values exactly.
 */
static int post_send(struct gw_coll *c, const struct ring *g, uint32_t u,
		     const struct gw_ctx_req *got, struct gw_ctx_req *r)
{
	uint64_t off, cnt = unit_span(g, u, 0, &off);
	int next = g->next, rc;
	uint32_t slot = slot_of(g->id, u);

	if (!cnt)
		return 0;
	if (in_reduce_phase(g, u) || !g->lossy || !lossy_hop(c, next, cnt, got, u, g))
		return gw_ctx_isend(c->ctx, next, slot, g->buf + off, cnt,
				    g->lossy | GW_CTX_ZEROCOPY, r);
	if (u / g->nseg == (uint32_t)g->grp->size - 1) { /* the owner's hop */
		rc = gw_ctx_isend_sent(c->ctx, next, slot, g->buf + off, cnt, GW_CTX_LOSSY,
				       c->scratch, r);
		if (!rc) /* encoded at post time: keep the sent bits */
			memcpy(g->buf + off, c->scratch, cnt * sizeof(float));
		return rc;
	}
	rc = gw_ctx_isend_fwd(c->ctx, next, slot, got, r);
	if (rc == -EPROTO) /* next speaks another codec */
		rc = gw_ctx_isend(c->ctx, next, slot, g->buf + off, cnt, GW_CTX_ZEROCOPY, r);
	return rc;
}

/* Wait for r[0..n) in order while rc stays 0; abort the rest once it is not. */
static int wait_or_abort(struct gw_coll *c, struct gw_ctx_req *r, uint32_t n, int rc)
{
	for (uint32_t i = 0; i < n; i++) {
		if (rc)
			gw_ctx_abort(c->ctx, &r[i]);
		else
			rc = gw_ctx_waitall(c->ctx, &r[i], 1);
	}
	return rc;
}

/*
 * Frame buffers. The context keeps one per (peer, slot) and direction, and
 * every unit has its own slot, so a ring that kept them would hold about
 * its whole tensor again in frames (0.5x for an exact one on 2 ranks). A
 * unit's buffers go to the context's pool (gw_ctx_slot_trim()) as soon as
 * they are idle - a send's once it completed, a receive's once its payload
 * was passed on - and the units behind it in the window take them from
 * there: the ring holds about 2 x WINDOW segments in frames, and a training
 * loop still allocates nothing after its first step.
 */
static void trim(struct gw_coll *c, const struct ring *g, uint32_t u, int recv)
{
	gw_ctx_slot_trim(c->ctx, recv ? g->prev : g->next, slot_of(g->id, u), 0);
}

static int wait_send(struct gw_coll *c, const struct ring *g, struct gw_ctx_req *sr, uint32_t u)
{
	int rc = gw_ctx_waitall(c->ctx, &sr[u], 1);

	if (!rc)
		trim(c, g, u, 0);
	if (sr[u].res) /* see STAGED_MAX */
		c->staged -= sr[u].n;
	sr[u].res = NULL;
	return rc;
}

static int ring_run(struct gw_coll *c, const struct ring *g)
{
	struct gw_ctx_req *rr = c->req, *sr = c->req + g->units;
	uint32_t posted = g->first, swaited = g->first, rwaited = g->first, u;
	uint32_t back = ((uint32_t)g->grp->size - 1) * g->nseg;
	uint32_t lag = g->nseg < WINDOW ? g->nseg : WINDOW;
	char what[96];
	int rc = 0;

	/* Units below first are another run's (an allgather after its own
	 * reduce-scatter, which has completed): nothing waits for them. */
	memset(c->req, 0, 2 * (size_t)g->units * sizeof(*c->req));
	c->staged = 0;
	for (u = g->first; u < g->last && !rc; u++) {
		while (!rc && posted < g->last && posted <= u + WINDOW &&
		       posted < rwaited + 2 * WINDOW) {
			/* A receive straight into the buffer (recv_flags())
			 * overwrites what send posted - back read: that send
			 * must have been posted (it is below u) and left (or
			 * belong to an earlier run, which has completed). */
			if (recv_flags(g) && !in_reduce_phase(g, posted) &&
			    posted - back >= g->first) {
				if (posted - back >= u)
					break;
				while (!rc && swaited <= posted - back)
					rc = wait_send(c, g, sr, swaited++);
				if (rc)
					break;
			}
			rc = post_recv(c, g, posted, &rr[posted]), posted++;
		}
		/* An allgather receive overwrites what this rank sent size - 1
		 * steps before; sends may go out of the buffer itself
		 * (GW_CTX_ZEROCOPY), so that one must have left. */
		while (!rc && u >= g->nseg + back && swaited <= u - g->nseg - back)
			rc = wait_send(c, g, sr, swaited++);
		/* Receives complete in order: the segment this send passes on
		 * (u - nseg), and any more than WINDOW behind, so that only
		 * about 2 x WINDOW are posted (each holds a frame buffer). A
		 * wait here is on a unit below u, so no rank waits for one that
		 * waits for it. */
		while (!rc && u >= g->first + lag && rwaited <= u - lag) {
			rc = gw_ctx_waitall(c->ctx, &rr[rwaited], 1);
			/* Its frame is needed later only when it is a lossy
			 * allgather payload that send rwaited + nseg forwards. */
			if (!rc && !(g->lossy && !in_reduce_phase(g, rwaited)))
				trim(c, g, rwaited, 1);
			rwaited++;
		}
		if (!rc)
			rc = post_send(c, g, u, &rr[u - (u >= g->nseg ? g->nseg : 0)], &sr[u]);
		if (!rc && u >= g->nseg) /* its payload went on: buffer free */
			trim(c, g, u - g->nseg, 1);
		if (!rc && sr[u].res)
			c->staged += sr[u].n;
		while (!rc && (u + 1 - swaited > WINDOW || (c->staged > STAGED_MAX && swaited < u)))
			rc = wait_send(c, g, sr, swaited++);
	}
	if (rc) {
		snprintf(what, sizeof(what), "%s %s", g->grp->name,
			 in_reduce_phase(g, u - 1) ? "reduce-scatter" : "allgather");
		coll_fail(c, rc, what, (int)((u - 1) / g->nseg));
		wait_or_abort(c, rr, g->units, rc);
		wait_or_abort(c, sr, g->units, rc);
		return rc;
	}
	/* The sends still in flight (see above), then the last receives; after
	 * a failure the rest are withdrawn, not waited for one timeout each. */
	rc = wait_or_abort(c, sr, g->units, 0);
	rc = wait_or_abort(c, rr, g->units, rc);
	for (u = g->first; u < g->last; u++) {
		trim(c, g, u, 0);
		trim(c, g, u, 1);
	}
	return rc ? coll_fail(c, rc, g->grp->name, (int)((g->last - 1) / g->nseg)) : 0;
}

/* Reserve c->req for units receives and sends, c->scratch for one segment. */
static int ring_reserve(struct gw_coll *c, uint32_t units, uint64_t seg, unsigned lossy)
{
	int rc = gw_grow((void **)&c->req, &c->req_cap, 2 * (size_t)units * sizeof(*c->req));

	if (!rc && lossy)
		rc = gw_grow((void **)&c->scratch, &c->scratch_cap, seg * sizeof(float));
	return rc;
}

/*
 * Values per segment, so that a segment is about seg_bytes on the wire: a
 * compressed segment is small, and many small messages cost more than the
 * overlap gains (top-k at 1% took twice as long on a 1 Gbit/s link in 1 MiB
 * segments as in whole chunks). But at most SEG_VALUES_MAX values (4 MiB of
 * floats, about 80 KB of top-k at 1% on the wire). A sparse codec's
 * segment costs far more to encode and decode than to send, so a long one
 * leaves the link idle while it is encoded and the next rank idle while it
 * is decoded: top-k at 1%, 64 MiB on 2 ranks over 1 Gbit/s, took 81 ms in
 * segments of 4M values and 27 ms in segments of 1M (2026-12-02). Each
 * segment in flight also holds a staged residual, the owner's copy and a
 * codec scratch of its length (top-k at 1% once held 2.3x its tensor in
 * memory with a few huge segments).
 */
#define SEG_VALUES_MAX (UINT64_C(1) << 20)

static uint64_t segment_values(const struct gw_coll *c, unsigned lossy)
{
	double bpv = lossy ? c->wire_bpv : sizeof(float);
	uint64_t seg = (uint64_t)((double)c->seg_bytes / bpv);

	if (c->seg_bytes && seg > SEG_VALUES_MAX)
		seg = SEG_VALUES_MAX;
	return c->seg_bytes && !seg ? 1 : seg;
}

int coll_ring_allreduce(struct gw_coll *c, const struct coll_group *grp, uint64_t key, float *buf,
			uint64_t n, unsigned lossy, unsigned phases)
{
	int size = grp->size, rc;
	uint64_t q = n / (uint64_t)size, rem = n % (uint64_t)size, most = CNT(0), nseg, seg;
	uint32_t steps = 2 * ((uint32_t)size - 1);
	struct ring g = { .grp = grp,
			  .next = group_peer(grp, 1),
			  .prev = group_peer(grp, -1),
			  .buf = buf,
			  .q = q,
			  .rem = rem };

	assert(!lossy || c->agreed);
	/* Segments of about seg_bytes on the wire, no more units than slots. */
	seg = segment_values(c, lossy);
	nseg = seg && most > seg ? (most + seg - 1) / seg : 1;
	if (nseg > (UINT32_C(1) << STEP_BITS) / steps)
		nseg = (UINT32_C(1) << STEP_BITS) / steps;
	g.nseg = (uint32_t)nseg;
	g.seg = (most + nseg - 1) / nseg;
	g.units = steps * g.nseg;
	/* The same units (hence slots) whichever phases run. */
	g.first = phases & RING_RS ? 0 : (steps / 2) * g.nseg;
	g.last = phases & RING_AG ? g.units : (steps / 2) * g.nseg;
	g.lossy = lossy;
	g.id = coll_stream_of(c, key);
	rc = ring_reserve(c, g.units, g.seg, g.lossy);
	return rc ? rc : ring_run(c, &g);
}
