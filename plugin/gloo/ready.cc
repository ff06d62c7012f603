// SPDX-License-Identifier: MIT
/*
 * ready.cc - a send completes once its receiver has posted the receive, as
 * on Gloo's tcp device.
 *
 * Gloo's tcp pair moves the bytes of an unbound send only after the peer's
 * NOTIFY_RECV_READY, so a send to a rank that never receives times out.
 * Here the bytes still go at once (no round trip before the data), but the
 * Gloo-level completion (waitSend(), a bound buffer's waitSend()) waits for
 * a notice from the peer: "n more receives posted on gradwire slot s".
 *
 *   receiver: every receive the device queues (UnboundBuffer::recv(), a bound
 *             receive buffer's next message) owes its peer one notice on its
 *             slot, sent when it is queued, not when the bytes arrive, so it
 *             travels while the peer sends and needs no later progress here.
 *             A receive from any of several ranks owes one to the rank whose
 *             message it took, when it took it.
 *   sender:   a send whose bytes left (the frame's local completion) waits in
 *             unready_ for its (peer, slot) until a notice's credit covers it;
 *             credits that come first wait in credits_. Sends and receives of
 *             one (peer, slot) are FIFO at both ends, so counts suffice.
 *
 * Notices are exact byte frames on a slot of their own (address.cc,
 * readySlot()), authenticated like any frame when GRADWIRE_MAC asks for it:
 *
 *   body: n x { gradwire slot (u32) | receives (u32) }, host byte order,
 *         n = 1 .. kReadyMax
 *
 * Each rank keeps one notice receive posted per peer and one notice send in
 * flight per peer; what is owed meanwhile is merged into the next one. A
 * notice frame stays at most 112 bytes: libfabric 1.17's net keeps up to 4
 * early messages of up to 128 bytes and stops reading a connection at a
 * larger one (transport.h, "Ordering"). A notice that comes early (its
 * receive not reposted yet) is held that way until the next round of
 * progress reposts it.
 *
 * A notice never waits in its post (gwg_isend_now()): receives need no
 * connection, and a post refused for now (a peer whose connection net
 * dropped answers EAGAIN) would otherwise retry for GRADWIRE_TIMEOUT_MS
 * inside recv(). What is owed is tried again at the next round.
 *
 * Credits are bounded: at most kCreditMax per (peer, slot) and kCreditKeys
 * slots with credits, so a peer cannot make this rank allocate without end.
 */
#include <cstring>

#include "device.h"

