/* SPDX-License-Identifier: MIT */
/*
 * test_int8.c - the int8 codec: hand-computed sections, per-bucket scales,
 * ties to even, stochastic rounding (unbiased, reproducible), the error bound
 * and residual identity, non-finite and extreme inputs, hostile sections, and
 * every usable SIMD variant against int8-generic.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include "tbucket.h"

#define HDR 8

static const struct gw_codec_ops *generic(void)
{
	return gw_codec_find_impl("int8-generic");
}

static struct gw_codec mk(const struct gw_codec_ops *ops, uint32_t bucket, uint32_t rounding,
			  uint64_t seed)
{
	struct gw_codec c;

	gw_codec_init(&c, ops);
	c.p.bucket = bucket;
	c.p.rounding = rounding;
	c.p.seed = seed;
	return c;
}

/* Encode with ops; *ctr is the stream state. */
static ssize_t enc(const struct gw_codec_ops *ops, uint32_t bucket, uint32_t rounding,
		   uint64_t seed, uint64_t *ctr, const float *x, const float *res, float *res_out,
		   uint64_t n, uint8_t *out, size_t cap, struct gw_enc_info *info)
{
	struct gw_codec c = mk(ops, bucket, rounding, seed);

	memset(info, 0, sizeof(*info));
	return ops->encode(&c, ctr, NULL, x, res, res_out, n, out, cap, info);
}

static float scale_at(const uint8_t *s, uint64_t j)
{
	return gw_u2f(gw_get32(s + HDR + 4 * j));
}

static void test_hand(void)
{
	const float x[4] = { 1, 2, 3, 4 };
	float y[4], r[4], acc[4] = { 10, 10, 10, 10 };
	uint8_t out[64];
	struct gw_enc_info info;
	uint64_t ctr = 0;
	struct gw_codec c = mk(generic(), 4, GW_ROUND_NEAREST, 0);
	ssize_t len = enc(generic(), 4, GW_ROUND_NEAREST, 0, &ctr, x, NULL, NULL, 4, out,
			  sizeof(out), &info);
	float sc = 4.0f / 127.0f;

	CU_ASSERT_EQUAL(gw_int8_generic.bound(&c, 4), 8 + 4 + 4);
	CU_ASSERT_EQUAL_FATAL(len, 8 + 4 + 4);
	CU_ASSERT_EQUAL(gw_get32(out), 4);
	CU_ASSERT_EQUAL(gw_get32(out + 4), 0);
	CU_ASSERT_EQUAL(gw_get32(out + 8), gw_f2u(sc));
	/* 127/4 = 31.75: 31.75 -> 32, 63.5 -> 64 (tie, even), 95.25 -> 95, 127. */
	CU_ASSERT_EQUAL((int8_t)out[12], 32);
	CU_ASSERT_EQUAL((int8_t)out[13], 64);
	CU_ASSERT_EQUAL((int8_t)out[14], 95);
	CU_ASSERT_EQUAL((int8_t)out[15], 127);
	CU_ASSERT_EQUAL(info.flags, 0);
	CU_ASSERT_EQUAL(ctr, 0); /* nearest does not touch the counter */
	CU_ASSERT_EQUAL(generic()->decode(out, (size_t)len, 4, y), 0);
	CU_ASSERT_EQUAL(y[0], 32 * sc);
	CU_ASSERT_EQUAL(y[1], 64 * sc);
	CU_ASSERT_EQUAL(y[2], 95 * sc);
	CU_ASSERT_EQUAL(y[3], 4.0f); /* the largest element is exact (seed: 1 step low) */
	CU_ASSERT_EQUAL(generic()->decode_add(out, (size_t)len, 4, acc), 0);
	for (int i = 0; i < 4; i++)
		CU_ASSERT_EQUAL(acc[i], 10 + y[i]);

	/* With a residual: y = x + r is encoded, r_out = y - decoded. */
	for (int i = 0; i < 4; i++)
		r[i] = 0.5f;
	len = enc(generic(), 4, GW_ROUND_NEAREST, 0, &ctr, x, r, r, 4, out, sizeof(out), &info);
	CU_ASSERT_EQUAL_FATAL(len, 16);
	CU_ASSERT_EQUAL(gw_get32(out + 8), gw_f2u(4.5f / 127.0f));
	CU_ASSERT_EQUAL(generic()->decode(out, (size_t)len, 4, y), 0);
	for (int i = 0; i < 4; i++)
		CU_ASSERT_EQUAL(r[i], (x[i] + 0.5f) - y[i]);
	CU_ASSERT_EQUAL(y[3], 4.5f);
}

