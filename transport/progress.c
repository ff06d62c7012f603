/* SPDX-License-Identifier: MIT */
/*
 * progress.c - posting tagged sends and receives, and the one progress
 * engine that turns CQ entries into finished requests (wait.c waits for
 * them, cancels and drains).
 *
 * Invariants:
 *  - every in-flight op lives in the context's slabs (stable addresses), so
 *    a completion's op_context is always a valid struct tp_op, even when its
 *    waiter gave up (the op is then an orphan, freed by its completion);
 *  - waiting sleeps: in fi_cq_sread() when the CQ has a wait object, else a
 *    backoff of sched_yield() then nanosleep() up to 1 ms. Ranks may
 *    outnumber cores, and a spinning waiter steals the core its peer needs;
 *  - a sched_yield() that took over TP_YIELD_LOST_US gave the core to
 *    another task for its whole slice (busy neighbours: milliseconds), so
 *    for TP_CONTENDED_US after one, waits without a wait object (shm) only
 *    sleep: a sleeper that wakes is scheduled ahead of a busy loop, a
 *    yielder behind it (with busy loops beside them, small allreduces over
 *    shm took milliseconds while yielding). Not when this host's own ranks
 *    outnumber its CPUs (gw_tp_crowded()): there the core mostly goes to a
 *    peer rank, and sleeping instead slowed 4 ranks on 2 cores over shm
 *    (docs/performance.md, "Why the defaults are what they are");
 *  - with a provider that reports FI_PROGRESS_AUTO (net) a waiter never
 *    polls: it sleeps in fi_cq_sread(), whose wait set holds the provider's
 *    socket epoll fd, and the provider moves the bytes inside that call
 *    when a socket is ready. (libfabric 1.17's net starts a thread of its
 *    own only once an EQ whose wait object is no fd is opened; we open no
 *    EQ, so its data moves only inside our CQ calls and posts.) Polling
 *    cost, with busy neighbours, a scheduler slice per sched_yield();
 *  - two links (two providers, transport.h): every progress call reads both
 *    CQs, and a waiter never sleeps in one CQ while the other may need
 *    progress: it arms both wait objects (fi_trywait() on each), then
 *    sleeps in poll() on both wait fds (FI_GETWAIT) for at most the bounded
 *    sleep one link would take (TP_SLEEP_MS unless both progress
 *    themselves). Without a wait fd on both, waiters back off. One link
 *    takes exactly the path it took before links existed;
 *  - completions are read in batches of TP_BATCH;
 *  - an error entry becomes a negative errno on its op, with a log line that
 *    names the peer and the provider's text; it is never dropped;
 *  - a signal that interrupts fi_cq_sread() (EINTR) is no error: the wait
 *    goes on to its deadline;
 *  - no loop runs past a deadline: posting retries FI_EAGAIN until
 *    cfg.timeout_ms, waits stop at theirs, then cancel and drain;
 *  - a peer declared gone (live.c: its process ended) ends every wait for
 *    it with -ECONNRESET, and posts to it fail at once; waits look for
 *    that only when nothing completed (tp_live_poll(), rate-limited), so
 *    a frame that completes at once costs nothing more.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define GW_TP_INTERNAL
#include "transport.h"

#define TP_BATCH 16
#define TP_SPIN_US 200	       /* yielding poll while the endpoint is hot */
#define TP_SLEEP_MS 2	       /* longest sleep in fi_cq_sread() (manual progress) */
#define TP_AUTO_SLEEP_MS 100   /* the same with a provider that progresses itself */
#define TP_YIELD_LOST_US 1000  /* a sched_yield() this long gave the core to a hog */
#define TP_CONTENDED_US 100000 /* ... then waits only sleep for this long */
#define TP_BACKOFF_YIELDS 4    /* backoff()'s yields before its sleeps */

int64_t gw_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t gw_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- op pool -------------------------------------------------------------- */

static struct tp_op *op_get(struct gw_tp *tp)
{
	struct tp_op *op = tp->free_ops;

