/* SPDX-License-Identifier: MIT */
/*
 * ring.c - the ring allreduce engine (coll_impl.h), used by
 * gw_coll_allreduce() (allreduce.c) and by PowerSGD's exact sums of
 * its factors (lowrank.c).
 *
 * Allreduce (ring) over a group of ranks (coll_impl.h: every rank, or a
 * sub-group of the hierarchical allreduce), "rank" and "size" below being
 * this rank's position in it and its size; the caller may run only the
 * reduce-scatter or only the allgather (RING_RS, RING_AG).
 * buf is cut into size chunks whose lengths differ by at
 * most one; chunk k starts at k * q + min(k, n % size) (the chunk rule), or
 * where the caller's table of offsets says (struct ring's offs: a
 * reduce-scatter or float allgather given counts per rank, any of them
 * zero). Ring step t sends
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
 *
 * A run is resumable: a struct ring (coll_impl.h) holds all its state - its
 * units' counters, its own requests (c->reqs[] of its kind), its staged
 * values - and coll_ring_step() moves it on until a request it needs has
 * not completed. With blocking waits it runs to the end, as
 * coll_ring_allreduce() does for one ring alone (the same waits in the same
 * order as a plain loop); without them it returns RING_PENDING there, so
 * that one thread can drive two rings at once (hier.c's pipeline).
 * Either way every wait, post and window rule below holds in the same order.
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

/* Offset and length of what unit u sends (recv = 0) or receives (1). */
static uint64_t unit_span(const struct ring *g, uint32_t u, int recv, uint64_t *off)
{
	int k = mod(g->grp->me - (int)(u / g->nseg) - recv + g->delta, g->grp->size);

	return ring_seg_span(g, k, u % g->nseg, off);
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
	return gw_ctx_irecv(c->ctx, g->prev, slot_of(g->id, g->base + u), g->buf + off, cnt,
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
	uint32_t slot = slot_of(g->id, g->base + u);

	if (!cnt)
		return 0;
	if (in_reduce_phase(g, u))
		return gw_ctx_isend(c->ctx, next, slot, g->buf + off, cnt,
				    g->lossy | GW_CTX_ZEROCOPY | coll_auto_flag(c, next, false), r);
	if (!g->lossy || !lossy_hop(c, next, cnt, got, u, g))
		return gw_ctx_isend(c->ctx, next, slot, g->buf + off, cnt, GW_CTX_ZEROCOPY, r);
	if (u / g->nseg == (uint32_t)g->grp->size - 1) /* the owner's hop keeps the sent bits */
		return gw_ctx_isend_sent(c->ctx, next, slot, g->buf + off, cnt,
					 GW_CTX_LOSSY | coll_auto_flag(c, next, true), g->buf + off,
					 r);
	rc = gw_ctx_isend_fwd(c->ctx, next, slot, got, r);
	if (rc == -EPROTO) /* next speaks another codec */
		rc = gw_ctx_isend(c->ctx, next, slot, g->buf + off, cnt, GW_CTX_ZEROCOPY, r);
	return rc;
}

/*
 * Frame buffers. The context keeps one per (peer, slot) and direction, and
 * every unit has its own slot, so a ring that kept them would hold about
 * its whole tensor again in frames. A
 * unit's buffers go to the context's pool (gw_ctx_slot_trim()) as soon as
 * they are idle - a send's once it completed, a receive's once its payload
 * was passed on - and the units behind it in the window take them from
 * there: the ring holds about 2 x WINDOW segments in frames, and a training
 * loop still allocates nothing after its first step.
 */
static void trim_frames(struct gw_coll *c, const struct ring *g, uint32_t u, int recv)
{
	gw_ctx_slot_trim(c->ctx, recv ? g->prev : g->next, slot_of(g->id, g->base + u), 0);
}

/*
 * Finish r when it is complete: wait for it (with the context's timeout)
 * while g may block, else only when gw_ctx_test() says it completed.
 * Return: 0, the wait's error, or RING_PENDING (not complete; g may not
 * block). A request never posted (an empty unit) is complete.
 */
static int finish_req(struct gw_coll *c, struct ring *g, struct gw_ctx_req *r)
{
	int rc;

	if (!r->cs)
		return 0;
	if (!g->blocks) {
		rc = gw_ctx_test(c->ctx, r);
		if (rc <= 0)
			return rc ? rc : RING_PENDING;
	} else if (g->blocks > 0) {
		g->blocks--;
	}
	g->moves++;
	return gw_ctx_waitall(c->ctx, r, 1);
}

/* Finish the oldest send in flight (sr[swaited]). */
static int wait_send(struct gw_coll *c, struct ring *g)
{
	struct gw_ctx_req *r = &g->sr[g->swaited];
	int rc = finish_req(c, g, r);

	if (rc == RING_PENDING)
		return rc;
	if (!rc)
		trim_frames(c, g, g->swaited, 0);
	if (r->res) /* see STAGED_MAX */
		g->staged -= r->n;
	r->res = NULL;
	g->swaited++;
	return rc;
}

/*
 * The steps of unit u, in this order (coll_ring_step() resumes a unit at
 * the phase it stopped in; each phase's loop only re-checks its conditions).
 */
enum phase {
	PH_RECVS,	/* post the receives the windows allow */
	PH_OVERWRITE,	/* the send an allgather receive overwrites has left */
	PH_ARRIVED,	/* the receive this send passes on has arrived */
	PH_SEND,	/* post the send of unit u */
	PH_WINDOW,	/* at most WINDOW sends (and STAGED_MAX values) in flight */
	PH_DRAIN,	/* after the last unit: the sends still in flight, */
	PH_DRAIN_RECVS, /* then the last receives */
};

static int post_recvs(struct gw_coll *c, struct ring *g, uint32_t back)
{
	int rc;

	while (g->posted < g->last && g->posted <= g->u + WINDOW &&
	       g->posted < g->rwaited + 2 * WINDOW) {
		/* A receive straight into the buffer (recv_flags())
		 * overwrites what send posted - back read: that send
		 * must have been posted (it is below u) and left (or
		 * belong to an earlier run, which has completed). */
		if (recv_flags(g) && !in_reduce_phase(g, g->posted) &&
		    g->posted - back >= g->first) {
			if (g->posted - back >= g->u)
				break;
			while (g->swaited <= g->posted - back) {
				rc = wait_send(c, g);
				if (rc)
					return rc;
			}
		}
		rc = post_recv(c, g, g->posted, &g->rr[g->posted]);
		g->posted++;
		if (rc)
			return rc;
		g->moves++;
	}
	return 0;
}

/* Unit u's phases from where it stopped; 0 once its send is posted and the
 * window allows the next unit. */
static int unit_step(struct gw_coll *c, struct ring *g, uint32_t back, uint32_t lag)
{
	uint32_t u = g->u;
	int rc;

	switch (g->phase) {
	case PH_RECVS:
		rc = post_recvs(c, g, back);
		if (rc)
			return rc;
		g->phase = PH_OVERWRITE;
		/* fall through */
	case PH_OVERWRITE:
		/* An allgather receive overwrites what this rank sent size - 1
		 * steps before; sends may go out of the buffer itself
		 * (GW_CTX_ZEROCOPY), so that one must have left. */
		while (u >= g->nseg + back && g->swaited <= u - g->nseg - back) {
			rc = wait_send(c, g);
			if (rc)
				return rc;
		}
		g->phase = PH_ARRIVED;
		/* fall through */
	case PH_ARRIVED:
		/* Receives complete in order: the segment this send passes on
		 * (u - nseg), and any more than WINDOW behind, so that only
		 * about 2 x WINDOW are posted (each holds a frame buffer). A
		 * wait here is on a unit below u, so no rank waits for one that
		 * waits for it. */
		while (u >= g->first + lag && g->rwaited <= u - lag) {
			rc = finish_req(c, g, &g->rr[g->rwaited]);
			if (rc)
				return rc;
			/* Its frame is needed later only when it is a lossy
			 * allgather payload that send rwaited + nseg forwards. */
			if (!(g->lossy && !in_reduce_phase(g, g->rwaited)))
				trim_frames(c, g, g->rwaited, 1);
			g->rwaited++;
		}
		g->phase = PH_SEND;
		/* fall through */
	case PH_SEND:
		rc = post_send(c, g, u, &g->rr[u - (u >= g->nseg ? g->nseg : 0)], &g->sr[u]);
		if (rc)
			return rc;
		g->moves++;
		if (u >= g->nseg) /* its payload went on: buffer free */
			trim_frames(c, g, u - g->nseg, 1);
		if (g->sr[u].res)
			g->staged += g->sr[u].n;
		g->phase = PH_WINDOW;
		/* fall through */
	default:
		while (u + 1 - g->swaited > WINDOW || (g->staged > STAGED_MAX && g->swaited < u)) {
			rc = wait_send(c, g);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* Start g's units at first: nothing posted, nothing in flight. Units
 * below first are another run's (an allgather after its own reduce-scatter,
 * which has completed): nothing waits for them. */
static void ring_start(struct ring *g, uint32_t first)
{
	memset(g->rr, 0, 2 * (size_t)g->units * sizeof(*g->rr));
	g->first = first;
	g->u = g->posted = g->swaited = g->rwaited = first;
	g->phase = PH_RECVS;
	g->staged = 0;
}

int coll_ring_step(struct gw_coll *c, struct ring *g, int blocks)
{
	uint32_t back = ((uint32_t)g->grp->size - 1) * g->nseg;
	uint32_t lag = g->nseg < WINDOW ? g->nseg : WINDOW;
	int rc;

	g->blocks = blocks;
	if (g->direct) { /* the reduce-scatter in direct rounds, then the rest */
		rc = coll_direct_step(c, g);
		if (rc)
			return rc;
		g->direct = false;
		if (g->last == g->units / 2) /* a reduce-scatter alone */
			return 0;
		ring_start(g, g->units / 2);
	}
	while (g->u < g->last) {
		rc = unit_step(c, g, back, lag);
		if (rc)
			return rc;
		g->u++;
		g->phase = g->u < g->last ? PH_RECVS : PH_DRAIN;
	}
	/* The sends still in flight (see above), then the last receives; after
	 * a failure the rest are withdrawn (coll_ring_fail()), not waited for
	 * one timeout each. */
	while (g->phase == PH_DRAIN && g->swaited < g->last) {
		rc = finish_req(c, g, &g->sr[g->swaited]);
		if (rc)
			return rc;
		g->swaited++;
	}
	g->phase = PH_DRAIN_RECVS;
	while (g->rwaited < g->last) {
		rc = finish_req(c, g, &g->rr[g->rwaited]);
		if (rc)
			return rc;
		g->rwaited++;
	}
	for (uint32_t u = g->first; u < g->last; u++) {
		trim_frames(c, g, u, 0);
		trim_frames(c, g, u, 1);
	}
	return 0;
}

void coll_ring_abort_begin(struct gw_coll *c, struct ring *g)
{
	for (uint32_t u = g->first; u < g->last; u++) {
		gw_ctx_abort_begin(c->ctx, &g->rr[u]);
		gw_ctx_abort_begin(c->ctx, &g->sr[u]);
	}
}

void coll_ring_abort(struct gw_coll *c, struct ring *g)
{
	coll_ring_abort_begin(c, g);
	for (uint32_t u = g->first; u < g->last; u++) {
		gw_ctx_abort(c->ctx, &g->rr[u]);
		gw_ctx_abort(c->ctx, &g->sr[u]);
	}
}

int coll_ring_fail(struct gw_coll *c, struct ring *g, int rc)
{
	char what[96];

	if (g->u < g->last) {
		snprintf(what, sizeof(what), "%s %s", g->grp->name,
			 in_reduce_phase(g, g->u) ? "reduce-scatter" : "allgather");
		coll_fail(c, rc, what, (int)(g->u / g->nseg));
	} else {
		coll_fail(c, rc, g->grp->name, (int)((g->last - 1) / g->nseg));
	}
	coll_ring_abort(c, g);
	return rc;
}

/*
 * Values per segment, so that a segment is about seg_bytes on the wire: a
 * compressed segment is small, and many small messages cost more than the
 * overlap gains. But at most SEG_VALUES_MAX values (2 MiB of floats): a
 * sparse codec's segment costs far more to encode and decode than to send,
 * so a long one leaves the link idle while it is encoded and the next rank
 * idle while it is decoded; shorter ones gained nothing more. Each segment
 * in flight also holds a staged residual and a codec scratch of its
 * length, so a few huge segments held several times the tensor in memory.
 * See docs/performance.md, "Why the defaults are what they are", row "1 MiB
 * wire segments (GRADWIRE_SEGMENT_BYTES), sparse segments of at most 512K
 * values".
 */
#define SEG_VALUES_MAX (UINT64_C(1) << 19)

/*
 * Exact transfers among ranks that all reach each other over shm go in
 * whole chunks up to SHM_WHOLE_MAX values a chunk: there is no encoding to
 * overlap, and each message costs a wake-up of a provider without a wait
 * object. Longer chunks go in segments of SHM_SEG_VALUES, so that a segment
 * is added while it is still in the cache and the next one is copied, and
 * the frames that hold reduce-scatter receives stay small (at most 2 x
 * WINDOW segments posted). With shm's copies through its shared buffers
 * (fi_load.c), whole chunks were faster up to SHM_WHOLE_MAX and segments
 * beyond, of any length near SHM_SEG_VALUES; with ranks that share a core
 * the figures measure the scheduler more than the copies. See
 * docs/performance.md, "Why the defaults are what they are", row "shm
 * copies through its shared buffers (FI_SHM_DISABLE_CMA=1); exact shm
 * chunks above 4 MiB in 1 MiB segments".
 */
#define SHM_WHOLE_MAX (UINT64_C(1) << 20)  /* values a chunk: 4 MiB */
#define SHM_SEG_VALUES (UINT64_C(1) << 18) /* 1 MiB */

/*
 * Values per segment of a ring whose largest chunk has most values (0: whole
 * chunks). In a ring of two ranks every step is an exchange within one pair,
 * and an exact chunk of more than half a segment, up to one, goes in two
 * halves so that the second is on the wire while the first is added and
 * passed on (see docs/performance.md, "Why the defaults are what they
 * are", row "a ring of two sends a chunk in two halves"). In longer rings
 * halves were slower where ranks share a core (more wake-ups), so they
 * keep whole segments.
 */
static uint64_t segment_values(const struct gw_coll *c, const struct coll_group *grp,
			       unsigned lossy, uint64_t most)
{
	double bpv = lossy ? c->wire_bpv : sizeof(float);
	uint64_t seg = (uint64_t)((double)c->seg_bytes / bpv);

	if (!lossy && grp->shm)
		return most <= SHM_WHOLE_MAX ? 0 : SHM_SEG_VALUES;
	if (c->seg_bytes && seg > SEG_VALUES_MAX)
		seg = SEG_VALUES_MAX;
	if (c->seg_bytes && !seg)
		return 1;
	if (!lossy && grp->size == 2 && most <= seg && most > seg / 2)
		return (most + 1) / 2; /* two halves */
	return seg;
}

void coll_ring_init(struct gw_coll *c, struct ring *g, const struct coll_group *grp, float *buf,
		    uint64_t n, const uint64_t *offs, unsigned lossy, uint32_t id, uint32_t base,
		    uint32_t budget)
{
	int size = grp->size;
	uint64_t q = n / (uint64_t)size, rem = n % (uint64_t)size, most = chunk_cnt(0, q, rem),
		 nseg, seg;
	uint32_t steps = 2 * ((uint32_t)size - 1);

	assert(!lossy || c->agreed);
	assert(budget >= steps);
	assert(!offs || (offs[0] == 0 && offs[size] == n));
	*g = (struct ring){ .grp = grp,
			    .next = group_peer(grp, 1),
			    .prev = group_peer(grp, -1),
			    .buf = buf,
			    .q = q,
			    .rem = rem,
			    .offs = offs,
			    .lossy = lossy,
			    .id = id,
			    .base = base };
	most = offs ? 0 : most; /* segments are cut for the longest chunk */
	for (int k = 0; offs && k < size; k++)
		if (offs[k + 1] - offs[k] > most)
			most = offs[k + 1] - offs[k];
	/* Segments of about seg_bytes on the wire, no more units than slots. */
	seg = segment_values(c, grp, lossy, most);
	nseg = seg && most > seg ? (most + seg - 1) / seg : 1;
	if (nseg > budget / steps)
		nseg = budget / steps;
	g->nseg = (uint32_t)nseg;
	g->seg = (most + nseg - 1) / nseg;
	g->units = steps * g->nseg;
}

int coll_ring_begin(struct gw_coll *c, struct ring *g, unsigned phases, unsigned reqs)
{
	struct ring_reqs *m = &c->reqs[reqs];
	uint32_t half = g->units / 2;
	int rc = gw_grow((void **)&m->req, &m->cap, 2 * (size_t)g->units * sizeof(*m->req));

	if (rc)
		return rc;
	/* The same units (hence slots) whichever phases run. */
	g->last = phases & RING_AG ? g->units : half;
	g->rr = m->req;
	g->sr = m->req + g->units;
	ring_start(g, phases & RING_RS ? 0 : half);
	g->direct = (phases & (RING_RS | RING_DIRECT)) == (RING_RS | RING_DIRECT);
	if (g->direct)
		coll_direct_begin(g);
	return 0;
}

int coll_ring_allreduce(struct gw_coll *c, const struct coll_group *grp, uint64_t key, float *buf,
			uint64_t n, unsigned lossy, unsigned phases)
{
	return coll_ring_run(c, grp, key, buf, n, NULL, lossy, phases, 0);
}

int coll_ring_run(struct gw_coll *c, const struct coll_group *grp, uint64_t key, float *buf,
		  uint64_t n, const uint64_t *offs, unsigned lossy, unsigned phases, int delta)
{
	struct ring g;
	int rc;

	coll_ring_init(c, &g, grp, buf, n, offs, lossy, coll_stream_of(c, key), 0,
		       UINT32_C(1) << STEP_BITS);
	g.delta = delta;
	rc = coll_ring_begin(c, &g, phases, RING_REQS_MAIN);
	if (rc)
		return rc;
	/* One ring alone: every wait blocks, as it always did. */
	rc = coll_ring_step(c, &g, -1);
	return rc ? coll_ring_fail(c, &g, rc) : 0;
}
