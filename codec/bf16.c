/* SPDX-License-Identifier: MIT */
/*
 * bf16.c - the bf16 codec: each value as a bfloat16 (the upper half of its
 * float32), generic C.
 *
 * Section (no codec parameters), little-endian:
 *
 *   0        2        4               2n
 *   +--------+--------+-- ... --+--------+
 *   | h[0]   | h[1]   |         | h[n-1] |   u16: float32 bits >> 16
 *   +--------+--------+-- ... --+--------+
 *
 * The section is exactly 2n bytes; anything else is malformed.
 *
 * Encoding y = x (+ res) with float bits u, per element:
 *  - finite y: round to nearest, ties to even, on the bits:
 *    h = (u + 0x7fff + ((u >> 16) & 1)) >> 16. Subnormals are kept (this is
 *    why AVX512_BF16's vcvtneps2bf16, which flushes them, is not used).
 *    A finite y that would round to +-Inf (|u| >= 0x7f7f8000) saturates to
 *    0x7f7f | sign (+-3.3895e38) and sets GW_PF_SATURATED.
 *  - NaN: (u >> 16) | 0x0040 (quiet, sign and top payload kept); +-Inf: the
 *    formula above already gives 0x7f80 | sign. Non-finite values are noted
 *    (gw_note_nonfinite) and leave residual 0.
 *  - res_out = y - decode(h), decode(h) = h << 16 exactly.
 *
 * Decoding is u = h << 16: exact, NaN payloads included.
 * This file is the reference: bf16_avx2.c and bf16_avx512.c must produce
 * identical bytes, residuals and info for every input.
 */
#include "codec_impl.h"

#define F32_ABS 0x7fffffffu
#define F32_INF 0x7f800000u
#define F32_SAT 0x7f7f8000u	/* from here RNE would give Inf */

static size_t bf16_bound(const struct gw_codec *c, uint64_t n)
{
	(void)c;
	return (size_t)n * 2;
}

static ssize_t bf16_encode(const struct gw_codec *c, void *state, void *scratch,
			   const float *x, const float *res, float *res_out,
			   uint64_t n, void *out, size_t cap,
			   struct gw_enc_info *info)
{
	uint8_t *o = out;
	uint32_t sat = 0;

	(void)state, (void)scratch;
	if (!gw_enc_args_ok(x, res, res_out, n))
		return -EINVAL;
	if (cap < bf16_bound(c, n))
		return -ENOSPC;
	for (uint64_t i = 0; i < n; i++) {
		float y = res ? x[i] + res[i] : x[i];
		uint32_t u = gw_f2u(y), a = u & F32_ABS, h;
		float r;

		if (a >= F32_INF) {
			gw_note_nonfinite(info, i, y);
			h = (u >> 16) | (a > F32_INF ? 0x40u : 0);
			r = 0.0f;
		} else {
			if (a >= F32_SAT) {
				h = ((u >> 16) & 0x8000u) | 0x7f7fu;
				sat = 1;
			} else {
				h = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
			}
			r = y - gw_u2f(h << 16);
		}
		gw_put16(o + 2 * i, (uint16_t)h);
		if (res_out)
			res_out[i] = r;
	}
	if (sat)
		info->flags |= GW_PF_SATURATED;
	return (ssize_t)(n * 2);
}

static int bf16_decode(const void *in, size_t len, uint64_t n, float *y)
{
	const uint8_t *b = in;

	if (n > GW_MAX_ELEMS || len != n * 2)
		return -EBADMSG;
	for (uint64_t i = 0; i < n; i++)
		y[i] = gw_u2f((uint32_t)gw_get16(b + 2 * i) << 16);
	return 0;
}

static int bf16_decode_add(const void *in, size_t len, uint64_t n, float *acc)
{
	const uint8_t *b = in;

	if (n > GW_MAX_ELEMS || len != n * 2)
		return -EBADMSG;
	for (uint64_t i = 0; i < n; i++)
		acc[i] += gw_u2f((uint32_t)gw_get16(b + 2 * i) << 16);
	return 0;
}

const struct gw_codec_ops gw_bf16_generic = {
	GW_OPS_SIZE,
	.name = "bf16",
	.impl = "bf16-generic",
	.id = GW_CODEC_BF16,
	.lossy = true,
	.priority = 100,
	.params = NULL,
	.bound = bf16_bound,
	.encode = bf16_encode,
	.decode = bf16_decode,
	.decode_add = bf16_decode_add,
};