namespace gradwire_gloo
{

namespace
{

constexpr size_t kEntry = 2 * sizeof(uint32_t);
constexpr size_t kReadyMax = 8; // entries per notice: 64 bytes of body
constexpr uint32_t kCreditMax = 1u << 20;
constexpr size_t kCreditKeys = 1u << 16;

} // namespace

void Context::readyOpen()
{
	ready_.resize(size);
	for (int p = 0; p < size; p++) {
		if (p == rank)
			continue;
		ready_[p].rreq = reqStorage();
		ready_[p].sreq = reqStorage();
		readyPost(p);
	}
}

void Context::readyPost(int peer)
{
	ReadyLink &l = ready_[peer];
	int rc = gwg_irecv_frame(gw_, peer, readySlot(), kReadyMax * kEntry, reqOf(l.rreq));

	l.rposted = !rc;
	if (rc)
		log(LOG_ERROR, rank,
		    "gradwire: cannot post the receive for rank " + std::to_string(peer) +
			    "'s receive-ready notices: " + errText(rc) +
			    " (sends to it will time out)");
	lostPeer(peer, rc); // a peer gone: fail them now
}

void Context::owe(int peer, uint32_t gslot)
{
	auto &owed = ready_[peer].owed;

	for (auto &e : owed)
		if (e.first == gslot) {
			e.second++;
			return;
		}
	owed.emplace_back(gslot, 1u);
}

void Context::flushReady(int peer)
{
	ReadyLink &l = ready_[peer];

	if (l.owed.empty() || !gw_ || !closed_[peer].empty())
		return;
	if (l.sposted) { // the last notice: a small send, gone by now mostly
		if (gwg_test(gw_, reqOf(l.sreq)) == 0)
			return;
		l.sposted = false;
		int rc = gwg_finish(gw_, reqOf(l.sreq));
		if (rc) {
			log(LOG_WARN, rank,
			    "gradwire: a receive-ready notice to rank " + std::to_string(peer) +
				    " failed: " + errText(rc));
			lostPeer(peer, rc);
		}
	}
	size_t n = std::min(l.owed.size(), kReadyMax);
	uint32_t body[2 * kReadyMax];

	for (size_t i = 0; i < n; i++) {
		body[2 * i] = l.owed[i].first;
		body[2 * i + 1] = l.owed[i].second;
	}
	// Never wait in the post: a receive is posted without a connection,
	// and its notice to a peer whose connection is not there now (net
	// answers EAGAIN on one it dropped) is tried again at the next round.
	int rc = gwg_isend_now(gw_, peer, readySlot(), body, n * kEntry, reqOf(l.sreq));
	if (rc == -EAGAIN)
		return;
	if (rc) {
		log(LOG_WARN, rank,
		    "gradwire: cannot send a receive-ready notice to rank " + std::to_string(peer) +
			    ": " + errText(rc) + " (retried)");
		postFailed(peer, rc);
		return;
	}
	l.sposted = true;
	l.owed.erase(l.owed.begin(), l.owed.begin() + (long)n);
}

void Context::credit(int peer, uint32_t gslot, uint32_t n)
{
	uint64_t key = queueKey(peer, true, gslot);
	auto u = unready_.find(key);

	while (n && u != unready_.end() && !u->second.empty()) {
		notify(u->second.front().get(), peer, 0);
		u->second.pop_front();
		n--;
	}
	if (u != unready_.end() && u->second.empty())
		unready_.erase(u);
	if (!n)
		return;
	auto c = credits_.find(key);
	if (c == credits_.end() && credits_.size() >= kCreditKeys)
		c = credits_.end();
	else
		c = credits_.emplace(key, 0u).first;
	if (c == credits_.end() || n > kCreditMax - c->second) {
		log(LOG_WARN, rank,
		    "gradwire: rank " + std::to_string(peer) +
			    " announced more receives than this rank keeps count of (slot " +
			    std::to_string(gslot) + "); ignored");
		return;
	}
	c->second += n;
}

void Context::sendLeft(std::unique_ptr<Op> op)
{
	uint64_t key = queueKey(op->peer, true, op->gslot);
	auto c = credits_.find(key);

	if (c == credits_.end()) {
		unready_[key].push_back(std::move(op));
		return;
	}
	notify(op.get(), op->peer, 0);
	if (!--c->second)
		credits_.erase(c);
}

bool Context::pollReady()
{
	bool any = false;

	for (int p = 0; p < (int)ready_.size(); p++) {
		ReadyLink &l = ready_[p];

		if (p == rank)
			continue;
		if (l.rposted && gwg_test(gw_, reqOf(l.rreq)) != 0) {
			int rc = gwg_finish(gw_, reqOf(l.rreq));
			const void *bytes = nullptr;
			size_t len = 0;

			l.rposted = false;
			any = true;
			if (!rc)
				gwg_req_frame(reqOf(l.rreq), &bytes, &len);
			if (!rc && (len % kEntry || !len))
				rc = -EPROTO;
			for (size_t i = 0; !rc && i < len / kEntry; i++) {
				uint32_t e[2];

				std::memcpy(e, (const char *)bytes + i * kEntry, kEntry);
				credit(p, e[0], e[1]);
			}
			if (rc)
				log(LOG_WARN, rank,
				    "gradwire: a receive-ready notice from rank " +
					    std::to_string(p) + " was refused: " + errText(rc));
			// A peer gone (ECONNRESET) closes its pair: the sends
			// waiting for its notices fail now, not at the timeout.
			lostPeer(p, rc);
			if (closed_[p].empty())
				readyPost(p);
		}
		flushReady(p);
	}
	return any;
}

} // namespace gradwire_gloo