	if (!op) {
		struct tp_slab *sl = calloc(1, sizeof(*sl));

		if (!sl)
			return NULL;
		sl->next = tp->slabs;
		tp->slabs = sl;
		for (size_t i = 0; i < 64; i++) {
			sl->ops[i].next = tp->free_ops;
			tp->free_ops = &sl->ops[i];
		}
		op = tp->free_ops;
	}
	tp->free_ops = op->next;
	memset(op, 0, sizeof(*op));
	return op;
}

void tp_op_put(struct gw_tp *tp, struct tp_op *op)
{
	tp_mr_close(op->mr);
	op->mr = NULL;
	op->state = OP_FREE;
	op->next = tp->free_ops;
	tp->free_ops = op;
}

void tp_ops_free(struct gw_tp *tp)
{
	while (tp->slabs) {
		struct tp_slab *sl = tp->slabs;

		for (size_t i = 0; i < 64; i++)
			tp_mr_close(sl->ops[i].mr);
		tp->slabs = sl->next;
		free(sl);
	}
	tp->free_ops = NULL;
}

/* ---- completions ------------------------------------------------------------ */

/* The endpoint op is posted on: the link's receiving one for a receive
 * from a peer that sends to it (peer[] != peer_src[], tp.c). */
struct fid_ep *tp_op_ep(const struct gw_tp *tp, const struct tp_op *op)
{
	const struct tp_link *l = &tp->link[op->link];

	return op->dir == OP_RECV && l->rx_ep && tp->peer[op->peer] != tp->peer_src[op->peer]
		       ? l->rx_ep
		       : l->ep;
}

const char *tp_op_dir_name(const struct tp_op *op)
{
	return op->dir == OP_SEND ? "send to" : "receive from";
}

static void complete(struct gw_tp *tp, struct tp_op *op, ssize_t result)
{
	tp_mr_close(op->mr);
	op->mr = NULL;
	if (op->state == OP_ORPHAN) {
		tp_log(tp, GW_LOG_DEBUG, "abandoned %s rank %d finished: %zd", tp_op_dir_name(op),
		       op->peer, result);
		tp->orphans--;
		tp_op_put(tp, op);
		return;
	}
	op->result = result;
	op->done_ns = gw_now_ns();
	op->state = OP_DONE;
}

static int read_err(struct gw_tp *tp, struct tp_link *l)
{
	struct fi_cq_err_entry e;
	struct tp_op *op;
	char buf[256];
	const char *txt;
	ssize_t ret;

	memset(&e, 0, sizeof(e));
	ret = fi_cq_readerr(l->cq, &e, 0);
	if (ret == -FI_EAGAIN)
		return 0;
	if (ret < 0) {
		tp_log(tp, GW_LOG_ERROR, "fi_cq_readerr: %s", fi_strerror((int)-ret));
		return tp_errno((int)ret);
	}
	txt = fi_cq_strerror(l->cq, e.prov_errno, e.err_data, buf, sizeof(buf));
	op = e.op_context;
	if (!op) {
		tp_log(tp, GW_LOG_ERROR, "CQ error of no request: %s (%s)", fi_strerror(e.err),
		       txt ? txt : "");
		return 1;
	}
	if (e.err == FI_ETRUNC) {
		tp_log(tp, GW_LOG_ERROR,
		       "message from rank %d (tag 0x%016llx) is longer than the "
		       "%zu-byte receive (by %zu bytes, 0: not told): rejected",
		       op->peer, (unsigned long long)op->tag, op->len, e.olen);
	} else if (e.err == FI_ECANCELED && !op->cancelling) {
		tp_log(tp, GW_LOG_ERROR,
		       "%s rank %d (tag 0x%016llx) aborted by the provider (connection lost?): %s",
		       tp_op_dir_name(op), op->peer, (unsigned long long)op->tag, txt ? txt : "");
		complete(tp, op, -ECONNABORTED);
		return 1;
	} else if (e.err != FI_ECANCELED) {
		tp_log(tp, GW_LOG_ERROR, "%s rank %d (tag 0x%016llx) failed: %s (%s)",
		       tp_op_dir_name(op), op->peer, (unsigned long long)op->tag,
		       fi_strerror(e.err), txt ? txt : "");
	}
	complete(tp, op, e.err ? tp_errno(e.err) : -EIO);
	return 1;
}

