/* SPDX-License-Identifier: MIT */
/*
 * half_avx2.h - the AVX2 encode and decode loops of the 16-bit float codecs
 * (fp16_avx2.c, bf16_avx2.c), 8 values per step, parameterized by the
 * format's 8-lane conversion kernels.
 *
 * The loop does what both formats share: y = x (+ res), the non-finite and
 * saturation masks, the store of the halves, the first non-finite value
 * (noted before res_out, which may be res, changes), the fused residual
 * y - dec (0 in non-finite lanes) and the SATURATED flag. Tails go through
 * a zero-padded stack block, so every element takes the same vector path.
 * Only for the files built with the AVX2 flags.
 */
#ifndef GW_HALF_AVX2_H
#define GW_HALF_AVX2_H

#include <immintrin.h>
#include "half.h"

/*
 * A format's 8-lane narrowing: the 8 u16 of y, given its magnitude bits a,
 * its non-finite lanes nf and its saturating (finite) lanes s; *dec gets the
 * float32 values the decoder returns for them, for the residual.
 */
typedef __m128i gw_half_narrow8_fn(__m256 y, __m256i a, __m256i nf, __m256i s, __m256 *dec);
/* A format's 8-lane widening: the decoder's float32 values of 8 u16. */
typedef __m256 gw_half_widen8_fn(__m128i h);

/* Encode 8 values at x (+ res) into o, residual into res_out; i: index of x[0]. */
GW_HALF_INLINE void gw_half_avx2_enc8(const float *x, const float *res, float *res_out, uint8_t *o,
				      uint64_t i, __m256i *sat, struct gw_enc_info *info,
				      const bool wr, const uint32_t sat_from,
				      gw_half_narrow8_fn *narrow8)
{
	__m256 y = _mm256_loadu_ps(x), dec;
	__m256i a, nf, s;
	__m128i h;
	int m;

	if (wr)
		y = _mm256_add_ps(y, _mm256_loadu_ps(res));
	a = _mm256_and_si256(_mm256_castps_si256(y), _mm256_set1_epi32(0x7fffffff));
	nf = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f7fffff));
	s = _mm256_andnot_si256(nf, _mm256_cmpgt_epi32(a, _mm256_set1_epi32((int)(sat_from - 1))));
	h = narrow8(y, a, nf, s, &dec);
	_mm_storeu_si128((__m128i *)(void *)o, h);
	*sat = _mm256_or_si256(*sat, s);
	/* Note the first non-finite y before res_out (which may be res) changes. */
	m = _mm256_movemask_ps(_mm256_castsi256_ps(nf));
	if (__builtin_expect(m != 0, 0) && !(info->flags & GW_PF_NONFINITE)) {
		float yb[8];
		int k = __builtin_ctz((unsigned)m);

		_mm256_storeu_ps(yb, y);
		gw_note_nonfinite(info, i + (uint64_t)k, yb[k]);
	}
	if (wr) {
		__m256 r = _mm256_sub_ps(y, dec);

		_mm256_storeu_ps(res_out, _mm256_andnot_ps(_mm256_castsi256_ps(nf), r));
	}
}

/* Encode n values (the enc_run of GW_HALF_OPS, given the format's kernel). */
GW_HALF_INLINE void gw_half_avx2_enc_run(const float *x, const float *res, float *res_out,
					 uint64_t n, uint8_t *o, struct gw_enc_info *info,
					 const bool wr, const uint32_t sat_from,
					 gw_half_narrow8_fn *narrow8)
{
	__m256i sat = _mm256_setzero_si256();
	uint64_t i = 0;

	for (; i + 8 <= n; i += 8)
		gw_half_avx2_enc8(x + i, wr ? res + i : NULL, wr ? res_out + i : NULL, o + 2 * i, i,
				  &sat, info, wr, sat_from, narrow8);
	if (i < n) {
		float xb[8] = { 0 }, rb[8] = { 0 }, rob[8];
		uint8_t ob[16];
		size_t k = (size_t)(n - i);

		memcpy(xb, x + i, k * 4);
		if (wr)
			memcpy(rb, res + i, k * 4);
		gw_half_avx2_enc8(xb, rb, rob, ob, i, &sat, info, wr, sat_from, narrow8);
		memcpy(o + 2 * i, ob, k * 2);
		if (wr)
			memcpy(res_out + i, rob, k * 4);
	}
	if (!_mm256_testz_si256(sat, sat))
		info->flags |= GW_PF_SATURATED;
}

/* Decode n values (the dec_run of GW_HALF_OPS, given the format's kernel). */
GW_HALF_INLINE void gw_half_avx2_dec_run(const uint8_t *b, uint64_t n, float *y, const bool add,
					 gw_half_widen8_fn *widen8)
{
	uint64_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 v = widen8(_mm_loadu_si128((const __m128i *)(const void *)(b + 2 * i)));

		if (add)
			v = _mm256_add_ps(_mm256_loadu_ps(y + i), v);
		_mm256_storeu_ps(y + i, v);
	}
	if (i < n) {
		uint8_t hb[16] = { 0 };
		float yb[8];
		size_t k = (size_t)(n - i);

		memcpy(hb, b + 2 * i, k * 2);
		_mm256_storeu_ps(yb, widen8(_mm_loadu_si128((const __m128i *)(const void *)hb)));
		for (size_t j = 0; j < k; j++)
			y[i + j] = add ? y[i + j] + yb[j] : yb[j];
	}
}

#endif
