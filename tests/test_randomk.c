/* SPDX-License-Identifier: MIT */
/*
 * test_randomk.c - stratified random-k: the index rule (checked against the
 * __int128 formula), reproducibility from (seed, counter), unbiasedness
 * without error feedback, the residual identity with it, non-finite values,
 * and rejection of malformed sections with the output untouched.
 */
#include <math.h>
#include <stdlib.h>
#include "tutil.h"
#include "codec_impl.h"

static struct gw_codec mk(double ratio, uint64_t seed)
{
	struct gw_codec c;

	gw_codec_init(&c, gw_codec_find("randomk"));
	c.p.ratio = ratio;
	c.p.seed = seed;
	return c;
}

static uint64_t k_of(double ratio, uint64_t n)
{
	double k = ceil(ratio * (double)n);

	if (!n)
		return 0;
	return k < 1 ? 1 : k > (double)n ? n : (uint64_t)k;
}

/* The index of stratum j, straight from the definition. */
static uint64_t ref_index(uint64_t s, uint64_t j, uint64_t n, uint64_t k, uint64_t *size)
{
	uint64_t lo = (uint64_t)((unsigned __int128)j * n / k);
	uint64_t hi = (uint64_t)((unsigned __int128)(j + 1) * n / k);

	*size = hi - lo;
	return lo + (uint64_t)(((unsigned __int128)gw_mix64(s, j) * *size) >> 64);
}

static ssize_t enc(const struct gw_codec *c, uint64_t *ctr, const float *x, const float *r,
		   float *ro, uint64_t n, uint8_t *out, size_t cap, struct gw_enc_info *info)
{
	return c->ops->encode(c, ctr, NULL, x, r, ro, n, out, cap, info);
}

