/* SPDX-License-Identifier: MIT */
/*
 * coll.c - the collectives object, barrier, broadcast and allgather (exact),
 * and the call check every allreduce starts with (allreduce.c has the
 * allreduce, ring.c its ring).
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
 *  16 u32 call number (allreduces so far)  20 u8 op  21 u8 lossy
 *  22 u8 auto's choice (codec id + 1 | 0x40 a trial)  23 u8 auto's rate
 *     class | 0x80 probe (auto_codec.c; both 0 without GRADWIRE_CODEC=auto)
 *
 * so ranks that disagree on the tensor (the order of ids), its length, the
 * op or the lossy flag all fail at once, before any data moves, with the
 * same message naming the tensor, both values and the two ranks, instead
 * of a malformed frame on one rank and a timeout on another. A
 * reduce-scatter or float allgather given counts per rank (other than the
 * chunk rule's) sets KEY_CNT in key and puts FNV-1a 64 of its counts in n
 * (they fix the length too), so ranks that pass different counts fail the
 * same way, the message saying that the counts differ. The last two bytes
 * are not compared: they carry what each rank states for auto, so that
 * every rank learns every rank's choice at the same call boundary. auto's
 * probe uses the call check's slots from step 1024 on.
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
	gw_tp_lost_ends_all(gw_ctx_tp(ctx), true);
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
	free(c->descs);
	free(c->offs);
	free(c->lr.p);
	free(c->lr.q);
	free(c->lr.qn);
	free(c->lr.work);
	free(c->au.want);
	free(c->au.probe_buf);
	free(c->world.rank);
	free(c->local.rank);
	free(c->cross.rank);
	free(c->grid);
	free(c->hrs.tmp);
	free(c->hrs.offs);
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
	c->algo_set = algo;
	c->decided = false; /* coll_decide() again, and the first lossy call's */
	c->agreed = false;  /* agreement: it looks at the links that algorithm uses */
}

/* Remember the first error and say where it happened, and with whom. */
int coll_fail(struct gw_coll *c, int rc, const char *what, int step)
{
	bool receiving;
	int peer = gw_ctx_failed_peer(c->ctx, &receiving);

	if (!c->err) {
		c->err = rc;
		if (peer >= 0)
			snprintf(c->errmsg, sizeof(c->errmsg), "%s step %d failed: %s (%s rank %d)",
				 what, step, gw_strerror(rc),
				 receiving ? "receiving from" : "sending to", peer);
		else
			snprintf(c->errmsg, sizeof(c->errmsg), "%s step %d failed: %s", what, step,
				 gw_strerror(rc));
	}
	gw_log(GW_LOG_ERROR, GW_LOG_ERROR, c->rank, "%s step %d failed: %s", what, step,
	       gw_strerror(rc));
	return rc;
}

const char *gw_coll_error(const struct gw_coll *c)
{
	return c->err ? c->errmsg : NULL;
}

/*
 * One step of byte messages: receive len bytes from `from` into rbuf (when
 * from >= 0), send len bytes of sbuf to `to` (when to >= 0), on slot.
 * The receive is posted first; nothing stays in flight when we return: a
 * request that was posted is waited, or withdrawn when the other's post
 * failed (a post to a dead peer can itself take the timeout; waiting
 * another one for the receive made a rank fail after twice the timeout).
 */
int coll_bytes_step(struct gw_coll *c, uint32_t slot, int to, const void *sbuf, int from,
		    void *rbuf, size_t len)
{
	struct gw_ctx_req r[2];
	size_t k = 0;
	int rc;

	if (from >= 0) {
		rc = gw_ctx_irecv_bytes(c->ctx, from, slot, rbuf, len, &r[k]);
		if (rc)
			return rc;
		k++;
	}
	if (to >= 0) {
		rc = gw_ctx_isend_bytes(c->ctx, to, slot, sbuf, len, &r[k]);
		if (rc) {
			if (k)
				gw_ctx_abort(c->ctx, &r[0]);
			return rc;
		}
		k++;
	}
	return gw_ctx_waitall(c->ctx, r, k);
}

