/* SPDX-License-Identifier: MIT */
/*
 * wait.c - finishing requests: waiting for one or all (gw_tp_wait(),
 * gw_tp_waitall()), testing, cancelling, and the blocking send and
 * receive built on them. The progress engine that completes ops is in
 * progress.c; this file decides when a waiter stops.
 *
 * Invariants:
 *  - a wait ends at its deadline: the late ops are cancelled together and
 *    drained for at most TP_DRAIN_MS in all; one whose completion still has
 *    not come becomes an orphan (it keeps its buffer, its completion frees
 *    it);
 *  - an op is freed only once its completion came, so no byte lands in a
 *    buffer the caller took back;
 *  - a peer declared gone ends every wait for it with -ECONNRESET.
 */
#include <errno.h>
#include <stdlib.h>
#define GW_TP_INTERNAL
#include "transport.h"

#define TP_DRAIN_MS 500 /* how long a cancelled op may take to drain */

/*
 * Ask the provider to give op back. Its completion (cancelled, or done
 * after all) still has to come before its buffer is free again: until then
 * it is posted and cancelling.
 */
static void cancel_begin(struct gw_tp *tp, struct tp_op *op)
{
	int ret;

	if (op->cancelling || op->state != OP_POSTED)
		return;
	op->cancelling = true;
	ret = fi_cancel(&tp_op_ep(tp, op)->fid, &op->ctx);
	if (ret)
		tp_log(tp, GW_LOG_DEBUG, "fi_cancel(%s rank %d): %s", tp_op_dir_name(op), op->peer,
		       fi_strerror(-ret));
}

/* A cancelled op did not complete in time: it keeps its buffer, nobody waits for it. */
static void orphan(struct gw_tp *tp, struct tp_op *op)
{
	tp_log(tp, GW_LOG_WARN,
	       "%s rank %d (tag 0x%016llx) was cancelled but did not complete; "
	       "its buffer stays in use until it completes or the context is destroyed",
	       tp_op_dir_name(op), op->peer, (unsigned long long)op->tag);
	op->state = OP_ORPHAN;
	tp->orphans++;
}

/* Whether op was cancelled and its completion has not come. */
static bool cancel_pending(const struct tp_op *op)
{
	return op->state == OP_POSTED && op->cancelling;
}

/* The first op cancelled whose completion has not come, or NULL. */
static struct tp_op *cancelled_op(const struct gw_tp *tp)
{
	for (struct tp_slab *sl = tp->slabs; sl; sl = sl->next)
		for (size_t i = 0; i < 64; i++)
			if (cancel_pending(&sl->ops[i]))
				return &sl->ops[i];
	return NULL;
}

/*
 * Wait, TP_DRAIN_MS at most in all, for the completions of every cancelled
 * op; those still missing then become orphans. One shared drain, so that
 * withdrawing many requests (a ring's whole window) costs one bounded wait,
 * not one per request.
 */
static void drain(struct gw_tp *tp)
{
	int64_t deadline = gw_now_ms() + TP_DRAIN_MS;
	unsigned step = 0;

	while (cancelled_op(tp)) {
		int64_t left = deadline - gw_now_ms();

		if (left <= 0 || tp_progress_wait(tp, left, &step) < 0)
			break;
	}
	for (struct tp_slab *sl = tp->slabs; sl; sl = sl->next) /* one pass */
		for (size_t i = 0; i < 64; i++)
			if (cancel_pending(&sl->ops[i]))
				orphan(tp, &sl->ops[i]);
}

/* Whether op ends because a peer is gone (its own, or any with
 * gw_tp_lost_ends_all()) or because we revoked. */
static bool op_lost(const struct gw_tp *tp, const struct tp_op *op)
{
	return tp->peer_lost[op->peer] || (tp->lost_all && tp->lost_first >= 0) ||
	       atomic_load_explicit(&tp->revoked, memory_order_relaxed);
}

/* A result that says the peer cannot be reached (not a refused message). */
static bool unreachable(ssize_t result)
{
	switch (result) {
	case -ETIMEDOUT:
	case -ECONNABORTED:
	case -ECONNRESET:
	case -ECONNREFUSED:
	case -ENOTCONN:
	case -EPIPE:
	case -EHOSTUNREACH:
	case -EIO:
		return true;
	default:
		return false;
	}
}

/*
 * Hand op's outcome to req and recycle op (unless it became an orphan). Op
 * still in flight is cancelled and drained first; a completion that beats
 * the cancel stands (its data is not lost), a cancelled one becomes why.
 */
