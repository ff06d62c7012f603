/* SPDX-License-Identifier: MIT */
/*
 * fp16.c - the fp16 codec: each value as an IEEE binary16, generic C.
 *
 * Section (no codec parameters), little-endian:
 *
 *   0        2        4               2n
 *   +--------+--------+-- ... --+--------+
 *   | h[0]   | h[1]   |         | h[n-1] |   u16 binary16 bit patterns
 *   +--------+--------+-- ... --+--------+
 *
 * The section is exactly 2n bytes; anything else is malformed.
 *
 * Encoding y = x (+ res), per element:
 *  - finite y: round to nearest, ties to even; binary16 subnormals are kept.
 *    A y whose rounded value would be +-Inf (|y| >= 65520) saturates to
 *    +-65504 (0x7bff | sign) and sets GW_PF_SATURATED; the residual carries
 *    the excess. |y| in (65504, 65520) rounds to 65504 honestly (no flag).
 *  - NaN: sign | 0x7e00 | (mantissa >> 13), a quiet NaN that keeps the sign
 *    and the top payload bits; +-Inf: sign | 0x7c00. Both are what F16C's
 *    vcvtps2ph writes, so the SIMD variants need no fix-up for them.
 *    Non-finite values are noted (gw_note_nonfinite) and leave residual 0.
 *  - res_out = y - widen(h): widen() is exactly what the decoder computes.
 *
 * Decoding widens exactly (every binary16, subnormals included, is a float32).
 * A signalling NaN is returned quieted (bit 22 set), as vcvtph2ps does, so
 * all variants decode hostile NaN patterns to the same bits.
 *
 * This file is the reference (bit manipulation and one exact-by-construction
 * float add, no _Float16):
 * fp16_avx2.c and fp16_avx512.c must produce identical bytes, residuals and
 * info for every input. It gives the conversion kernels; the loops, checks
 * and saturation are the ones bf16 uses too (half.h).
 */
#include "half.h"

#define F32_INF 0x7f800000u
#define F32_SAT 0x477ff000u	  /* 65520: from here RNE would give Inf */
#define F32_MINNORM16 0x38800000u /* 2^-14, smallest normal binary16 */

/*
 * binary16 bits (without sign) of finite |y| < 65520 given as float bits a.
 * Both candidates are computed and one selected, so the loop has no
 * data-dependent branch. A subnormal result is round(|y| * 2^24): adding 0.5
 * (whose ulp is 2^-24) lets the FPU round it to nearest even, and the low
 * mantissa bits of the sum are the result (carry to 0x400, the smallest
 * normal, included). This needs no FTZ, and DAZ would only zero inputs that
 * round to 0 anyway.
 */
static inline uint32_t narrow_finite(uint32_t a)
{
	uint32_t nrm = (a + 0x0fffu + ((a >> 13) & 1) - 0x38000000u) >> 13;
	uint32_t sub = gw_f2u(gw_u2f(a) + 0.5f) - 0x3f000000u;

	return a >= F32_MINNORM16 ? nrm : sub;
}

/* float32 bits of binary16 h: exact; NaN quieted like vcvtph2ps. */
static inline uint32_t widen(uint32_t h)
{
	uint32_t s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
	int sh;

	if (e == 0x1f)
		return s | F32_INF | (m << 13) | (m ? 0x400000u : 0);
	if (e)
		return s | ((e + 112) << 23) | (m << 13);
	if (!m)
		return s;
	/* Subnormal m * 2^-24: shift the leading one up to bit 10. */
	sh = __builtin_clz(m) - 21;
	m <<= sh;
	return s | ((uint32_t)(113 - sh) << 23) | ((m & 0x3ff) << 13);
}

/* binary16 bits of a NaN or Inf, as vcvtps2ph writes them. */
static inline uint32_t narrow_nonfinite(uint32_t u, uint32_t a)
{
	return 0x7c00u | (a > F32_INF ? 0x200u : 0) | ((a & 0x7fffffu) >> 13) |
	       ((u >> 16) & 0x8000u);
}

/* binary16 bits of finite y below saturation, given as float bits u, a = |u|. */
static inline uint32_t narrow(uint32_t u, uint32_t a)
{
	return narrow_finite(a) | ((u >> 16) & 0x8000u);
}

GW_HALF_INLINE void enc_run(const float *x, const float *res, float *res_out, uint64_t n,
			    uint8_t *o, struct gw_enc_info *info, const bool wr)
{
	gw_half_enc_run(x, res, res_out, n, o, info, wr, F32_SAT, 0x7bffu, narrow, narrow_nonfinite,
			widen);
}

GW_HALF_INLINE void dec_run(const uint8_t *b, uint64_t n, float *y, const bool add)
{
	gw_half_dec_run(b, n, y, add, widen);
}

GW_HALF_OPS(fp16, enc_run, dec_run)

const struct gw_codec_ops gw_fp16_generic = {
	.size = sizeof(struct gw_codec_ops),
	.name = "fp16",
	.impl = "fp16-generic",
	.id = GW_CODEC_FP16,
	.lossy = true,
	.priority = 100,
	.params = NULL,
	.bound = gw_half_bound,
	.encode = fp16_encode,
	.decode = fp16_decode,
	.decode_add = fp16_decode_add,
};
