/* SPDX-License-Identifier: MIT */
/*
 * test_onebit.c - the onebit codec: a hand-computed section, zero encodes
 * positive, scale = mean magnitude in the defined summation order, residual
 * identity, non-finite and overflowing inputs, hostile sections, and every
 * usable SIMD variant against onebit-generic.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "tbucket.h"

#define HDR 8

static const struct gw_codec_ops *generic(void)
{
	return gw_codec_find_impl("onebit-generic");
}

static ssize_t enc(const struct gw_codec_ops *ops, uint32_t bucket, const float *x,
		   const float *res, float *res_out, uint64_t n, uint8_t *out, size_t cap,
		   struct gw_enc_info *info)
{
	struct gw_codec c;

	gw_codec_init(&c, ops);
	c.p.bucket = bucket;
	memset(info, 0, sizeof(*info));
	return ops->encode(&c, NULL, NULL, x, res, res_out, n, out, cap, info);
}

static float scale_at(const uint8_t *s, uint64_t j)
{
	return gw_u2f(gw_get32(s + HDR + 4 * j));
}

static void test_hand(void)
{
	const float x[9] = { 1, -2, 0, -0.0f, 3, -4, 5, 6, 7 };
	const float want[9] = { 0.75f, -0.75f, 0.75f, 0.75f, 4.5f, -4.5f, 4.5f, 4.5f, 7 };
	float y[9], r[9] = { 0 }, acc[9];
	uint8_t out[64];
	struct gw_enc_info info;
	struct gw_codec c;
	ssize_t len = enc(generic(), 4, x, r, r, 9, out, sizeof(out), &info);

	gw_codec_init(&c, generic());
	c.p.bucket = 4;
	CU_ASSERT_EQUAL(generic()->bound(&c, 9), 8 + 12 + 2);
	CU_ASSERT_EQUAL_FATAL(len, 8 + 12 + 2);
	CU_ASSERT_EQUAL(gw_get32(out), 4);
	CU_ASSERT_EQUAL(gw_get32(out + 4), 0);
	CU_ASSERT_EQUAL(scale_at(out, 0), 0.75f); /* (1 + 2 + 0 + 0) / 4 */
	CU_ASSERT_EQUAL(scale_at(out, 1), 4.5f);  /* 18 / 4 */
	CU_ASSERT_EQUAL(scale_at(out, 2), 7.0f);
	/* Bits 1,0,1,1 1,0,1,1 | 1: zero and -0.0 are positive. */
	CU_ASSERT_EQUAL(out[20], 0xDD);
	CU_ASSERT_EQUAL(out[21], 0x01);
	CU_ASSERT_EQUAL(generic()->decode(out, (size_t)len, 9, y), 0);
	for (int i = 0; i < 9; i++) {
		CU_ASSERT_EQUAL(y[i], want[i]);
		CU_ASSERT_EQUAL(r[i], x[i] - want[i]);
		acc[i] = 1;
	}
	CU_ASSERT_EQUAL(generic()->decode_add(out, (size_t)len, 9, acc), 0);
	for (int i = 0; i < 9; i++)
		CU_ASSERT_EQUAL(acc[i], 1 + want[i]);
	CU_ASSERT_EQUAL(info.flags, 0);
}

/* The scale is the mean |y| of the bucket, summed in the documented order. */
static void test_scale(void)
{
	enum { N = 1000 };
	float *x = tu_alloc(N * 4), *r = tu_alloc(N * 4), *y = tu_alloc(N * 4);
	uint8_t *out = tu_alloc(HDR + 4 * N + N);
	struct gw_enc_info info;

	tu_fill(x, N, 21);
	for (uint32_t bucket = 1; bucket <= N; bucket = bucket * 2 + 5) {
		ssize_t len = enc(generic(), bucket, x, NULL, NULL, N, out, HDR + 4 * N + N, &info);

		CU_ASSERT_FATAL(len > 0);
		for (uint64_t b0 = 0, j = 0; b0 < N; b0 += bucket, j++) {
			uint64_t e = b0 + bucket < N ? b0 + bucket : N;
			float s[8] = { 0 }, want;
			double d = 0;

			for (uint64_t i = b0; i < e; i++) {
				s[(i - b0) % 8] += fabsf(x[i]);
				d += fabs((double)x[i]);
			}
			want = (((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]))) /
			       (float)(e - b0);
			CU_ASSERT_EQUAL(scale_at(out, j), want);
			CU_ASSERT(fabs(scale_at(out, j) - d / (double)(e - b0)) <=
				  1e-5 * d / (double)(e - b0));
		}
	}
	/* Residual identity and |y - decoded| = ||y| - scale| with a residual in. */
	tu_fill(r, N, 3);
	{
		float *r0 = tu_alloc(N * 4);
		ssize_t len;

		memcpy(r0, r, N * 4);
		len = enc(generic(), 64, x, r, r, N, out, HDR + 4 * N + N, &info);
		CU_ASSERT_FATAL(len > 0);
		CU_ASSERT_EQUAL(generic()->decode(out, (size_t)len, N, y), 0);
		for (int i = 0; i < N; i++) {
			float yi = x[i] + r0[i], sc = scale_at(out, i / 64);

			CU_ASSERT_EQUAL(gw_f2u(r[i]), gw_f2u(yi - y[i]));
			CU_ASSERT_EQUAL(fabsf(y[i]), sc);
			CU_ASSERT((y[i] >= 0) == (yi >= 0));
		}
		free(r0);
	}
	free(x), free(r), free(y), free(out);
}