static void test_buckets(void)
{
	/* A bucket of tiny values next to one of big values. */
	const float x[6] = { 1e-3f, -5e-4f, 2.5e-4f, 1000, -2000, 3 };
	float y[6];
	uint8_t out[64];
	struct gw_enc_info info;
	ssize_t len = enc(generic(), 3, GW_ROUND_NEAREST, 0, NULL, x, NULL, NULL, 6, out,
			  sizeof(out), &info);

	CU_ASSERT_EQUAL_FATAL(len, 8 + 8 + 6);
	CU_ASSERT_EQUAL(scale_at(out, 0), 1e-3f / 127.0f);
	CU_ASSERT_EQUAL(scale_at(out, 1), 2000.0f / 127.0f);
	CU_ASSERT_EQUAL((int8_t)out[16], 127);
	CU_ASSERT_EQUAL((int8_t)out[17], -64); /* -63.5, tie to even */
	CU_ASSERT_EQUAL((int8_t)out[18], 32);  /* 31.75 */
	CU_ASSERT_EQUAL((int8_t)out[19], 64);  /* 63.5, tie to even */
	CU_ASSERT_EQUAL((int8_t)out[20], -127);
	CU_ASSERT_EQUAL((int8_t)out[21], 0); /* 0.1905 */
	CU_ASSERT_EQUAL(generic()->decode(out, (size_t)len, 6, y), 0);
	for (int i = 0; i < 3; i++) /* the tiny bucket keeps its precision */
		CU_ASSERT(fabsf(y[i] - x[i]) <= 1e-3f / 127 / 2 * 1.0001f);
	CU_ASSERT_EQUAL(y[0], 1e-3f);
	CU_ASSERT_EQUAL(y[4], -2000.0f);

	/* Tail bucket shorter than the others. */
	len = enc(generic(), 4, GW_ROUND_NEAREST, 0, NULL, x, NULL, NULL, 6, out, sizeof(out),
		  &info);
	CU_ASSERT_EQUAL_FATAL(len, 8 + 8 + 6);
	CU_ASSERT_EQUAL(scale_at(out, 0), 1000.0f / 127.0f);
	CU_ASSERT_EQUAL(scale_at(out, 1), 2000.0f / 127.0f);
}

static void test_ties(void)
{
	/* m = 127: inv = 1, so y * inv = y exactly. */
	const float x[8] = { 127, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f };
	const int8_t want[8] = { 127, 0, 2, 2, 0, -2, -2, 126 };
	uint8_t out[64];
	struct gw_enc_info info;
	ssize_t len = enc(generic(), 8, GW_ROUND_NEAREST, 0, NULL, x, NULL, NULL, 8, out,
			  sizeof(out), &info);

	CU_ASSERT_EQUAL_FATAL(len, 8 + 4 + 8);
	CU_ASSERT_EQUAL(scale_at(out, 0), 1.0f);
	for (int i = 0; i < 8; i++)
		CU_ASSERT_EQUAL((int8_t)out[12 + i], want[i]);
}