/*
 * One batch of completions of link l, sleeping up to timeout_ms for the
 * first when its CQ can block. Return: completions handled (0: none), or
 * -errno.
 */
static int link_read(struct gw_tp *tp, struct tp_link *l, int timeout_ms)
{
	struct fi_cq_tagged_entry ent[TP_BATCH];
	ssize_t n;

	if (l->blocking && timeout_ms > 0) {
		n = fi_cq_sread(l->cq, ent, TP_BATCH, NULL, timeout_ms);
		if (n == -FI_ENOSYS) {
			tp_log(tp, GW_LOG_INFO, "fi_cq_sread unsupported; waits back off instead");
			l->blocking = false;
			tp->blocking = false;
			n = fi_cq_read(l->cq, ent, TP_BATCH);
		}
	} else {
		n = fi_cq_read(l->cq, ent, TP_BATCH);
	}
	/* EINTR: a signal reached this thread in fi_cq_sread()'s poll (a
	 * handler of the host's, a debugger attaching); nothing completed
	 * and nothing failed, so the caller's deadline decides as always. */
	if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT || n == -FI_EINTR)
		return 0;
	if (n == -FI_EAVAIL)
		return read_err(tp, l);
	if (n < 0) {
		tp_log(tp, GW_LOG_ERROR, "reading the %s CQ: %s", l->info->fabric_attr->prov_name,
		       fi_strerror((int)-n));
		return tp_errno((int)n);
	}
	for (ssize_t i = 0; i < n; i++) {
		struct tp_op *op = ent[i].op_context;

		complete(tp, op, op->dir == OP_RECV ? (ssize_t)ent[i].len : (ssize_t)op->len);
	}
	return (int)n;
}

/* One batch from every link, without sleeping. */
static int links_read(struct gw_tp *tp)
{
	int total = 0;

	for (int i = 0; i < tp->nlinks; i++) {
		int n = link_read(tp, &tp->link[i], 0);

		if (n < 0)
			return n;
		total += n;
	}
	return total;
}

/*
 * Two links: sleep up to timeout_ms until either CQ's wait fd is ready,
 * then read both. fi_trywait() on each first: it fails (-FI_EAGAIN) when a
 * CQ holds entries or its provider has work that a read would do, and then
 * we read instead of sleeping.
 */
static int links_wait(struct gw_tp *tp, int timeout_ms)
{
	struct pollfd pfd[TP_LINKS];
	int n = links_read(tp);

	if (n || timeout_ms <= 0)
		return n;
	for (int i = 0; i < tp->nlinks; i++) {
		struct tp_link *l = &tp->link[i];
		struct fid *f = &l->cq->fid;

		int ret = fi_trywait(l->fabric, &f, 1);

		if (ret == -FI_EAGAIN)
			return links_read(tp);
		if (ret != FI_SUCCESS) { /* cannot arm it: back off from now on */
			tp_log(tp, GW_LOG_INFO, "fi_trywait on the %s CQ: %s; waits back off",
			       l->info->fabric_attr->prov_name, fi_strerror(-ret));
			tp->blocking = false;
			return 0;
		}
		pfd[i] = (struct pollfd){ .fd = l->wait_fd, .events = POLLIN };
	}
	/* EINTR, as in link_read(): the caller's deadline decides. */
	if (poll(pfd, (nfds_t)tp->nlinks, timeout_ms) < 0)
		return 0;
	return links_read(tp);
}

/*
 * One batch of completions (of every link), sleeping up to timeout_ms for
 * the first when the CQs can block. Return: completions handled (0: none),
 * or -errno.
 */