static ssize_t finish(struct gw_tp *tp, struct gw_tp_req *req, int why)
{
	struct tp_op *op = req->op;
	ssize_t result;

	if (op->state == OP_POSTED) {
		cancel_begin(tp, op);
		drain(tp);
	}
	if (op_lost(tp, op) && why != -ECANCELED) /* withdrawn: its peer is gone, or we revoked */
		why = atomic_load(&tp->revoked) ? -ECONNABORTED : -ECONNRESET;
	result = op->state == OP_ORPHAN ? why : op->result;
	req->done_ns = op->state == OP_ORPHAN ? 0 : op->done_ns;
	if (op->cancelling && result == -ECANCELED)
		result = why;
	if (result != -ECANCELED) /* not withdrawn on purpose: says how the peer is */
		tp->peer_failed[op->peer] = unreachable(result);
	if (result == -ETIMEDOUT)
		tp_log(tp, GW_LOG_WARN, "%s rank %d timed out", tp_op_dir_name(op), op->peer);
	if (op->state != OP_ORPHAN)
		tp_op_put(tp, op);
	req->op = NULL;
	req->result = result;
	return result;
}

/* Posted, not completed, and not ended by a lost peer (then withdrawn). */
static bool pending(const struct gw_tp *tp, const struct gw_tp_req *req)
{
	return req->op && req->op->state == OP_POSTED && !op_lost(tp, req->op);
}

ssize_t gw_tp_wait(struct gw_tp *tp, struct gw_tp_req *req, int timeout_ms)
{
	if (!tp || !req)
		return -EINVAL;
	gw_tp_waitall(tp, req, 1, timeout_ms);
	return req->result;
}

int gw_tp_waitall(struct gw_tp *tp, struct gw_tp_req *reqs, size_t n, int timeout_ms)
{
	int64_t deadline = gw_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	int why = -ETIMEDOUT, first = 0;
	unsigned step = 0;
	size_t i = 0;

	if (!tp || (!reqs && n))
		return -EINVAL;
	for (;;) {
		int64_t left;
		int r;

		while (i < n && !pending(tp, &reqs[i]))
			i++;
		if (i == n)
			break;
		left = deadline - gw_now_ms();
		if (left <= 0)
			break;
		r = tp_progress_wait(tp, left, &step);
		if (r < 0) {
			why = r; /* the CQ itself failed */
			break;
		}
	}
	for (i = 0; i < n; i++) /* withdraw the late ones together: one drain */
		if (reqs[i].op && reqs[i].op->state == OP_POSTED)
			cancel_begin(tp, reqs[i].op);
	for (i = 0; i < n; i++) {
		ssize_t r = reqs[i].op ? finish(tp, &reqs[i], why) : -EINVAL;

		reqs[i].result = r;
		if (r < 0 && !first)
			first = (int)r;
	}
	return first;
}

ssize_t gw_tp_cancel(struct gw_tp *tp, struct gw_tp_req *req)
{
	if (!tp || !req || !req->op)
		return -EINVAL;
	return finish(tp, req, -ECANCELED);
}

void gw_tp_cancel_begin(struct gw_tp *tp, struct gw_tp_req *req)
{
	if (tp && req && req->op)
		cancel_begin(tp, req->op);
}

int gw_tp_test(struct gw_tp *tp, struct gw_tp_req *req)
{
	if (!tp || !req || !req->op)
		return -EINVAL;
	if (req->op->state == OP_POSTED) {
		int r = tp_progress_once(tp, 0);

		if (r < 0)
			return r;
	}
	return req->op->state != OP_POSTED || op_lost(tp, req->op);
}

ssize_t gw_tp_send(struct gw_tp *tp, int peer, uint32_t slot, uint32_t seq, const void *buf,
		   size_t len)
{
	struct gw_tp_req req;
	int ret = gw_tp_isend(tp, peer, slot, seq, buf, len, &req);

	return ret ? ret : gw_tp_wait(tp, &req, tp->cfg.timeout_ms);
}

ssize_t gw_tp_recv(struct gw_tp *tp, int peer, uint32_t slot, uint32_t seq, void *buf, size_t cap)
{
	struct gw_tp_req req;
	int ret = gw_tp_irecv(tp, peer, slot, seq, buf, cap, &req);

	return ret ? ret : gw_tp_wait(tp, &req, tp->cfg.timeout_ms);
}
