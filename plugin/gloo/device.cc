// SPDX-License-Identifier: MIT
/*
 * device.cc - a Gloo transport device on gradwire (libgradwire_gloo.so).
 *
 * Loading the library registers the device GRADWIRE in PyTorch's
 * c10d::GlooDeviceRegistry; with GLOO_DEVICE_TRANSPORT=GRADWIRE,
 * torch.distributed's gloo backend creates its contexts here. Everything
 * travels as exact byte frames of a gradwire context (shim.h): Gloo hands
 * the transport bytes, not types, so nothing is compressed.
 *
 * Connecting. Gloo's rendezvous (connectFullMesh) creates one Pair per peer,
 * publishes every pair's address() through the host's store, then calls
 * connect(bytes) per peer. gw_ctx_create() wants a store instead, so a
 * background thread runs it over a private store (rendezvous, below): its
 * first set (this rank's libfabric address) becomes our Address, and each
 * connect() puts a peer's address and host id into the private store. The
 * connect() that completes the set joins the thread, which by then has run
 * gradwire's handshake with every peer.
 *
 *   Address bytes (kMaxByteSize = 192, zero padded, host byte order):
 *   0 magic "GWGL" | 4 version 1 | 8 rank | 12 size | 16 host id (8)
 *   | 24 name length | 28 libfabric name ...
 *
 * Slots. Gloo slots are 64 bits: prefix (8) | tag (32) | delta (24), or a
 * raw user tag (send/recv, prefix 0). gradwire slots have 28 bits:
 *
 *   prefix 0:     gradwire slot = the user tag, which must be < 2^24
 *   prefix 1..15: gradwire slot = prefix << 24 | (tag mod 4096) << 12 | delta
 *                 (delta < 4096)
 *
 * Both ends compute the same value, with no table to keep in step. Two
 * live Gloo slots share a gradwire slot only if their tags differ by a
 * multiple of 4096, i.e. a collective is still running while 4095 later
 * ones on the same process group have started; their messages then match
 * in posting order, which is right only if every rank posts them in the
 * same order.
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
 * Threads and progress. One mutex per context guards the gradwire context,
 * the queues and every buffer's counters. A waiter polls its context: it
 * tests every posted request (so a send completes even while its peer only
 * waits for other requests: ofi_rxm rendezvous), sleeps at most 1 ms on the
 * completion queue (woken by the kernel when one arrives), and between
 * rounds lets other threads in: other waiters by yielding the mutex, a
 * thread that only wants to post by waiting for it on a condition
 * variable; a lone waiter never yields. Waits end at Gloo's timeout with
 * an IoException naming gradwire.
 */
#define USE_C10D_GLOO 1

#include <torch/csrc/distributed/c10d/GlooDeviceFactory.hpp>

#include <gloo/common/error.h>
#include <gloo/transport/address.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "shim.h"

