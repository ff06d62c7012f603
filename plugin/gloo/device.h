// SPDX-License-Identifier: MIT
/*
 * device.h - the GRADWIRE Gloo device's parts (private to plugin/gloo).
 *
 * Laid out as Gloo's own tcp transport is:
 *
 *   address.cc        Address: what a rank publishes, and slot mapping
 *   rendezvous.cc     Context: from Gloo's connect() calls to a gradwire
 *                     context (gw_ctx_create() over a private store)
 *   context.cc        Context: operation queues, progress and waiting
 *   pair.cc           Pair, and the bound Buffer (createSend/RecvBuffer)
 *   ready.cc          Context: a send completes once its receiver has posted
 *                     the receive (receive-ready notices)
 *   unbound_buffer.cc UnboundBuffer (what torch.distributed uses)
 *   device.cc         Device, gradwire::gloo::CreateDevice(), probes
 *   c10d.cc           the GRADWIRE entry of PyTorch's c10d registry
 *
 * Everything travels as exact byte frames of a gradwire context (shim.h):
 * Gloo hands the transport bytes, not types, so nothing is compressed.
 * One mutex per context (Context::mu) guards the gradwire context, the
 * queues and every buffer's counters (struct Waitable).
 */
#ifndef GW_GLOO_DEVICE_H
#define GW_GLOO_DEVICE_H

#include <gloo/common/error.h>
#include <gloo/transport/address.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/unbound_buffer.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "shim.h"

namespace gradwire_gloo
{

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

enum { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

// What this process did through the device (the probes in device.cc).
extern std::atomic<int> g_contexts;
extern std::atomic<unsigned long long> g_bytes;

std::string errText(int rc);
void log(int level, int rank, const std::string &msg);

// ---- address.cc ---------------------------------------------------------------

// Gloo's 64-bit slot of an unbound buffer -> gradwire's 28-bit slot.
uint32_t mapSlot(uint64_t slot);
// A bound buffer's slot (Pair::createSendBuffer's int) -> gradwire's.
uint32_t boundSlot(int slot);
// The slot of receive-ready notices (ready.cc).
uint32_t readySlot();

class Address : public ::gloo::transport::Address
{
      public:
	// nullptr when the libfabric name does not fit.
	static std::unique_ptr<Address> make(int rank, int size, const void *name, size_t len,
					     const std::vector<char> &live);
	// Check a peer's bytes (throws) and take its libfabric name, host id
	// and liveness listener's address (transport/live.c).
	static void parse(const std::vector<char> &b, int peer, int size, std::vector<char> *name,
			  uint64_t *host, std::vector<char> *live);

	std::string str() const override { return text_; }
	std::vector<char> bytes() const override { return bytes_; }

      private:
	Address(std::vector<char> bytes, std::string text)
	    : bytes_(std::move(bytes)), text_(std::move(text))
	{
	}
	std::vector<char> bytes_;
	std::string text_;
};

// ---- operations -----------------------------------------------------------------

// What a wait waits on: an unbound buffer, or a bound buffer. [send] indexes.
struct Waitable {
	int completions[2] = { 0, 0 };
	int lastRank[2] = { -1, -1 };
	bool aborted[2] = { false, false };
	std::string error;
};

class BoundBuffer;

// Storage for a gradwire request (gwg_req_size() bytes, aligned).
inline std::vector<std::max_align_t> reqStorage()
{
	return std::vector<std::max_align_t>((gwg_req_size() + sizeof(std::max_align_t) - 1) /
					     sizeof(std::max_align_t));
}

inline struct gwg_req *reqOf(std::vector<std::max_align_t> &v)
{
	return reinterpret_cast<struct gwg_req *>(v.data());
}

// A bound buffer's message is one frame on its slot: where the bytes go
// in the receive buffer, then the bytes (see pair.cc).
enum class OpKind : uint8_t { Plain, BoundSend, BoundRecv };

// One posted or queued send or receive.
struct Op {
	Waitable *w; // nullptr: its buffer is gone (see Context::orphan)
	bool send;
	int peer;
	uint64_t slot;	// Gloo's, for messages
	uint32_t gslot; // gradwire's
	char *ptr;
	size_t len;
	OpKind kind = OpKind::Plain;
	BoundBuffer *bound = nullptr; // BoundRecv: its buffer
	uint64_t roffset = 0;	      // BoundSend: where the bytes go
	bool posted = false;
	std::vector<char> discard; // an orphan's target
	std::vector<std::max_align_t> req;
	// Receive from any of these ranks (Gloo's recv(srcRanks, ...)): one
	// request per rank once armed, the first to complete wins.
	std::vector<int> any;
	std::vector<std::vector<std::max_align_t>> subs;
	bool armed = false;
	int armRc = 0;
};

class Context;

// ---- unbound_buffer.cc ----------------------------------------------------------

class UnboundBuffer : public ::gloo::transport::UnboundBuffer
{
      public:
	UnboundBuffer(std::shared_ptr<Context> ctx, void *ptr, size_t size)
	    : ::gloo::transport::UnboundBuffer(ptr, size), ctx_(std::move(ctx))
	{
	}
	~UnboundBuffer() override;

