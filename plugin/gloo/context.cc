// SPDX-License-Identifier: MIT
/*
 * context.cc - the GRADWIRE device's operations: queues, progress, waits.
 *
 * Ordering. gradwire allows one send and one receive per (peer, slot) in
 * flight; Gloo may post several. Each (peer, direction, slot) has a FIFO
 * queue; its head is posted, the next one when it completes. Sequence
 * numbers make the n-th send match the peer's n-th receive. A receive from
 * any of several ranks waits until none of their receive queues on its slot
 * is busy, posts to all of them and holds those queues; the first message
 * wins, the others are withdrawn (one that arrived anyway is kept for the
 * next receive from its sender).
 *
 * Bound buffers (pair.cc) use the same queues: a send is one frame (the
 * offset, then the bytes); a receive buffer always has its next receive
 * posted, queued again each time one lands.
 *
 * Completion. A receive completes when its bytes have landed. A send's
 * bytes leave when it is posted, but it completes (waitSend()) only once
 * the peer has posted a receive for it: every receive queued here sends a
 * receive-ready notice to its peer, and a send whose bytes left waits for
 * one (ready.cc), as Gloo's tcp device waits for its peer's recv-ready.
 *
 * Threads and progress. A waiter polls its context: it tests every posted
 * request (so a send completes even while its peer only waits for other
 * requests: ofi_rxm rendezvous), sleeps at most 1 ms on the completion
 * queue (woken by the kernel when one arrives), and between rounds lets
 * other threads in: other waiters by yielding the mutex, a thread that only
 * wants to post by waiting for it on a condition variable; a lone waiter
 * never yields. Waits end at Gloo's timeout with an IoException that says
 * "Timed out", as Gloo's tcp device's does.
 */
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "device.h"