int gw_coll_barrier(struct gw_coll *c)
{
	int rc, round = 0;

	if (c->err)
		return c->err;
	/* Round k: tell rank + 2^k, hear from rank - 2^k. */
	for (int d = 1; d < c->size; d <<= 1, round++) {
		rc = coll_bytes_step(c, slot_of(ID_BARRIER, (uint32_t)round),
				     mod(c->rank + d, c->size), NULL, mod(c->rank - d, c->size),
				     NULL, 0);
		if (rc)
			return coll_fail(c, rc, "barrier", round);
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
			rc = coll_bytes_step(c, slot, -1, NULL, mod(vr - mask + root, c->size), buf,
					     bytes);
			if (rc)
				return coll_fail(c, rc, "broadcast", 0);
			break;
		}
	}
	rc = 0;
	for (mask >>= 1; mask > 0; mask >>= 1) {
		if (vr + mask >= c->size)
			continue;
		rc = gw_ctx_isend_bytes(c->ctx, mod(vr + mask + root, c->size), slot, buf, bytes,
					&r[k]);
		if (rc)
			break;
		k++;
	}
	rc2 = gw_ctx_waitall(c->ctx, r, k);
	rc = rc ? rc : rc2;
	return rc ? coll_fail(c, rc, "broadcast", 1) : 0;
}

int gw_coll_allgather(struct gw_coll *c, const void *send, void *recv, size_t bytes_per_rank)
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

		rc = coll_bytes_step(c, slot, next, out + (size_t)bs * bytes_per_rank, prev,
				     out + (size_t)br * bytes_per_rank, bytes_per_rank);
		if (rc)
			return coll_fail(c, rc, "allgather", s);
	}
	return 0;
}

uint32_t coll_stream_of(struct gw_coll *c, uint64_t key)
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
	uint8_t want, rate; /* auto's (c->au.say, auto_codec.c), not compared */
};
_Static_assert(sizeof(struct call_desc) == 24, "the call descriptor is 24 bytes");

static int tensor_name(char *s, size_t len, uint64_t key)
{
	return key & KEY_ID
		       ? snprintf(s, len, "tensor id %llu",
				  (unsigned long long)(key & ~(KEY_ID | KEY_RS | KEY_AG | KEY_CNT)))
		       : snprintf(s, len, "a tensor without id");
}

/* The collective a call check's key belongs to. */
static const char *kind_of(uint64_t key)
{
	return key & KEY_RS ? "reduce-scatter" : key & KEY_AG ? "allgather" : "allreduce";
}

/* "%llu values", or the counts' hash for a call given counts (KEY_CNT). */
static void size_name(char *s, size_t len, const struct call_desc *d)
{
	if (d->key & KEY_CNT)
		snprintf(s, len, "counts per rank, hash %016llx", (unsigned long long)d->n);
	else
		snprintf(s, len, "%llu values", (unsigned long long)d->n);
}