static void test_stochastic(void)
{
	enum { N = 64, T = 4000 };
	float x[N], y[N];
	uint8_t a[HDR + 5 * N], b[HDR + 5 * N];
	struct gw_enc_info info;
	uint64_t ctr = 0, c1 = 0, c2 = 0;
	double sum = 0, sc = 1.0 / 127;
	/* v * 127 = 38.1: codes 38 and 39 with probabilities 0.9 and 0.1. */
	const float v = 0.3f;
	double p = (double)v * 127 - 38;

	x[0] = 1.0f; /* fixes m = 1 */
	for (int i = 1; i < N; i++)
		x[i] = v;
	for (int t = 0; t < T; t++) {
		ssize_t len = enc(generic(), N, GW_ROUND_STOCHASTIC, 42, &ctr, x, NULL, NULL, N, a,
				  sizeof(a), &info);

		CU_ASSERT_EQUAL_FATAL(len, HDR + 4 + N);
		CU_ASSERT_EQUAL(generic()->decode(a, (size_t)len, N, y), 0);
		CU_ASSERT_EQUAL((int8_t)a[12], 127);
		for (int i = 1; i < N; i++) {
			int8_t q = (int8_t)a[12 + i];

			CU_ASSERT(q == 38 || q == 39);
			sum += y[i];
		}
	}
	CU_ASSERT_EQUAL(ctr, T);
	{
		double cnt = (double)T * (N - 1), mean = sum / cnt;
		double sd = sc * sqrt(p * (1 - p) / cnt);

		/* Unbiased: within 5 standard errors of v (a biased rounding,
		 * e.g. nearest, would be off by 0.1 * scale = 30 of them). */
		CU_ASSERT(fabs(mean - (double)v) < 5 * sd);
	}

	/* Reproducible: same seed and counter give the same bytes. */
	tu_fill(x, N, 7);
	CU_ASSERT_EQUAL_FATAL(enc(generic(), 16, GW_ROUND_STOCHASTIC, 99, &c1, x, NULL, NULL, N, a,
				  sizeof(a), &info),
			      HDR + 16 + N);
	CU_ASSERT_EQUAL_FATAL(enc(generic(), 16, GW_ROUND_STOCHASTIC, 99, &c2, x, NULL, NULL, N, b,
				  sizeof(b), &info),
			      HDR + 16 + N);
	CU_ASSERT_EQUAL(memcmp(a, b, HDR + 16 + N), 0);
	CU_ASSERT_EQUAL(c1, 1);
	/* The next step draws other offsets; so does another seed. */
	enc(generic(), 16, GW_ROUND_STOCHASTIC, 99, &c2, x, NULL, NULL, N, b, sizeof(b), &info);
	CU_ASSERT_NOT_EQUAL(memcmp(a, b, HDR + 16 + N), 0);
	c2 = 0;
	enc(generic(), 16, GW_ROUND_STOCHASTIC, 98, &c2, x, NULL, NULL, N, b, sizeof(b), &info);
	CU_ASSERT_NOT_EQUAL(memcmp(a, b, HDR + 16 + N), 0);
	/* The offsets are the documented hash. */
	{
		uint64_t s = gw_mix64(99, 0);
		float m = 0;

		for (int i = 0; i < 16; i++)
			m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
		for (int i = 0; i < 16; i++) {
			uint32_t h = gw_hash32(gw_hash32((uint32_t)i ^ (uint32_t)s) ^
					       (uint32_t)(s >> 32));
			float u = (float)(h >> 8) * 0x1p-24f;
			float q = floorf(x[i] * (127.0f / m) + u);

			q = q > 127 ? 127 : q < -127 ? -127 : q;
			CU_ASSERT_EQUAL((int8_t)a[HDR + 4 * 4 + i], (int8_t)q);
		}
	}
}

