/* SPDX-License-Identifier: MIT */
/*
 * exact.c - the exact collectives over byte messages: barrier
 * (dissemination), broadcast (binomial tree) and allgather (ring), and the
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
