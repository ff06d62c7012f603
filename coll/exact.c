/* SPDX-License-Identifier: MIT */
/*
 * exact.c - the exact collectives over byte messages: barrier
 * (dissemination), broadcast (binomial tree, in pieces) and allgather (ring), and the
 * step of byte messages they and the call check (check.c) are made of.
 * Each uses its own ident's slots (coll_impl.h's slot layout).
 */
#include <errno.h>
#include <string.h>
#include "coll_impl.h"

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

/*
 * The broadcast goes in pieces of BCAST_PIECE bytes, up to BCAST_WINDOW of
 * them in flight on slots of their own: a rank passes each piece to its
 * children as soon as it has it, so the tree's hops overlap and a link
 * carries one piece while the next is on its way. One message of a large
 * state (a joiner's, gradwire.elastic) left the link idle between its
 * copies and its hops.
 */
#define BCAST_PIECE ((size_t)4 << 20)
#define BCAST_WINDOW 8u

/* The length of piece i of a broadcast of bytes. */
static size_t piece_len(size_t bytes, size_t i)
{
	size_t left = bytes - i * BCAST_PIECE;

	return left < BCAST_PIECE ? left : BCAST_PIECE;
}

/* Give up what a failed broadcast left in flight. */
static void bcast_abort(struct gw_coll *c, struct gw_ctx_req *rr, const bool *rposted,
			struct gw_ctx_req (*sr)[STEP_BITS], const int *nsent)
{
	for (unsigned w = 0; w < BCAST_WINDOW; w++) {
		if (rposted[w])
			gw_ctx_abort(c->ctx, &rr[w]);
		for (int k = 0; k < nsent[w]; k++)
			gw_ctx_abort(c->ctx, &sr[w][k]);
	}
}

int gw_coll_broadcast(struct gw_coll *c, int root, void *buf, size_t bytes)
{
	struct gw_ctx_req rr[BCAST_WINDOW], sr[BCAST_WINDOW][STEP_BITS];
	bool rposted[BCAST_WINDOW] = { false };
	int nsent[BCAST_WINDOW] = { 0 }, child[STEP_BITS], nchild = 0, parent = -1, vr, mask = 1;
	uint8_t *b = buf;
	size_t pieces, posted = 0;
	int rc = 0;

	if (c->err)
		return c->err;
	if (root < 0 || root >= c->size || (bytes && !buf))
		return -EINVAL;
	if (c->size == 1 || !bytes)
		return 0;
	/* Binomial tree over ranks renumbered so that root is 0: the parent,
	 * then the children, farthest subtree first. */
	vr = mod(c->rank - root, c->size);
	for (; mask < c->size; mask <<= 1)
		if (vr & mask) {
			parent = mod(vr - mask + root, c->size);
			break;
		}
	for (mask >>= 1; mask > 0; mask >>= 1)
		if (vr + mask < c->size)
			child[nchild++] = mod(vr + mask + root, c->size);
	pieces = (bytes + BCAST_PIECE - 1) / BCAST_PIECE;
	for (size_t i = 0; i < pieces && !rc; i++) {
		unsigned w = (unsigned)(i % BCAST_WINDOW);

		/* Receives up to a window ahead; piece j's slot is free once
		 * piece j - BCAST_WINDOW arrived. */
		while (parent >= 0 && posted < pieces && posted < i + BCAST_WINDOW && !rc) {
			unsigned pw = (unsigned)(posted % BCAST_WINDOW);

			rc = gw_ctx_irecv_bytes(c->ctx, parent, slot_of(ID_BCAST, pw),
						b + posted * BCAST_PIECE, piece_len(bytes, posted),
						&rr[pw]);
			rposted[pw] = !rc;
			posted += !rc;
		}
		if (!rc && parent >= 0) {
			rposted[w] = false;
			rc = gw_ctx_wait(c->ctx, &rr[w]);
		}
		if (!rc && nsent[w]) { /* piece i - BCAST_WINDOW's, on this slot */
			rc = gw_ctx_waitall(c->ctx, sr[w], (size_t)nsent[w]);
			nsent[w] = 0;
		}
		for (int k = 0; k < nchild && !rc; k++) {
			rc = gw_ctx_isend_bytes(c->ctx, child[k], slot_of(ID_BCAST, w),
						b + i * BCAST_PIECE, piece_len(bytes, i),
						&sr[w][nsent[w]]);
			nsent[w] += !rc;
		}
	}
	for (unsigned w = 0; w < BCAST_WINDOW && !rc; w++) {
		rc = nsent[w] ? gw_ctx_waitall(c->ctx, sr[w], (size_t)nsent[w]) : 0;
		nsent[w] = 0;
	}
	if (rc)
		bcast_abort(c, rr, rposted, sr, nsent);
	return rc ? coll_fail(c, rc, "broadcast", 0) : 0;
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