/* Error bound and residual identity on awkward data, both roundings. */
static void test_bound(void)
{
	enum { N = 3001 };
	float *x = tu_alloc(N * 4), *r = tu_alloc(N * 4), *r0 = tu_alloc(N * 4);
	float *y = tu_alloc(N * 4);
	uint8_t *out = tu_alloc(HDR + 5 * N);
	struct gw_enc_info info;

	for (uint32_t rnd = 0; rnd < 2; rnd++) {
		for (uint32_t bucket = 1; bucket <= 1024; bucket = bucket * 3 + 1) {
			uint64_t ctr = 5;
			ssize_t len;

			tu_fill_hard(x, N, bucket + rnd, 0);
			tu_fill(r0, N, bucket);
			memcpy(r, r0, N * 4);
			len = enc(generic(), bucket, rnd, 3, &ctr, x, r, r, N, out, HDR + 5 * N,
				  &info);
			CU_ASSERT_EQUAL_FATAL(len, (ssize_t)(HDR + 4 * gw_nbuckets(N, bucket) + N));
			CU_ASSERT_EQUAL(generic()->decode(out, (size_t)len, N, y), 0);
			for (uint64_t i = 0; i < N; i++) {
				float yi = x[i] + r0[i], sc = scale_at(out, i / bucket);
				float tol = (rnd ? sc : sc / 2) * 1.0001f + 0x1p-140f;

				CU_ASSERT_EQUAL(gw_f2u(r[i]), gw_f2u(yi - y[i]));
				CU_ASSERT(fabsf(yi - y[i]) <= tol);
				CU_ASSERT((int8_t)out[len - N + i] != -128);
			}
			CU_ASSERT_EQUAL(info.flags, 0);
		}
	}
	free(x), free(r), free(r0), free(y), free(out);
}

static void test_nonfinite(void)
{
	float x[6] = { 1, NAN, -2, INFINITY, 0.5f, -INFINITY }, r[6] = { 0 }, y[6];
	uint8_t out[128];
	struct gw_enc_info info;
	ssize_t len =
		enc(generic(), 3, GW_ROUND_NEAREST, 0, NULL, x, r, r, 6, out, sizeof(out), &info);
	struct gw_codec c = mk(generic(), 3, GW_ROUND_NEAREST, 0);

	CU_ASSERT_EQUAL_FATAL(len, 8 + 8 + 6);
	CU_ASSERT_EQUAL(info.flags, GW_PF_NONFINITE);
	CU_ASSERT_EQUAL(info.nonfinite_index, 1);
	CU_ASSERT(isnan(gw_u2f(info.nonfinite_bits)));
	CU_ASSERT_EQUAL(scale_at(out, 0), 2.0f / 127); /* NaN excluded */
	CU_ASSERT_EQUAL(scale_at(out, 1), 0.5f / 127); /* infinities excluded */
	CU_ASSERT_EQUAL(out[17], 0);
	CU_ASSERT_EQUAL(out[19], 0);
	CU_ASSERT_EQUAL(out[21], 0);
	CU_ASSERT_EQUAL((int8_t)out[20], 127);
	for (int i = 0; i < 6; i++)
		CU_ASSERT(isfinite(r[i]));
	CU_ASSERT_EQUAL(gw_f2u(r[1]), 0);
	CU_ASSERT_EQUAL(gw_f2u(r[3]), 0);

	/* Through the payload the receiver sees the first non-finite value. */
	len = gw_payload_encode(&c, NULL, NULL, x, NULL, NULL, 6, out, sizeof(out));
	CU_ASSERT_EQUAL_FATAL(len, GW_PAYLOAD_HDR + GW_PAYLOAD_NONFINITE_REC + 22);
	CU_ASSERT_EQUAL(gw_payload_decode(out, (size_t)len, y, 6), 0);
	CU_ASSERT(isnan(y[1]));
	CU_ASSERT_EQUAL(y[0], 64 * (2.0f / 127));
	CU_ASSERT_EQUAL(y[2], -2.0f);
	CU_ASSERT_EQUAL(y[3], 0.0f);
}

