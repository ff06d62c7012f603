// SPDX-License-Identifier: MIT
/*
 * gatherv.h - gloo::gatherv() for the test, whose header Debian lacks.
 *
 * Debian's libgloo0 (0.0~git20220518.5b14351) exports gloo::gatherv() and
 * GathervOptions' members, but libgloo-dev ships no gloo/gatherv.h (as it
 * ships no gloo/common/memory.h). This declares GathervOptions as that
 * library was built: the same data members in the same order, the same
 * out-of-line members. A Gloo that has the header uses its own.
 */
#ifndef GW_TEST_GLOO_GATHERV_H
#define GW_TEST_GLOO_GATHERV_H

#if __has_include(<gloo/gatherv.h>)
#include <gloo/gatherv.h>
#else
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <chrono>
#include <memory>
#include <vector>

namespace gloo
{

class GathervOptions
{
      public:
	explicit GathervOptions(const std::shared_ptr<Context> &context)
	    : context(context), timeout(context->getTimeout())
	{
	}

	template <typename T> void setInput(T *ptr, size_t elements)
	{
		setInput(static_cast<void *>(ptr), elements, sizeof(T));
	}

	template <typename T> void setOutput(T *ptr, std::vector<size_t> elementsPerRank)
	{
		setOutput(static_cast<void *>(ptr), std::move(elementsPerRank), sizeof(T));
	}

	void setRoot(int r) { root = r; }
	void setTag(uint32_t t) { tag = t; }
	void setTimeout(std::chrono::milliseconds t) { timeout = t; }

      protected:
	std::shared_ptr<Context> context;
	std::unique_ptr<transport::UnboundBuffer> in;
	std::unique_ptr<transport::UnboundBuffer> out;
	std::vector<size_t> elementsPerRank;
	size_t elementSize = 0;
	int root = -1;
	uint32_t tag = 0;
	std::chrono::milliseconds timeout;

	void setElementSize(size_t elementSize);
	void setInput(void *ptr, size_t elements, size_t elementSize);
	void setOutput(void *ptr, std::vector<size_t> elements, size_t elementSize);

	friend void gatherv(GathervOptions &);
};

void gatherv(GathervOptions &opts);

} // namespace gloo
#endif

#endif
