// SPDX-License-Identifier: MIT
/*
 * rendezvous.cc - from Gloo's connect() calls to a connected gradwire context.
 *
 * Gloo's rendezvous (connectFullMesh) creates one Pair per peer, publishes
 * every pair's address() through the host's store, then calls
 * connect(bytes) per peer. gw_ctx_create() wants a store instead, so a
 * background thread runs it over a private store: its set of this rank's
 * libfabric address becomes our Address (with the liveness listener's
 * address, set just before: transport/live.c), and each connect() puts a
 * peer's address, host id and listener into the private store. The connect() that
 * completes the set joins the thread, which by then has run gradwire's
 * handshake with every peer.
 */
#include <cstdio>
#include <cstring>

#include "device.h"

namespace gradwire_gloo
{

int Context::storeSet(void *arg, const char *key, const void *val, size_t len)
{
	auto *c = static_cast<Context *>(arg);
	char own[64];
	std::lock_guard<std::mutex> g(c->rmu_);

	c->kv_[key].assign((const char *)val, (const char *)val + len);
	snprintf(own, sizeof(own), GWG_KEY_ADDR, c->rank);
	if (!strcmp(key, own) && !c->addr_) {
		snprintf(own, sizeof(own), GWG_KEY_LIVE, c->rank);
		c->addr_ = Address::make(c->rank, c->size, val, len, c->kv_[own]);
		if (!c->addr_)
			return -ENAMETOOLONG;
	}
	c->rcv_.notify_all();
	return 0;
}

ssize_t Context::storeGet(void *arg, const char *key, void *buf, size_t cap, int timeout_ms)
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
	// Gloo's timeout (the context's, set by the rendezvous before the
	// first pair) bounds the handshake and a post; waits take their own.
	int rc = gwg_create(rank, size, (int)getTimeout().count(), &store_, &gw, err, sizeof(err));
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
	std::vector<char> name, live;
	uint64_t host;
	char key[64];

	Address::parse(b, peer, size, &name, &host, &live);
	std::unique_lock<std::mutex> lk(rmu_);
	snprintf(key, sizeof(key), GWG_KEY_ADDR, peer);
	kv_[key] = std::move(name);
	snprintf(key, sizeof(key), GWG_KEY_HOST, peer);
	kv_[key].assign((const char *)&host, (const char *)&host + sizeof(host));
	snprintf(key, sizeof(key), GWG_KEY_LIVE, peer);
	kv_[key] = std::move(live);
	rcv_.notify_all();
	if (++connected_ < size - 1)
		return;
	lk.unlock();
	thread_.join();
	if (rc_)
		GLOO_THROW_IO_EXCEPTION("gradwire: rank ", rank, " of ", size,
					" could not connect: ", err_, " (", errText(rc_), ")");
	provider_ = gwg_provider(gw_);
	{
		std::lock_guard<std::mutex> g(mu);

		readyOpen();
	}
	g_contexts++;
	log(LOG_INFO, rank,
	    "Gloo device GRADWIRE: rank " + std::to_string(rank) + " of " + std::to_string(size) +
		    " connected over " + provider_);
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
		unready_.clear();
	}
}

} // namespace gradwire_gloo