static void test_layout(void)
{
	const float x[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
	struct gw_codec c = mk(0.3, 5);
	struct gw_enc_info info = { 0 };
	uint64_t ctr = 0, s, size;
	uint8_t out[64];
	float y[10];

	CU_ASSERT_EQUAL(c.ops->state_size(&c, 10), 8);
	CU_ASSERT_EQUAL(c.ops->bound(&c, 10), 16 + 3 * 4);
	CU_ASSERT_EQUAL(c.ops->bound(&c, 0), 16);
	CU_ASSERT_EQUAL(enc(&c, &ctr, x, NULL, NULL, 10, out, sizeof(out), &info), 28);
	CU_ASSERT_EQUAL(ctr, 1);
	s = gw_get64(out);
	CU_ASSERT_EQUAL(s, gw_mix64(5, 0));
	CU_ASSERT_EQUAL(gw_get64(out + 8), 3);
	CU_ASSERT_EQUAL(c.ops->decode(out, 28, 10, y), 0);
	for (uint64_t j = 0, prev = 0; j < 3; j++) {
		uint64_t i = ref_index(s, j, 10, 3, &size);

		/* Strata of 10 in 3: [0,3) [3,6) [6,10); value scaled by size. */
		CU_ASSERT_EQUAL(size, j == 2 ? 4u : 3u);
		CU_ASSERT_EQUAL(gw_get32(out + 16 + 4 * j), gw_f2u(x[i] * (float)size));
		CU_ASSERT_EQUAL(y[i], x[i] * (float)size);
		y[i] = 0;
		CU_ASSERT(!j || i > prev);
		prev = i;
	}
	for (int i = 0; i < 10; i++)
		CU_ASSERT_EQUAL(y[i], 0);
	/* n = 0: s and k = 0 only. */
	CU_ASSERT_EQUAL(enc(&c, &ctr, NULL, NULL, NULL, 0, out, sizeof(out), &info), 16);
	CU_ASSERT_EQUAL(gw_get64(out + 8), 0);
	CU_ASSERT_EQUAL(c.ops->decode(out, 16, 0, y), 0);
}

/* Indices: distinct, sorted, one per stratum, as the formula says. */
static void test_strata(void)
{
	static const uint64_t sizes[] = { 1, 2, 3, 7, 64, 100, 1000, 4097, 100003 };
	static const double ratios[] = { 1e-9, 0.01, 0.1, 0.37, 0.5, 0.99, 1 };
	float *x = tu_alloc(100003 * 4), *y = tu_alloc(100003 * 4);
	uint8_t *out = tu_alloc(16 + 4 * 100003);

	for (uint64_t i = 0; i < 100003; i++)
		x[i] = 1.0f;
	for (size_t a = 0; a < sizeof(sizes) / sizeof(sizes[0]); a++) {
		for (size_t b = 0; b < sizeof(ratios) / sizeof(ratios[0]); b++) {
			uint64_t n = sizes[a], k = k_of(ratios[b], n), ctr = a + b, s;
			struct gw_codec c = mk(ratios[b], 99);
			struct gw_enc_info info = { 0 };
			uint64_t hits = 0, bad = 0, prev = 0;

			CU_ASSERT_EQUAL_FATAL(
				enc(&c, &ctr, x, NULL, NULL, n, out, 16 + 4 * k, &info),
				(ssize_t)(16 + 4 * k));
			s = gw_get64(out);
			CU_ASSERT_EQUAL(s, gw_mix64(99, a + b));
			CU_ASSERT_EQUAL(c.ops->decode(out, 16 + 4 * k, n, y), 0);
			for (uint64_t j = 0; j < k; j++) {
				uint64_t size, i = ref_index(s, j, n, k, &size);
				uint64_t lo = (uint64_t)((unsigned __int128)j * n / k);

				bad += size < 1 || i < lo || i >= lo + size;
				bad += j && i <= prev;
				bad += y[i] != (float)size;
				prev = i;
			}
			for (uint64_t i = 0; i < n; i++)
				hits += y[i] != 0;
			CU_ASSERT_EQUAL(bad, 0);
			CU_ASSERT_EQUAL(hits, k);
		}
	}
	free(x), free(y), free(out);
}

static void test_reproducible(void)
{
	uint64_t n = 1000, a = 0, b = 0, c1 = 1;
	struct gw_codec c = mk(0.05, 0x1234);
	struct gw_enc_info info = { 0 };
	float x[1000];
	uint8_t o1[256], o2[256], o3[256], o4[256];

	tu_fill(x, n, 8);
	CU_ASSERT_EQUAL(enc(&c, &a, x, NULL, NULL, n, o1, sizeof(o1), &info), 216);
	CU_ASSERT_EQUAL(enc(&c, &b, x, NULL, NULL, n, o2, sizeof(o2), &info), 216);
	CU_ASSERT_EQUAL(memcmp(o1, o2, 216), 0); /* same (seed, counter) */
	CU_ASSERT_EQUAL(enc(&c, &a, x, NULL, NULL, n, o3, sizeof(o3), &info), 216);
	CU_ASSERT_NOT_EQUAL(memcmp(o1, o3, 216), 0); /* next call differs */
	CU_ASSERT_NOT_EQUAL(memcmp(o1 + 16, o3 + 16, 200), 0);
	CU_ASSERT_EQUAL(a, 2);
	CU_ASSERT_EQUAL(enc(&c, &c1, x, NULL, NULL, n, o4, sizeof(o4), &info), 216);
	CU_ASSERT_EQUAL(memcmp(o3, o4, 216), 0); /* counter 1 again */
	c.p.seed = 0x1235;
	b = 0;
	CU_ASSERT_EQUAL(enc(&c, &b, x, NULL, NULL, n, o2, sizeof(o2), &info), 216);
	CU_ASSERT_NOT_EQUAL(memcmp(o1, o2, 216), 0); /* other seed */
}

/* Without error feedback the decoded tensor is unbiased: mean -> x. */
static void test_unbiased(void)
{
	enum { N = 64, T = 20000 };
	struct gw_codec c = mk(0.1, 3);
	struct gw_enc_info info = { 0 };
	double sum[N] = { 0 };
	float x[N], y[N];
	uint8_t out[16 + 4 * 7];
	uint64_t ctr = 0;
	int bad = 0;

	tu_fill(x, N, 4);
	for (int t = 0; t < T; t++) {
		CU_ASSERT_EQUAL_FATAL(enc(&c, &ctr, x, NULL, NULL, N, out, sizeof(out), &info),
				      (ssize_t)sizeof(out));
		CU_ASSERT_EQUAL_FATAL(c.ops->decode(out, sizeof(out), N, y), 0);
		for (int i = 0; i < N; i++)
			sum[i] += y[i];
	}
	for (int i = 0; i < N; i++) {
		/* Strata have 9 or 10 elements: per-call sd <= 3|x|, so the mean
		 * of T calls is within 6 sd of x with overwhelming odds. */
		double tol = 6 * 3 * fabs(x[i]) / sqrt(T) + 1e-6;

		bad += fabs(sum[i] / T - x[i]) > tol;
	}
	CU_ASSERT_EQUAL(bad, 0);
}

/* With error feedback: y = decoded + residual exactly, values unscaled. */
static void test_error_feedback(void)
{
	uint64_t n = 3001, k = k_of(0.01, n), ctr = 0, s, size, i0;
	float *x = tu_alloc(n * 4), *r = tu_alloc(n * 4), *y = tu_alloc(n * 4);
	float *dec = tu_alloc(n * 4), *r2 = tu_alloc(n * 4);
	struct gw_codec c = mk(0.01, 17);
	struct gw_enc_info info = { 0 };
	uint8_t *out = tu_alloc(16 + 4 * k);
	int bad = 0;

	tu_fill(x, n, 5);
	tu_fill(r, n, 6);
	/* Put a NaN where the first stratum samples, an Inf elsewhere. */
	i0 = ref_index(gw_mix64(17, 0), 0, n, k, &size);
	x[i0] = NAN;
	x[i0 == 1000 ? 1001 : 1000] = INFINITY;
	for (uint64_t i = 0; i < n; i++)
		y[i] = x[i] + r[i];
	memcpy(r2, r, n * 4);
	CU_ASSERT_EQUAL_FATAL(enc(&c, &ctr, x, r, r, n, out, 16 + 4 * k, &info),
			      (ssize_t)(16 + 4 * k));
	s = gw_get64(out);
	CU_ASSERT_EQUAL(info.flags, GW_PF_NONFINITE);
	CU_ASSERT_EQUAL(info.nonfinite_index, i0 < 1000 ? i0 : 1000);
	CU_ASSERT_EQUAL(gw_get32(out + 16), 0); /* NaN sent as 0 */
	CU_ASSERT_EQUAL(c.ops->decode(out, 16 + 4 * k, n, dec), 0);
	for (uint64_t i = 0; i < n; i++) {
		if (gw_nonfinite(y[i])) {
			bad += r[i] != 0 || dec[i] != 0;
			continue;
		}
		bad += gw_f2u(dec[i] + r[i]) != gw_f2u(y[i]);
		bad += dec[i] != 0 && r[i] != 0;
	}
	for (uint64_t j = 1; j < k; j++) {
		uint64_t i = ref_index(s, j, n, k, &size);

		bad += gw_get32(out + 16 + 4 * j) != gw_f2u(y[i]); /* unscaled */
		bad += r[i] != 0;
	}
	CU_ASSERT_EQUAL(bad, 0);
	/* Separate residual buffers give the same result. */
	{
		uint64_t ctr2 = 0;
		uint8_t *o2 = tu_alloc(16 + 4 * k);
		float *ro = tu_alloc(n * 4);

		CU_ASSERT_EQUAL(enc(&c, &ctr2, x, r2, ro, n, o2, 16 + 4 * k, &info),
				(ssize_t)(16 + 4 * k));
		CU_ASSERT_EQUAL(memcmp(out, o2, 16 + 4 * k), 0);
		CU_ASSERT_EQUAL(memcmp(ro, r, n * 4), 0);
		free(o2), free(ro);
	}
	/* Without error feedback a sampled NaN is sent as 0 and flagged. */
	ctr = 0;
	memset(&info, 0, sizeof(info));
	CU_ASSERT_EQUAL(enc(&c, &ctr, x, NULL, NULL, n, out, 16 + 4 * k, &info),
			(ssize_t)(16 + 4 * k));
	CU_ASSERT_EQUAL(gw_get32(out + 16), 0);
	CU_ASSERT_EQUAL(info.nonfinite_index, i0 < 1000 ? i0 : 1000);
	free(x), free(r), free(y), free(dec), free(r2), free(out);
}

static void test_space_and_args(void)
{
	struct gw_codec c = mk(0.1, 0);
	struct gw_enc_info info = { 0 };
	float x[50], r[50] = { 0 };
	uint8_t out[64];
	uint64_t ctr = 7;

	tu_fill(x, 50, 1);
	r[3] = 1;
	memset(out, 0xee, sizeof(out));
	CU_ASSERT_EQUAL(enc(&c, &ctr, x, r, r, 50, out, 35, &info), -ENOSPC);
	CU_ASSERT_EQUAL(ctr, 7); /* nothing consumed */
	CU_ASSERT_EQUAL(r[3], 1);
	CU_ASSERT_EQUAL(out[0], 0xee);
	CU_ASSERT_EQUAL(enc(&c, &ctr, x, r, r, 50, out, 36, &info), 36);
	CU_ASSERT_EQUAL(enc(&c, &ctr, x, r, NULL, 50, out, 64, &info), -EINVAL);
	CU_ASSERT_EQUAL(enc(&c, &ctr, NULL, NULL, NULL, 50, out, 64, &info), -EINVAL);
	CU_ASSERT_EQUAL(c.ops->encode(&c, NULL, NULL, x, NULL, NULL, 50, out, 64, &info),
			-EINVAL); /* no state */
	c.p.ratio = 0;
	CU_ASSERT_EQUAL(enc(&c, &ctr, x, NULL, NULL, 50, out, 64, &info), -EINVAL);
	c.p.ratio = 2;
	CU_ASSERT_EQUAL(enc(&c, &ctr, x, NULL, NULL, 50, out, 64, &info), -EINVAL);
}

#define DN 20

static void reject(const uint8_t *sec, size_t len, uint64_t n)
{
	float y[DN + 1];

	for (int i = 0; i <= DN; i++)
		y[i] = 42.0f;
	CU_ASSERT_EQUAL(gw_randomk_generic.decode(sec, len, n, y), -EBADMSG);
	CU_ASSERT_EQUAL(gw_randomk_generic.decode_add(sec, len, n, y), -EBADMSG);
	for (int i = 0; i <= DN; i++)
		CU_ASSERT_EQUAL(y[i], 42.0f);
}

static void test_decode_rejects(void)
{
	struct gw_codec c = mk(0.2, 1);
	struct gw_enc_info info = { 0 };
	uint8_t good[64], b[64];
	uint64_t ctr = 0;
	float x[DN], y[DN];
	size_t len;

	tu_fill(x, DN, 2);
	len = (size_t)enc(&c, &ctr, x, NULL, NULL, DN, good, sizeof(good), &info);
	CU_ASSERT_EQUAL_FATAL(len, 16 + 4 * 4);
	for (size_t l = 0; l < len; l++)
		reject(good, l, DN);
	memcpy(b, good, len);
	b[len] = 0;
	reject(b, len + 1, DN);
	reject(good, len, 3); /* k = 4 > n */
	reject(good, len, 0);
	reject(good, len, GW_MAX_ELEMS + 1);
#define MUT(stmt, n)                                                                               \
	do {                                                                                       \
		memcpy(b, good, len);                                                              \
		stmt;                                                                              \
		reject(b, len, n);                                                                 \
	} while (0)
	MUT(gw_put64(b + 8, 5), DN); /* k disagrees with len */
	MUT(gw_put64(b + 8, 3), DN);
	MUT(gw_put64(b + 8, UINT64_MAX), DN);
#undef MUT
	{
		uint8_t s[16] = { 0 };

		reject(s, 16, DN); /* k = 0 but n > 0 */
		gw_put64(s + 8, 1);
		reject(s, 16, 0); /* k > n = 0 */
		gw_put64(s + 8, 0);
		CU_ASSERT_EQUAL(gw_randomk_generic.decode(s, 16, 0, y), 0);
	}
	/* A section of k values for a larger n is valid and decodes there. */
	CU_ASSERT_EQUAL(gw_randomk_generic.decode(good, len, DN, y), 0);
	for (int i = 0; i < DN; i++)
		y[i] = 1;
	CU_ASSERT_EQUAL(gw_randomk_generic.decode_add(good, len, DN, y), 0);
	{
		int sent = 0;

		for (int i = 0; i < DN; i++)
			sent += y[i] != 1;
		CU_ASSERT_EQUAL(sent, 4);
	}
}

static void test_payload_roundtrip(void)
{
	uint64_t n = 777, ctr = 0;
	float *x = tu_alloc(n * 4), *y = tu_alloc(n * 4), *res = tu_alloc(n * 4);
	struct gw_codec c;
	char err[128];
	size_t cap;
	uint8_t *buf;
	ssize_t len;

	CU_ASSERT_EQUAL_FATAL(gw_codec_parse("randomk:ratio=0.1,seed=42", &c, err, sizeof(err)), 0);
	cap = gw_payload_bound(&c, n);
	buf = tu_alloc(cap);
	tu_fill_hard(x, n, 9, 1);
	len = gw_payload_encode(&c, &ctr, NULL, x, res, res, n, buf, cap);
	CU_ASSERT_FATAL(len > 0);
	CU_ASSERT_EQUAL(buf[1], GW_CODEC_RANDOMK);
	CU_ASSERT_EQUAL(buf[3], GW_PF_NONFINITE);
	CU_ASSERT_EQUAL(gw_payload_decode(buf, (size_t)len, y, n), 0);
	CU_ASSERT(isnan(y[n / 3]));
	for (uint64_t i = 0; i < n; i++) {
		if (gw_nonfinite(x[i]))
			continue;
		if (y[i] + res[i] != x[i]) {
			CU_FAIL("payload: decoded + residual != x");
			break;
		}
	}
	free(x), free(y), free(res), free(buf);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "layout and hand-checked strata", test_layout },
		{ "indices: one per stratum, sorted, as defined", test_strata },
		{ "reproducible from (seed, counter)", test_reproducible },
		{ "unbiased without error feedback", test_unbiased },
		{ "error feedback identity, non-finite values", test_error_feedback },
		{ "-ENOSPC and -EINVAL", test_space_and_args },
		{ "malformed sections rejected, output untouched", test_decode_rejects },
		{ "payload round trip", test_payload_roundtrip },
		CU_TEST_INFO_NULL,
	};
	return tu_run("randomk", tests);
}