static void test_nonfinite(void)
{
	float x[5] = { 2, NAN, -INFINITY, -4, INFINITY }, r[5] = { 0 }, y[5];
	uint8_t out[128];
	struct gw_enc_info info;
	struct gw_codec c;
	ssize_t len = enc(generic(), 5, x, r, r, 5, out, sizeof(out), &info);

	CU_ASSERT_EQUAL_FATAL(len, 8 + 4 + 1);
	CU_ASSERT_EQUAL(info.flags, GW_PF_NONFINITE);
	CU_ASSERT_EQUAL(info.nonfinite_index, 1);
	CU_ASSERT_EQUAL(scale_at(out, 0), 3.0f); /* (2 + 4) / 2 */
	CU_ASSERT_EQUAL(out[12], 0x17);		 /* 1,1,1,0,1 */
	CU_ASSERT_EQUAL(r[0], -1.0f);
	CU_ASSERT_EQUAL(gw_f2u(r[1]), 0);
	CU_ASSERT_EQUAL(gw_f2u(r[2]), 0);
	CU_ASSERT_EQUAL(r[3], -1.0f);
	CU_ASSERT_EQUAL(gw_f2u(r[4]), 0);

	gw_codec_init(&c, gw_codec_find("onebit"));
	len = gw_payload_encode(&c, NULL, NULL, x, NULL, NULL, 5, out, sizeof(out));
	CU_ASSERT_FATAL(len > 0);
	CU_ASSERT_EQUAL(gw_payload_decode(out, (size_t)len, y, 5), 0);
	CU_ASSERT(isnan(y[1]));
	CU_ASSERT_EQUAL(y[0], 3.0f);
	CU_ASSERT_EQUAL(y[3], -3.0f);

	/* All non-finite: scale 0. */
	x[0] = NAN, x[3] = INFINITY;
	len = enc(generic(), 8, x, NULL, NULL, 5, out, sizeof(out), &info);
	CU_ASSERT_EQUAL(scale_at(out, 0), 0.0f);
	CU_ASSERT_EQUAL(out[12], 0x1f);
}

/* Sums that overflow float still give a finite scale near the mean. */
static void test_overflow(void)
{
	float x[4] = { FLT_MAX, -FLT_MAX, 3e38f, FLT_MAX }, r[4] = { 0 }, y[4];
	uint8_t out[64];
	struct gw_enc_info info;
	ssize_t len = enc(generic(), 4, x, r, r, 4, out, sizeof(out), &info);
	double mean = (3.0 * FLT_MAX + 3e38) / 4;

	CU_ASSERT_EQUAL_FATAL(len, 8 + 4 + 1);
	CU_ASSERT(isfinite(scale_at(out, 0)));
	CU_ASSERT(fabs(scale_at(out, 0) - mean) <= 1e-6 * mean);
	CU_ASSERT_EQUAL(generic()->decode(out, (size_t)len, 4, y), 0);
	for (int i = 0; i < 4; i++)
		CU_ASSERT(isfinite(y[i]) && isfinite(r[i]));
	CU_ASSERT_EQUAL(info.flags, 0);
}

