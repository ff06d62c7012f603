/* SPDX-License-Identifier: MIT */
/*
 * int8_avx2.c - the int8 codec with AVX2, 8 lanes (see int8.c for the
 * section layout, the rounding rules and the error bound).
 *
 * Same bytes, residual bits and info as int8-generic for every input: the
 * bucket maximum uses and-abs + max (order-independent, so any association
 * gives the generic result), the codes use the same two multiplies,
 * _mm256_cvtps_epi32 (round to nearest even under the default MXCSR, like
 * nearbyintf) or floor + convert, and the stochastic hash runs in 32-bit
 * lanes. Bucket tails shorter than a vector go through the generic scalar
 * code (gw_int8_encode_range), as do the per-bucket scale computations.
 */
#include <immintrin.h>
#include <math.h>
#include "int8.h"

static inline __m256 load_y(const float *x, const float *res, uint64_t i)
{
	__m256 y = _mm256_loadu_ps(x + i);

	return res ? _mm256_add_ps(y, _mm256_loadu_ps(res + i)) : y;
}

static inline __m256 finite_mask(__m256 y)
{
	__m256 a = _mm256_and_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));

	return _mm256_cmp_ps(a, _mm256_set1_ps(INFINITY), _CMP_LT_OQ);
}

static float bucket_max(const float *x, const float *res, uint64_t i, uint64_t e)
{
	const __m256 am = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	const __m256 inf = _mm256_set1_ps(INFINITY);
	__m256 m0 = _mm256_setzero_ps(), m1 = m0;
	float t[8], m;

	for (; i + 16 <= e; i += 16) {
		__m256 a = _mm256_and_ps(load_y(x, res, i), am);
		__m256 b = _mm256_and_ps(load_y(x, res, i + 8), am);

		m0 = _mm256_max_ps(m0, _mm256_and_ps(a, _mm256_cmp_ps(a, inf, _CMP_LT_OQ)));
		m1 = _mm256_max_ps(m1, _mm256_and_ps(b, _mm256_cmp_ps(b, inf, _CMP_LT_OQ)));
	}
	for (; i + 8 <= e; i += 8) {
		__m256 a = _mm256_and_ps(load_y(x, res, i), am);

		m0 = _mm256_max_ps(m0, _mm256_and_ps(a, _mm256_cmp_ps(a, inf, _CMP_LT_OQ)));
	}
	_mm256_storeu_ps(t, _mm256_max_ps(m0, m1));
	m = gw_int8_max(x, res, i, e);
	for (int k = 0; k < 8; k++)
		m = t[k] > m ? t[k] : m;
	return m;
}

static inline __m256i hash8(__m256i x)
{
	x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
	x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
	x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
	x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x846ca68bu));
	return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

/* u of elements i .. i + 7 (gw_int8_u in int8.c, lane by lane). */
static inline __m256 stoch_u(uint64_t i, uint64_t s)
{
	__m256i lo = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)i),
				      _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
	__m256i hi, h;

	if ((uint32_t)i <= UINT32_MAX - 7) {
		hi = _mm256_set1_epi32((int)((uint32_t)(s >> 32) ^ (uint32_t)(i >> 32)));
	} else {
		/* The low word wraps inside this vector: rare, per lane. */
		uint32_t t[8];

		for (int k = 0; k < 8; k++)
			t[k] = (uint32_t)(s >> 32) ^ (uint32_t)((i + k) >> 32);
		hi = _mm256_loadu_si256((const __m256i *)t);
	}
	h = hash8(_mm256_xor_si256(lo, _mm256_set1_epi32((int)(uint32_t)s)));
	h = hash8(_mm256_xor_si256(h, hi));
	return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)), _mm256_set1_ps(0x1p-24f));
}

/* Record the first non-finite lane (finmask: movemask of the finite lanes). */
static inline void note_first(uint64_t i, __m256 y, int finmask, struct gw_enc_info *info)
{
	float t[8];
	int k = __builtin_ctz(~finmask & 0xff);

	_mm256_storeu_ps(t, y);
	gw_note_nonfinite(info, i + k, t[k]);
}

static void encode_bucket(const float *x, const float *res, float *res_out, uint64_t i, uint64_t e,
			  const struct gw_int8_bk *k, int stoch, uint64_t s, int8_t *code,
			  struct gw_enc_info *info)
{
	const __m256 pre = _mm256_set1_ps(k->pre), inv = _mm256_set1_ps(k->inv);
	const __m256 sc = _mm256_set1_ps(k->scale);
	const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);

	for (; i + 8 <= e; i += 8) {
		__m256 y = load_y(x, res, i), fin = finite_mask(y);
		__m256 v = _mm256_mul_ps(_mm256_mul_ps(y, pre), inv);
		__m256i q;
		__m128i p;
		int fm = _mm256_movemask_ps(fin);

		if (stoch)
			v = _mm256_floor_ps(_mm256_add_ps(v, stoch_u(i, s)));
		q = _mm256_cvtps_epi32(v);
		q = _mm256_max_epi32(_mm256_min_epi32(q, lim), nlim);
		q = _mm256_and_si256(q, _mm256_castps_si256(fin));
		p = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
		_mm_storel_epi64((__m128i *)(code + i), _mm_packs_epi16(p, p));
		if (fm != 0xff)
			note_first(i, y, fm, info);
		if (res_out) {
			__m256 d = _mm256_mul_ps(_mm256_cvtepi32_ps(q), sc);

			_mm256_storeu_ps(res_out + i, _mm256_and_ps(_mm256_sub_ps(y, d), fin));
		}
	}
	gw_int8_encode_range(x, res, res_out, i, e, k, stoch, s, code, info);
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
	const __m256 vs = _mm256_set1_ps(sc);

	for (; i + 8 <= e; i += 8) {
		__m128i c8 = _mm_loadl_epi64((const __m128i *)(q + i));
		__m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c8)), vs);

		if (add)
			v = _mm256_add_ps(_mm256_loadu_ps(y + i), v);
		_mm256_storeu_ps(y + i, v);
	}
	gw_int8_decode_range(q, y, i, e, sc, add);
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
	return gw_cpu_avx2();
}

const struct gw_codec_ops gw_int8_avx2 = {
	.size = sizeof(struct gw_codec_ops),
	.name = "int8",
	.impl = "int8-avx2",
	.id = GW_CODEC_INT8,
	.lossy = true,
	.priority = 150,
	.cpu_ok = probe,
	.params = gw_params_int8,
	.state_size = gw_int8_state_size,
	.bound = gw_int8_bound,
	.encode = enc,
	.decode = dec,
	.decode_add = dec_add,
};