/* Extreme magnitudes: no inf/NaN from 127/m or 127*scale. */
static void test_extremes(void)
{
	float x[4], r[4], y[4];
	uint8_t out[64];
	struct gw_enc_info info;
	ssize_t len;

	x[0] = 1e-40f, x[1] = -5e-41f, x[2] = 0x1p-149f, x[3] = 0;
	for (uint32_t rnd = 0; rnd < 2; rnd++) {
		uint64_t ctr = 0;

		len = enc(generic(), 4, rnd, 0, &ctr, x, NULL, NULL, 4, out, sizeof(out), &info);
		CU_ASSERT_EQUAL_FATAL(len, 16);
		CU_ASSERT_EQUAL((int8_t)out[12], 127);
		CU_ASSERT((int8_t)out[13] <= -63 && (int8_t)out[13] >= -64);
		CU_ASSERT_EQUAL(generic()->decode(out, (size_t)len, 4, y), 0);
		for (int i = 0; i < 4; i++)
			CU_ASSERT(fabsf(y[i] - x[i]) <= 1e-40f / 127 + 0x1p-140f);
	}
	x[0] = FLT_MAX, x[1] = -FLT_MAX, x[2] = 1e38f, x[3] = -3e38f;
	memset(r, 0, sizeof(r));
	len = enc(generic(), 4, GW_ROUND_NEAREST, 0, NULL, x, r, r, 4, out, sizeof(out), &info);
	CU_ASSERT_EQUAL_FATAL(len, 16);
	CU_ASSERT(127.0f * scale_at(out, 0) <= FLT_MAX);
	CU_ASSERT_EQUAL(generic()->decode(out, (size_t)len, 4, y), 0);
	for (int i = 0; i < 4; i++) {
		CU_ASSERT(isfinite(y[i]) && isfinite(r[i]));
		CU_ASSERT_EQUAL(r[i], x[i] - y[i]);
	}
	CU_ASSERT_EQUAL(info.flags, 0);
	/* An all-zero bucket: scale 0, codes 0, and -0.0 stays -0.0 in the residual. */
	x[0] = 0, x[1] = -0.0f, x[2] = 0, x[3] = 0;
	memset(r, 0, sizeof(r));
	len = enc(generic(), 4, GW_ROUND_NEAREST, 0, NULL, x, r, r, 4, out, sizeof(out), &info);
	CU_ASSERT_EQUAL(scale_at(out, 0), 0.0f);
	CU_ASSERT_EQUAL(gw_get32(out + 12), 0);
	CU_ASSERT_EQUAL(gw_f2u(r[1]), 0); /* y = -0 + 0 = +0 */
	CU_ASSERT_EQUAL(gw_f2u(r[0]), 0);
}

