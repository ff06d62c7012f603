/* SPDX-License-Identifier: MIT */
/*
 * coll.c - barrier, broadcast, allgather and ring allreduce over a context.
 *
 * Slot layout (all below GW_TP_SLOT_MAX):
 *
 *   GW_COLL_SLOT_BASE + (ident << STEP_BITS) + step
 *   ident 0: barrier (step = round), 1: broadcast, 2: allgather,
 *         3 + k: allreduce stream k (step 0 .. 2 * (size - 1) - 1)
 *
 * Allreduce (ring). buf is cut into size chunks whose lengths differ by at
 * most one; chunk k starts at k * q + min(k, n % size). Reduce-scatter step s
 * sends chunk (rank - s) to next and adds chunk (rank - s - 1) from prev into
 * place (GW_CTX_ADD); the receive is posted first, then the send, then both
 * are waited (full duplex). After size - 1 steps rank r owns chunk r + 1.
 * Allgather step s sends chunk (rank + 1 - s) and receives chunk (rank - s)
 * over its old contents. When lossy, at step 0 the owner sends its chunk
 * with gw_ctx_isend_sent() and replaces its copy with what the next rank
 * decodes; every later hop forwards the payload it received byte for byte
 * (gw_ctx_isend_fwd), so the chunk stays compressed on every hop and every
 * rank ends with the owner's bits. Empty chunks (n < size) are not sent: both
 * sides know the lengths.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "coll.h"
#include "coll_lowrank.h"

#define STEP_BITS 16
#define ID_BARRIER 0u
#define ID_BCAST 1u
#define ID_ALLGATHER 2u
#define ID_ALLREDUCE 3u

struct gw_coll {
	struct gw_ctx *ctx;
	int rank, size;
	int err;			/* first failure; every later call returns it */
	uint64_t stream_key[GW_COLL_STREAMS];	/* the tensor of each stream */
	unsigned nstreams;
	float *scratch;			/* the owner's chunk as the next rank decodes it */
	uint64_t scratch_n;
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
	*out = c;
	return 0;
}

void gw_coll_destroy(struct gw_coll *c)
{
	if (!c)
		return;
	free(c->scratch);
	gw_lowrank_destroy(c->lowrank);
	free(c);
}

struct gw_ctx *gw_coll_ctx(const struct gw_coll *c)
{
	return c->ctx;
}

