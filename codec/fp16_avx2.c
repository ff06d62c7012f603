/* SPDX-License-Identifier: MIT */
/*
 * fp16_avx2.c - the fp16 codec with AVX2 + F16C, 8 values per step.
 *
 * Same section as fp16.c (n x u16 binary16, exactly 2n bytes) and the same
 * bytes, residuals and info for every input; fp16.c is the reference and
 * documents the rounding, saturation and NaN rules.
 *
 * vcvtps2ph with _MM_FROUND_TO_NEAREST_INT rounds to nearest even, keeps
 * subnormals, turns Inf into Inf and NaN into sign | 0x7e00 | (mant >> 13),
 * exactly the reference rules, so the only fix-up is saturation: finite lanes
 * with |y| >= 65520 are blended to +-65504 first (NaN lanes are left alone).
 * The residual is fused into the same pass: vcvtph2ps widens the stored
 * halves exactly (the decoder's own operation) and y - dec is one vsubps.
 * The loops, shared with bf16_avx2.c, are in half_avx2.h.
 */
#include "half_avx2.h"

#define F32_SAT 0x477ff000u /* 65520: from here RNE would give Inf */
#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* Finite lanes at or beyond 65520 become +-65504 before vcvtps2ph. */
GW_HALF_INLINE __m128i narrow8(__m256 y, __m256i a, __m256i nf, __m256i s, __m256 *dec)
{
	const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	/* +-65504 with y's sign, for the saturating lanes only. */
	__m256 max = _mm256_or_ps(_mm256_andnot_ps(abs, y), _mm256_set1_ps(65504.0f));
	__m128i h = _mm256_cvtps_ph(_mm256_blendv_ps(y, max, _mm256_castsi256_ps(s)), RNE);

	(void)a, (void)nf;
	*dec = _mm256_cvtph_ps(h);
	return h;
}

GW_HALF_INLINE __m256 widen8(__m128i h)
{
	return _mm256_cvtph_ps(h);
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

GW_HALF_OPS(fp16, enc_run, dec_run)

static bool probe(void)
{
	return gw_cpu_avx2();
}

const struct gw_codec_ops gw_fp16_avx2 = {
	.size = sizeof(struct gw_codec_ops),
	.name = "fp16",
	.impl = "fp16-avx2",
	.id = GW_CODEC_FP16,
	.lossy = true,
	.priority = 150,
	.cpu_ok = probe,
	.params = NULL,
	.bound = gw_half_bound,
	.encode = fp16_encode,
	.decode = fp16_decode,
	.decode_add = fp16_decode_add,
};