	bool waitRecv(int *rank, milliseconds timeout) override;
	bool waitSend(int *rank, milliseconds timeout) override;
	void abortWaitRecv() override;
	void abortWaitSend() override;

	void send(int dstRank, uint64_t slot, size_t offset, size_t nbytes) override;
	void recv(int srcRank, uint64_t slot, size_t offset, size_t nbytes) override;
	void recv(std::vector<int> srcRanks, uint64_t slot, size_t offset, size_t nbytes) override;

	Waitable w; // under the context's mutex

      private:
	std::shared_ptr<Context> ctx_; // a buffer keeps its context alive
};

// ---- pair.cc --------------------------------------------------------------------

class Pair : public ::gloo::transport::Pair
{
      public:
	Pair(Context *ctx, int peer) : ctx_(ctx), peer_(peer) {}
	const ::gloo::transport::Address &address() const override;
	void connect(const std::vector<char> &bytes) override;
	void close() override;
	void setSync(bool, bool) override {}
	std::unique_ptr<::gloo::transport::Buffer> createSendBuffer(int slot, void *ptr,
								    size_t size) override;
	std::unique_ptr<::gloo::transport::Buffer> createRecvBuffer(int slot, void *ptr,
								    size_t size) override;
	void send(::gloo::transport::UnboundBuffer *buf, uint64_t slot, size_t offset,
		  size_t nbytes) override;
	void recv(::gloo::transport::UnboundBuffer *buf, uint64_t slot, size_t offset,
		  size_t nbytes) override;

      private:
	Context *ctx_;
	int peer_;
};

// A buffer bound to one peer and slot: a send buffer writes into the peer's
// receive buffer of the same slot, at the offset the sender names.
class BoundBuffer : public ::gloo::transport::Buffer
{
      public:
	BoundBuffer(std::shared_ptr<Context> ctx, int peer, bool send, int slot, void *ptr,
		    size_t size);
	~BoundBuffer() override;

	void send(size_t offset, size_t length, size_t roffset) override;
	void waitRecv() override;
	void waitSend() override;

	char *base() const { return static_cast<char *>(ptr_); }
	size_t size() const { return size_; }
	int slot() const { return slot_; }

	Waitable w; // under the context's mutex
	const int peer;
	const bool sender;
	const uint32_t gslot;

      private:
	std::shared_ptr<Context> ctx_;
};

// ---- rendezvous.cc and context.cc -----------------------------------------------

class Context : public ::gloo::transport::Context, public std::enable_shared_from_this<Context>
{
      public:
	Context(int rank, int size) : ::gloo::transport::Context(rank, size), closed_(size)
	{
#ifdef GW_GLOO_SELF_PAIR
		// A pair for this rank itself, never connected, as Gloo's own tcp
		// device gives it from Gloo 20231202 on (meson.build): its ring
		// helpers (getLeftPair()) insist on one on a one-rank context.
		// Nothing moves over it (makeOp() refuses this rank as a peer).
		pairs_.at(rank).reset(new Pair(this, rank));
#endif
	}
	~Context() override;

	std::unique_ptr<::gloo::transport::Pair> &createPair(int peer) override;
	std::unique_ptr<::gloo::transport::UnboundBuffer> createUnboundBuffer(void *ptr,
									      size_t size) override
	{
		return std::unique_ptr<::gloo::transport::UnboundBuffer>(
			new UnboundBuffer(shared_from_this(), ptr, size));
	}

	// rendezvous.cc
	const Address &address();
	void connectPeer(int peer, const std::vector<char> &bytes);

