/* SPDX-License-Identifier: MIT */
/*
 * coll.c - barrier, broadcast, allgather and ring allreduce over a context.
 *
 * Slot layout (all below GW_TP_SLOT_MAX):
 *
 *   GW_COLL_SLOT_BASE + (ident << STEP_BITS) + step
 *   ident 0: barrier (step = round), 1: broadcast, 2: allgather,
 *         3 + k: allreduce stream k (step = unit, below),
 *         3 + GW_COLL_STREAMS: every allreduce's call check (step = round)
 *
 * Call check. Every allreduce starts with a dissemination allgather of a
 * 24-byte descriptor of the call on one fixed slot:
 *
 *   0 u64 key (the tensor: KEY_ID | id, or its length)   8 u64 n
 *  16 u32 call number (allreduces so far)  20 u8 op  21 u8 lossy  22 u16 0
 *
 * so ranks that disagree on the tensor (the order of ids), its length, the
 * op or the lossy flag all fail at once, before any data moves, with the
 * same message naming the tensor, both values and the two ranks, instead
 * of a malformed frame on one rank and a timeout on another.
 *
 * Allreduce (ring). buf is cut into size chunks whose lengths differ by at
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
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/grow.h"
#include "coll.h"
#include "coll_lowrank.h"

#define STEP_BITS 16
#define ID_BARRIER 0u
#define ID_BCAST 1u
#define ID_ALLGATHER 2u
#define ID_ALLREDUCE 3u
#define ID_CALL (ID_ALLREDUCE + GW_COLL_STREAMS)

_Static_assert(GW_COLL_SLOT_BASE + ((uint64_t)(ID_CALL + 1) << STEP_BITS)
		       <= (uint64_t)GW_TP_SLOT_MAX + 1,
	       "every allreduce stream's slots and the call check's fit below GW_TP_SLOT_MAX");

struct gw_coll {
	struct gw_ctx *ctx;
	int rank, size;
	int err;			/* first failure; every later call returns it */
	char errmsg[320];		/* what it was, when there is more to say */
	uint32_t calls;			/* allreduces so far (the call check) */
	uint64_t staged;		/* values of lossy sends in flight (ring_run) */
	struct call_desc *descs;	/* the call check's, one per rank */
	uint64_t stream_key[GW_COLL_STREAMS];	/* the tensor of each stream */
	unsigned nstreams;
	uint64_t seg_bytes;		/* allreduce segment on the wire (0: whole chunks) */
	bool links_agreed;		/* agree_links() ran, and found: */
	bool lossy_links;		/* some rank's link to its next compresses */
	double wire_bpv;		/* the most wire bytes per value of any rank's
					 * link to its next (4 for one that does not) */
	float *scratch;			/* the owner's segment as the next rank decodes it */
	size_t scratch_cap;		/* bytes, as req_cap (gw_grow()) */
	struct gw_ctx_req *req;		/* allreduce: receives, then sends, per unit */
	size_t req_cap;
	struct gw_lowrank *lowrank;	/* PowerSGD's allreduce (coll_lowrank.c) */
};

/* Chunk k of a tensor of n = q * size + rem values (uses q and rem in scope). */
#define OFF(k) ((uint64_t)(k) * q + ((uint64_t)(k) < rem ? (uint64_t)(k) : rem))
#define CNT(k) (q + ((uint64_t)(k) < rem))

static uint32_t slot_of(uint32_t ident, uint32_t step)
{
	return GW_COLL_SLOT_BASE + (ident << STEP_BITS) + step;
}

static int mod(int a, int m)
{
	return ((a % m) + m) % m;
}

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
	c->rank = gw_ctx_rank(ctx);
	c->size = gw_ctx_size(ctx);
	c->seg_bytes = GW_COLL_SEGMENT_BYTES;
	*out = c;
	return 0;
}