/* Remember the first error and say where it happened. */
static int fail(struct gw_coll *c, int rc, const char *what, int step)
{
	if (!c->err)
		c->err = rc;
	gw_log(GW_LOG_ERROR, GW_LOG_ERROR, c->rank,
	       "%s step %d failed: %s", what, step, gw_strerror(rc));
	return rc;
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

/*
 * One ring step of floats: add into / overwrite rx[0..rn) from `from`, send
 * sx[0..sn) to `to`; sent (when set) receives what `to` decodes. Empty
 * messages are skipped on both sides.
 */
static int float_step(struct gw_coll *c, uint32_t slot, int to, const float *sx,
		      uint64_t sn, unsigned sflags, float *sent, int from,
		      float *rx, uint64_t rn, unsigned rflags)
{
	struct gw_ctx_req r[2];
	size_t k = 0;
	int rc = 0, rc2;

	if (rn) {
		rc = gw_ctx_irecv(c->ctx, from, slot, rx, rn, rflags, &r[k]);
		if (!rc)
			k++;
	}
	if (!rc && sn) {
		rc = gw_ctx_isend_sent(c->ctx, to, slot, sx, sn, sflags, sent, &r[k]);
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
 * The allgather phase of a lossy allreduce. Step 0: the owner encodes its
 * reduced chunk once (with its residual) and keeps what the next rank will
 * decode. Step s > 0: a rank sends the chunk it received at step s - 1 by
 * forwarding that payload byte for byte (gw_ctx_isend_fwd), so the chunk
 * stays compressed on every hop and every rank decodes the same bytes; a
 * link that negotiated another codec gets the decoded values exactly.
 */
static int allgather_lossy(struct gw_coll *c, uint32_t id, float *buf, uint64_t n)
{
	int size = c->size, rank = c->rank, rc = 0, rc2;
	int next = mod(rank + 1, size), prev = mod(rank - 1, size);
	uint64_t q = n / (uint64_t)size, rem = n % (uint64_t)size;
	struct gw_ctx_req got = { 0 };	/* the previous step's receive */

	for (int s = 0; s < size - 1 && !rc; s++) {
		int cs = mod(rank + 1 - s, size), cr = mod(rank - s, size);
		uint32_t slot = slot_of(id, (uint32_t)(size - 1 + s));
		struct gw_ctx_req r[2];
		size_t k = 0;

		if (CNT(cr)) {
			rc = gw_ctx_irecv(c->ctx, prev, slot, buf + OFF(cr), CNT(cr), 0,
					  &r[k]);
			if (!rc)
				k++;
		}
		if (!rc && CNT(cs) && s == 0) {
			rc = gw_ctx_isend_sent(c->ctx, next, slot, buf + OFF(cs), CNT(cs),
					       GW_CTX_LOSSY, c->scratch, &r[k]);
			if (!rc) {	/* encoded at post time: keep the sent bits */
				memcpy(buf + OFF(cs), c->scratch, CNT(cs) * sizeof(float));
				k++;
			}
		} else if (!rc && CNT(cs)) {
			rc = gw_ctx_isend_fwd(c->ctx, next, slot, &got, &r[k]);
			if (rc == -EPROTO)	/* next speaks another codec */
				rc = gw_ctx_isend(c->ctx, next, slot, buf + OFF(cs),
						  CNT(cs), 0, &r[k]);
			if (!rc)
				k++;
		}
		rc2 = gw_ctx_waitall(c->ctx, r, k);
		rc = rc ? rc : rc2;
		if (CNT(cr))
			got = r[0];
		if (rc)
			return fail(c, rc, "allreduce allgather", s);
	}
	return 0;
}

static int allreduce(struct gw_coll *c, uint64_t key, float *buf, uint64_t n,
		     enum gw_coll_op op, unsigned flags)
{
	int size = c->size, rank = c->rank, rc;
	int next = mod(rank + 1, size), prev = mod(rank - 1, size);
	uint64_t q = n / (uint64_t)size, rem = n % (uint64_t)size;
	unsigned lossy = flags & GW_CTX_LOSSY;
	uint32_t id;

	if (c->err)
		return c->err;
	if ((op != GW_COLL_SUM && op != GW_COLL_AVG) || (flags & ~GW_CTX_LOSSY) ||
	    (n && !buf))
		return -EINVAL;
	if (lossy && size > 1 && n) {	/* PowerSGD's own scheme, if agreed */
		rc = gw_coll_lowrank_allreduce(c, &c->lowrank,
					       slot_of(stream_of(c, key), 0), buf, n, op);
		if (rc <= 0)
			return rc < 0 ? fail(c, rc, "allreduce (low rank)", 0) : 0;
		if (rc == GW_LOWRANK_EXACT)
			lossy = 0;
	}
	if (size == 1 || !n)
		goto avg;
	id = stream_of(c, key);
	if (lossy && c->scratch_n < CNT(0)) {
		float *s = realloc(c->scratch, CNT(0) * sizeof(float));

		if (!s)
			return -ENOMEM;
		c->scratch = s;
		c->scratch_n = CNT(0);
	}
	for (int s = 0; s < size - 1; s++) {	/* reduce-scatter */
		int cs = mod(rank - s, size), cr = mod(rank - s - 1, size);

		rc = float_step(c, slot_of(id, (uint32_t)s), next, buf + OFF(cs),
				CNT(cs), lossy, NULL, prev, buf + OFF(cr), CNT(cr),
				GW_CTX_ADD);
		if (rc)
			return fail(c, rc, "allreduce reduce-scatter", s);
	}
	if (lossy) {
		rc = allgather_lossy(c, id, buf, n);
		if (rc)
			return rc;
		goto avg;
	}
	for (int s = 0; s < size - 1; s++) {	/* allgather, exact */
		int cs = mod(rank + 1 - s, size), cr = mod(rank - s, size);
		uint32_t slot = slot_of(id, (uint32_t)(size - 1 + s));

		rc = float_step(c, slot, next, buf + OFF(cs), CNT(cs), 0, NULL,
				prev, buf + OFF(cr), CNT(cr), 0);
		if (rc)
			return fail(c, rc, "allreduce allgather", s);
	}
avg:
	if (op == GW_COLL_AVG && size > 1)
		for (uint64_t i = 0; i < n; i++)
			buf[i] /= (float)size;
	return 0;
}