int tp_progress_once(struct gw_tp *tp, int timeout_ms)
{
	if (tp->nlinks == 1)
		return link_read(tp, &tp->link[0], timeout_ms);
	if (tp->blocking && timeout_ms > 0)
		return links_wait(tp, timeout_ms);
	return links_read(tp);
}

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* sched_yield(); false (and waits only sleep for a while) when it gave the
 * core to another task, i.e. took long, unless this host's ranks outnumber
 * its CPUs (tp->crowded): then the task is most likely a peer rank, which
 * the yield lets progress. */
static bool yield_kept(struct gw_tp *tp)
{
	int64_t t0 = now_us(), t1;

	sched_yield();
	t1 = now_us();
	if (t1 - t0 < TP_YIELD_LOST_US || tp->crowded)
		return true;
	tp->contended_us = t1 + TP_CONTENDED_US;
	return false;
}

static bool contended(const struct gw_tp *tp)
{
	return now_us() < tp->contended_us; /* 0: never contended */
}

/* Back off a little more each call: TP_BACKOFF_YIELDS yields (measured,
 * and skipped while the cores are contended), then 16 us doubling to 1 ms. */
static void backoff(struct gw_tp *tp, unsigned *step)
{
	struct timespec ts = { 0, 0 };
	unsigned s;

	if (*step < TP_BACKOFF_YIELDS && contended(tp))
		*step = TP_BACKOFF_YIELDS;
	s = (*step)++;
	if (s < TP_BACKOFF_YIELDS) {
		yield_kept(tp);
		return;
	}
	s -= TP_BACKOFF_YIELDS;
	ts.tv_nsec = s >= 6 ? 1000000L : 16000L << s;
	nanosleep(&ts, NULL);
}

/*
 * Wait up to left ms for something to complete.
 *
 * An auto-progress provider sleeps in fi_cq_sread() at once (see the top
 * of this file). For manual progress: ofi_rxm moves one internal completion per fi_cq_read (a large
 * message is many: SAR segments, rendezvous steps) and its wait object does not always fire again
 * for the next step, so a waiter that only sleeps in fi_cq_sread() crawls (a large allreduce took
 * several times as long as when polled). Hence a short, yielding poll while the endpoint is "hot"
 * (something was posted or completed, or the wait object just fired), and a sleep in fi_cq_sread()
 * of at most TP_SLEEP_MS once it has gone quiet: an idle waiter uses no CPU, a busy one gives the
 * core away at every poll.
 */
int tp_progress_wait(struct gw_tp *tp, int64_t left, unsigned *step)
{
	int64_t t0, spin = 0;
	int n = tp_progress_once(tp, 0);

	if (n)
		goto out;
	/* Nothing completed: before sleeping, whether a peer is gone (live.c;
	 * one poll() per TP_LIVE_MS at most). Its requests end now. */
	if (tp_live_poll(tp))
		return 1;
	if (tp->auto_progress && tp->blocking && tp->cfg.spin_us >= 0) {
		/* fi_cq_sread() waits on the provider's sockets too and
		 * progresses them when they are ready: sleep in the kernel. */
		n = tp_progress_once(tp, (int)(left < TP_AUTO_SLEEP_MS ? left : TP_AUTO_SLEEP_MS));
		goto out;
	}
	if (tp->cfg.spin_us < 0)
		spin = left * 1000; /* busy poll until the deadline */
	else if (tp->hot && !contended(tp))
		spin = tp->cfg.spin_us > 0 ? tp->cfg.spin_us : TP_SPIN_US;
	if (spin > 0) {
		int64_t end = now_us() + spin;

		do {
			bool kept = yield_kept(tp);

			n = tp_progress_once(tp, 0);
			if (n)
				goto out;
			if (!kept && tp->cfg.spin_us >= 0)
				break; /* contended: sleep instead */
		} while (now_us() < end);
		tp->hot = false;
		if (tp->cfg.spin_us < 0)
			return 0;
	}
	if (!tp->blocking) {
		backoff(tp, step);
		return 0;
	}
	if (left > TP_SLEEP_MS)
		left = TP_SLEEP_MS;
	t0 = now_us();
	n = tp_progress_once(tp, (int)left);
	/* Woken before the timeout: the wait object saw traffic. */
	if (n == 0 && now_us() - t0 < left * 1000 - 100)
		tp->hot = true;
out:
	if (n > 0) {
		*step = 0;
		tp->hot = true;
	}
	return n;
}

