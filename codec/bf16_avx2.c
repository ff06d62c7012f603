/* SPDX-License-Identifier: MIT */
/*
 * bf16_avx2.c - the bf16 codec with AVX2 integer ops, 8 values per step.
 *
 * Same section as bf16.c (n x u16, the upper halves of float32, exactly 2n
 * bytes) and the same bytes, residuals and info for every input; bf16.c is
 * the reference and documents the rules.
 *
 * The rounding is the reference's bit trick in 32-bit lanes
 * (u + 0x7fff + ((u >> 16) & 1)) >> 16, with NaN and saturating lanes blended
 * in; the halves are packed with vpackusdw (every lane is <= 0xffff). The
 * decoded value is h << 16, so the residual y - dec is fused into the pass.
 * The loops, shared with fp16_avx2.c, are in half_avx2.h.
 */
#include "half_avx2.h"

#define F32_SAT 0x7f7f8000u /* from here RNE would give Inf */

/* The reference's rounding in 32-bit lanes, NaN and saturating lanes blended in. */
GW_HALF_INLINE __m128i narrow8(__m256 y, __m256i a, __m256i nf, __m256i s, __m256 *dec)
{
	__m256i u = _mm256_castps_si256(y), nan, hi, h;

	(void)nf;
	nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
	hi = _mm256_srli_epi32(u, 16);
	h = _mm256_add_epi32(u, _mm256_set1_epi32(0x7fff));
	h = _mm256_srli_epi32(_mm256_add_epi32(h, _mm256_and_si256(hi, _mm256_set1_epi32(1))), 16);
	h = _mm256_blendv_epi8(h, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
	h = _mm256_blendv_epi8(h,
			       _mm256_or_si256(_mm256_and_si256(hi, _mm256_set1_epi32(0x8000)),
					       _mm256_set1_epi32(0x7f7f)),
			       s);
	*dec = _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
	return _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

GW_HALF_INLINE __m256 widen8(__m128i h)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

GW_HALF_INLINE void enc_run(const float *x, const float *res, float *res_out, uint64_t n,
			    uint8_t *o, struct gw_enc_info *info, const bool wr)
{
	gw_half_avx2_enc_run(x, res, res_out, n, o, info, wr, F32_SAT, narrow8);
}

GW_HALF_INLINE void dec_run(const uint8_t *b, uint64_t n, float *y, const bool add)
{
	gw_half_avx2_dec_run(b, n, y, add, widen8);
}

GW_HALF_OPS(bf16, enc_run, dec_run)

static bool probe(void)
{
	return gw_cpu_avx2();
}

const struct gw_codec_ops gw_bf16_avx2 = {
	.size = sizeof(struct gw_codec_ops),
	.name = "bf16",
	.impl = "bf16-avx2",
	.id = GW_CODEC_BF16,
	.lossy = true,
	.priority = 150,
	.cpu_ok = probe,
	.params = NULL,
	.bound = gw_half_bound,
	.encode = bf16_encode,
	.decode = bf16_decode,
	.decode_add = bf16_decode_add,
};