void gw_coll_destroy(struct gw_coll *c)
{
	if (!c)
		return;
	free(c->scratch);
	free(c->req);
	free(c->descs);
	gw_lowrank_destroy(c->lowrank);
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

/* Remember the first error and say where it happened, and with whom. */
static int fail(struct gw_coll *c, int rc, const char *what, int step)
{
	bool receiving;
	int peer = gw_ctx_failed_peer(c->ctx, &receiving);

	if (!c->err) {
		c->err = rc;
		if (peer >= 0)
			snprintf(c->errmsg, sizeof(c->errmsg), "%s step %d failed: %s "
				 "(%s rank %d)", what, step, gw_strerror(rc),
				 receiving ? "receiving from" : "sending to", peer);
		else
			snprintf(c->errmsg, sizeof(c->errmsg), "%s step %d failed: %s",
				 what, step, gw_strerror(rc));
	}
	gw_log(GW_LOG_ERROR, GW_LOG_ERROR, c->rank,
	       "%s step %d failed: %s", what, step, gw_strerror(rc));
	return rc;
}

const char *gw_coll_error(const struct gw_coll *c)
{
	return c->err ? c->errmsg : NULL;
}

/*
 * One step of byte messages: receive len bytes from `from` into rbuf (when
 * from >= 0), send len bytes of sbuf to `to` (when to >= 0), on slot.
 * The receive is posted first; a request that was posted is always waited,
 * so nothing stays in flight when we return.
 */
static int bytes_step(struct gw_coll *c, uint32_t slot, int to, const void *sbuf,
		      int from, void *rbuf, size_t len)
{
	struct gw_ctx_req r[2];
	size_t k = 0;
	int rc = 0, rc2;

	if (from >= 0) {
		rc = gw_ctx_irecv_bytes(c->ctx, from, slot, rbuf, len, &r[k]);
		if (!rc)
			k++;
	}
	if (!rc && to >= 0) {
		rc = gw_ctx_isend_bytes(c->ctx, to, slot, sbuf, len, &r[k]);
		if (!rc)
			k++;
	}
	rc2 = gw_ctx_waitall(c->ctx, r, k);
	return rc ? rc : rc2;
}

int gw_coll_barrier(struct gw_coll *c)
{
	int rc, round = 0;

	if (c->err)
		return c->err;
	/* Round k: tell rank + 2^k, hear from rank - 2^k. */
	for (int d = 1; d < c->size; d <<= 1, round++) {
		rc = bytes_step(c, slot_of(ID_BARRIER, (uint32_t)round),
				mod(c->rank + d, c->size), NULL,
				mod(c->rank - d, c->size), NULL, 0);
		if (rc)
			return fail(c, rc, "barrier", round);
	}
	return 0;
}

int gw_coll_broadcast(struct gw_coll *c, int root, void *buf, size_t bytes)
{
	struct gw_ctx_req r[STEP_BITS * 2];
	uint32_t slot = slot_of(ID_BCAST, 0);
	int vr, mask = 1, rc, rc2;
	size_t k = 0;

	if (c->err)
		return c->err;
	if (root < 0 || root >= c->size || (bytes && !buf))
		return -EINVAL;
	if (c->size == 1 || !bytes)
		return 0;
	/* Binomial tree over ranks renumbered so that root is 0. */
	vr = mod(c->rank - root, c->size);
	for (; mask < c->size; mask <<= 1) {
		if (vr & mask) {
			rc = bytes_step(c, slot, -1, NULL,
					mod(vr - mask + root, c->size), buf, bytes);
			if (rc)
				return fail(c, rc, "broadcast", 0);
			break;
		}
	}
	rc = 0;
	for (mask >>= 1; mask > 0; mask >>= 1) {
		if (vr + mask >= c->size)
			continue;
		rc = gw_ctx_isend_bytes(c->ctx, mod(vr + mask + root, c->size), slot,
					buf, bytes, &r[k]);
		if (rc)
			break;
		k++;
	}
	rc2 = gw_ctx_waitall(c->ctx, r, k);
	rc = rc ? rc : rc2;
	return rc ? fail(c, rc, "broadcast", 1) : 0;
}

int gw_coll_allgather(struct gw_coll *c, const void *send, void *recv,
		      size_t bytes_per_rank)
{
	uint8_t *out = recv;
	uint32_t slot = slot_of(ID_ALLGATHER, 0);
	int next = mod(c->rank + 1, c->size), prev = mod(c->rank - 1, c->size), rc;

	if (c->err)
		return c->err;
	if (!bytes_per_rank)
		return 0;
	if (!send || !recv)
		return -EINVAL;
	memmove(out + (size_t)c->rank * bytes_per_rank, send, bytes_per_rank);
	/* Step s: pass on block rank - s, take block rank - s - 1. */
	for (int s = 0; s < c->size - 1; s++) {
		int bs = mod(c->rank - s, c->size), br = mod(c->rank - s - 1, c->size);

		rc = bytes_step(c, slot, next, out + (size_t)bs * bytes_per_rank, prev,
				out + (size_t)br * bytes_per_rank, bytes_per_rank);
		if (rc)
			return fail(c, rc, "allgather", s);
	}
	return 0;
}

/* The stream of slots of a tensor (key: its length, or KEY_ID | the
 * caller's id): first come, first served, the same order on every rank. */
#define KEY_ID (UINT64_C(1) << 63)

static uint32_t stream_of(struct gw_coll *c, uint64_t key)
{
	for (unsigned i = 0; i < c->nstreams; i++)
		if (c->stream_key[i] == key)
			return ID_ALLREDUCE + i;
	if (c->nstreams < GW_COLL_STREAMS) {
		c->stream_key[c->nstreams] = key;
		return ID_ALLREDUCE + c->nstreams++;
	}
	return ID_ALLREDUCE + (uint32_t)(key % GW_COLL_STREAMS);
}

/* The call check (see the top of this file). */
struct call_desc {
	uint64_t key, n;
	uint32_t call;
	uint8_t op, lossy;
	uint16_t zero;
};
_Static_assert(sizeof(struct call_desc) == 24, "the call descriptor is 24 bytes");

static int tensor_name(char *s, size_t len, uint64_t key)
{
	return key & KEY_ID ? snprintf(s, len, "tensor id %llu",
				       (unsigned long long)(key & ~KEY_ID))
			    : snprintf(s, len, "a tensor without id");
}

/* Why rank ra's call a and rank rb's call b cannot be one allreduce. */
static void call_diff(char *m, size_t len, const struct call_desc *a, int ra,
		      const struct call_desc *b, int rb)
{
	char ta[48], tb[48];

	tensor_name(ta, sizeof(ta), a->key);
	tensor_name(tb, sizeof(tb), b->key);
	if (a->key != b->key && ((a->key | b->key) & KEY_ID))
		snprintf(m, len, "allreduce #%u: rank %d reduces %s (%llu values), "
			 "rank %d %s (%llu values): the ranks call allreduce on "
			 "different tensors or in different orders", a->call, ra, ta,
			 (unsigned long long)a->n, rb, tb, (unsigned long long)b->n);
	else if (a->n != b->n)
		snprintf(m, len, "allreduce #%u of %s: rank %d passes %llu values, "
			 "rank %d passes %llu", a->call, ta, ra,
			 (unsigned long long)a->n, rb, (unsigned long long)b->n);
	else if (a->call != b->call)
		snprintf(m, len, "allreduce of %s: rank %d is at call #%u, rank %d "
			 "at #%u (a rank skipped or repeated an allreduce)", ta, ra,
			 a->call, rb, b->call);
	else if (a->op != b->op)
		snprintf(m, len, "allreduce #%u of %s: rank %d asks for %s, rank %d "
			 "for %s", a->call, ta, ra, a->op ? "avg" : "sum", rb,
			 b->op ? "avg" : "sum");
	else
		snprintf(m, len, "allreduce #%u of %s: rank %d %s lossy compression "
			 "(GRADWIRE_LOSSY), rank %d %s", a->call, ta, ra,
			 a->lossy ? "allows" : "does not allow", rb,
			 b->lossy ? "does" : "does not");
}

/*
 * Every rank learns every rank's descriptor (dissemination: in round k this
 * rank passes what it holds to rank + 2^k; descs[i] is rank - i's), then
 * compares each with rank 0's, so all ranks report the same difference.
 * Return: 0, -EINVAL (a difference: c->errmsg says which), or the
 * transport's error.
 */
static int check_call(struct gw_coll *c, uint64_t key, uint64_t n,
		      enum gw_coll_op op, unsigned lossy)
{
	struct call_desc *d;
	int have = 1, round = 0, rc, r0;

	if (!c->descs) {
		c->descs = calloc((size_t)c->size, sizeof(*c->descs));
		if (!c->descs)
			return -ENOMEM;
	}
	d = c->descs;
	d[0] = (struct call_desc){ .key = key, .n = n, .call = c->calls++,
				   .op = (uint8_t)op, .lossy = lossy != 0 };
	for (int dist = 1; dist < c->size; dist <<= 1, round++) {
		int cnt = dist < c->size - dist ? dist : c->size - dist;

		rc = bytes_step(c, slot_of(ID_CALL, (uint32_t)round),
				mod(c->rank + dist, c->size), d,
				mod(c->rank - dist, c->size), d + dist,
				(size_t)cnt * sizeof(*d));
		if (rc)
			return fail(c, rc, "allreduce (call check)", round);
		have += cnt;
	}
	r0 = c->rank;	/* descs[r0] is rank 0's */
	for (int i = 0; i < c->size; i++) {
		const struct call_desc *x = &d[mod(r0 - i, c->size)];

		if (i && (x->key != d[r0].key || x->n != d[r0].n ||
			  x->op != d[r0].op || x->lossy != d[r0].lossy ||
			  x->call != d[r0].call)) {
			call_diff(c->errmsg, sizeof(c->errmsg), &d[r0], 0, x, i);
			c->err = -EINVAL;
			gw_log(GW_LOG_ERROR, GW_LOG_ERROR, c->rank, "%s", c->errmsg);
			return -EINVAL;
		}
	}
	return have == c->size ? 0 : -EIO;
}

static int allreduce(struct gw_coll *c, uint64_t key, float *buf, uint64_t n,
		     enum gw_coll_op op, unsigned flags);

int gw_coll_allreduce(struct gw_coll *c, float *buf, uint64_t n,
		      enum gw_coll_op op, unsigned flags)
{
	return allreduce(c, n & ~KEY_ID, buf, n, op, flags);
}

int gw_coll_allreduce_id(struct gw_coll *c, uint32_t id, float *buf,
			 uint64_t n, enum gw_coll_op op, unsigned flags)
{
	return allreduce(c, KEY_ID | id, buf, n, op, flags);
}

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
	float *buf;
	uint64_t q, rem;	/* chunk k: OFF(k), CNT(k) */
	uint64_t seg;		/* values per segment */
	uint32_t nseg, units, id;
	unsigned lossy;
};