int gw_tp_progress(struct gw_tp *tp, int timeout_ms)
{
	int64_t deadline;
	unsigned step = 0;
	int n;

	if (!tp)
		return -EINVAL;
	if (timeout_ms <= 0)
		return tp_progress_once(tp, 0);
	deadline = gw_now_ms() + timeout_ms;
	for (;;) {
		int64_t left = deadline - gw_now_ms();

		if (left <= 0)
			return 0;
		n = tp_progress_wait(tp, left, &step);
		if (n)
			return n;
	}
}

/* ---- posting ------------------------------------------------------------ */

/*
 * Post one send or receive of buf[0..len), or a send gathered from
 * iov[0..iovcnt) (iov != NULL: len is their total; no registration, the
 * caller checked that the provider needs none).
 */
static int post(struct gw_tp *tp, enum tp_op_dir dir, unsigned kind, int peer, uint32_t slot,
		uint32_t seq, void *buf, size_t len, const struct iovec *iov, size_t iovcnt,
		struct gw_tp_req *req)
{
	struct tp_link *l;
	struct tp_op *op;
	void *desc;
	int64_t deadline;
	unsigned step = 0;
	ssize_t r;
	int ret;

	if (!req)
		return -EINVAL;
	req->op = NULL;
	req->result = -EINVAL;
	if (!tp || peer < 0 || peer >= tp->size || slot > GW_TP_SLOT_MAX || kind == 0 ||
	    kind > 15 || (!buf && len) || tp->closed)
		return -EINVAL;
	if (atomic_load(&tp->revoked))
		return -ECONNABORTED; /* logged once, by gw_tp_revoke() */
	if (tp->peer_lost[peer]) {
		tp_log(tp, GW_LOG_ERROR,
		       "posting a %s rank %d (%zu bytes): rank %d is gone (its connection closed)",
		       dir == OP_SEND ? "send to" : "receive from", peer, len, peer);
		return -ECONNRESET;
	}
	op = op_get(tp);
	if (!op)
		return -ENOMEM;
	op->dir = dir;
	op->peer = peer;
	op->tag = gw_tp_tag(kind, slot, seq);
	op->len = len;
	desc = NULL;
	op->link = tp->peer_link[peer];
	l = &tp->link[op->link];
	ret = iov ? 0
		  : tp_mr_for(tp, op->link, buf, len, dir == OP_SEND ? FI_SEND : FI_RECV, &op->mr,
			      &desc);
	if (ret)
		goto err_put;
	op->state = OP_POSTED;
	deadline = tp->leave_by ? tp->leave_by : gw_now_ms() + tp->cfg.timeout_ms;
	for (;;) {
		if (iov && dir == OP_SEND)
			r = fi_tsendv(l->ep, iov, NULL, iovcnt, tp->peer[peer], op->tag, &op->ctx);
		else if (iov)
			r = fi_trecvv(tp_op_ep(tp, op), iov, NULL, iovcnt, tp->peer_src[peer],
				      op->tag, 0, &op->ctx);
		else if (dir == OP_SEND)
			r = fi_tsend(l->ep, buf, len, desc, tp->peer[peer], op->tag, &op->ctx);
		else
			r = fi_trecv(tp_op_ep(tp, op), buf, len, desc, tp->peer_src[peer], op->tag,
				     0, &op->ctx);
		if (r != -FI_EAGAIN || tp->post_once)
			break;
		if (gw_now_ms() >= deadline) {
			r = -FI_ETIMEDOUT;
			break;
		}
		/* The provider's queue is full: complete something first
		 * (backing off as a wait does, sleeping under contention). */
		if (tp_progress_once(tp, 0) == 0)
			backoff(tp, &step);
		tp_live_poll(tp); /* net refuses a dead peer's sends with EAGAIN */
		if (tp->peer_lost[peer] || atomic_load(&tp->revoked)) {
			r = atomic_load(&tp->revoked) ? -FI_ECONNABORTED : -FI_ECONNRESET;
			break;
		}
	}
	if (r) {
		ret = tp_errno((int)r);
		if (ret != -EAGAIN)
			tp_log(tp, GW_LOG_ERROR, "posting a %s rank %d (%zu bytes): %s",
			       tp_op_dir_name(op), peer, len, fi_strerror((int)-r));
		goto err_put;
	}
	req->op = op;
	req->result = 0;
	tp->hot = true;
	return 0;

err_put:
	tp_op_put(tp, op);
	return ret;
}

