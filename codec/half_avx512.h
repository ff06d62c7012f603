/* SPDX-License-Identifier: MIT */
/*
 * half_avx512.h - the AVX-512 encode and decode loops of the 16-bit float
 * codecs (fp16_avx512.c, bf16_avx512.c), 16 values per step, parameterized
 * by the format's 16-lane conversion kernels.
 *
 * The loop does what both formats share: y = x (+ res), the non-finite and
 * saturation masks, the store of the halves, the first non-finite value
 * (noted before res_out, which may be res, changes), the fused residual
 * y - dec (0 in non-finite lanes) and the SATURATED flag. Tails use masked
 * loads and stores (masked-off lanes never fault). Only for the files built
 * with the AVX-512 flags.
 */
#ifndef GW_HALF_AVX512_H
#define GW_HALF_AVX512_H

#include <immintrin.h>
#include "half.h"

/*
 * A format's 16-lane narrowing: the 16 u16 of y, given its magnitude bits a,
 * its non-finite lanes nf and its saturating (finite) lanes s; *dec gets the
 * float32 values the decoder returns for them, for the residual.
 */
typedef __m256i gw_half_narrow16_fn(__m512 y, __m512i a, __mmask16 nf, __mmask16 s, __m512 *dec);
/* A format's 16-lane widening: the decoder's float32 values of 16 u16. */
typedef __m512 gw_half_widen16_fn(__m256i h);

/* Encode the lanes of k at x (+ res) into o and res_out; i: index of x[0]. */
GW_HALF_INLINE void gw_half_avx512_enc16(const float *x, const float *res, float *res_out,
					 uint8_t *o, uint64_t i, __mmask16 k, __mmask16 *sat,
					 struct gw_enc_info *info, const bool wr,
					 const uint32_t sat_from, gw_half_narrow16_fn *narrow16)
{
	__m512 y = _mm512_maskz_loadu_ps(k, x), dec;
	__m512i a;
	__mmask16 nf, s;
	__m256i h;

	if (wr)
		y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(k, res));
	a = _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(0x7fffffff));
	nf = _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7f7fffff));
	s = _mm512_mask_cmpgt_epi32_mask((__mmask16)~nf, a, _mm512_set1_epi32((int)(sat_from - 1)));
	h = narrow16(y, a, nf, s, &dec);
	_mm256_mask_storeu_epi16(o, k, h);
	*sat |= s;
	if (__builtin_expect(nf != 0, 0) && !(info->flags & GW_PF_NONFINITE)) {
		float yb[16];
		int j = __builtin_ctz((unsigned)nf);

		_mm512_storeu_ps(yb, y);
		gw_note_nonfinite(info, i + (uint64_t)j, yb[j]);
	}
	if (wr)
		_mm512_mask_storeu_ps(res_out, k, _mm512_maskz_sub_ps((__mmask16)~nf, y, dec));
}

/* Encode n values (the enc_run of GW_HALF_OPS, given the format's kernel). */
GW_HALF_INLINE void gw_half_avx512_enc_run(const float *x, const float *res, float *res_out,
					   uint64_t n, uint8_t *o, struct gw_enc_info *info,
					   const bool wr, const uint32_t sat_from,
					   gw_half_narrow16_fn *narrow16)
{
	__mmask16 sat = 0;
	uint64_t i = 0;

	for (; i + 16 <= n; i += 16)
		gw_half_avx512_enc16(x + i, wr ? res + i : NULL, wr ? res_out + i : NULL, o + 2 * i,
				     i, 0xffff, &sat, info, wr, sat_from, narrow16);
	if (i < n)
		gw_half_avx512_enc16(x + i, wr ? res + i : NULL, wr ? res_out + i : NULL, o + 2 * i,
				     i, (__mmask16)((1u << (n - i)) - 1), &sat, info, wr, sat_from,
				     narrow16);
	if (sat)
		info->flags |= GW_PF_SATURATED;
}

/* Decode the lanes of k at b into y (or add them to it). */
GW_HALF_INLINE void gw_half_avx512_dec16(const uint8_t *b, float *y, __mmask16 k, const bool add,
					 gw_half_widen16_fn *widen16)
{
	__m512 v = widen16(_mm256_maskz_loadu_epi16(k, b));

	if (add)
		v = _mm512_add_ps(_mm512_maskz_loadu_ps(k, y), v);
	_mm512_mask_storeu_ps(y, k, v);
}

/* Decode n values (the dec_run of GW_HALF_OPS, given the format's kernel). */
GW_HALF_INLINE void gw_half_avx512_dec_run(const uint8_t *b, uint64_t n, float *y, const bool add,
					   gw_half_widen16_fn *widen16)
{
	uint64_t i = 0;

	for (; i + 16 <= n; i += 16)
		gw_half_avx512_dec16(b + 2 * i, y + i, 0xffff, add, widen16);
	if (i < n)
		gw_half_avx512_dec16(b + 2 * i, y + i, (__mmask16)((1u << (n - i)) - 1), add,
				     widen16);
}

#endif