namespace gradwire_gloo {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kAddrBytes = ::gloo::transport::Address::kMaxByteSize;
constexpr uint32_t kMagic = 0x4c475747; // "GWGL"
constexpr uint32_t kVersion = 1;
constexpr size_t kAddrHeader = 28;

std::atomic<int> g_contexts{0};
std::atomic<unsigned long long> g_bytes{0};

enum { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

std::string errText(int rc)
{
	return std::string(gwg_strerror(rc));
}

// Gloo's 64-bit slot -> gradwire's 28-bit slot (see the top of the file).
uint32_t mapSlot(uint64_t slot)
{
	uint64_t prefix = slot >> 56, tag = (slot >> 24) & 0xffffffffu,
		 delta = slot & 0xffffffu;

	if (prefix == 0) {
		if (slot >= (UINT64_C(1) << 24))
			GLOO_THROW_INVALID_OPERATION_EXCEPTION(
				"gradwire: user tag ", slot,
				" is too large (the GRADWIRE device takes tags < 2^24)");
		return (uint32_t)slot;
	}
	if (prefix > 15 || delta >= 4096)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION(
			"gradwire: Gloo slot 0x", std::hex, slot,
			" has no gradwire slot (prefix < 16 and delta < 4096 are "
			"supported)");
	return (uint32_t)(prefix << 24 | (tag & 0xfffu) << 12 | delta);
}

void putU32(std::vector<char> &b, size_t off, uint32_t v)
{
	std::memcpy(b.data() + off, &v, sizeof(v));
}

uint32_t getU32(const std::vector<char> &b, size_t off)
{
	uint32_t v;

	std::memcpy(&v, b.data() + off, sizeof(v));
	return v;
}

} // namespace

class Context;

class Address : public ::gloo::transport::Address {
public:
	Address(std::vector<char> bytes, std::string text)
	    : bytes_(std::move(bytes)), text_(std::move(text))
	{
	}
	std::string str() const override { return text_; }
	std::vector<char> bytes() const override { return bytes_; }

private:
	std::vector<char> bytes_;
	std::string text_;
};

class UnboundBuffer;

// One posted or queued send or receive.
struct Op {
	UnboundBuffer *ub; // nullptr: its buffer is gone (see ~UnboundBuffer)
	bool send;
	int peer;
	uint64_t slot;	// Gloo's, for messages
	uint32_t gslot; // gradwire's
	char *ptr;
	size_t len;
	bool posted = false;
	std::vector<char> discard;
	std::vector<std::max_align_t> req;
	// Receive from any of these ranks (Gloo's recv(srcRanks, ...)): one
	// request per rank once armed, the first to complete wins.
	std::vector<int> any;
	std::vector<std::vector<std::max_align_t>> subs;
	bool armed = false;
	int armRc = 0;
};

static struct gwg_req *reqOf(std::vector<std::max_align_t> &v)
{
	return reinterpret_cast<struct gwg_req *>(v.data());
}

class UnboundBuffer : public ::gloo::transport::UnboundBuffer {
public:
	UnboundBuffer(std::shared_ptr<Context> ctx, void *ptr, size_t size)
	    : ::gloo::transport::UnboundBuffer(ptr, size), ctx_(std::move(ctx))
	{
	}
	~UnboundBuffer() override;

	bool waitRecv(int *rank, milliseconds timeout) override
	{
		return wait(false, rank, timeout);
	}
	bool waitSend(int *rank, milliseconds timeout) override
	{
		return wait(true, rank, timeout);
	}
	void abortWaitRecv() override;
	void abortWaitSend() override;

	void send(int dstRank, uint64_t slot, size_t offset, size_t nbytes) override;
	void recv(int srcRank, uint64_t slot, size_t offset, size_t nbytes) override;
	void recv(std::vector<int> srcRanks, uint64_t slot, size_t offset,
		  size_t nbytes) override;

