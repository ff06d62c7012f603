/* SPDX-License-Identifier: MIT */
/*
 * onebit_avx2.c - the onebit codec with AVX2 (see onebit.c for the section
 * layout and the exact definition of the scale).
 *
 * Same bytes, residual bits and info as onebit-generic for every input:
 *  - the bucket's 8 interleaved partial sums are one 8-lane accumulator fed
 *    by loads that start at the bucket's first element (whatever its global
 *    alignment), so lane j holds exactly the generic s[j]; the < 8 leftover
 *    elements of a bucket go through the generic gw_onebit_sums() into the
 *    same array, and the final combine and division are generic code;
 *  - sign bits come from _mm256_movemask_ps of an ordered y >= 0 compare
 *    (-0.0 >= 0 holds, NaN is forced to 1 with the other non-finite lanes),
 *    fused with the residual, and are appended through the driver's bit
 *    writer (onebit.h) because bucket starts need not be byte-aligned; a
 *    bucket's < 8 trailing elements go through gw_onebit_encode_range();
 *  - decode walks the tensor byte by byte; a byte whose 8 elements straddle a
 *    bucket boundary is done element by element.
 */
#include <immintrin.h>
#include <math.h>
#include "bucket.h"
#include "onebit.h"

static inline __m256 load_y(const float *x, const float *res, uint64_t i)
{
	__m256 y = _mm256_loadu_ps(x + i);

	return res ? _mm256_add_ps(y, _mm256_loadu_ps(res + i)) : y;
}

static float bucket_scale(const float *x, const float *res, uint64_t b0, uint64_t e)
{
	const __m256 am = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	const __m256 inf = _mm256_set1_ps(INFINITY);
	__m256 acc = _mm256_setzero_ps();
	__m256i cnt = _mm256_setzero_si256();
	uint32_t count, c8[8];
	float s[8];
	uint64_t i = b0;

	for (; i + 8 <= e; i += 8) {
		__m256 a = _mm256_and_ps(load_y(x, res, i), am);
		__m256 fin = _mm256_cmp_ps(a, inf, _CMP_LT_OQ);

		acc = _mm256_add_ps(acc, _mm256_and_ps(a, fin));
		cnt = _mm256_sub_epi32(cnt, _mm256_castps_si256(fin));
	}
	_mm256_storeu_ps(s, acc);
	_mm256_storeu_si256((__m256i *)c8, cnt);
	count = c8[0] + c8[1] + c8[2] + c8[3] + c8[4] + c8[5] + c8[6] + c8[7];
	gw_onebit_sums(x, res, b0, i, e, s, &count);
	return gw_onebit_scale(s, count, x, res, b0, e);
}

static void encode_bucket(const float *x, const float *res, float *res_out, uint64_t i, uint64_t e,
			  float scale, struct gw_onebit_bw *wp, struct gw_enc_info *info)
{
	/* A copy whose address never escapes stays in registers. */
	struct gw_onebit_bw w = *wp;
	const __m256 am = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	const __m256 sgn = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
	const __m256 inf = _mm256_set1_ps(INFINITY), zero = _mm256_setzero_ps();
	const __m256 sc = _mm256_set1_ps(scale);

	for (; i + 8 <= e; i += 8) {
		__m256 y = load_y(x, res, i);
		__m256 fin = _mm256_cmp_ps(_mm256_and_ps(y, am), inf, _CMP_LT_OQ);
		__m256 ge = _mm256_cmp_ps(y, zero, _CMP_GE_OQ);
		int fm = _mm256_movemask_ps(fin);

		gw_onebit_put(&w, (uint32_t)(_mm256_movemask_ps(ge) | (~fm & 0xff)), 8);
		if (fm != 0xff) {
			float t[8];
			int j = __builtin_ctz(~fm & 0xff);

			_mm256_storeu_ps(t, y);
			gw_note_nonfinite(info, i + j, t[j]);
		}
		if (res_out) {
			/* +scale where y >= 0, else -scale (finite lanes). */
			__m256 d = _mm256_xor_ps(sc, _mm256_andnot_ps(ge, sgn));

			_mm256_storeu_ps(res_out + i, _mm256_and_ps(_mm256_sub_ps(y, d), fin));
		}
	}
	*wp = w;
	if (i < e)
		gw_onebit_encode_range(x, res, res_out, i, e, scale, wp, info);
}

static ssize_t enc(const struct gw_codec *c, void *state, void *scratch, const float *x,
		   const float *res, float *res_out, uint64_t n, void *out, size_t cap,
		   struct gw_enc_info *info)
{
	(void)state, (void)scratch;
	return gw_onebit_encode(c, x, res, res_out, n, out, cap, info, bucket_scale, encode_bucket);
}

static int dec_any(const void *in, size_t len, uint64_t n, float *y, int add)
{
	const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
	const __m256 sgn = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
	const uint8_t *p = in, *bits;
	uint64_t bi = 0, be, i;
	uint32_t b;
	float s;
	int rc = gw_onebit_check(in, len, n, &b);

	if (rc)
		return rc;
	bits = p + gw_bucket_data(b, n);
	be = gw_bucket_end(0, b, n); /* end of bucket bi */
	s = n ? gw_bucket_scale(p, 0) : 0.0f;
	for (i = 0; i < n; i += 8) {
		while (i >= be) {
			bi++;
			be = gw_bucket_end(be, b, n);
			s = gw_bucket_scale(p, bi);
		}
		if (i + 8 <= be) {
			__m256i v = _mm256_and_si256(_mm256_set1_epi32(bits[i >> 3]), sel);
			__m256 on = _mm256_castsi256_ps(_mm256_cmpeq_epi32(v, sel));
			__m256 d = _mm256_xor_ps(_mm256_set1_ps(s), _mm256_andnot_ps(on, sgn));

			if (add)
				d = _mm256_add_ps(_mm256_loadu_ps(y + i), d);
			_mm256_storeu_ps(y + i, d);
			continue;
		}
		/* The byte straddles a bucket boundary or ends the tensor. */
		for (uint64_t j = i; j < i + 8 && j < n; j++) {
			float v;

			while (j >= be) {
				bi++;
				be = gw_bucket_end(be, b, n);
				s = gw_bucket_scale(p, bi);
			}
			v = (bits[j >> 3] >> (j & 7)) & 1 ? s : -s;
			y[j] = add ? y[j] + v : v;
		}
	}
	return 0;
}

static int dec(const void *in, size_t len, uint64_t n, float *y)
{
	return dec_any(in, len, n, y, 0);
}

static int dec_add(const void *in, size_t len, uint64_t n, float *acc)
{
	return dec_any(in, len, n, acc, 1);
}

static bool probe(void)
{
	return gw_cpu_avx2();
}

const struct gw_codec_ops gw_onebit_avx2 = {
	.size = sizeof(struct gw_codec_ops),
	.name = "onebit",
	.impl = "onebit-avx2",
	.id = GW_CODEC_ONEBIT,
	.lossy = true,
	.priority = 150,
	.cpu_ok = probe,
	.params = gw_params_onebit,
	.bound = gw_onebit_bound,
	.encode = enc,
	.decode = dec,
	.decode_add = dec_add,
};