int gw_tp_isend_kind(struct gw_tp *tp, unsigned kind, int peer, uint32_t slot, uint32_t seq,
		     const void *buf, size_t len, struct gw_tp_req *req)
{
	/* libfabric takes a non-const pointer; it only reads a send buffer. */
	return post(tp, OP_SEND, kind, peer, slot, seq, (void *)(uintptr_t)buf, len, NULL, 0, req);
}

int gw_tp_irecv_kind(struct gw_tp *tp, unsigned kind, int peer, uint32_t slot, uint32_t seq,
		     void *buf, size_t cap, struct gw_tp_req *req)
{
	return post(tp, OP_RECV, kind, peer, slot, seq, buf, cap, NULL, 0, req);
}

int gw_tp_isend(struct gw_tp *tp, int peer, uint32_t slot, uint32_t seq, const void *buf,
		size_t len, struct gw_tp_req *req)
{
	return gw_tp_isend_kind(tp, GW_TP_KIND_DATA, peer, slot, seq, buf, len, req);
}

bool gw_tp_can_sendv(const struct gw_tp *tp, size_t iovcnt)
{
	return tp && !tp->need_mr && iovcnt <= tp->tx_iov_limit;
}

bool gw_tp_can_recvv(const struct gw_tp *tp, size_t iovcnt)
{
	return tp && !tp->need_mr && iovcnt <= tp->rx_iov_limit;
}

/* A send gathered from, or a receive scattered into, iov[0..iovcnt). */
static int post_iov(struct gw_tp *tp, enum tp_op_dir dir, int peer, uint32_t slot, uint32_t seq,
		    const struct iovec *iov, size_t iovcnt, struct gw_tp_req *req)
{
	size_t len = 0;

	if (!iov || !iovcnt ||
	    !(dir == OP_SEND ? gw_tp_can_sendv(tp, iovcnt) : gw_tp_can_recvv(tp, iovcnt))) {
		if (req)
			req->op = NULL;
		return -EINVAL;
	}
	for (size_t i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	return post(tp, dir, GW_TP_KIND_DATA, peer, slot, seq, iov[0].iov_base, len, iov, iovcnt,
		    req);
}

int gw_tp_isendv(struct gw_tp *tp, int peer, uint32_t slot, uint32_t seq, const struct iovec *iov,
		 size_t iovcnt, struct gw_tp_req *req)
{
	return post_iov(tp, OP_SEND, peer, slot, seq, iov, iovcnt, req);
}

int gw_tp_irecvv(struct gw_tp *tp, int peer, uint32_t slot, uint32_t seq, const struct iovec *iov,
		 size_t iovcnt, struct gw_tp_req *req)
{
	return post_iov(tp, OP_RECV, peer, slot, seq, iov, iovcnt, req);
}

int gw_tp_irecv(struct gw_tp *tp, int peer, uint32_t slot, uint32_t seq, void *buf, size_t cap,
		struct gw_tp_req *req)
{
	return gw_tp_irecv_kind(tp, GW_TP_KIND_DATA, peer, slot, seq, buf, cap, req);
}