	// Guarded by the context's mutex.
	int completions[2] = { 0, 0 }; // [send]
	int lastRank[2] = { -1, -1 };
	bool aborted[2] = { false, false };
	std::string error;

private:
	bool wait(bool send, int *rank, milliseconds timeout);
	std::shared_ptr<Context> ctx_; // a buffer keeps its context alive
};

class Pair : public ::gloo::transport::Pair {
public:
	Pair(Context *ctx, int peer) : ctx_(ctx), peer_(peer) {}
	const ::gloo::transport::Address &address() const override;
	void connect(const std::vector<char> &bytes) override;
	void close() override {}
	void setSync(bool, bool) override {}
	std::unique_ptr<::gloo::transport::Buffer> createSendBuffer(int, void *,
								    size_t) override
	{
		GLOO_THROW_INVALID_OPERATION_EXCEPTION(
			"gradwire: the GRADWIRE device supports only unbound "
			"buffers (what torch.distributed uses), not createSendBuffer");
	}
	std::unique_ptr<::gloo::transport::Buffer> createRecvBuffer(int, void *,
								    size_t) override
	{
		GLOO_THROW_INVALID_OPERATION_EXCEPTION(
			"gradwire: the GRADWIRE device supports only unbound "
			"buffers (what torch.distributed uses), not createRecvBuffer");
	}
	void send(::gloo::transport::UnboundBuffer *buf, uint64_t slot, size_t offset,
		  size_t nbytes) override
	{
		buf->send(peer_, slot, offset, nbytes);
	}
	void recv(::gloo::transport::UnboundBuffer *buf, uint64_t slot, size_t offset,
		  size_t nbytes) override
	{
		buf->recv(peer_, slot, offset, nbytes);
	}

private:
	Context *ctx_;
	int peer_;
};

class Context : public ::gloo::transport::Context,
		public std::enable_shared_from_this<Context> {
public:
	Context(int rank, int size) : ::gloo::transport::Context(rank, size) {}
	~Context() override;

	std::unique_ptr<::gloo::transport::Pair> &createPair(int peer) override;
	std::unique_ptr<::gloo::transport::UnboundBuffer>
	createUnboundBuffer(void *ptr, size_t size) override
	{
		return std::unique_ptr<::gloo::transport::UnboundBuffer>(
			new UnboundBuffer(shared_from_this(), ptr, size));
	}

	const Address &address();
	void connectPeer(int peer, const std::vector<char> &bytes);
	void post(UnboundBuffer *ub, bool send, int peer, uint64_t slot,
		  size_t offset, size_t nbytes);
	void postAny(UnboundBuffer *ub, const std::vector<int> &peers, uint64_t slot,
		     size_t offset, size_t nbytes);
	// One round of progress; may unlock lk for a moment.
	void progress(std::unique_lock<std::mutex> &lk);
	void orphan(UnboundBuffer *ub);
	// "rank 1", "ranks 1, 3": the peers of ub's pending operations.
	std::string pendingPeers(const UnboundBuffer *ub, bool send);
	// mu, taken ahead of the progress loop (posting); throws if unconnected.
	std::unique_lock<std::mutex> lockToPost();

	std::mutex mu; // the gradwire context, queues, buffers' counters
	std::atomic<int> posting{0}; // threads that wait for mu to post
	std::atomic<int> waiters{0}; // threads in UnboundBuffer::wait()
	std::mutex handoffMu_;	      // with handoff_: a waiter lets them in
	std::condition_variable handoff_;

private:
	static int storeSet(void *arg, const char *key, const void *val, size_t len);
	static ssize_t storeGet(void *arg, const char *key, void *buf, size_t cap,
			     int timeout_ms);
	void open();
	std::unique_ptr<Op> makeOp(UnboundBuffer *ub, bool send, int peer,
				   uint64_t slot, size_t offset, size_t nbytes);
	void start(Op *op);
	void complete(Op *op, int rc);
	void notify(Op *op, int peer, int rc);
	bool arm(Op *op);
	bool progressAny();
	void unblock(uint64_t key);
	void idle(int peer, uint32_t gslot);
	static uint64_t queueKey(int peer, bool send, uint32_t gslot)
	{
		return (uint64_t)peer << 33 | (uint64_t)send << 32 | gslot;
	}

	// Rendezvous between Gloo's connect() calls and gw_ctx_create().
	std::mutex rmu_;
	std::condition_variable rcv_;
	std::map<std::string, std::vector<char>> kv_;
	std::unique_ptr<Address> addr_;
	bool started_ = false, done_ = false, closing_ = false;
	int connected_ = 0, rc_ = 0;
	char err_[512] = "";
	std::thread thread_;
	struct gradwire_store store_ = {};
	struct gwg_ctx *gw_ = nullptr;
	std::string provider_;

	// Posted and queued operations (under mu).
	std::unordered_map<uint64_t, std::deque<std::unique_ptr<Op>>> queues_;
	std::vector<Op *> inflight_;
	std::deque<std::unique_ptr<Op>> anyops_; // receives from any of several
	std::unordered_map<uint64_t, int> blocked_; // receive queues armed ones hold
};

// ---- rendezvous -------------------------------------------------------------

int Context::storeSet(void *arg, const char *key, const void *val, size_t len)
{
	auto *c = static_cast<Context *>(arg);
	char own[64];
	std::lock_guard<std::mutex> g(c->rmu_);

	c->kv_[key].assign((const char *)val, (const char *)val + len);
	snprintf(own, sizeof(own), GWG_KEY_ADDR, c->rank);
	if (!strcmp(key, own) && !c->addr_) {
		std::vector<char> b(kAddrBytes, 0);
		uint64_t host = gwg_host_id();
		int32_t r = c->rank, n = c->size;

		if (len > kAddrBytes - kAddrHeader)
			return -ENAMETOOLONG;
		putU32(b, 0, kMagic);
		putU32(b, 4, kVersion);
		std::memcpy(b.data() + 8, &r, 4);
		std::memcpy(b.data() + 12, &n, 4);
		std::memcpy(b.data() + 16, &host, 8);
		putU32(b, 24, (uint32_t)len);
		std::memcpy(b.data() + kAddrHeader, val, len);
		c->addr_.reset(new Address(std::move(b),
					   "gradwire rank " + std::to_string(c->rank)));
	}
	c->rcv_.notify_all();
	return 0;
}

ssize_t Context::storeGet(void *arg, const char *key, void *buf, size_t cap,
		       int timeout_ms)
{
	auto *c = static_cast<Context *>(arg);
	std::unique_lock<std::mutex> lk(c->rmu_);
	auto ready = [&] { return c->closing_ || c->kv_.count(key); };

	if (!c->rcv_.wait_for(lk, milliseconds(timeout_ms), ready))
		return -ETIMEDOUT;
	if (c->closing_)
		return -ECANCELED;
	const auto &v = c->kv_[key];
	if (v.size() > cap)
		return -ENOSPC;
	std::memcpy(buf, v.data(), v.size());
	return (long)v.size();
}

void Context::open()
{
	struct gwg_ctx *gw = nullptr;
	char err[sizeof(err_)] = "";
	int rc = gwg_create(rank, size, &store_, &gw, err, sizeof(err));
	std::lock_guard<std::mutex> g(rmu_);

	rc_ = rc;
	gw_ = gw;
	std::memcpy(err_, err, sizeof(err_));
	done_ = true;
	rcv_.notify_all();
}

std::unique_ptr<::gloo::transport::Pair> &Context::createPair(int peer)
{
	{
		std::lock_guard<std::mutex> g(rmu_);

		if (!started_) {
			started_ = true;
			store_.size = sizeof(store_);
			store_.set = storeSet;
			store_.get = storeGet;
			store_.arg = this;
			thread_ = std::thread([this] { open(); });
		}
	}
	pairs_.at(peer).reset(new Pair(this, peer));
	return pairs_[peer];
}

const Address &Context::address()
{
	std::unique_lock<std::mutex> lk(rmu_);

	rcv_.wait(lk, [&] { return addr_ || done_; });
	if (!addr_)
		GLOO_THROW_IO_EXCEPTION("gradwire: rank ", rank,
					" could not open its endpoint: ", err_);
	return *addr_;
}

void Context::connectPeer(int peer, const std::vector<char> &b)
{
	char key[64];
	int32_t r, n;
	uint32_t len;
	uint64_t host;

	if (b.size() != kAddrBytes || getU32(b, 0) != kMagic)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION(
			"gradwire: rank ", peer, " sent an address that is not a "
			"GRADWIRE device's (does every rank set "
			"GLOO_DEVICE_TRANSPORT=GRADWIRE?)");
	std::memcpy(&r, b.data() + 8, 4);
	std::memcpy(&n, b.data() + 12, 4);
	std::memcpy(&host, b.data() + 16, 8);
	len = getU32(b, 24);
	if (getU32(b, 4) != kVersion || r != peer || n != size ||
	    len > kAddrBytes - kAddrHeader)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION(
			"gradwire: rank ", peer, "'s address is inconsistent (version ",
			getU32(b, 4), ", rank ", r, ", size ", n, "; expected version ",
			kVersion, ", rank ", peer, ", size ", size, ")");
	std::unique_lock<std::mutex> lk(rmu_);
	snprintf(key, sizeof(key), GWG_KEY_ADDR, peer);
	kv_[key].assign(b.data() + kAddrHeader, b.data() + kAddrHeader + len);
	snprintf(key, sizeof(key), GWG_KEY_HOST, peer);
	kv_[key].assign((const char *)&host, (const char *)&host + sizeof(host));
	rcv_.notify_all();
	if (++connected_ < size - 1)
		return;
	lk.unlock();
	thread_.join();
	if (rc_)
		GLOO_THROW_IO_EXCEPTION("gradwire: rank ", rank, " of ", size,
					" could not connect: ", err_, " (",
					errText(rc_), ")");
	provider_ = gwg_provider(gw_);
	g_contexts++;
	std::string msg = "Gloo device GRADWIRE: rank " + std::to_string(rank) +
			  " of " + std::to_string(size) + " connected over " +
			  provider_;
	gwg_log(LOG_INFO, rank, msg.c_str());
}

Context::~Context()
{
	{
		std::lock_guard<std::mutex> g(rmu_);

		closing_ = true;
		rcv_.notify_all();
	}
	if (thread_.joinable())
		thread_.join();
	pairs_.clear();
	{
		std::lock_guard<std::mutex> g(mu);

		inflight_.clear();
		gwg_destroy(gw_); // drops what is still posted
		gw_ = nullptr;
		queues_.clear();
		anyops_.clear();
	}
}

// ---- operations ---------------------------------------------------------------

std::unique_ptr<Op> Context::makeOp(UnboundBuffer *ub, bool send, int peer,
				    uint64_t slot, size_t offset, size_t nbytes)
{
	if (nbytes == ::gloo::transport::UnboundBuffer::kUnspecifiedByteCount) {
		if (offset > ub->size)
			GLOO_THROW_INVALID_OPERATION_EXCEPTION(
				"gradwire: offset ", offset, " beyond a buffer of ",
				ub->size, " bytes");
		nbytes = ub->size - offset;
	}
	if (offset > ub->size || nbytes > ub->size - offset)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION(
			"gradwire: ", nbytes, " bytes at offset ", offset,
			" exceed a buffer of ", ub->size, " bytes");
	if (peer < 0 || peer >= size || peer == rank)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION("gradwire: rank ", rank,
						       " cannot ", send ? "send to" : "receive from",
						       " rank ", peer, " (size ", size, ")");
	std::unique_ptr<Op> op(new Op());
	op->ub = ub;
	op->send = send;
	op->peer = peer;
	op->slot = slot;
	op->gslot = mapSlot(slot);
	op->ptr = (char *)ub->ptr + offset;
	op->len = nbytes;
	op->req.resize((gwg_req_size() + sizeof(std::max_align_t) - 1) /
		       sizeof(std::max_align_t));
	return op;
}

std::unique_lock<std::mutex> Context::lockToPost()
{
	posting++;
	std::unique_lock<std::mutex> g(mu);

	{
		std::lock_guard<std::mutex> h(handoffMu_);
		posting--;
	}
	handoff_.notify_all();
	if (!gw_)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION(
			"gradwire: rank ", rank, " is not connected");
	return g;
}

void Context::post(UnboundBuffer *ub, bool send, int peer, uint64_t slot,
		   size_t offset, size_t nbytes)
{
	std::unique_ptr<Op> op = makeOp(ub, send, peer, slot, offset, nbytes);
	uint64_t key = queueKey(peer, send, op->gslot);
	std::unique_lock<std::mutex> g = lockToPost();
	auto &q = queues_[key];
	q.push_back(std::move(op));
	if (q.size() == 1 && !blocked_.count(key))
		start(q.front().get());
}

void Context::postAny(UnboundBuffer *ub, const std::vector<int> &peers,
		      uint64_t slot, size_t offset, size_t nbytes)
{
	// Each rank once, this one left out: torch 1.13's recvAnysource passes
	// size zeros and then every rank, this one included.
	std::vector<int> from;

	for (int p : peers) {
		if (p < 0 || p >= size)
			GLOO_THROW_INVALID_OPERATION_EXCEPTION(
				"gradwire: rank ", rank, " cannot receive from rank ",
				p, " (size ", size, ")");
		if (p != rank && std::find(from.begin(), from.end(), p) == from.end())
			from.push_back(p);
	}
	if (from.empty())
		GLOO_THROW_INVALID_OPERATION_EXCEPTION(
			"gradwire: rank ", rank, ": a receive from none of the other ranks");
	if (from.size() == 1)
		return post(ub, false, from[0], slot, offset, nbytes);
	std::unique_ptr<Op> op = makeOp(ub, false, from[0], slot, offset, nbytes);
	op->any = from;
	op->subs.resize(from.size(), op->req);
	std::unique_lock<std::mutex> g = lockToPost();
	anyops_.push_back(std::move(op));
	arm(anyops_.back().get());
}

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
		int rc = gwg_irecv(gw_, op->any[i], op->gslot, op->ptr, op->len,
				   reqOf(op->subs[i]));

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

void Context::start(Op *op)
{
	auto *r = reinterpret_cast<struct gwg_req *>(op->req.data());
	int rc = op->send ? gwg_isend(gw_, op->peer, op->gslot, op->ptr, op->len, r)
			  : gwg_irecv(gw_, op->peer, op->gslot, op->ptr, op->len, r);

	op->posted = true;
	inflight_.push_back(op);
	if (rc)
		complete(op, rc); // never posted: nothing to finish
}

void Context::complete(Op *op, int rc)
{
	uint64_t key = queueKey(op->peer, op->send, op->gslot);
	int peer = op->peer;
	uint32_t gslot = op->gslot;

	inflight_.erase(std::find(inflight_.begin(), inflight_.end(), op));
	notify(op, op->peer, rc);
	auto it = queues_.find(key);
	it->second.pop_front(); // op is gone from here on
	if (it->second.empty()) {
		queues_.erase(it);
		idle(peer, gslot);
	} else if (!blocked_.count(key)) {
		start(it->second.front().get());
	}
}

// Tell op's buffer that op completed (from peer) or failed.
void Context::notify(Op *op, int peer, int rc)
{
	UnboundBuffer *ub = op->ub;

	if (ub && !rc) {
		ub->completions[op->send]++;
		ub->lastRank[op->send] = peer;
		g_bytes += op->len;
	} else if (ub && ub->error.empty()) {
		char slot[32];
		std::string from = op->any.empty() ? "rank " + std::to_string(op->peer)
						   : "any of " + std::to_string(op->any.size()) + " ranks";

		snprintf(slot, sizeof(slot), "0x%llx", (unsigned long long)op->slot);
		ub->error = std::string("gradwire: ") +
			    (op->send ? "send to " : "receive from ") + from +
			    " (Gloo slot " + slot + ", " + std::to_string(op->len) +
			    " bytes) failed: " + errText(rc);
	}
}

// A drained slot gives its frame buffers to the context's pool: every
// collective has new tags, hence new slots, and would otherwise allocate
// (and fault in) fresh buffers for every message, and slots that Gloo's
// tags leave behind would each keep theirs.
void Context::idle(int peer, uint32_t gslot)
{
	gwg_trim(gw_, peer, gslot);
}

void Context::progress(std::unique_lock<std::mutex> &lk)
{
	bool any = !anyops_.empty() && progressAny();
	std::vector<Op *> ops(inflight_);

	for (Op *op : ops) {
		auto *r = reinterpret_cast<struct gwg_req *>(op->req.data());
		int rc = gwg_test(gw_, r);

		if (rc == 0)
			continue;
		rc = gwg_finish(gw_, r);
		complete(op, rc);
		any = true;
	}
	if (any)
		return;
	if (gw_)
		gwg_progress(gw_, 1); // sleeps in the CQ until a completion, 1 ms at most
	// Let other threads in (std::mutex is not fair). Other waiters (Gloo's
	// worker threads, each on its own buffer) block on mu itself, and only a
	// yield lets them take it. A lone waiter does not yield: beside busy
	// processes every sched_yield() gave the core away for a whole time
	// slice, each round (0.07-0.4x Gloo's tcp device beside two CPU-bound
	// processes); threads that only want to post are waited for in the
	// kernel, on a condition variable they signal once they hold mu.
	if (waiters.load() > 1) {
		lk.unlock();
		std::this_thread::yield();
		lk.lock();
	} else if (posting.load() > 0) {
		lk.unlock();
		{
			std::unique_lock<std::mutex> h(handoffMu_);
			handoff_.wait_for(h, milliseconds(1), [this] { return posting.load() == 0; });
		}
		lk.lock();
	}
}

std::string Context::pendingPeers(const UnboundBuffer *ub, bool send)
{
	std::vector<int> peers;

	for (auto &kq : queues_)
		for (auto &op : kq.second)
			if (op->ub == ub && op->send == send)
				peers.push_back(op->peer);
	for (auto &op : anyops_)
		if (op->ub == ub && !send)
			peers.insert(peers.end(), op->any.begin(), op->any.end());
	std::sort(peers.begin(), peers.end());
	peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
	if (peers.empty())
		return "no rank (nothing pending)";
	std::string s = peers.size() == 1 ? "rank " : "ranks ";
	for (size_t i = 0; i < peers.size(); i++)
		s += (i ? ", " : "") + std::to_string(peers[i]);
	return s;
}

void Context::orphan(UnboundBuffer *ub)
{
	// Point op at a scratch copy of its own, away from the dying buffer.
	auto detach = [ub](auto &op) {
		if (op->ub != ub)
			return false;
		op->ub = nullptr;
		op->discard.resize(op->len);
		op->ptr = op->discard.data();
		return true;
	};

	for (auto &op : anyops_) {
		if (!detach(op))
			continue;
		for (size_t i = 0; op->armed && i < op->any.size(); i++)
			gwg_req_retarget(reqOf(op->subs[i]), op->ptr);
	}
	for (auto &kq : queues_) {
		for (auto &op : kq.second) {
			if (!detach(op))
				continue;
			if (op->posted && !op->send)
				gwg_req_retarget(reinterpret_cast<struct gwg_req *>(
							 op->req.data()),
						 op->ptr);
		}
	}
}

// ---- buffers ------------------------------------------------------------------

UnboundBuffer::~UnboundBuffer()
{
	std::lock_guard<std::mutex> g(ctx_->mu);

	ctx_->orphan(this);
}

void UnboundBuffer::abortWaitRecv()
{
	std::lock_guard<std::mutex> g(ctx_->mu);

	aborted[0] = true;
}

void UnboundBuffer::abortWaitSend()
{
	std::lock_guard<std::mutex> g(ctx_->mu);

	aborted[1] = true;
}

void UnboundBuffer::send(int dstRank, uint64_t slot, size_t offset, size_t nbytes)
{
	ctx_->post(this, true, dstRank, slot, offset, nbytes);
}

void UnboundBuffer::recv(int srcRank, uint64_t slot, size_t offset, size_t nbytes)
{
	ctx_->post(this, false, srcRank, slot, offset, nbytes);
}

void UnboundBuffer::recv(std::vector<int> srcRanks, uint64_t slot, size_t offset,
			 size_t nbytes)
{
	if (srcRanks.size() == 1)
		return recv(srcRanks[0], slot, offset, nbytes);
	ctx_->postAny(this, srcRanks, slot, offset, nbytes);
}

bool UnboundBuffer::wait(bool send, int *rank, milliseconds timeout)
{
	if (timeout == ::gloo::transport::kUnsetTimeout)
		timeout = ctx_->getTimeout();
	auto deadline = Clock::now() + timeout;
	struct Count {
		std::atomic<int> &n;
		explicit Count(std::atomic<int> &c) : n(c) { n++; }
		~Count() { n--; }
	} waiting(ctx_->waiters);
	std::unique_lock<std::mutex> lk(ctx_->mu);

	for (;;) {
		if (aborted[send]) {
			aborted[send] = false;
			return false;
		}
		if (!error.empty()) {
			std::string e;

			e.swap(error);
			throw ::gloo::IoException(e);
		}
		if (completions[send] > 0) {
			completions[send]--;
			if (rank)
				*rank = lastRank[send];
			return true;
		}
		// Gloo's own words first ("Timed out"), as its tcp device says.
		if (Clock::now() >= deadline)
			GLOO_THROW_IO_EXCEPTION(
				"Timed out after ", timeout.count(), " ms waiting for a ",
				send ? "send to " : "receive from ", ctx_->pendingPeers(this, send),
				" on rank ", ctx_->rank, " (gradwire device; a peer that is only "
				"slow needs a longer process group timeout: "
				"init_process_group(timeout=...))");
		ctx_->progress(lk);
	}
}

const ::gloo::transport::Address &Pair::address() const
{
	return ctx_->address();
}

void Pair::connect(const std::vector<char> &bytes)
{
	ctx_->connectPeer(peer_, bytes);
}

// ---- device -------------------------------------------------------------------

class Device : public ::gloo::transport::Device {
public:
	std::string str() const override { return "gradwire"; }
	const std::string &getPCIBusID() const override { return bus_; }
	std::shared_ptr<::gloo::transport::Context> createContext(int rank,
								  int size) override
	{
		return std::make_shared<Context>(rank, size);
	}

private:
	std::string bus_;
};

std::shared_ptr<::gloo::transport::Device> makeDevice(const std::string &iface,
						      const std::string &hostname)
{
	char err[512];
	int timeout_ms = 0;
	int rc = gwg_config_check(&timeout_ms, err, sizeof(err));

	if (rc) {
		gwg_log(LOG_ERROR, -1, err);
		GLOO_THROW_INVALID_OPERATION_EXCEPTION("gradwire: ", err);
	}
	std::string msg = "Gloo device GRADWIRE created (Gloo's interface '" +
			  iface + "' / hostname '" + hostname +
			  "' unused: GRADWIRE_PROVIDER and GRADWIRE_IFACE choose "
			  "the fabric)";
	gwg_log(LOG_INFO, -1, msg.c_str());
	return std::make_shared<Device>();
}

} // namespace gradwire_gloo

namespace c10d {
C10_REGISTER_CREATOR(GlooDeviceRegistry, GRADWIRE, gradwire_gloo::makeDevice);
} // namespace c10d

// For tests and tools: what this process did through the device.
extern "C" __attribute__((visibility("default"))) int gradwire_gloo_contexts(void)
{
	return gradwire_gloo::g_contexts.load();
}

extern "C" __attribute__((visibility("default"))) unsigned long long
gradwire_gloo_bytes(void)
{
	return gradwire_gloo::g_bytes.load();
}
