// SPDX-License-Identifier: MIT
/*
 * address.cc - what a rank of the GRADWIRE device publishes, and its slots.
 *
 * Address bytes (kMaxByteSize = 192, zero padded, host byte order):
 *
 *   0 magic "GWGL" | 4 version 3 | 8 rank | 12 size | 16 host id (8)
 *   | 24 name length | 28 libfabric name ... | live length (4) | live ...
 *
 * "live" is the address of the rank's liveness listener (transport/live.c:
 * how a peer learns at once that this process ended), or empty.
 *
 * Slots. gradwire slots have 28 bits. Gloo's unbound buffers have 64-bit
 * slots: prefix (8) | tag (32) | delta (24), or a raw user tag (send/recv,
 * prefix 0). Bound buffers have an int slot per pair (Context::nextSlot()).
 *
 *   prefix 0:      gradwire slot = the user tag, which must be < 2^24
 *   prefix 1..14:  gradwire slot = prefix << 24 | (tag mod 4096) << 12 | delta
 *                  (delta < 4096)
 *   bound buffers: gradwire slot = 15 << 24 | (slot mod 2^23)
 *   notices:       gradwire slot = 15 << 24 | 2^23 (receive-ready, ready.cc)
 *
 * Both ends compute the same value, with no table to keep in step. Two
 * live Gloo slots share a gradwire slot only if their tags differ by a
 * multiple of 4096, i.e. a collective is still running while 4095 later
 * ones on the same process group have started (or 2^23 bound slots later);
 * their messages then match in posting order, which is right only if every
 * rank posts them in the same order.
 */
#include <cstring>

#include "device.h"

namespace gradwire_gloo
{

namespace
{

constexpr size_t kAddrBytes = ::gloo::transport::Address::kMaxByteSize;
constexpr uint32_t kMagic = 0x4c475747; // "GWGL"
constexpr uint32_t kVersion = 3;	// 2: receive-ready notices (ready.cc); 3: live
constexpr size_t kAddrHeader = 28;
constexpr uint32_t kBoundPrefix = 15;

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

std::atomic<int> g_contexts{ 0 };
std::atomic<unsigned long long> g_bytes{ 0 };

std::string errText(int rc)
{
	return std::string(gwg_strerror(rc));
}

void log(int level, int rank, const std::string &msg)
{
	gwg_log(level, rank, msg.c_str());
}

uint32_t mapSlot(uint64_t slot)
{
	uint64_t prefix = slot >> 56, tag = (slot >> 24) & 0xffffffffu, delta = slot & 0xffffffu;

	if (prefix == 0) {
		if (slot >= (UINT64_C(1) << 24))
			GLOO_THROW_INVALID_OPERATION_EXCEPTION(
				"gradwire: user tag ", slot,
				" is too large (the GRADWIRE device takes tags < 2^24)");
		return (uint32_t)slot;
	}
	if (prefix >= kBoundPrefix || delta >= 4096)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION(
			"gradwire: Gloo slot 0x", std::hex, slot,
			" has no gradwire slot (prefix < 15 and delta < 4096 are "
			"supported)");
	return (uint32_t)(prefix << 24 | (tag & 0xfffu) << 12 | delta);
}

uint32_t boundSlot(int slot)
{
	return kBoundPrefix << 24 | ((uint32_t)slot & 0x7fffffu);
}

uint32_t readySlot()
{
	return kBoundPrefix << 24 | 0x800000u;
}

std::unique_ptr<Address> Address::make(int rank, int size, const void *name, size_t len,
				       const std::vector<char> &live)
{
	std::vector<char> b(kAddrBytes, 0);
	uint64_t host = gwg_host_id();
	int32_t r = rank, n = size;

	if (len + 4 + live.size() > kAddrBytes - kAddrHeader)
		return nullptr;
	putU32(b, 0, kMagic);
	putU32(b, 4, kVersion);
	std::memcpy(b.data() + 8, &r, 4);
	std::memcpy(b.data() + 12, &n, 4);
	std::memcpy(b.data() + 16, &host, 8);
	putU32(b, 24, (uint32_t)len);
	std::memcpy(b.data() + kAddrHeader, name, len);
	putU32(b, kAddrHeader + len, (uint32_t)live.size());
	if (!live.empty())
		std::memcpy(b.data() + kAddrHeader + len + 4, live.data(), live.size());
	return std::unique_ptr<Address>(
		new Address(std::move(b), "gradwire rank " + std::to_string(rank)));
}

void Address::parse(const std::vector<char> &b, int peer, int size, std::vector<char> *name,
		    uint64_t *host, std::vector<char> *live)
{
	int32_t r, n;
	uint32_t len, llen = 0;

	if (b.size() != kAddrBytes || getU32(b, 0) != kMagic)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION("gradwire: rank ", peer,
						       " sent an address that is not a "
						       "GRADWIRE device's (does every rank set "
						       "GLOO_DEVICE_TRANSPORT=GRADWIRE?)");
	std::memcpy(&r, b.data() + 8, 4);
	std::memcpy(&n, b.data() + 12, 4);
	std::memcpy(host, b.data() + 16, 8);
	len = getU32(b, 24);
	if (len <= kAddrBytes - kAddrHeader - 4)
		llen = getU32(b, kAddrHeader + len);
	if (getU32(b, 4) != kVersion || r != peer || n != size ||
	    len > kAddrBytes - kAddrHeader - 4 || llen > kAddrBytes - kAddrHeader - 4 - len)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION(
			"gradwire: rank ", peer, "'s address is inconsistent (version ",
			getU32(b, 4), ", rank ", r, ", size ", n, "; expected version ", kVersion,
			", rank ", peer, ", size ", size, ")");
	name->assign(b.data() + kAddrHeader, b.data() + kAddrHeader + len);
	live->assign(b.data() + kAddrHeader + len + 4, b.data() + kAddrHeader + len + 4 + llen);
}

} // namespace gradwire_gloo
