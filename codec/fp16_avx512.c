/* SPDX-License-Identifier: MIT */
/*
 * fp16_avx512.c - the fp16 codec with AVX-512, 16 values per step.
 *
 * Same section as fp16.c (n x u16 binary16, exactly 2n bytes) and the same
 * bytes, residuals and info for every input; fp16.c is the reference and
 * documents the rounding, saturation and NaN rules.
 *
 * vcvtps2ph (zmm) rounds to nearest even, keeps subnormals and maps Inf/NaN
 * exactly like the reference, so only saturation needs a masked blend to
 * +-65504 (finite lanes with |y| >= 65520; NaN lanes untouched). The residual
 * is fused: vcvtph2ps widens the stored halves exactly as the decoder does.
 * The loops, shared with bf16_avx512.c, are in half_avx512.h.
 */
#include "half_avx512.h"

#define F32_SAT 0x477ff000u /* 65520: from here RNE would give Inf */
#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* Finite lanes at or beyond 65520 become +-65504 before vcvtps2ph. */
GW_HALF_INLINE __m256i narrow16(__m512 y, __m512i a, __mmask16 nf, __mmask16 s, __m512 *dec)
{
	const __m512i abs = _mm512_set1_epi32(0x7fffffff);
	/* +-65504 with y's sign, for the saturating lanes only. */
	__m512 max = _mm512_castsi512_ps(_mm512_or_si512(
		_mm512_andnot_si512(abs, _mm512_castps_si512(y)), _mm512_set1_epi32(0x477fe000)));
	__m256i h = _mm512_cvtps_ph(_mm512_mask_blend_ps(s, y, max), RNE);

	(void)a, (void)nf;
	*dec = _mm512_cvtph_ps(h);
	return h;
}

GW_HALF_INLINE __m512 widen16(__m256i h)
{
	return _mm512_cvtph_ps(h);
}

GW_HALF_INLINE void enc_run(const float *x, const float *res, float *res_out, uint64_t n,
			    uint8_t *o, struct gw_enc_info *info, const bool wr)
{
	gw_half_avx512_enc_run(x, res, res_out, n, o, info, wr, F32_SAT, narrow16);
}

GW_HALF_INLINE void dec_run(const uint8_t *b, uint64_t n, float *y, const bool add)
{
	gw_half_avx512_dec_run(b, n, y, add, widen16);
}

GW_HALF_OPS(fp16, enc_run, dec_run)

static bool probe(void)
{
	return gw_cpu_avx512();
}

const struct gw_codec_ops gw_fp16_avx512 = {
	.size = sizeof(struct gw_codec_ops),
	.name = "fp16",
	.impl = "fp16-avx512",
	.id = GW_CODEC_FP16,
	.lossy = true,
	.priority = 200,
	.cpu_ok = probe,
	.params = NULL,
	.bound = gw_half_bound,
	.encode = fp16_encode,
	.decode = fp16_decode,
	.decode_add = fp16_decode_add,
};
