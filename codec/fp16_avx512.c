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
 * Tails use masked loads and stores (masked-off lanes never fault).
 */
#include <immintrin.h>
#include <stdbool.h>
#include "codec_impl.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))
#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* Encode the lanes of k at x (+ res) into o and res_out; i: index of x[0]. */
static ALWAYS_INLINE void enc16(const float *x, const float *res, float *res_out,
				uint8_t *o, uint64_t i, __mmask16 k, __mmask16 *sat,
				struct gw_enc_info *info, const bool wr)
{
	const __m512i abs = _mm512_set1_epi32(0x7fffffff);
	__m512 y = _mm512_maskz_loadu_ps(k, x);
	__m512i a;
	__mmask16 nf, s;
	__m512 max;
	__m256i h;

	if (wr)
		y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(k, res));
	a = _mm512_and_si512(_mm512_castps_si512(y), abs);
	nf = _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7f7fffff));
	s = _mm512_mask_cmpgt_epi32_mask((__mmask16)~nf, a, _mm512_set1_epi32(0x477fefff));
	/* +-65504 with y's sign, for the saturating lanes only. */
	max = _mm512_castsi512_ps(_mm512_or_si512(_mm512_andnot_si512(abs,
			_mm512_castps_si512(y)), _mm512_set1_epi32(0x477fe000)));
	h = _mm512_cvtps_ph(_mm512_mask_blend_ps(s, y, max), RNE);
	_mm256_mask_storeu_epi16(o, k, h);
	*sat |= s;
	if (__builtin_expect(nf != 0, 0) && !(info->flags & GW_PF_NONFINITE)) {
		float yb[16];
		int j = __builtin_ctz((unsigned)nf);

		_mm512_storeu_ps(yb, y);
		gw_note_nonfinite(info, i + (uint64_t)j, yb[j]);
	}
	if (wr)
		_mm512_mask_storeu_ps(res_out, k,
				      _mm512_maskz_sub_ps((__mmask16)~nf, y,
							  _mm512_cvtph_ps(h)));
}

static ALWAYS_INLINE void enc_run(const float *x, const float *res, float *res_out,
				  uint64_t n, uint8_t *o, struct gw_enc_info *info,
				  const bool wr)
{
	__mmask16 sat = 0;
	uint64_t i = 0;

	for (; i + 16 <= n; i += 16)
		enc16(x + i, wr ? res + i : NULL, wr ? res_out + i : NULL,
		      o + 2 * i, i, 0xffff, &sat, info, wr);
	if (i < n)
		enc16(x + i, wr ? res + i : NULL, wr ? res_out + i : NULL,
		      o + 2 * i, i, (__mmask16)((1u << (n - i)) - 1), &sat, info, wr);
	if (sat)
		info->flags |= GW_PF_SATURATED;
}

static size_t fp16_bound(const struct gw_codec *c, uint64_t n)
{
	(void)c;
	return (size_t)n * 2;
}

static ssize_t fp16_encode(const struct gw_codec *c, void *state, void *scratch,
			   const float *x, const float *res, float *res_out,
			   uint64_t n, void *out, size_t cap,
			   struct gw_enc_info *info)
{
	(void)state, (void)scratch;
	if (!gw_enc_args_ok(x, res, res_out, n))
		return -EINVAL;
	if (cap < fp16_bound(c, n))
		return -ENOSPC;
	if (res)
		enc_run(x, res, res_out, n, out, info, true);
	else
		enc_run(x, NULL, NULL, n, out, info, false);
	return (ssize_t)(n * 2);
}

static ALWAYS_INLINE void dec16(const uint8_t *b, float *y, __mmask16 k, const bool add)
{
	__m512 v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, b));

	if (add)
		v = _mm512_add_ps(_mm512_maskz_loadu_ps(k, y), v);
	_mm512_mask_storeu_ps(y, k, v);
}

static ALWAYS_INLINE void dec_run(const uint8_t *b, uint64_t n, float *y, const bool add)
{
	uint64_t i = 0;

	for (; i + 16 <= n; i += 16)
		dec16(b + 2 * i, y + i, 0xffff, add);
	if (i < n)
		dec16(b + 2 * i, y + i, (__mmask16)((1u << (n - i)) - 1), add);
}

static int fp16_decode(const void *in, size_t len, uint64_t n, float *y)
{
	if (n > GW_MAX_ELEMS || len != n * 2)
		return -EBADMSG;
	dec_run(in, n, y, false);
	return 0;
}

static int fp16_decode_add(const void *in, size_t len, uint64_t n, float *acc)
{
	if (n > GW_MAX_ELEMS || len != n * 2)
		return -EBADMSG;
	dec_run(in, n, acc, true);
	return 0;
}

static bool probe(void)
{
	return gw_cpu_avx512();
}

const struct gw_codec_ops gw_fp16_avx512 = {
	GW_OPS_SIZE,
	.name = "fp16",
	.impl = "fp16-avx512",
	.id = GW_CODEC_FP16,
	.lossy = true,
	.priority = 200,
	.cpu_ok = probe,
	.params = NULL,
	.bound = fp16_bound,
	.encode = fp16_encode,
	.decode = fp16_decode,
	.decode_add = fp16_decode_add,
};
