/* SPDX-License-Identifier: MIT */
/*
 * int8_avx512.c - the int8 codec with AVX-512, 16 lanes (see int8.c for the
 * section layout, the rounding rules and the error bound).
 *
 * Same bytes, residual bits and info as int8-generic for every input. Bucket
 * tails use masked loads and stores (masked-off lanes read as 0, which cannot
 * raise a bucket maximum, and are never written), so no scalar tail loop is
 * needed; the per-bucket scale computation is the generic code. Codes are
 * clamped to [-127, 127] before the truncating narrow (vpmovdb).
 */
#include <immintrin.h>
#include <math.h>
#include "int8.h"

static inline __mmask16 lanes(uint64_t i, uint64_t e)
{
	return e - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (e - i)) - 1);
}

static inline __m512 load_y(const float *x, const float *res, uint64_t i, __mmask16 m)
{
	__m512 y = _mm512_maskz_loadu_ps(m, x + i);

	return res ? _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, res + i)) : y;
}

static inline __mmask16 fin_mask(__m512 y, __mmask16 m)
{
	__m512 a = _mm512_abs_ps(y);

	return _mm512_mask_cmp_ps_mask(m, a, _mm512_set1_ps(INFINITY), _CMP_LT_OQ);
}

static float bucket_max(const float *x, const float *res, uint64_t i, uint64_t e)
{
	const __m512 inf = _mm512_set1_ps(INFINITY);
	__m512 m0 = _mm512_setzero_ps(), m1 = m0;

	for (; i + 32 <= e; i += 32) {
		__m512 a = _mm512_abs_ps(load_y(x, res, i, 0xffff));
		__m512 b = _mm512_abs_ps(load_y(x, res, i + 16, 0xffff));

		m0 = _mm512_mask_max_ps(m0, _mm512_cmp_ps_mask(a, inf, _CMP_LT_OQ), m0, a);
		m1 = _mm512_mask_max_ps(m1, _mm512_cmp_ps_mask(b, inf, _CMP_LT_OQ), m1, b);
	}
	for (; i < e; i += 16) {
		__m512 a = _mm512_abs_ps(load_y(x, res, i, lanes(i, e)));

		m0 = _mm512_mask_max_ps(m0, _mm512_cmp_ps_mask(a, inf, _CMP_LT_OQ), m0, a);
	}
	return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

static inline __m512i hash16(__m512i x)
{
	x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
	x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
	x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
	x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)0x846ca68bu));
	return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

/* u of elements i .. i + 15 (gw_int8_u in int8.c, lane by lane). */
static inline __m512 stoch_u(uint64_t i, uint64_t s)
{
	__m512i base = _mm512_set1_epi32((int)(uint32_t)i);
	__m512i lo = _mm512_add_epi32(
		base, _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
	__m512i hi = _mm512_set1_epi32((int)(uint32_t)(i >> 32));
	__m512i h;

	/* Lanes whose low word wrapped carry into the high word. */
	hi = _mm512_mask_add_epi32(hi, _mm512_cmplt_epu32_mask(lo, base), hi, _mm512_set1_epi32(1));
	hi = _mm512_xor_si512(hi, _mm512_set1_epi32((int)(uint32_t)(s >> 32)));
	h = hash16(_mm512_xor_si512(lo, _mm512_set1_epi32((int)(uint32_t)s)));
	h = hash16(_mm512_xor_si512(h, hi));
	return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(h, 8)), _mm512_set1_ps(0x1p-24f));
}

static void encode_bucket(const float *x, const float *res, float *res_out, uint64_t i, uint64_t e,
			  const struct gw_int8_bk *k, int stoch, uint64_t s, int8_t *code,
			  struct gw_enc_info *info)
{
	const __m512 pre = _mm512_set1_ps(k->pre), inv = _mm512_set1_ps(k->inv);
	const __m512 sc = _mm512_set1_ps(k->scale);
	const __m512i lim = _mm512_set1_epi32(127), nlim = _mm512_set1_epi32(-127);

	for (; i < e; i += 16) {
		__mmask16 m = lanes(i, e);
		__m512 y = load_y(x, res, i, m);
		__mmask16 fin = fin_mask(y, m);
		__m512 v = _mm512_mul_ps(_mm512_mul_ps(y, pre), inv);
		__m512i q;

		if (stoch)
			v = _mm512_roundscale_ps(_mm512_add_ps(v, stoch_u(i, s)),
						 _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
		q = _mm512_cvtps_epi32(v);
		q = _mm512_maskz_max_epi32(fin, _mm512_min_epi32(q, lim), nlim);
		_mm_mask_storeu_epi8(code + i, m, _mm512_cvtepi32_epi8(q));
		if (fin != m) {
			float t[16];
			int j = __builtin_ctz((unsigned)(m & ~fin));

			_mm512_storeu_ps(t, y);
			gw_note_nonfinite(info, i + j, t[j]);
		}
		if (res_out) {
			__m512 d = _mm512_mul_ps(_mm512_cvtepi32_ps(q), sc);

			_mm512_mask_storeu_ps(res_out + i, m, _mm512_maskz_sub_ps(fin, y, d));
		}
	}
}

static ssize_t enc(const struct gw_codec *c, void *state, void *scratch, const float *x,
		   const float *res, float *res_out, uint64_t n, void *out, size_t cap,
		   struct gw_enc_info *info)
{
	(void)scratch;
	return gw_int8_encode(c, state, x, res, res_out, n, out, cap, info, bucket_max,
			      encode_bucket);
}

static void decode_bucket(const int8_t *q, float *y, uint64_t i, uint64_t e, float sc, int add)
{
	const __m512 vs = _mm512_set1_ps(sc);

	/* Whole vectors unmasked (faster on Zen 4), then one masked tail. */
	for (; i + 16 <= e; i += 16) {
		__m128i c8 = _mm_loadu_si128((const __m128i *)(q + i));
		__m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c8)), vs);

		if (add)
			v = _mm512_add_ps(_mm512_loadu_ps(y + i), v);
		_mm512_storeu_ps(y + i, v);
	}
	if (i < e) {
		__mmask16 m = lanes(i, e);
		__m128i c8 = _mm_maskz_loadu_epi8(m, q + i);
		__m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c8)), vs);

		if (add)
			v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), v);
		_mm512_mask_storeu_ps(y + i, m, v);
	}
}

static int dec(const void *in, size_t len, uint64_t n, float *y)
{
	return gw_int8_decode(in, len, n, y, 0, decode_bucket);
}

static int dec_add(const void *in, size_t len, uint64_t n, float *acc)
{
	return gw_int8_decode(in, len, n, acc, 1, decode_bucket);
}

static bool probe(void)
{
	return gw_cpu_avx512();
}

const struct gw_codec_ops gw_int8_avx512 = {
	.size = sizeof(struct gw_codec_ops),
	.name = "int8",
	.impl = "int8-avx512",
	.id = GW_CODEC_INT8,
	.lossy = true,
	.priority = 200,
	.cpu_ok = probe,
	.params = gw_params_int8,
	.state_size = gw_int8_state_size,
	.bound = gw_int8_bound,
	.encode = enc,
	.decode = dec,
	.decode_add = dec_add,
};