/* Offset and length of what unit u sends (recv = 0) or receives (1). */
static uint64_t unit_span(const struct gw_coll *c, const struct ring *g,
			  uint32_t u, int recv, uint64_t *off)
{
	uint64_t q = g->q, rem = g->rem, lo = (uint64_t)(u % g->nseg) * g->seg;
	int k = mod(c->rank - (int)(u / g->nseg) - recv, c->size);

	*off = OFF(k) + lo;
	return lo >= CNT(k) ? 0 : CNT(k) - lo < g->seg ? CNT(k) - lo : g->seg;
}

/* Whether unit u belongs to the reduce-scatter phase (else the allgather). */
static bool in_reduce_phase(const struct gw_coll *c, const struct ring *g, uint32_t u)
{
	return u / g->nseg < (uint32_t)c->size - 1;
}

/* An exact ring's allgather receives land in the buffer as they arrive. */
static unsigned recv_flags(const struct ring *g)
{
	return g->lossy ? 0 : GW_CTX_ZEROCOPY;
}

static int post_recv(struct gw_coll *c, const struct ring *g, uint32_t u,
		     struct gw_ctx_req *r)
{
	uint64_t off, cnt = unit_span(c, g, u, 1, &off);

	if (!cnt)
		return 0;
	return gw_ctx_irecv(c->ctx, mod(c->rank - 1, c->size),
			    slot_of(g->id, u), g->buf + off, cnt,
			    in_reduce_phase(c, g, u) ? GW_CTX_ADD : recv_flags(g), r);
}