static void test_rejects(void)
{
	enum { N = 37 };
	float x[N], y[N];
	uint8_t good[HDR + 4 * 5 + N + 8], b[sizeof(good)];
	struct gw_enc_info info;
	size_t len;
	uint64_t ctr = 0;
	struct gw_codec c = mk(generic(), 8, GW_ROUND_NEAREST, 0);

	tu_fill(x, N, 3);
	len = (size_t)enc(generic(), 8, GW_ROUND_NEAREST, 0, NULL, x, NULL, NULL, N, good,
			  sizeof(good), &info);
	CU_ASSERT_EQUAL_FATAL(len, HDR + 4 * 5 + N);
	CU_ASSERT_EQUAL(generic()->decode(good, len, N, y), 0);

#define MUT(stmt, l, n)                                                                            \
	do {                                                                                       \
		memcpy(b, good, sizeof(b));                                                        \
		stmt;                                                                              \
		tb_reject(GW_CODEC_INT8, b, l, n);                                                 \
	} while (0)
	for (size_t l = 0; l < len; l++)
		MUT((void)0, l, N);
	MUT((void)0, len + 1, N); /* trailing byte */
	MUT((void)0, len, N - 1); /* another n */
	MUT((void)0, len, N + 1);
	MUT((void)0, len, GW_MAX_ELEMS + 1);
	MUT((void)0, len, UINT64_MAX);
	MUT(gw_put32(b, 0), len, N); /* bucket 0 */
	MUT(gw_put32(b, GW_BUCKET_MAX + 1), len, N);
	MUT(gw_put32(b, UINT32_MAX), len, N);
	MUT(gw_put32(b, 7), len, N);  /* 6 buckets: len off by 4 */
	MUT(gw_put32(b, 10), len, N); /* 4 buckets */
	MUT(b[4] = 1, len, N);	      /* reserved */
	MUT(b[7] = 0x80, len, N);
	MUT(gw_put32(b + 8, gw_f2u(-1.0f)), len, N); /* negative scale */
	MUT(gw_put32(b + 12, 0x80000000u), len, N);  /* -0.0 */
	MUT(gw_put32(b + 16, gw_f2u(NAN)), len, N);
	MUT(gw_put32(b + 20, gw_f2u(INFINITY)), len, N);
	MUT(gw_put32(b + 24, gw_f2u(FLT_MAX)), len, N); /* 127 * scale overflows */
	MUT(b[len - 1] = 0x80, len, N);			/* code -128 */
	MUT(b[HDR + 20] = 0x80, len, N);
	tb_reject(GW_CODEC_INT8, NULL, 0, N);
#undef MUT
	/* n = 0: only the 8-byte parameter block. */
	len = (size_t)enc(generic(), 8, GW_ROUND_NEAREST, 0, NULL, x, NULL, NULL, 0, good,
			  sizeof(good), &info);
	CU_ASSERT_EQUAL(len, 8);
	CU_ASSERT_EQUAL(generic()->decode(good, 8, 0, y), 0);
	tb_reject(GW_CODEC_INT8, good, 9, 0);
	tb_reject(GW_CODEC_INT8, good, 7, 0);

	/* Encoder argument errors. */
	CU_ASSERT_EQUAL(enc(generic(), 8, 0, 0, NULL, x, NULL, NULL, N, good,
			    gw_int8_generic.bound(&c, N) - 1, &info),
			-ENOSPC);
	CU_ASSERT_EQUAL(enc(generic(), 0, 0, 0, NULL, x, NULL, NULL, N, good, sizeof(good), &info),
			-EINVAL);
	CU_ASSERT_EQUAL(enc(generic(), GW_BUCKET_MAX + 1, 0, 0, NULL, x, NULL, NULL, N, good,
			    sizeof(good), &info),
			-EINVAL);
	CU_ASSERT_EQUAL(enc(generic(), 8, 2, 0, NULL, x, NULL, NULL, N, good, sizeof(good), &info),
			-EINVAL);
	CU_ASSERT_EQUAL(enc(generic(), 8, 1, 0, NULL, x, NULL, NULL, N, good, sizeof(good), &info),
			-EINVAL); /* stochastic needs state */
	CU_ASSERT_EQUAL(enc(generic(), 8, 0, 0, NULL, x, x, NULL, N, good, sizeof(good), &info),
			-EINVAL);
	/* -ENOSPC leaves the counter alone. */
	CU_ASSERT_EQUAL(enc(generic(), 8, 1, 0, &ctr, x, NULL, NULL, N, good, 20, &info), -ENOSPC);
	CU_ASSERT_EQUAL(ctr, 0);
	CU_ASSERT_EQUAL(gw_codec_state_size(&c, N), 8);
}

