/* SPDX-License-Identifier: MIT */
/*
 * residual.c - error-feedback residuals owned by the caller.
 *
 * A residual belongs to one stream (in the transport: one peer and slot). Its
 * shape is fixed by the first tensor; a tensor of another shape re-zeroes it
 * and bumps `resets`, so the caller can log it. It is never truncated or
 * reused across shapes, which is how the seed lost gradient mass.
 */
#include <stdlib.h>
#include "codec_impl.h"
#include "../common/grow.h"

void gw_residual_init(struct gw_residual *r)
{
	memset(r, 0, sizeof(*r));
}

void gw_residual_fini(struct gw_residual *r)
{
	free(r->buf);
	gw_residual_init(r);
}

int gw_residual_prepare(struct gw_residual *r, uint64_t n)
{
	float *b = NULL;

	if (n == r->n && (r->buf || !n))
		return 0;
	if (n > GW_MAX_ELEMS || n > SIZE_MAX / sizeof(float))
		return -EINVAL;
	if (n) {
		b = gw_alloc_lines((size_t)n * sizeof(float)); /* SIMD encoders stream into it */
		if (!b)
			return -ENOMEM;
		memset(b, 0, (size_t)n * sizeof(float));
	}
	if (r->buf || r->n)
		r->resets++;
	free(r->buf);
	r->buf = b;
	r->n = n;
	return 1;
}

void gw_residual_reset(struct gw_residual *r)
{
	if (r->buf)
		memset(r->buf, 0, (size_t)r->n * sizeof(float));
}