/*
 * Whether allgather unit u needs the lossy treatment: the owner's hop when
 * the link to next compresses a segment of cnt values, a later hop when the
 * payload it passes on is compressed. Otherwise the values travel exactly
 * (the same bits every rank holds), straight from the buffer.
 */
static bool lossy_hop(const struct gw_coll *c, int next, uint64_t cnt,
		      const struct gw_ctx_req *got, uint32_t u,
		      const struct ring *g)
{
	struct gw_payload p;

	if (u / g->nseg == (uint32_t)c->size - 1)
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
	uint64_t off, cnt = unit_span(c, g, u, 0, &off);
	int next = mod(c->rank + 1, c->size), rc;
	uint32_t slot = slot_of(g->id, u);

	if (!cnt)
		return 0;
	if (in_reduce_phase(c, g, u) || !g->lossy || !lossy_hop(c, next, cnt, got, u, g))
		return gw_ctx_isend(c->ctx, next, slot, g->buf + off, cnt,
				    g->lossy | GW_CTX_ZEROCOPY, r);
	if (u / g->nseg == (uint32_t)c->size - 1) {	/* the owner's hop */
		rc = gw_ctx_isend_sent(c->ctx, next, slot, g->buf + off, cnt,
				       GW_CTX_LOSSY, c->scratch, r);
		if (!rc)	/* encoded at post time: keep the sent bits */
			memcpy(g->buf + off, c->scratch, cnt * sizeof(float));
		return rc;
	}
	rc = gw_ctx_isend_fwd(c->ctx, next, slot, got, r);
	if (rc == -EPROTO)	/* next speaks another codec */
		rc = gw_ctx_isend(c->ctx, next, slot, g->buf + off, cnt,
				  GW_CTX_ZEROCOPY, r);
	return rc;
}