/* Every usable variant: bytes, residual bits, info, decode identical. */
static void test_variants(void)
{
	static const uint64_t sizes[] = { 0,  1,  2,  7,   8,	9,   15,  16,	17,   31,  33,
					  63, 64, 65, 127, 200, 511, 513, 1000, 1027, 4099 };
	static const uint32_t buckets[] = { 1, 3, 8, 13, 16, 17, 512, 1000 };
	const uint64_t nmax = 4099;
	size_t cap = HDR + 5 * nmax;
	float *x = tu_alloc(nmax * 4), *r0 = tu_alloc(nmax * 4);
	float *ra = tu_alloc(nmax * 4), *rb = tu_alloc(nmax * 4);
	float *ya = tu_alloc(nmax * 4), *yb = tu_alloc(nmax * 4);
	uint8_t *a = tu_alloc(cap), *b = tu_alloc(cap);
	int tested = 0;

	for (size_t k = 0; k < gw_codec_count(); k++) {
		const struct gw_codec_ops *o = gw_codec_at(k);

		if (o->id != GW_CODEC_INT8 || o == generic() || (o->cpu_ok && !o->cpu_ok()))
			continue;
		tested++;
		for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
			for (size_t bi = 0; bi < sizeof(buckets) / sizeof(buckets[0]); bi++)
				for (int v = 0; v < 8; v++) {
					uint64_t n = sizes[si], ca = (uint64_t)v << 20, cb = ca;
					uint32_t rnd = v & 1;
					int with_res = v & 2, nonfin = v & 4;
					struct tb_enc ea = { a, 0, { 0 }, ra, ya };
					struct tb_enc eb = { b, 0, { 0 }, rb, yb };

					tu_fill_hard(x, n, n * 31 + buckets[bi] + (uint64_t)v,
						     nonfin);
					tu_fill(r0, n, n + 5);
					memcpy(ra, r0, n * 4);
					memcpy(rb, r0, n * 4);
					ea.len = enc(generic(), buckets[bi], rnd, 77, &ca, x,
						     with_res ? ra : NULL, with_res ? ra : NULL, n,
						     a, cap, &ea.info);
					eb.len = enc(o, buckets[bi], rnd, 77, &cb, x,
						     with_res ? rb : NULL, with_res ? rb : NULL, n,
						     b, cap, &eb.info);
					CU_ASSERT_EQUAL(ca, cb);
					tb_same(generic(), o, &ea, &eb, r0, n, buckets[bi], v);
				}
	}
	if (!tested)
		printf("(no SIMD variant usable here) ");
	free(x), free(r0), free(ra), free(rb), free(ya), free(yb), free(a), free(b);
}

/* The payload round trip through the best implementation. */
static void test_payload(void)
{
	enum { N = 1000 };
	float *x = tu_alloc(N * 4), *y = tu_alloc(N * 4), *r = tu_alloc(N * 4);
	uint8_t *buf;
	struct gw_codec c;
	char err[128];
	ssize_t len;
	uint64_t ctr = 0;

	CU_ASSERT_EQUAL_FATAL(
		gw_codec_parse("int8:bucket=100,rounding=stochastic,seed=5", &c, err, sizeof(err)),
		0);
	buf = tu_alloc(gw_payload_bound(&c, N));
	tu_fill(x, N, 11);
	len = gw_payload_encode(&c, &ctr, NULL, x, r, r, N, buf, gw_payload_bound(&c, N));
	CU_ASSERT_EQUAL_FATAL(len, GW_PAYLOAD_HDR + 8 + 40 + N);
	CU_ASSERT_EQUAL(buf[1], GW_CODEC_INT8);
	CU_ASSERT_EQUAL(gw_payload_decode(buf, (size_t)len, y, N), 0);
	for (int i = 0; i < N; i++)
		CU_ASSERT_EQUAL(gw_f2u(r[i]), gw_f2u(x[i] - y[i]));
	CU_ASSERT_EQUAL(gw_payload_decode(buf, (size_t)len - 1, y, N), -EBADMSG);
	free(x), free(y), free(r), free(buf);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "hand-computed section [1,2,3,4]", test_hand },
		{ "per-bucket scales", test_buckets },
		{ "nearest rounds ties to even", test_ties },
		{ "stochastic: unbiased and reproducible", test_stochastic },
		{ "error bound and residual identity", test_bound },
		{ "non-finite values", test_nonfinite },
		{ "subnormal and huge buckets", test_extremes },
		{ "malformed sections rejected, output untouched", test_rejects },
		{ "SIMD variants identical to generic", test_variants },
		{ "payload round trip", test_payload },
		CU_TEST_INFO_NULL,
	};
	return tu_run("int8", tests);
}
