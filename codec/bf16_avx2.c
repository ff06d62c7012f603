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
 * Tails go through a zero-padded stack block.
 */
#include <immintrin.h>
#include <stdbool.h>
#include "codec_impl.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Encode 8 values at x (+ res) into o, residual into res_out; i: index of x[0]. */
static ALWAYS_INLINE void enc8(const float *x, const float *res, float *res_out,
			       uint8_t *o, uint64_t i, __m256i *sat,
			       struct gw_enc_info *info, const bool wr)
{
	__m256 y = _mm256_loadu_ps(x);
	__m256i u, a, nf, nan, s, hi, h;
	int m;

	if (wr)
		y = _mm256_add_ps(y, _mm256_loadu_ps(res));
	u = _mm256_castps_si256(y);
	a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
	nf = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f7fffff));
	nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
	s = _mm256_andnot_si256(nf, _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f7f7fff)));
	hi = _mm256_srli_epi32(u, 16);
	h = _mm256_add_epi32(u, _mm256_set1_epi32(0x7fff));
	h = _mm256_srli_epi32(_mm256_add_epi32(h, _mm256_and_si256(hi, _mm256_set1_epi32(1))),
			      16);
	h = _mm256_blendv_epi8(h, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
	h = _mm256_blendv_epi8(h, _mm256_or_si256(_mm256_and_si256(hi, _mm256_set1_epi32(0x8000)),
						  _mm256_set1_epi32(0x7f7f)), s);
	_mm_storeu_si128((__m128i *)(void *)o,
			 _mm_packus_epi32(_mm256_castsi256_si128(h),
					  _mm256_extracti128_si256(h, 1)));
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
		__m256 r = _mm256_sub_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));

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

static size_t bf16_bound(const struct gw_codec *c, uint64_t n)
{
	(void)c;
	return (size_t)n * 2;
}

static ssize_t bf16_encode(const struct gw_codec *c, void *state, void *scratch,
			   const float *x, const float *res, float *res_out,
			   uint64_t n, void *out, size_t cap,
			   struct gw_enc_info *info)
{
	(void)state, (void)scratch;
	if (!gw_enc_args_ok(x, res, res_out, n))
		return -EINVAL;
	if (cap < bf16_bound(c, n))
		return -ENOSPC;
	if (res)
		enc_run(x, res, res_out, n, out, info, true);
	else
		enc_run(x, NULL, NULL, n, out, info, false);
	return (ssize_t)(n * 2);
}

static ALWAYS_INLINE __m256 widen8(const uint8_t *b)
{
	__m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)b));

	return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

static ALWAYS_INLINE void dec_run(const uint8_t *b, uint64_t n, float *y, const bool add)
{
	uint64_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 v = widen8(b + 2 * i);

		if (add)
			v = _mm256_add_ps(_mm256_loadu_ps(y + i), v);
		_mm256_storeu_ps(y + i, v);
	}
	if (i < n) {
		uint8_t hb[16] = { 0 };
		float yb[8];
		size_t k = (size_t)(n - i);

		memcpy(hb, b + 2 * i, k * 2);
		_mm256_storeu_ps(yb, widen8(hb));
		for (size_t j = 0; j < k; j++)
			y[i + j] = add ? y[i + j] + yb[j] : yb[j];
	}
}

static int bf16_decode(const void *in, size_t len, uint64_t n, float *y)
{
	if (n > GW_MAX_ELEMS || len != n * 2)
		return -EBADMSG;
	dec_run(in, n, y, false);
	return 0;
}

static int bf16_decode_add(const void *in, size_t len, uint64_t n, float *acc)
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

const struct gw_codec_ops gw_bf16_avx2 = {
	GW_OPS_SIZE,
	.name = "bf16",
	.impl = "bf16-avx2",
	.id = GW_CODEC_BF16,
	.lossy = true,
	.priority = 150,
	.cpu_ok = probe,
	.params = NULL,
	.bound = bf16_bound,
	.encode = bf16_encode,
	.decode = bf16_decode,
	.decode_add = bf16_decode_add,
};
