/* SPDX-License-Identifier: MIT */
/*
 * bf16_avx512.c - the bf16 codec with AVX-512 integer ops, 16 values per step.
 *
 * Same section as bf16.c (n x u16, the upper halves of float32, exactly 2n
 * bytes) and the same bytes, residuals and info for every input; bf16.c is
 * the reference and documents the rules.
 *
 * The rounding is the reference's bit trick (u + 0x7fff + ((u >> 16) & 1)) >> 16
 * in 32-bit lanes, NaN and saturating lanes patched under masks, narrowed with
 * vpmovdw. vcvtneps2bf16 (AVX512_BF16) is NOT used: it flushes subnormals.
 * The residual y - (h << 16) is fused into the pass. The loops, shared with
 * fp16_avx512.c, are in half_avx512.h.
 */
#include "half_avx512.h"

#define F32_SAT 0x7f7f8000u /* from here RNE would give Inf */

/* The reference's rounding in 32-bit lanes, NaN and saturating lanes patched. */
GW_HALF_INLINE __m256i narrow16(__m512 y, __m512i a, __mmask16 nf, __mmask16 s, __m512 *dec)
{
	__m512i u = _mm512_castps_si512(y), hi, h;
	__mmask16 nan = _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7f800000));

	(void)nf;
	hi = _mm512_srli_epi32(u, 16);
	h = _mm512_add_epi32(u, _mm512_set1_epi32(0x7fff));
	h = _mm512_srli_epi32(_mm512_add_epi32(h, _mm512_and_si512(hi, _mm512_set1_epi32(1))), 16);
	h = _mm512_mask_or_epi32(h, nan, hi, _mm512_set1_epi32(0x40));
	h = _mm512_mask_or_epi32(h, s, _mm512_and_si512(hi, _mm512_set1_epi32(0x8000)),
				 _mm512_set1_epi32(0x7f7f));
	*dec = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
	return _mm512_cvtepi32_epi16(h);
}

GW_HALF_INLINE __m512 widen16(__m256i h)
{
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
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

GW_HALF_OPS(bf16, enc_run, dec_run)

static bool probe(void)
{
	return gw_cpu_avx512();
}

const struct gw_codec_ops gw_bf16_avx512 = {
	.size = sizeof(struct gw_codec_ops),
	.name = "bf16",
	.impl = "bf16-avx512",
	.id = GW_CODEC_BF16,
	.lossy = true,
	.priority = 200,
	.cpu_ok = probe,
	.params = NULL,
	.bound = gw_half_bound,
	.encode = bf16_encode,
	.decode = bf16_decode,
	.decode_add = bf16_decode_add,
};