static void test_rejects(void)
{
	enum { N = 37 };
	float x[N], y[N];
	uint8_t good[HDR + 4 * 5 + 5 + 8], b[sizeof(good)];
	struct gw_enc_info info;
	struct gw_codec c;
	size_t len;

	tu_fill(x, N, 4);
	len = (size_t)enc(generic(), 8, x, NULL, NULL, N, good, sizeof(good), &info);
	CU_ASSERT_EQUAL_FATAL(len, HDR + 4 * 5 + 5);
	CU_ASSERT_EQUAL(good[len - 1] >> 5, 0); /* padding written as 0 */
	CU_ASSERT_EQUAL(generic()->decode(good, len, N, y), 0);

#define MUT(stmt, l, n)                                                                            \
	do {                                                                                       \
		memcpy(b, good, sizeof(b));                                                        \
		stmt;                                                                              \
		tb_reject(GW_CODEC_ONEBIT, b, l, n);                                               \
	} while (0)
	for (size_t l = 0; l < len; l++)
		MUT((void)0, l, N);
	MUT((void)0, len + 1, N);
	MUT((void)0, len, N + 8);
	MUT((void)0, len, N - 8);
	MUT((void)0, len, GW_MAX_ELEMS + 1);
	MUT(gw_put32(b, 0), len, N);
	MUT(gw_put32(b, GW_BUCKET_MAX + 1), len, N);
	MUT(gw_put32(b, 7), len, N); /* 6 buckets */
	MUT(b[5] = 1, len, N);
	MUT(gw_put32(b + 8, gw_f2u(-0.5f)), len, N);
	MUT(gw_put32(b + 12, 0x80000000u), len, N);
	MUT(gw_put32(b + 16, gw_f2u(NAN)), len, N);
	MUT(gw_put32(b + 24, gw_f2u(INFINITY)), len, N);
	MUT(b[len - 1] |= 0x20, len, N); /* padding bits */
	MUT(b[len - 1] |= 0x80, len, N);
	tb_reject(GW_CODEC_ONEBIT, NULL, 0, N);
#undef MUT
	/* The same bytes read as 35 elements: bits 3 and 4 of the last byte
	 * become padding and must be 0. */
	memcpy(b, good, sizeof(b));
	b[len - 1] = 0x04;
	CU_ASSERT_EQUAL(generic()->decode(b, len, N - 2, y), 0);
	b[len - 1] = 0x0c;
	tb_reject(GW_CODEC_ONEBIT, b, len, N - 2);

	gw_codec_init(&c, generic());
	c.p.bucket = 8;
	CU_ASSERT_EQUAL(
		enc(generic(), 8, x, NULL, NULL, N, good, generic()->bound(&c, N) - 1, &info),
		-ENOSPC);
	CU_ASSERT_EQUAL(enc(generic(), 0, x, NULL, NULL, N, good, sizeof(good), &info), -EINVAL);
	CU_ASSERT_EQUAL(enc(generic(), 8, x, x, NULL, N, good, sizeof(good), &info), -EINVAL);
	len = (size_t)enc(generic(), 8, x, NULL, NULL, 0, good, sizeof(good), &info);
	CU_ASSERT_EQUAL(len, 8);
	CU_ASSERT_EQUAL(generic()->decode(good, 8, 0, y), 0);
	tb_reject(GW_CODEC_ONEBIT, good, 9, 0);
}

static void test_variants(void)
{
	static const uint64_t sizes[] = { 0,  1,  2,  7,   8,	9,   15,  16,	17,   31,  33,
					  63, 64, 65, 127, 200, 511, 513, 1000, 1027, 4099 };
	static const uint32_t buckets[] = { 1, 3, 5, 8, 13, 16, 17, 512, 1000 };
	const uint64_t nmax = 4099;
	size_t cap = HDR + 4 * nmax + nmax;
	float *x = tu_alloc(nmax * 4), *r0 = tu_alloc(nmax * 4);
	float *ra = tu_alloc(nmax * 4), *rb = tu_alloc(nmax * 4);
	float *ya = tu_alloc(nmax * 4), *yb = tu_alloc(nmax * 4);
	uint8_t *a = tu_alloc(cap), *b = tu_alloc(cap);
	int tested = 0;

	for (size_t k = 0; k < gw_codec_count(); k++) {
		const struct gw_codec_ops *o = gw_codec_at(k);

		if (o->id != GW_CODEC_ONEBIT || o == generic() || (o->cpu_ok && !o->cpu_ok()))
			continue;
		tested++;
		for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
			for (size_t bi = 0; bi < sizeof(buckets) / sizeof(buckets[0]); bi++)
				for (int v = 0; v < 6; v++) {
					uint64_t n = sizes[si];
					int with_res = v & 1;
					struct tb_enc ea = { a, 0, { 0 }, ra, ya };
					struct tb_enc eb = { b, 0, { 0 }, rb, yb };

					tu_fill_hard(x, n, n * 17 + buckets[bi] + (uint64_t)v,
						     v & 2);
					if (v & 4) /* sums that overflow */
						for (uint64_t i = 0; i < n; i += 2)
							x[i] = i % 4 ? FLT_MAX : -3e38f;
					tu_fill(r0, n, n + 9);
					memcpy(ra, r0, n * 4);
					memcpy(rb, r0, n * 4);
					memset(a, 0xAA, cap);
					memset(b, 0x55, cap);
					ea.len =
						enc(generic(), buckets[bi], x, with_res ? ra : NULL,
						    with_res ? ra : NULL, n, a, cap, &ea.info);
					eb.len = enc(o, buckets[bi], x, with_res ? rb : NULL,
						     with_res ? rb : NULL, n, b, cap, &eb.info);
					tb_same(generic(), o, &ea, &eb, r0, n, buckets[bi], v);
				}
	}
	if (!tested)
		printf("(no SIMD variant usable here) ");
	free(x), free(r0), free(ra), free(rb), free(ya), free(yb), free(a), free(b);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "hand-computed section, zero is positive", test_hand },
		{ "scale is the mean magnitude; residual identity", test_scale },
		{ "non-finite values", test_nonfinite },
		{ "overflowing sums", test_overflow },
		{ "malformed sections rejected, output untouched", test_rejects },
		{ "SIMD variants identical to generic", test_variants },
		CU_TEST_INFO_NULL,
	};
	return tu_run("onebit", tests);
}
