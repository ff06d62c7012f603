// SPDX-License-Identifier: MIT
/*
 * unbound_buffer.cc - Gloo's UnboundBuffer on the GRADWIRE device: what
 * torch.distributed and Gloo's new-style collectives (gloo::allreduce(),
 * ...) use. Every operation is queued on the context (context.cc).
 */
#include "device.h"

namespace gradwire_gloo
{

UnboundBuffer::~UnboundBuffer()
{
	std::unique_lock<std::mutex> g = ctx_->lockCounted();

	ctx_->orphan(&w);
}

bool UnboundBuffer::waitRecv(int *rank, milliseconds timeout)
{
	return ctx_->wait(w, false, rank, timeout);
}

bool UnboundBuffer::waitSend(int *rank, milliseconds timeout)
{
	return ctx_->wait(w, true, rank, timeout);
}

void UnboundBuffer::abortWaitRecv()
{
	ctx_->abortWait(w, false);
}

void UnboundBuffer::abortWaitSend()
{
	ctx_->abortWait(w, true);
}

void UnboundBuffer::send(int dstRank, uint64_t slot, size_t offset, size_t nbytes)
{
	ctx_->post(&w, (char *)ptr, size, true, dstRank, slot, offset, nbytes);
}

void UnboundBuffer::recv(int srcRank, uint64_t slot, size_t offset, size_t nbytes)
{
	ctx_->post(&w, (char *)ptr, size, false, srcRank, slot, offset, nbytes);
}

void UnboundBuffer::recv(std::vector<int> srcRanks, uint64_t slot, size_t offset, size_t nbytes)
{
	if (srcRanks.size() == 1)
		return recv(srcRanks[0], slot, offset, nbytes);
	ctx_->postAny(&w, (char *)ptr, size, srcRanks, slot, offset, nbytes);
}

} // namespace gradwire_gloo