namespace gradwire_gloo
{

namespace
{

// Where nbytes at offset of a buffer of size start (throws past its end).
char *span(char *base, size_t size, size_t offset, size_t nbytes)
{
	// Gloo's tcp device accepts an empty operation at any offset (bcube
	// with fewer elements than ranks posts them past the end).
	if (!nbytes)
		return base;
	if (offset > size || nbytes > size - offset)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION("gradwire: ", nbytes, " bytes at offset ",
						       offset, " exceed a buffer of ", size,
						       " bytes");
	return base + offset;
}

std::unique_ptr<Op> newOp(Waitable *w, bool send, int peer, uint64_t slot, uint32_t gslot,
			  OpKind kind, char *ptr, size_t len)
{
	std::unique_ptr<Op> op(new Op());

	op->w = w;
	op->send = send;
	op->peer = peer;
	op->slot = slot;
	op->gslot = gslot;
	op->kind = kind;
	op->ptr = ptr;
	op->len = len;
	op->req = reqStorage();
	return op;
}

} // namespace

// ---- posting ------------------------------------------------------------------

std::unique_ptr<Op> Context::makeOp(Waitable *w, char *base, size_t size, bool send, int peer,
				    uint64_t slot, size_t offset, size_t nbytes)
{
	if (nbytes == ::gloo::transport::UnboundBuffer::kUnspecifiedByteCount) {
		if (offset > size)
			GLOO_THROW_INVALID_OPERATION_EXCEPTION("gradwire: offset ", offset,
							       " beyond a buffer of ", size,
							       " bytes");
		nbytes = size - offset;
	}
	char *ptr = span(base, size, offset, nbytes);
	if (peer < 0 || peer >= this->size || peer == rank)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION("gradwire: rank ", rank, " cannot ",
						       send ? "send to" : "receive from", " rank ",
						       peer, " (size ", this->size, ")");
	return newOp(w, send, peer, slot, mapSlot(slot), OpKind::Plain, ptr, nbytes);
}

std::unique_lock<std::mutex> Context::lockCounted()
{
	posting_++;
	std::unique_lock<std::mutex> g(mu);

	{
		std::lock_guard<std::mutex> h(handoffMu_);
		posting_--;
	}
	handoff_.notify_all();
	return g;
}

std::unique_lock<std::mutex> Context::lockToPost(int peer)
{
	std::unique_lock<std::mutex> g = lockCounted();

	if (!gw_)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION("gradwire: rank ", rank,
						       " is not connected");
	if (peer >= 0 && !closed_[peer].empty())
		GLOO_THROW_IO_EXCEPTION("gradwire: rank ", rank, ": ", closed_[peer]);
	return g;
}

void Context::enqueue(std::unique_ptr<Op> op)
{
	uint64_t key = queueKey(op->peer, op->send, op->gslot);
	auto &q = queues_[key];

	q.push_back(std::move(op));
	if (q.size() == 1 && !blocked_.count(key))
		start(q.front().get());
}

void Context::post(Waitable *w, char *base, size_t size, bool send, int peer, uint64_t slot,
		   size_t offset, size_t nbytes)
{
	std::unique_ptr<Op> op = makeOp(w, base, size, send, peer, slot, offset, nbytes);
	uint32_t gslot = op->gslot;
	std::unique_lock<std::mutex> g = lockToPost(peer);

	enqueue(std::move(op));
	if (!send) { // tell the peer now: its send completes on it (ready.cc)
		owe(peer, gslot);
		flushReady(peer);
	}
}

void Context::postAny(Waitable *w, char *base, size_t size, const std::vector<int> &peers,
		      uint64_t slot, size_t offset, size_t nbytes)
{
	// Each rank once, this one left out: torch 1.13's recvAnysource passes
	// size zeros and then every rank, this one included.
	std::vector<int> from;

	for (int p : peers) {
		if (p < 0 || p >= this->size)
			GLOO_THROW_INVALID_OPERATION_EXCEPTION("gradwire: rank ", rank,
							       " cannot receive from rank ", p,
							       " (size ", this->size, ")");
		if (p != rank && std::find(from.begin(), from.end(), p) == from.end())
			from.push_back(p);
	}
	if (from.empty())
		GLOO_THROW_INVALID_OPERATION_EXCEPTION("gradwire: rank ", rank,
						       ": a receive from none of the other ranks");
	if (from.size() == 1)
		return post(w, base, size, false, from[0], slot, offset, nbytes);
	std::unique_ptr<Op> op = makeOp(w, base, size, false, from[0], slot, offset, nbytes);
	op->any = from;
	op->subs.resize(from.size(), op->req);
	std::unique_lock<std::mutex> g = lockToPost(-1);
	for (int p : from)
		if (!closed_[p].empty())
			GLOO_THROW_IO_EXCEPTION("gradwire: rank ", rank, ": ", closed_[p]);
	anyops_.push_back(std::move(op));
	arm(anyops_.back().get());
}

// ---- bound buffers --------------------------------------------------------------

// A bound message's head: the offset in the receive buffer (then the bytes).
constexpr size_t kHead = sizeof(uint64_t);

std::unique_ptr<Op> Context::boundRecv(BoundBuffer *b)
{
	// Its length: the most a message may hold.
	std::unique_ptr<Op> op = newOp(&b->w, false, b->peer, (uint64_t)b->slot(), b->gslot,
				       OpKind::BoundRecv, b->base(), kHead + b->size());

	op->bound = b;
	return op;
}

void Context::bind(BoundBuffer *b)
{
	uint64_t key = queueKey(b->peer, false, b->gslot);
	std::unique_lock<std::mutex> g = lockToPost(b->peer);

	if (bound_.count(key))
		GLOO_THROW_INVALID_OPERATION_EXCEPTION("gradwire: rank ", rank,
						       " has a receive buffer for slot ", b->slot(),
						       " from rank ", b->peer, " already");
	bound_[key] = b;
	enqueue(boundRecv(b));
	owe(b->peer, b->gslot);
	flushReady(b->peer);
}

void Context::sendBound(BoundBuffer *b, size_t offset, size_t length, size_t roffset)
{
	std::unique_ptr<Op> op =
		newOp(&b->w, true, b->peer, (uint64_t)b->slot(), b->gslot, OpKind::BoundSend,
		      span(b->base(), b->size(), offset, length), length);

	op->roffset = roffset;
	std::unique_lock<std::mutex> g = lockToPost(b->peer);
	enqueue(std::move(op));
}

/*
 * A bound receive completed (at the head of q): copy its bytes to where
 * the sender said, and queue the next receive, so one is always posted
 * while the buffer lives. A message that does not fit the buffer (every
 * byte from the network is hostile) fails the buffer instead.
 */
int Context::land(Op *op, std::deque<std::unique_ptr<Op>> &q)
{
	BoundBuffer *b = op->bound;
	const void *bytes;
	uint64_t roffset = 0;
	size_t n;

	gwg_req_frame(reqOf(op->req), &bytes, &n);
	if (n >= kHead)
		std::memcpy(&roffset, bytes, kHead);
	if (n < kHead || roffset > b->size() || n - kHead > b->size() - roffset) {
		if (b->w.error.empty())
			b->w.error = "gradwire: a message from rank " + std::to_string(b->peer) +
				     " was refused: it does not fit receive buffer " +
				     std::to_string(b->slot()) + " (" +
				     std::to_string(n < kHead ? 0 : n - kHead) +
				     " bytes at offset " + std::to_string(n < kHead ? 0 : roffset) +
				     ", buffer of " + std::to_string(b->size()) + " bytes)";
		return -EPROTO;
	}
	op->len = n - kHead;
	if (op->len)
		std::memcpy(b->base() + roffset, (const char *)bytes + kHead, op->len);
	q.push_back(boundRecv(b));
	owe(b->peer, b->gslot); // sent at the end of this round of progress
	return 0;
}

void Context::unbind(BoundBuffer *b)
{
	std::unique_lock<std::mutex> g = lockCounted();
	uint64_t key = queueKey(b->peer, false, b->gslot);
	auto it = b->sender ? queues_.end() : queues_.find(key);

	if (!b->sender)
		bound_.erase(key);
	if (it != queues_.end()) { // take back its posted receive
		auto &q = it->second;

		for (auto i = q.begin(); i != q.end();) {
			Op *op = i->get();

			if (op->w != &b->w || op->kind != OpKind::BoundRecv) {
				++i;
				continue;
			}
			if (op->posted) {
				if (gw_)
					gwg_withdraw(gw_, reqOf(op->req));
				inflight_.erase(std::find(inflight_.begin(), inflight_.end(), op));
			}
			i = q.erase(i);
		}
		if (q.empty()) {
			queues_.erase(it);
			drained(key);
		} else if (!q.front()->posted && !blocked_.count(key)) {
			start(q.front().get());
		}
	}
	orphan(&b->w);
}

// ---- receives from any of several ranks -----------------------------------------

/*
 * Post a receive-from-any on every candidate once none of their receive
 * queues on its slot is busy (so it takes the next message of each), and
 * hold those queues until it completes. Return: whether it is armed.
 */
bool Context::arm(Op *op)
{
	if (op->armed)
		return true;
	for (int p : op->any) {
		uint64_t key = queueKey(p, false, op->gslot);

		if (queues_.count(key) || blocked_.count(key))
			return false;
	}
	op->armed = true;
	for (size_t i = 0; i < op->any.size(); i++) {
		int rc =
			gwg_irecv(gw_, op->any[i], op->gslot, op->ptr, op->len, reqOf(op->subs[i]));

		if (rc) {
			for (size_t j = 0; j < i; j++)
				gwg_withdraw(gw_, reqOf(op->subs[j]));
			op->any.resize(i); // the ones to unblock
			op->armRc = rc;
			break;
		}
		blocked_[queueKey(op->any[i], false, op->gslot)] = 1;
	}
	return true;
}

void Context::unblock(uint64_t key)
{
	blocked_.erase(key);
	auto it = queues_.find(key);
	if (it != queues_.end() && !it->second.front()->posted)
		start(it->second.front().get());
}

// Complete the receives-from-any that can; true when one did.
bool Context::progressAny()
{
	bool progressed = false;

	for (auto it = anyops_.begin(); it != anyops_.end();) {
		Op *op = it->get();
		int winner = -1, rc = op->armRc;

		if (!arm(op)) {
			++it;
			continue;
		}
		for (size_t i = 0; !rc && winner < 0 && i < op->any.size(); i++) {
			if (gwg_test(gw_, reqOf(op->subs[i])) == 0)
				continue;
			winner = (int)i;
			rc = gwg_finish(gw_, reqOf(op->subs[i]));
		}
		if (!rc && winner < 0) {
			++it;
			continue;
		}
		for (size_t i = 0; !op->armRc && i < op->any.size(); i++)
			if ((int)i != winner)
				gwg_withdraw(gw_, reqOf(op->subs[i]));
		if (winner >= 0) // the winner's send completes on this
			owe(op->any[winner], op->gslot);
		notify(op, winner >= 0 ? op->any[winner] : -1, rc);
		std::vector<int> peers(op->any);
		uint32_t gslot = op->gslot;
		it = anyops_.erase(it); // op is gone from here on
		for (int p : peers)
			unblock(queueKey(p, false, gslot));
		progressed = true;
	}
	return progressed;
}

// ---- completion -------------------------------------------------------------------

void Context::start(Op *op)
{
	struct gwg_req *r = reqOf(op->req);
	int rc = op->kind == OpKind::BoundSend ? gwg_isend2(gw_, op->peer, op->gslot, &op->roffset,
							    kHead, op->ptr, op->len, r)
		 : op->kind == OpKind::BoundRecv
			 ? gwg_irecv_frame(gw_, op->peer, op->gslot, op->len, r)
		 : op->send ? gwg_isend(gw_, op->peer, op->gslot, op->ptr, op->len, r)
			    : gwg_irecv(gw_, op->peer, op->gslot, op->ptr, op->len, r);

	op->posted = true;
	inflight_.push_back(op);
	if (rc) {
		const bool send = op->send;
		const int peer = op->peer;

		complete(op, rc); // never posted: nothing to finish
		if (send)
			postFailed(peer, rc);
	}
}

void Context::complete(Op *op, int rc)
{
	uint64_t key = queueKey(op->peer, op->send, op->gslot);
	auto it = queues_.find(key);

	inflight_.erase(std::find(inflight_.begin(), inflight_.end(), op));
	if (!rc && op->kind == OpKind::BoundRecv)
		rc = land(op, it->second);
	std::unique_ptr<Op> done = std::move(it->second.front());
	const bool send = op->send;
	const int peer = op->peer;

	it->second.pop_front();
	if (send && !rc)
		sendLeft(std::move(done)); // complete once the peer has a receive for it
	else
		notify(op, peer, rc);
	// op may be gone from here on. A receive that failed for want of its
	// peer closes the pair too: later posts to it fail at once.
	if (rc)
		lostPeer(peer, rc);
	if (it->second.empty()) {
		queues_.erase(it);
		drained(key);
	} else if (!blocked_.count(key)) {
		start(it->second.front().get());
	}
}

// Tell op's buffer that op completed (from peer) or failed.
void Context::notify(Op *op, int peer, int rc)
{
	Waitable *w = op->w;

	if (!w)
		return;
	if (!rc) {
		w->completions[op->send]++;
		w->lastRank[op->send] = peer;
		g_bytes += op->len;
		return;
	}
	if (!w->error.empty())
		return;
	char slot[32];
	std::string from = op->any.empty() ? "rank " + std::to_string(op->peer)
					   : "any of " + std::to_string(op->any.size()) + " ranks";

	snprintf(slot, sizeof(slot), "0x%llx", (unsigned long long)op->slot);
	if (op->kind == OpKind::BoundRecv && op->bound) {
		w->error = "gradwire: a message from rank " + std::to_string(op->peer) +
			   " into receive buffer " + slot + " (" +
			   std::to_string(op->bound->size()) +
			   " bytes) was refused: " + errText(rc) +
			   (rc == -EPROTO ? " (it does not fit, or failed "
					    "gradwire's checks)"
					  : "");
		return;
	}
	w->error = std::string("gradwire: ") + (op->send ? "send to " : "receive from ") + from +
		   " (Gloo " + (op->kind == OpKind::Plain ? "" : "bound ") + "slot " + slot + ", " +
		   std::to_string(op->len) + " bytes) failed: " + errText(rc);
}

// A drained slot gives its frame buffers to the context's pool: every
// collective has new tags, hence new slots, and would otherwise allocate
// (and fault in) fresh buffers for every message, and slots that Gloo's
// tags leave behind would each keep theirs.
void Context::drained(uint64_t key)
{
	if (gw_)
		gwg_trim(gw_, (int)(key >> 33), (uint32_t)key);
}

void Context::progress(std::unique_lock<std::mutex> &lk)
{
	bool any = !anyops_.empty() && progressAny();
	std::vector<Op *> ops(inflight_);

	for (Op *op : ops) {
		struct gwg_req *r = reqOf(op->req);
		int rc = gwg_test(gw_, r);

		if (rc == 0)
			continue;
		rc = gwg_finish(gw_, r);
		complete(op, rc);
		any = true;
	}
	// Notices after the completions, which may owe some.
	if (pollReady() || any)
		return;
	if (gw_)
		gwg_progress(gw_, 1); // sleeps in the CQ until a completion, 1 ms at most
	// Let other threads in (std::mutex is not fair). A lone waiter does not
	// yield: beside busy processes every sched_yield() gave the core away
	// for a whole time slice, each round (far behind Gloo's tcp device
	// beside two CPU-bound processes: docs/performance.md). Threads that want mu for anything
	// else (to post, to destroy a buffer, to abort a wait: lockCounted())
	// are waited for in the kernel, on a condition variable they signal
	// once they hold mu, and first: a waiter may be waiting for what such a
	// thread is about to post (over net, a message queued behind one that
	// nobody has a receive for yet: transport.h, "Ordering"). Other
	// waiters (Gloo's worker threads, each on its own buffer) block on mu
	// itself, and only a yield lets them take it.
	if (posting_.load() > 0) {
		lk.unlock();
		{
			std::unique_lock<std::mutex> h(handoffMu_);
			handoff_.wait_for(h, milliseconds(1),
					  [this] { return posting_.load() == 0; });
		}
		lk.lock();
	} else if (waiters_.load() > 1) {
		lk.unlock();
		std::this_thread::yield();
		lk.lock();
	}
}

// ---- waiting, teardown ------------------------------------------------------------

std::string Context::pendingPeers(const Waitable *w, bool send)
{
	std::vector<int> peers;

	for (auto &kq : queues_)
		for (auto &op : kq.second)
			if (op->w == w && op->send == send)
				peers.push_back(op->peer);
	for (auto &op : anyops_)
		if (op->w == w && !send)
			peers.insert(peers.end(), op->any.begin(), op->any.end());
	for (auto &kq : unready_)
		for (auto &op : kq.second)
			if (op->w == w && send)
				peers.push_back(op->peer);
	std::sort(peers.begin(), peers.end());
	peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
	if (peers.empty())
		return "no rank (nothing pending)";
	std::string s = peers.size() == 1 ? "rank " : "ranks ";
	for (size_t i = 0; i < peers.size(); i++)
		s += (i ? ", " : "") + std::to_string(peers[i]);
	return s;
}

bool Context::wait(Waitable &w, bool send, int *peer, milliseconds timeout)
{
	if (timeout == ::gloo::transport::kUnsetTimeout)
		timeout = getTimeout();
	auto deadline = Clock::now() + timeout;
	struct Count {
		std::atomic<int> &n;
		explicit Count(std::atomic<int> &c) : n(c) { n++; }
		~Count() { n--; }
	} waiting(waiters_);
	std::unique_lock<std::mutex> lk(mu);

	for (;;) {
		if (w.aborted[send]) {
			w.aborted[send] = false;
			return false;
		}
		if (!w.error.empty()) {
			std::string e;

			e.swap(w.error);
			throw ::gloo::IoException(e);
		}
		if (w.completions[send] > 0) {
			w.completions[send]--;
			if (peer)
				*peer = w.lastRank[send];
			return true;
		}
		// Gloo's own words first ("Timed out"), as its tcp device says.
		if (Clock::now() >= deadline)
			GLOO_THROW_IO_EXCEPTION("Timed out after ", timeout.count(),
						" ms waiting for a ",
						send ? "send to " : "receive from ",
						pendingPeers(&w, send), " on rank ", rank,
						" (gradwire device; a peer that is only "
						"slow needs a longer timeout: the context's, or "
						"init_process_group(timeout=...) in torch)");
		progress(lk);
	}
}

void Context::abortWait(Waitable &w, bool send)
{
	std::unique_lock<std::mutex> g = lockCounted();

	w.aborted[send] = true;
}

void Context::orphan(Waitable *w)
{
	// Point op at a scratch copy of its own, away from the dying buffer. A
	// send not yet posted takes its bytes along (a posted one has them in
	// its frame already).
	auto detach = [w](Op &op) {
		if (op.w != w)
			return false;
		op.w = nullptr;
		op.bound = nullptr;
		if (op.send && !op.posted)
			op.discard.assign(op.ptr, op.ptr + op.len);
		else
			op.discard.resize(op.len);
		op.ptr = op.discard.data();
		return true;
	};

	for (auto &op : anyops_) {
		if (!detach(*op))
			continue;
		for (size_t i = 0; op->armed && i < op->any.size(); i++)
			gwg_req_retarget(reqOf(op->subs[i]), op->ptr);
	}
	for (auto &kq : queues_)
		for (auto &op : kq.second)
			if (detach(*op) && op->posted && !op->send)
				gwg_req_retarget(reqOf(op->req), op->ptr);
	for (auto &kq : unready_) // their bytes left already
		for (auto &op : kq.second)
			if (op->w == w)
				op->w = nullptr;
}

void Context::closePeer(int peer)
{
	std::unique_lock<std::mutex> g = lockCounted();

	if (peer >= 0 && peer < size && peer != rank)
		endPeer(peer, "the pair with rank " + std::to_string(peer) + " was closed");
}

/*
 * An operation that failed for want of a connection: the peer's process
 * ended or closed its endpoint. gradwire's transport sees a peer process
 * end within a second (transport/live.c) and fails every request with it
 * with ECONNRESET, receives included; a send the provider refused says so
 * too. Either closes the pair: pending and later operations with the peer
 * fail at once, as on Gloo's tcp device.
 */
void Context::lostPeer(int peer, int rc)
{
	switch (rc) {
	case -ECONNRESET:
		endPeer(peer, "rank " + std::to_string(peer) +
				      " is gone (its connection closed: did its process end?)");
		break;
	case -ENOTCONN:
	case -EPIPE:
	case -ECONNREFUSED:
	case -ECONNABORTED:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
		endPeer(peer, "the connection to rank " + std::to_string(peer) + " was lost (" +
				      errText(rc) + "; did its process end?)");
		break;
	default:
		break;
	}
}

/*
 * A send that could not even be posted. net 1.17 answers a send to a peer
 * whose connection it dropped with EAGAIN until the connection is torn
 * down, which only its event processing does; the post retries until the
 * transport learns that the peer is gone (ECONNRESET), or for the context's
 * timeout (under the context's lock): once is enough.
 */
void Context::postFailed(int peer, int rc)
{
	if (rc == -ETIMEDOUT)
		endPeer(peer, "no send to rank " + std::to_string(peer) +
				      " could be posted within the timeout (its connection is "
				      "gone; did its process end?)");
	else
		lostPeer(peer, rc);
}

void Context::endPeer(int peer, const std::string &why)
{
	auto fail = [peer, &why](Op &op) {
		bool mine = op.peer == peer ||
			    std::find(op.any.begin(), op.any.end(), peer) != op.any.end();

		if (mine && op.w && op.w->error.empty())
			op.w->error = "gradwire: " + why + " with a " +
				      (op.send ? "send" : "receive") + " pending";
	};

	if (!closed_[peer].empty())
		return;
	closed_[peer] = why;
	for (auto &kq : queues_)
		for (auto &op : kq.second)
			fail(*op);
	for (auto &op : anyops_)
		fail(*op);
	for (auto &kq : unready_)
		for (auto &op : kq.second)
			fail(*op);
}

} // namespace gradwire_gloo