	// context.cc. An unbound buffer's operations:
	void post(Waitable *w, char *base, size_t size, bool send, int peer, uint64_t slot,
		  size_t offset, size_t nbytes);
	void postAny(Waitable *w, char *base, size_t size, const std::vector<int> &peers,
		     uint64_t slot, size_t offset, size_t nbytes);
	// A bound buffer's: its receive header is posted at creation.
	void bind(BoundBuffer *b);
	void sendBound(BoundBuffer *b, size_t offset, size_t length, size_t roffset);
	void unbind(BoundBuffer *b);
	// Wait for one completion of w in direction send, or throw (an error,
	// a closed pair, Gloo's timeout). false: abortWait*() was called.
	bool wait(Waitable &w, bool send, int *rank, milliseconds timeout);
	void abortWait(Waitable &w, bool send);
	// Detach the operations of a buffer about to be freed (holding mu).
	void orphan(Waitable *w);
	// mu for a thread that is no waiter (posting, a buffer's destructor,
	// an abort): counted, so that a waiter hands mu over to it.
	std::unique_lock<std::mutex> lockCounted();
	// Pair::close(): fail what is pending with peer, refuse new operations.
	void closePeer(int peer);
	// The same under mu, saying why (closed_); a send that failed for want
	// of a connection calls it (lostPeer()).
	void endPeer(int peer, const std::string &why);
	void lostPeer(int peer, int rc);
	void postFailed(int peer, int rc); // a send's post failed
	// ready.cc, under mu: post every peer's notice receive (once connected).
	void readyOpen();

	std::mutex mu; // the gradwire context, queues, buffers' counters

      private:
	static int storeSet(void *arg, const char *key, const void *val, size_t len);
	static ssize_t storeGet(void *arg, const char *key, void *buf, size_t cap, int timeout_ms);
	void open();

	// lockCounted(), then throws if unconnected or peer's pair is closed.
	std::unique_lock<std::mutex> lockToPost(int peer);
	std::unique_ptr<Op> makeOp(Waitable *w, char *base, size_t size, bool send, int peer,
				   uint64_t slot, size_t offset, size_t nbytes);
	void enqueue(std::unique_ptr<Op> op);
	void start(Op *op);
	void complete(Op *op, int rc);
	void notify(Op *op, int peer, int rc);
	int land(Op *op, std::deque<std::unique_ptr<Op>> &q);
	std::unique_ptr<Op> boundRecv(BoundBuffer *b);
	bool arm(Op *op);
	bool progressAny();
	void progress(std::unique_lock<std::mutex> &lk);
	void unblock(uint64_t key);
	void drained(uint64_t key);
	std::string pendingPeers(const Waitable *w, bool send);
	// ready.cc: receive-ready notices.
	void readyPost(int peer);
	void owe(int peer, uint32_t gslot); // a receive from peer was queued
	void flushReady(int peer);	    // send what is owed to peer, if we can
	bool pollReady();		    // notices in and out; true: one came
	void credit(int peer, uint32_t gslot, uint32_t n);
	void sendLeft(std::unique_ptr<Op> op); // its bytes left: complete when ready
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
	std::deque<std::unique_ptr<Op>> anyops_;	    // receives from any of several
	std::unordered_map<uint64_t, int> blocked_;	    // receive queues armed ones hold
	std::unordered_map<uint64_t, BoundBuffer *> bound_; // receive buffers
	std::vector<std::string> closed_;		    // per peer: why it is closed, or empty

	// Receive-ready notices (ready.cc), per peer, and the sends they complete.
	struct ReadyLink {
		std::vector<std::max_align_t> rreq, sreq;
		bool rposted = false, sposted = false;
		std::vector<std::pair<uint32_t, uint32_t>> owed; // gslot, receives
	};
	std::vector<ReadyLink> ready_;
	std::unordered_map<uint64_t, uint32_t> credits_; // send key -> receives posted
	std::unordered_map<uint64_t, std::deque<std::unique_ptr<Op>>> unready_; // bytes left

	// Letting other threads in between rounds of progress (context.cc).
	std::atomic<int> posting_{ 0 }; // threads in lockCounted()
	std::atomic<int> waiters_{ 0 }; // threads in wait()
	std::mutex handoffMu_;
	std::condition_variable handoff_;
};

} // namespace gradwire_gloo

#endif
