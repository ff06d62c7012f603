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
 * identical bytes, residuals and info for every input. It gives the
 * conversion kernels; the loops, checks and saturation are the ones fp16 uses
 * too (half.h).
 */
#include "half.h"

#define F32_INF 0x7f800000u
#define F32_SAT 0x7f7f8000u /* from here RNE would give Inf */

/* bf16 bits of finite y below saturation: round to nearest even on the bits. */
static inline uint32_t narrow(uint32_t u, uint32_t a)
{
	(void)a;
	return (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
}

/* bf16 bits of a NaN (quieted) or Inf. */
static inline uint32_t narrow_nonfinite(uint32_t u, uint32_t a)
{
	return (u >> 16) | (a > F32_INF ? 0x40u : 0);
}

static inline uint32_t widen(uint32_t h)
{
	return h << 16;
}

GW_HALF_INLINE void enc_run(const float *x, const float *res, float *res_out, uint64_t n,
			    uint8_t *o, struct gw_enc_info *info, const bool wr)
{
	gw_half_enc_run(x, res, res_out, n, o, info, wr, F32_SAT, 0x7f7fu, narrow, narrow_nonfinite,
			widen);
}

GW_HALF_INLINE void dec_run(const uint8_t *b, uint64_t n, float *y, const bool add)
{
	gw_half_dec_run(b, n, y, add, widen);
}

GW_HALF_OPS(bf16, enc_run, dec_run)

const struct gw_codec_ops gw_bf16_generic = {
	.size = sizeof(struct gw_codec_ops),
	.name = "bf16",
	.impl = "bf16-generic",
	.id = GW_CODEC_BF16,
	.lossy = true,
	.priority = 100,
	.params = NULL,
	.bound = gw_half_bound,
	.encode = bf16_encode,
	.decode = bf16_decode,
	.decode_add = bf16_decode_add,
};