/* Why rank ra's call a and rank rb's call b cannot be one call. */
static void call_diff(char *m, size_t len, const struct call_desc *a, int ra,
		      const struct call_desc *b, int rb)
{
	const char *ka = kind_of(a->key), *kb = kind_of(b->key);
	char ta[32], tb[32], na[40], nb[40];

	tensor_name(ta, sizeof(ta), a->key);
	tensor_name(tb, sizeof(tb), b->key);
	size_name(na, sizeof(na), a);
	size_name(nb, sizeof(nb), b);
	if (ka != kb)
		snprintf(m, len,
			 "call #%u: rank %d calls %s of %s (%s), rank %d %s of %s "
			 "(%s): the ranks call different collectives, or in "
			 "different orders",
			 a->call, ra, ka, ta, na, rb, kb, tb, nb);
	else if (((a->key ^ b->key) & ~KEY_CNT) && ((a->key | b->key) & KEY_ID))
		snprintf(m, len,
			 "%s #%u: rank %d reduces %s (%s), "
			 "rank %d %s (%s): the ranks call %s on "
			 "different tensors or in different orders",
			 ka, a->call, ra, ta, na, rb, tb, nb, ka);
	else if (((a->key | b->key) & KEY_CNT) && (a->key != b->key || a->n != b->n))
		snprintf(m, len,
			 "%s #%u of %s: the counts per rank differ: rank %d passes %s, "
			 "rank %d %s",
			 ka, a->call, ta, ra, a->key & KEY_CNT ? na : "the chunk rule's counts", rb,
			 b->key & KEY_CNT ? nb : "the chunk rule's counts");
	else if (a->n != b->n)
		snprintf(m, len, "%s #%u of %s: rank %d passes %llu values, rank %d passes %llu",
			 ka, a->call, ta, ra, (unsigned long long)a->n, rb,
			 (unsigned long long)b->n);
	else if (a->call != b->call)
		snprintf(m, len,
			 "%s of %s: rank %d is at call #%u, rank %d "
			 "at #%u (a rank skipped or repeated a collective)",
			 ka, ta, ra, a->call, rb, b->call);
	else if (a->op != b->op)
		snprintf(m, len, "%s #%u of %s: rank %d asks for %s, rank %d for %s", ka, a->call,
			 ta, ra, a->op ? "avg" : "sum", rb, b->op ? "avg" : "sum");
	else
		snprintf(m, len,
			 "%s #%u of %s: rank %d %s lossy compression "
			 "(GRADWIRE_LOSSY), rank %d %s",
			 ka, a->call, ta, ra, a->lossy ? "allows" : "does not allow", rb,
			 b->lossy ? "does" : "does not");
}

/*
 * Every rank learns every rank's descriptor (dissemination: in round k this
 * rank passes what it holds to rank + 2^k; descs[i] is rank - i's), then
 * compares each with rank 0's, so all ranks report the same difference.
 * Return: 0, -EINVAL (a difference: c->errmsg says which), or the
 * transport's error.
 */
int coll_check_call(struct gw_coll *c, uint64_t key, uint64_t n, enum gw_coll_op op, unsigned lossy)
{
	struct call_desc *d;
	int have = 1, round = 0, rc, r0;

	if (!c->descs) {
		c->descs = calloc((size_t)c->size, sizeof(*c->descs));
		if (!c->descs)
			return -ENOMEM;
	}
	d = c->descs;
	d[0] = (struct call_desc){
		.key = key, .n = n, .call = c->calls++, .op = (uint8_t)op, .lossy = lossy != 0
	};
	d[0].want = c->au.say[0]; /* 0 and 0 without auto */
	d[0].rate = c->au.say[1];
	for (int dist = 1; dist < c->size; dist <<= 1, round++) {
		int cnt = dist < c->size - dist ? dist : c->size - dist;

		rc = coll_bytes_step(c, slot_of(ID_CALL, (uint32_t)round),
				     mod(c->rank + dist, c->size), d, mod(c->rank - dist, c->size),
				     d + dist, (size_t)cnt * sizeof(*d));
		if (rc)
			return coll_fail(c, rc, "allreduce (call check)", round);
		have += cnt;
	}
	r0 = c->rank; /* descs[r0] is rank 0's */
	for (int i = 0; i < c->size; i++) {
		const struct call_desc *x = &d[mod(r0 - i, c->size)];

		if (i && (x->key != d[r0].key || x->n != d[r0].n || x->op != d[r0].op ||
			  x->lossy != d[r0].lossy || x->call != d[r0].call)) {
			call_diff(c->errmsg, sizeof(c->errmsg), &d[r0], 0, x, i);
			c->err = -EINVAL;
			gw_log(GW_LOG_ERROR, GW_LOG_ERROR, c->rank, "%s", c->errmsg);
			return -EINVAL;
		}
	}
	if (have != c->size)
		return -EIO;
	for (int i = 0; c->au.on && i < c->size; i++) {
		c->au.want[mod(c->rank - i, c->size)] = d[i].want;
		c->au.rate_of[mod(c->rank - i, c->size)] = d[i].rate;
	}
	return 0;
}
