// SPDX-License-Identifier: MIT
/*
 * pair.cc - Gloo's Pair on the GRADWIRE device, and its bound buffers.
 *
 * Bound buffers are what Gloo's classic algorithm classes use
 * (AllreduceRing, AllreduceHalvingDoubling, BroadcastOneToAll, the
 * barriers...). A send buffer and the peer's receive buffer share a slot;
 * send(offset, length, roffset) writes length bytes from the send buffer
 * at offset into the peer's receive buffer at roffset, and each completes
 * one waitSend() here and one waitRecv() there, in order, as on Gloo's tcp
 * device. On the wire a message is one exact byte frame on the bound slot
 * (address.cc): roffset (64 bits, host byte order), then the bytes. A
 * receive buffer always has a receive posted for the next message (of up
 * to 8 + its size bytes), so no message ever arrives unexpected: libfabric
 * 1.17's net provider stops reading a connection at an early message of
 * more than 128 bytes. A message that does not fit the buffer fails the
 * buffer with an error naming the peer; others carry on.
 */
#include "device.h"

namespace gradwire_gloo
{

const ::gloo::transport::Address &Pair::address() const
{
	return ctx_->address();
}

void Pair::connect(const std::vector<char> &bytes)
{
	ctx_->connectPeer(peer_, bytes);
}

void Pair::close()
{
	ctx_->closePeer(peer_);
}

std::unique_ptr<::gloo::transport::Buffer> Pair::createSendBuffer(int slot, void *ptr, size_t size)
{
	return std::unique_ptr<::gloo::transport::Buffer>(
		new BoundBuffer(ctx_->shared_from_this(), peer_, true, slot, ptr, size));
}

std::unique_ptr<::gloo::transport::Buffer> Pair::createRecvBuffer(int slot, void *ptr, size_t size)
{
	return std::unique_ptr<::gloo::transport::Buffer>(
		new BoundBuffer(ctx_->shared_from_this(), peer_, false, slot, ptr, size));
}

void Pair::send(::gloo::transport::UnboundBuffer *buf, uint64_t slot, size_t offset, size_t nbytes)
{
	buf->send(peer_, slot, offset, nbytes);
}

void Pair::recv(::gloo::transport::UnboundBuffer *buf, uint64_t slot, size_t offset, size_t nbytes)
{
	buf->recv(peer_, slot, offset, nbytes);
}

BoundBuffer::BoundBuffer(std::shared_ptr<Context> ctx, int peer, bool send, int slot, void *ptr,
			 size_t size)
    : ::gloo::transport::Buffer(slot, ptr, size), peer(peer), sender(send), gslot(boundSlot(slot)),
      ctx_(std::move(ctx))
{
	// A buffer of the pair with this rank itself (device.h) only exists:
	// Gloo's ring algorithms make one on a one-rank context and never use
	// it, as over Gloo's tcp device.
	if (!sender && peer != ctx_->rank)
		ctx_->bind(this);
}

// Refuse to move anything over the pair with this rank itself.
static void refuseSelf(const BoundBuffer *b, int rank, const char *what)
{
	if (b->peer == rank)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION("gradwire: rank ", rank, " cannot ", what,
						       " a buffer of its pair with itself (slot ",
						       b->slot(), ")");
}

BoundBuffer::~BoundBuffer()
{
	ctx_->unbind(this);
}

void BoundBuffer::send(size_t offset, size_t length, size_t roffset)
{
	if (!sender)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION(
			"gradwire: send() on a receive buffer (slot ", slot_, ")");
	refuseSelf(this, ctx_->rank, "send from");
	ctx_->sendBound(this, offset, length, roffset);
}

void BoundBuffer::waitRecv()
{
	if (sender)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION(
			"gradwire: waitRecv() on a send buffer (slot ", slot_, ")");
	refuseSelf(this, ctx_->rank, "wait on");
	ctx_->wait(w, false, nullptr, ::gloo::transport::kUnsetTimeout);
}

void BoundBuffer::waitSend()
{
	if (!sender)
		GLOO_THROW_INVALID_OPERATION_EXCEPTION(
			"gradwire: waitSend() on a receive buffer (slot ", slot_, ")");
	refuseSelf(this, ctx_->rank, "wait on");
	ctx_->wait(w, true, nullptr, ::gloo::transport::kUnsetTimeout);
}

} // namespace gradwire_gloo