/* Wait for r[0..n) in order while rc stays 0; abort the rest once it is not. */
static int wait_or_abort(struct gw_coll *c, struct gw_ctx_req *r, uint32_t n,
			 int rc)
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
	gw_ctx_slot_trim(c->ctx, mod(c->rank + (recv ? -1 : 1), c->size),
			 slot_of(g->id, u), 0);
}

static int wait_send(struct gw_coll *c, const struct ring *g,
		     struct gw_ctx_req *sr, uint32_t u)
{
	int rc = gw_ctx_waitall(c->ctx, &sr[u], 1);

	if (!rc)
		trim(c, g, u, 0);
	if (sr[u].res)	/* see STAGED_MAX */
		c->staged -= sr[u].n;
	sr[u].res = NULL;
	return rc;
}

static int ring_run(struct gw_coll *c, const struct ring *g)
{
	struct gw_ctx_req *rr = c->req, *sr = c->req + g->units;
	uint32_t posted = 0, swaited = 0, rwaited = 0, u;
	uint32_t back = ((uint32_t)c->size - 1) * g->nseg;
	uint32_t lag = g->nseg < WINDOW ? g->nseg : WINDOW;
	int rc = 0;

	memset(c->req, 0, 2 * (size_t)g->units * sizeof(*c->req));
	c->staged = 0;
	for (u = 0; u < g->units && !rc; u++) {
		while (!rc && posted < g->units && posted <= u + WINDOW &&
		       posted < rwaited + 2 * WINDOW) {
			/* A receive straight into the buffer (recv_flags())
			 * overwrites what send posted - back read: that send
			 * must have been posted (it is below u) and left. */
			if (recv_flags(g) && !in_reduce_phase(c, g, posted)) {
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
		while (!rc && u >= lag && rwaited <= u - lag) {
			rc = gw_ctx_waitall(c->ctx, &rr[rwaited], 1);
			/* Its frame is needed later only when it is a lossy
			 * allgather payload that send rwaited + nseg forwards. */
			if (!rc && !(g->lossy && !in_reduce_phase(c, g, rwaited)))
				trim(c, g, rwaited, 1);
			rwaited++;
		}
		if (!rc)
			rc = post_send(c, g, u, &rr[u - (u >= g->nseg ? g->nseg : 0)],
				       &sr[u]);
		if (!rc && u >= g->nseg)	/* its payload went on: buffer free */
			trim(c, g, u - g->nseg, 1);
		if (!rc && sr[u].res)
			c->staged += sr[u].n;
		while (!rc && (u + 1 - swaited > WINDOW ||
			       (c->staged > STAGED_MAX && swaited < u)))
			rc = wait_send(c, g, sr, swaited++);
	}
	if (rc) {
		fail(c, rc, in_reduce_phase(c, g, u - 1) ? "allreduce reduce-scatter"
						 : "allreduce allgather",
		     (int)((u - 1) / g->nseg));
		wait_or_abort(c, rr, g->units, rc);
		wait_or_abort(c, sr, g->units, rc);
		return rc;
	}
	/* The sends still in flight (see above), then the last receives; after
	 * a failure the rest are withdrawn, not waited for one timeout each. */
	rc = wait_or_abort(c, sr, g->units, 0);
	rc = wait_or_abort(c, rr, g->units, rc);
	for (u = 0; u < g->units; u++) {
		trim(c, g, u, 0);
		trim(c, g, u, 1);
	}
	return rc ? fail(c, rc, "allreduce", 2 * (c->size - 1) - 1) : 0;
}

/* Reserve c->req for units receives and sends, c->scratch for one segment. */
static int ring_reserve(struct gw_coll *c, uint32_t units, uint64_t seg,
			unsigned lossy)
{
	int rc = gw_grow((void **)&c->req, &c->req_cap,
			 2 * (size_t)units * sizeof(*c->req));

	if (!rc && lossy)
		rc = gw_grow((void **)&c->scratch, &c->scratch_cap,
			     seg * sizeof(float));
	return rc;
}

/*
 * The first lossy call agrees, by one exact allgather, on the largest wire
 * bytes per value of any rank's link to its next rank, and on whether any
 * link compresses at all (if none does, lossy calls run as exact ones).
 * Every rank must cut the same segments (segment_values()) and take the
 * same path.
 */
static int agree_links(struct gw_coll *c)
{
	enum { PROBE = 1 << 20 };
	const struct gw_codec *k = gw_ctx_codec(c->ctx, mod(c->rank + 1, c->size));
	struct link { double bpv, lossy; } mine = { sizeof(float), 0 }, *all;
	int rc;

	if (c->links_agreed)
		return 0;
	if (k->ops->lossy)
		mine = (struct link){ (double)gw_payload_bound(k, PROBE) / PROBE, 1 };
	all = calloc((size_t)c->size, sizeof(*all));
	if (!all)
		return -ENOMEM;
	rc = gw_coll_allgather(c, &mine, all, sizeof(mine));
	for (int r = 0; !rc && r < c->size; r++) {
		c->wire_bpv = all[r].bpv > c->wire_bpv ? all[r].bpv : c->wire_bpv;
		c->lossy_links |= all[r].lossy != 0;
	}
	free(all);
	c->links_agreed = !rc;
	return rc;
}

/*
 * Values per segment, so that a segment is about seg_bytes on the wire: a
 * compressed segment is small, and many small messages cost more than the
 * overlap gains (top-k at 1% took twice as long on a 1 Gbit/s link in 1 MiB
 * segments as in whole chunks). But at most SEG_VALUES_MAX values (16 MiB of
 * floats, about 1.3 MB of top-k at 1% on the wire): each segment in flight
 * holds a staged residual, the owner's copy and a codec scratch of its
 * length, and a ring of a few huge segments has them all in flight at once
 * (top-k at 1% held 2.3x its tensor in memory that way).
 */
#define SEG_VALUES_MAX (UINT64_C(4) << 20)

static uint64_t segment_values(const struct gw_coll *c, unsigned lossy)
{
	double bpv = lossy ? c->wire_bpv : sizeof(float);
	uint64_t seg = (uint64_t)((double)c->seg_bytes / bpv);

	if (c->seg_bytes && seg > SEG_VALUES_MAX)
		seg = SEG_VALUES_MAX;
	return c->seg_bytes && !seg ? 1 : seg;
}

static int allreduce(struct gw_coll *c, uint64_t key, float *buf, uint64_t n,
		     enum gw_coll_op op, unsigned flags)
{
	int size = c->size, rc;
	uint64_t q = n / (uint64_t)size, rem = n % (uint64_t)size, most = CNT(0), nseg, seg;
	uint32_t steps = 2 * ((uint32_t)size - 1);
	struct ring g = { .buf = buf, .q = q, .rem = rem };
	unsigned lossy = flags & GW_CTX_LOSSY;

	if (c->err)
		return c->err;
	if ((op != GW_COLL_SUM && op != GW_COLL_AVG) || (flags & ~GW_CTX_LOSSY) ||
	    (n && !buf))
		return -EINVAL;
	if (size > 1) {
		rc = check_call(c, key, n, op, lossy);
		if (rc)
			return rc;
	}
	if (lossy && size > 1 && n) {	/* PowerSGD's own scheme, if agreed */
		rc = gw_coll_lowrank_allreduce(c, &c->lowrank,
					       slot_of(stream_of(c, key), 0), buf, n);
		if (rc < 0)
			return fail(c, rc, "allreduce (low rank)", 0);
		if (rc == 0)
			goto avg;
		if (rc == GW_LOWRANK_EXACT)
			lossy = 0;
	}
	if (size == 1 || !n)
		goto avg;
	if (lossy) {
		rc = agree_links(c);
		if (rc)
			return fail(c, rc, "allreduce (agreeing on the links)", 0);
		if (!c->lossy_links)
			lossy = 0;
	}
	/* Segments of about seg_bytes on the wire, no more units than slots. */
	seg = segment_values(c, lossy);
	nseg = seg && most > seg ? (most + seg - 1) / seg : 1;
	if (nseg > (UINT32_C(1) << STEP_BITS) / steps)
		nseg = (UINT32_C(1) << STEP_BITS) / steps;
	g.nseg = (uint32_t)nseg;
	g.seg = (most + nseg - 1) / nseg;
	g.units = steps * g.nseg;
	g.lossy = lossy;
	g.id = stream_of(c, key);
	rc = ring_reserve(c, g.units, g.seg, g.lossy);
	if (!rc)
		rc = ring_run(c, &g);
	if (rc)
		return rc;
avg:
	if (op == GW_COLL_AVG && size > 1)
		for (uint64_t i = 0; i < n; i++)
			buf[i] /= (float)size;
	return 0;
}
