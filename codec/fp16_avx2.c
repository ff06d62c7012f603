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
 * Tails go through a zero-padded stack block, so every element takes the
 * same vector path.
 */
#include <immintrin.h>
#include <stdbool.h>
#include "codec_impl.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))
#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* Encode 8 values at x (+ res) into o, residual into res_out; i: index of x[0]. */
static ALWAYS_INLINE void enc8(const float *x, const float *res, float *res_out,
			       uint8_t *o, uint64_t i, __m256i *sat,
			       struct gw_enc_info *info, const bool wr)
{
	const __m256i abs = _mm256_set1_epi32(0x7fffffff);
	__m256 y = _mm256_loadu_ps(x);
	__m256i a, nf, s;
	__m256 ys, max;
	__m128i h;
	int m;

	if (wr)
		y = _mm256_add_ps(y, _mm256_loadu_ps(res));
	a = _mm256_and_si256(_mm256_castps_si256(y), abs);
	nf = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f7fffff));
	s = _mm256_andnot_si256(nf, _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x477fefff)));
	/* +-65504 with y's sign, for the saturating lanes only. */
	max = _mm256_or_ps(_mm256_andnot_ps(_mm256_castsi256_ps(abs), y),
			   _mm256_set1_ps(65504.0f));
	ys = _mm256_blendv_ps(y, max, _mm256_castsi256_ps(s));
	h = _mm256_cvtps_ph(ys, RNE);
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
		__m256 r = _mm256_sub_ps(y, _mm256_cvtph_ps(h));

		_mm256_storeu_ps(res_out, _mm256_andnot_ps(_mm256_castsi256_ps(nf), r));
	}
}

static ALWAYS_INLINE void enc_run(const float *x, const float *res, float *res_out,
				  uint64_t n, uint8_t *o, struct gw_enc_info *info,
				  const bool wr)
{
	__m256i sat = _mm256_setzero_si256();
	uint64_t i = 0;

	for (; i + 8 <= n; i += 8)
		enc8(x + i, wr ? res + i : NULL, wr ? res_out + i : NULL,
		     o + 2 * i, i, &sat, info, wr);
	if (i < n) {
		float xb[8] = { 0 }, rb[8] = { 0 }, rob[8];
		uint8_t ob[16];
		size_t k = (size_t)(n - i);

		memcpy(xb, x + i, k * 4);
		if (wr)
			memcpy(rb, res + i, k * 4);
		enc8(xb, rb, rob, ob, i, &sat, info, wr);
		memcpy(o + 2 * i, ob, k * 2);
		if (wr)
			memcpy(res_out + i, rob, k * 4);
	}
	if (!_mm256_testz_si256(sat, sat))
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

static ALWAYS_INLINE void dec_run(const uint8_t *b, uint64_t n, float *y, const bool add)
{
	uint64_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)
							   (b + 2 * i)));

		if (add)
			v = _mm256_add_ps(_mm256_loadu_ps(y + i), v);
		_mm256_storeu_ps(y + i, v);
	}
	if (i < n) {
		uint8_t hb[16] = { 0 };
		float yb[8];
		size_t k = (size_t)(n - i);

		memcpy(hb, b + 2 * i, k * 2);
		_mm256_storeu_ps(yb, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)
								     (const void *)hb)));
		for (size_t j = 0; j < k; j++)
			y[i + j] = add ? y[i + j] + yb[j] : yb[j];
	}
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
	return gw_cpu_avx2();
}

const struct gw_codec_ops gw_fp16_avx2 = {
	GW_OPS_SIZE,
	.name = "fp16",
	.impl = "fp16-avx2",
	.id = GW_CODEC_FP16,
	.lossy = true,
	.priority = 150,
	.cpu_ok = probe,
	.params = NULL,
	.bound = fp16_bound,
	.encode = fp16_encode,
	.decode = fp16_decode,
	.decode_add = fp16_decode_add,
};
