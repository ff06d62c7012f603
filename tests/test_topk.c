/* SPDX-License-Identifier: MIT */
/*
 * test_topk.c - exact top-k: hand-computed cases, exactness against a
 * sort-based reference on random and adversarial inputs (including ones that
 * defeat the sampled threshold and force the exact fallback), the residual
 * and non-finite rules, every SIMD variant against the reference, and
 * rejection of malformed sections with the output untouched.
 */
#include <math.h>
#include <stdlib.h>
#include "tutil.h"
#include "codec_impl.h"

static const struct gw_codec_ops *impls[8];
static int nimpl;

static void find_impls(void)
{
	if (nimpl)
		return;
	impls[nimpl++] = gw_codec_generic(gw_codec_find("topk"));
	for (size_t i = 0; i < gw_codec_count(); i++) {
		const struct gw_codec_ops *o = gw_codec_at(i);

		if (o->id == GW_CODEC_TOPK && o != impls[0] && (!o->cpu_ok || o->cpu_ok()))
			impls[nimpl++] = o;
	}
}

static struct gw_codec mk(const struct gw_codec_ops *o, double ratio)
{
	struct gw_codec c;

	gw_codec_init(&c, o);
	c.p.ratio = ratio;
	return c;
}

static uint64_t k_of(double ratio, uint64_t n)
{
	double k = ceil(ratio * (double)n);

	if (!n)
		return 0;
	return k < 1 ? 1 : k > (double)n ? n : (uint64_t)k;
}

/* ---- the reference: sort by (|y| desc, index asc) ---------------------- */

static const float *ref_y;

static int by_mag(const void *a, const void *b)
{
	uint64_t i = *(const uint64_t *)a, j = *(const uint64_t *)b;
	uint32_t ki = gw_f2u(ref_y[i]) & 0x7fffffff, kj = gw_f2u(ref_y[j]) & 0x7fffffff;

	if (ki != kj)
		return ki > kj ? -1 : 1;
	return i < j ? -1 : i > j;
}

static int by_idx(const void *a, const void *b)
{
	uint64_t i = *(const uint64_t *)a, j = *(const uint64_t *)b;

	return i < j ? -1 : i > j;
}

/* Expected section, residual (of y) and info; returns the section length. */
static size_t reference(const float *y, uint64_t n, double ratio, uint8_t *sec, float *res,
			struct gw_enc_info *info)
{
	uint64_t *ix = malloc((n ? n : 1) * sizeof(*ix)), m = 0, k;

	memset(info, 0, sizeof(*info));
	for (uint64_t i = 0; i < n; i++) {
		res[i] = y[i];
		if (gw_nonfinite(y[i])) {
			gw_note_nonfinite(info, i, y[i]);
			res[i] = 0;
		} else {
			ix[m++] = i;
		}
	}
	ref_y = y;
	qsort(ix, m, sizeof(*ix), by_mag);
	k = k_of(ratio, n);
	if (k > m)
		k = m;
	qsort(ix, k, sizeof(*ix), by_idx);
	gw_put64(sec, k);
	for (uint64_t j = 0; j < k; j++) {
		gw_put32(sec + 8 + 4 * j, (uint32_t)ix[j]);
		gw_put32(sec + 8 + 4 * k + 4 * j, gw_f2u(y[ix[j]]));
		res[ix[j]] = 0;
	}
	free(ix);
	return 8 + 8 * k;
}

/*
 * Encode x (+ r) with every implementation, aliased and separate residual
 * buffers, and compare with the reference bit for bit; decode and check.
 */
static void check(const float *x, const float *r, uint64_t n, double ratio)
{
	float *y = tu_alloc(n * 4), *eres = tu_alloc(n * 4), *res = tu_alloc(n * 4);
	float *res2 = tu_alloc(n * 4), *dec = tu_alloc(n * 4);
	struct gw_enc_info einfo, info;
	size_t elen, bnd;
	uint8_t *esec, *sec;

	find_impls();
	for (uint64_t i = 0; i < n; i++)
		y[i] = r ? x[i] + r[i] : x[i];
	{
		struct gw_codec c = mk(impls[0], ratio);

		bnd = c.ops->bound(&c, n);
	}
	esec = tu_alloc(bnd);
	sec = tu_alloc(bnd);
	elen = reference(y, n, ratio, esec, eres, &einfo);
	CU_ASSERT_FATAL(elen <= bnd);
	for (int v = 0; v < nimpl; v++) {
		struct gw_codec c = mk(impls[v], ratio);
		void *scratch = tu_alloc(gw_codec_scratch_size(&c, n));
		int bad = 0;

		for (int alias = 0; alias < 2; alias++) {
			ssize_t len;

			memset(&info, 0, sizeof(info));
			memset(sec, 0xa5, bnd);
			if (r) {
				memcpy(res, r, n * 4);
				len = c.ops->encode(&c, NULL, scratch, x, res, alias ? res : res2,
						    n, sec, bnd, &info);
			} else {
				len = c.ops->encode(&c, NULL, scratch, x, NULL, NULL, n, sec, bnd,
						    &info);
			}
			bad |= len != (ssize_t)elen;
			if (len == (ssize_t)elen)
				bad |= memcmp(sec, esec, elen) != 0;
			bad |= memcmp(&info, &einfo, sizeof(info)) != 0;
			if (r)
				bad |= memcmp(alias ? res : res2, eres, n * 4) != 0;
			if (!r)
				break;
		}
		if (bad)
			printf("\n  %s differs from the reference: n=%llu ratio=%g ef=%d\n",
			       impls[v]->impl, (unsigned long long)n, ratio, r != NULL);
		CU_ASSERT(!bad);
		free(scratch);
	}
	/* Decoding gives y at the selected elements and 0 elsewhere, so
	 * y == decoded + residual exactly (no rounding: one side is 0). */
	CU_ASSERT_EQUAL(impls[0]->decode(esec, elen, n, dec), 0);
	for (uint64_t i = 0; i < n; i++) {
		if (gw_nonfinite(y[i]))
			continue;
		if (gw_f2u(dec[i]) != 0 && gw_f2u(eres[i]) != 0) {
			CU_FAIL("element both sent and kept");
			break;
		}
		if (dec[i] + eres[i] != y[i]) {
			CU_FAIL("y != decoded + residual");
			break;
		}
	}
	free(y), free(eres), free(res), free(res2), free(dec), free(esec), free(sec);
}

/* ---- hand-computed cases ------------------------------------------------ */

static ssize_t enc(double ratio, const float *x, const float *r, float *ro, uint64_t n,
		   uint8_t *out, size_t cap, struct gw_enc_info *info)
{
	struct gw_codec c = mk(gw_codec_generic(gw_codec_find("topk")), ratio);
	static uint8_t scratch[1 << 20];

	CU_ASSERT_FATAL(gw_codec_scratch_size(&c, n) <= sizeof(scratch));
	return c.ops->encode(&c, NULL, scratch, x, r, ro, n, out, cap, info);
}

static void test_seed_case(void)
{
	const float x[4] = { 1, 4, 2, 3 };
	const uint8_t want[24] = {
		2, 0, 0,    0,	  0, 0, 0,    0,    /* k = 2 */
		1, 0, 0,    0,	  3, 0, 0,    0,    /* indices 1, 3 */
		0, 0, 0x80, 0x40, 0, 0, 0x40, 0x40, /* 4.0f, 3.0f */
	};
	struct gw_enc_info info = { 0 };
	uint8_t out[64];
	float y[4];

	CU_ASSERT_EQUAL(enc(0.5, x, NULL, NULL, 4, out, sizeof(out), &info), 24);
	CU_ASSERT_EQUAL(memcmp(out, want, 24), 0);
	CU_ASSERT_EQUAL(info.flags, 0);
	CU_ASSERT_EQUAL(gw_topk_generic.decode(out, 24, 4, y), 0);
	CU_ASSERT(y[0] == 0 && y[1] == 4 && y[2] == 0 && y[3] == 3);
	y[0] = 1, y[1] = 1, y[2] = 1, y[3] = 1;
	CU_ASSERT_EQUAL(gw_topk_generic.decode_add(out, 24, 4, y), 0);
	CU_ASSERT(y[0] == 1 && y[1] == 5 && y[2] == 1 && y[3] == 4);
}

static void test_error_feedback(void)
{
	const float g1[4] = { 1, 4, 2, 3 }, g2[4] = { 0.1f, 0.1f, 0.1f, 0.1f };
	struct gw_enc_info info = { 0 };
	float res[4] = { 0 };
	uint8_t out[64];

	/* Step 1 sends 4 and 3 and keeps 1 and 2. */
	CU_ASSERT_EQUAL(enc(0.5, g1, res, res, 4, out, sizeof(out), &info), 24);
	CU_ASSERT(res[0] == 1 && res[1] == 0 && res[2] == 2 && res[3] == 0);
	/* Step 2: the small gradient rides on the residuals of 0 and 2. */
	CU_ASSERT_EQUAL(enc(0.5, g2, res, res, 4, out, sizeof(out), &info), 24);
	CU_ASSERT_EQUAL(gw_get32(out + 8), 0);
	CU_ASSERT_EQUAL(gw_get32(out + 12), 2);
	CU_ASSERT_EQUAL(gw_get32(out + 16), gw_f2u(1.0f + 0.1f));
	CU_ASSERT_EQUAL(gw_get32(out + 20), gw_f2u(2.0f + 0.1f));
	CU_ASSERT(res[0] == 0 && res[1] == 0.1f && res[2] == 0 && res[3] == 0.1f);
}

static void test_ties_and_nonfinite(void)
{
	/* Ties at the threshold go to the lowest indices; NaN and Inf are never
	 * selected even though they "outrank" every number. */
	const float x[8] = { 1, NAN, -2, 2, INFINITY, -2, 1, -0.0f };
	struct gw_enc_info info = { 0 };
	float res[8] = { 0 }, y[8];
	uint8_t out[128];

	CU_ASSERT_EQUAL(enc(0.25, x, res, res, 8, out, sizeof(out), &info), 8 + 2 * 8);
	CU_ASSERT_EQUAL(gw_get64(out), 2);
	CU_ASSERT_EQUAL(gw_get32(out + 8), 2);
	CU_ASSERT_EQUAL(gw_get32(out + 12), 3);
	CU_ASSERT_EQUAL(gw_get32(out + 16), gw_f2u(-2.0f));
	CU_ASSERT_EQUAL(info.flags, GW_PF_NONFINITE);
	CU_ASSERT_EQUAL(info.nonfinite_index, 1);
	CU_ASSERT(isnan(gw_u2f(info.nonfinite_bits)));
	CU_ASSERT(res[0] == 1 && res[1] == 0 && res[2] == 0 && res[3] == 0);
	CU_ASSERT(res[4] == 0 && res[5] == -2 && res[6] == 1);
	CU_ASSERT_EQUAL(gw_f2u(res[7]), gw_f2u(0.0f)); /* -0 + 0 = +0 */
	/* ratio 1 with two non-finite values: k = 6, the finite ones. */
	memset(&info, 0, sizeof(info));
	CU_ASSERT_EQUAL(enc(1, x, NULL, NULL, 8, out, sizeof(out), &info), 8 + 6 * 8);
	CU_ASSERT_EQUAL(gw_topk_generic.decode(out, 8 + 6 * 8, 8, y), 0);
	CU_ASSERT(y[1] == 0 && y[4] == 0 && y[2] == -2 && y[0] == 1);
	/* Only non-finite values: k = 0. */
	{
		const float z[3] = { NAN, -INFINITY, NAN };

		memset(&info, 0, sizeof(info));
		CU_ASSERT_EQUAL(enc(0.5, z, NULL, NULL, 3, out, sizeof(out), &info), 8);
		CU_ASSERT_EQUAL(gw_get64(out), 0);
		CU_ASSERT_EQUAL(info.nonfinite_index, 0);
	}
}

static void test_sizes_and_space(void)
{
	struct gw_codec c = mk(gw_codec_generic(gw_codec_find("topk")), 0.01);
	float x[100];
	uint8_t out[1024];
	struct gw_enc_info info = { 0 };
	uint64_t big = UINT64_C(1) << 32;

	/* Index width: u32 up to n = 2^32, u64 above. */
	CU_ASSERT_EQUAL(c.ops->bound(&c, big), 8 + k_of(0.01, big) * 8);
	CU_ASSERT_EQUAL(c.ops->bound(&c, big + 1), 8 + k_of(0.01, big + 1) * 12);
	CU_ASSERT_EQUAL(c.ops->bound(&c, 0), 8);
	CU_ASSERT_EQUAL(c.ops->bound(&c, 1), 16);
	CU_ASSERT_EQUAL(c.ops->bound(&c, 100), 16);
	c.p.ratio = 1e-9;
	CU_ASSERT_EQUAL(c.ops->bound(&c, 1000), 16); /* k >= 1 */
	c.p.ratio = 0.3;
	CU_ASSERT_EQUAL(c.ops->bound(&c, 10), 8 + 3 * 8);
	/* Scratch stays well below n for a small ratio at scale. */
	c.p.ratio = 0.01;
	CU_ASSERT(gw_codec_scratch_size(&c, UINT64_C(1) << 24) < (UINT64_C(1) << 24) / 2);

	/* n = 0 */
	CU_ASSERT_EQUAL(enc(0.5, NULL, NULL, NULL, 0, out, sizeof(out), &info), 8);
	CU_ASSERT_EQUAL(gw_get64(out), 0);
	CU_ASSERT_EQUAL(enc(0.5, NULL, NULL, NULL, 0, out, 7, &info), -ENOSPC);

	/* -ENOSPC before writing anything, exact to the byte, also when
	 * non-finite values shrink k below the bound. */
	tu_fill(x, 100, 7);
	for (int i = 0; i < 10; i++) {
		float res[100] = { 0 }, keep[100];

		res[i] = 1;
		memcpy(keep, res, sizeof(res));
		memset(out, 0xee, sizeof(out));
		CU_ASSERT_EQUAL(enc(0.05, x, res, res, 100, out, 47, &info), -ENOSPC);
		CU_ASSERT_EQUAL(memcmp(res, keep, sizeof(res)), 0);
		CU_ASSERT_EQUAL(out[0], 0xee);
	}
	CU_ASSERT_EQUAL(enc(0.05, x, NULL, NULL, 100, out, 48, &info), 48);
	x[3] = NAN, x[50] = INFINITY;
	CU_ASSERT_EQUAL(enc(1, x, NULL, NULL, 100, out, 8 + 98 * 8, &info), 8 + 98 * 8);
	CU_ASSERT_EQUAL(enc(1, x, NULL, NULL, 100, out, 8 + 98 * 8 - 1, &info), -ENOSPC);
	/* Bad arguments. */
	CU_ASSERT_EQUAL(enc(0, x, NULL, NULL, 100, out, sizeof(out), &info), -EINVAL);
	CU_ASSERT_EQUAL(enc(1.5, x, NULL, NULL, 100, out, sizeof(out), &info), -EINVAL);
	CU_ASSERT_EQUAL(enc(NAN, x, NULL, NULL, 100, out, sizeof(out), &info), -EINVAL);
	CU_ASSERT_EQUAL(enc(0.5, x, x, NULL, 100, out, sizeof(out), &info), -EINVAL);
	CU_ASSERT_EQUAL(enc(0.5, NULL, NULL, NULL, 100, out, sizeof(out), &info), -EINVAL);
}

/* ---- exactness against the reference ------------------------------------ */

static const double ratios[] = { 1e-9, 0.001, 0.01, 0.1, 0.3, 0.5, 1 };
#define NRATIOS (sizeof(ratios) / sizeof(ratios[0]))

static void test_random_small(void)
{
	static const uint64_t sizes[] = { 1,  2,  3,  7,  8,  9,   15,	16,   17,  31,
					  32, 33, 63, 64, 65, 100, 257, 1000, 4099 };
	float *x = tu_alloc(4099 * 4), *r = tu_alloc(4099 * 4);

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		uint64_t n = sizes[s];

		for (size_t q = 0; q < NRATIOS; q++) {
			tu_fill(x, n, 100 + s);
			tu_fill(r, n, 200 + s);
			check(x, NULL, n, ratios[q]);
			check(x, r, n, ratios[q]);
			tu_fill_hard(x, n, 300 + s, 0);
			check(x, NULL, n, ratios[q]);
			tu_fill_hard(x, n, 400 + s, 1);
			check(x, r, n, ratios[q]);
		}
	}
	free(x), free(r);
}

typedef void (*filler)(float *x, uint64_t n, uint64_t seed);

static void f_equal(float *x, uint64_t n, uint64_t s)
{
	(void)s;
	for (uint64_t i = 0; i < n; i++)
		x[i] = -3.5f;
}
static void f_zero(float *x, uint64_t n, uint64_t s)
{
	(void)s;
	memset(x, 0, n * 4);
}
static void f_signed_zero(float *x, uint64_t n, uint64_t s)
{
	for (uint64_t i = 0; i < n; i++)
		x[i] = (i * 7 + s) % 3 ? -0.0f : 0.0f;
}
static void f_subnormal(float *x, uint64_t n, uint64_t s)
{
	for (uint64_t i = 0; i < n; i++)
		x[i] = gw_u2f((uint32_t)((i * 2654435761u + s) % 4096) | ((i & 1) << 31));
}
static void f_ties(float *x, uint64_t n, uint64_t s)
{
	for (uint64_t i = 0; i < n; i++)
		x[i] = (float)((i * 2654435761u + s) % 5) - 2.0f;
}
static void f_sparse(float *x, uint64_t n, uint64_t s)
{
	tu_fill(x, n, s);
	for (uint64_t i = 0; i < n; i++)
		if ((i * 2654435761u) % 1000)
			x[i] = 0;
}
/* Big values exactly where the strided sample looks: it overestimates the
 * threshold and the pass finds fewer than k candidates. */
static void f_fool_high(float *x, uint64_t n, uint64_t s)
{
	uint64_t stride = n / 16384;

	tu_fill(x, n, s);
	for (uint64_t i = 0; i < n; i++)
		x[i] *= 0.001f;
	for (uint64_t j = 0; j < 16384 && stride; j++)
		x[j * stride + stride / 2] = 100.0f + (float)j;
}
/* Small values where the sample looks: it underestimates, too many. */
static void f_fool_low(float *x, uint64_t n, uint64_t s)
{
	uint64_t stride = n / 16384;

	tu_fill(x, n, s);
	for (uint64_t i = 0; i < n; i++)
		x[i] += x[i] < 0 ? -10.0f : 10.0f;
	for (uint64_t j = 0; j < 16384 && stride; j++)
		x[j * stride + stride / 2] = 1e-3f;
}
static void f_nan_heavy(float *x, uint64_t n, uint64_t s)
{
	tu_fill(x, n, s);
	for (uint64_t i = 0; i < n; i++)
		if ((i * 2654435761u) % 3 == 0)
			x[i] = i & 1 ? NAN : -INFINITY;
}
static void f_hard(float *x, uint64_t n, uint64_t s)
{
	tu_fill_hard(x, n, s, 1);
}
static void f_normal(float *x, uint64_t n, uint64_t s)
{
	tu_fill(x, n, s);
}

static const filler fillers[] = {
	f_normal, f_hard,   f_equal,	 f_zero,     f_signed_zero, f_subnormal,
	f_ties,	  f_sparse, f_fool_high, f_fool_low, f_nan_heavy,
};
#define NFILL (sizeof(fillers) / sizeof(fillers[0]))

static void test_adversarial(void)
{
	static const uint64_t sizes[] = { 33, 5000, 65536, 65537, 300001 };
	float *x = tu_alloc(300001 * 4), *r = tu_alloc(300001 * 4);

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		for (size_t f = 0; f < NFILL; f++) {
			uint64_t n = sizes[s];

			fillers[f](x, n, s * 16 + f);
			check(x, NULL, n, 0.01);
			check(x, NULL, n, 1e-9);
			if (n < 100000)
				check(x, NULL, n, 0.5);
			tu_fill(r, n, 77 + f);
			for (uint64_t i = 0; i < n; i++)
				r[i] *= 1e-3f;
			check(x, r, n, 0.001);
		}
	}
	free(x), free(r);
}

static void test_large(void)
{
	uint64_t n = UINT64_C(1) << 20;
	float *x = tu_alloc(n * 4), *r = tu_alloc(n * 4);

	tu_fill_seed(x, n);
	check(x, NULL, n, 0.01);
	tu_fill(r, n, 3);
	check(x, r, n, 0.01);
	tu_fill_hard(x, n, 4, 1);
	check(x, NULL, n, 0.001);
	f_ties(x, n, 5);
	check(x, NULL, n, 0.01);
	free(x), free(r);
}

/* ---- decoding hostile sections ------------------------------------------ */

#define DN 10

static void reject(const uint8_t *sec, size_t len, uint64_t n)
{
	float y[DN + 1];

	for (int i = 0; i <= DN; i++)
		y[i] = 42.0f;
	CU_ASSERT_EQUAL(gw_topk_generic.decode(sec, len, n, y), -EBADMSG);
	CU_ASSERT_EQUAL(gw_topk_generic.decode_add(sec, len, n, y), -EBADMSG);
	for (int i = 0; i <= DN; i++)
		CU_ASSERT_EQUAL(y[i], 42.0f);
}

static void test_decode_rejects(void)
{
	float x[DN], y[DN];
	uint8_t good[64], b[64];
	struct gw_enc_info info = { 0 };
	size_t len;

	tu_fill(x, DN, 11);
	len = (size_t)enc(0.3, x, NULL, NULL, DN, good, sizeof(good), &info);
	CU_ASSERT_EQUAL_FATAL(len, 8 + 3 * 8);
	CU_ASSERT_EQUAL(gw_topk_generic.decode(good, len, DN, y), 0);

	for (size_t l = 0; l < len; l++) /* every truncation */
		reject(good, l, DN);
	memcpy(b, good, len);
	b[len] = 0;
	reject(b, len + 1, DN);			  /* trailing byte */
	reject(good, len, gw_get32(good + 16));	  /* last index == n */
	reject(good, len, UINT64_C(1) << 32 | 1); /* n > 2^32 means u64 indices */
	reject(good, len, GW_MAX_ELEMS + 1);
#define MUT(stmt)                                                                                  \
	do {                                                                                       \
		memcpy(b, good, len);                                                              \
		stmt;                                                                              \
		reject(b, len, DN);                                                                \
	} while (0)
	MUT(gw_put64(b, 4)); /* k disagrees with len */
	MUT(gw_put64(b, 2));
	MUT(gw_put64(b, DN + 1)); /* k > n */
	MUT(gw_put64(b, UINT64_MAX));
	MUT(gw_put32(b + 8, gw_get32(good + 12))); /* duplicate */
	MUT((gw_put32(b + 8, gw_get32(good + 12)), gw_put32(b + 12, gw_get32(good + 8))));
	MUT(gw_put32(b + 16, DN)); /* out of range */
	MUT(gw_put32(b + 16, UINT32_MAX));
#undef MUT
	{
		/* k > n with a length that matches it. */
		uint8_t s[8 + 2 * 8] = { 2 };

		gw_put32(s + 8, 0);
		gw_put32(s + 12, 1);
		reject(s, sizeof(s), 1);
		CU_ASSERT_EQUAL(gw_topk_generic.decode(s, sizeof(s), 2, y), 0);
	}
	{
		/* k = 0 is a valid (all non-finite) section; n = 0 too. */
		uint8_t s[8] = { 0 };

		for (int i = 0; i < DN; i++)
			y[i] = 5;
		CU_ASSERT_EQUAL(gw_topk_generic.decode(s, 8, DN, y), 0);
		CU_ASSERT_EQUAL(y[0], 0);
		CU_ASSERT_EQUAL(gw_topk_generic.decode(s, 8, 0, y), 0);
	}
}

static void test_payload_roundtrip(void)
{
	uint64_t n = 5000;
	float *x = tu_alloc(n * 4), *y = tu_alloc(n * 4), *res = tu_alloc(n * 4);
	struct gw_codec c;
	char err[128];
	void *scratch, *buf;
	size_t cap;
	ssize_t len;

	find_impls();
	tu_fill_hard(x, n, 21, 1);
	for (int v = 0; v < nimpl; v++) {
		CU_ASSERT_EQUAL_FATAL(gw_codec_parse("topk:ratio=0.02", &c, err, sizeof(err)), 0);
		c.ops = impls[v];
		cap = gw_payload_bound(&c, n);
		scratch = tu_alloc(gw_codec_scratch_size(&c, n));
		buf = tu_alloc(cap);
		memset(res, 0, n * 4);
		len = gw_payload_encode(&c, NULL, scratch, x, res, res, n, buf, cap);
		CU_ASSERT_FATAL(len > 0);
		CU_ASSERT_EQUAL(((uint8_t *)buf)[1], GW_CODEC_TOPK);
		CU_ASSERT_EQUAL(gw_payload_decode(buf, (size_t)len, y, n), 0);
		/* The first non-finite value comes back; the rest are y or 0. */
		CU_ASSERT(isnan(y[n / 3]));
		for (uint64_t i = 0; i < n; i++) {
			if (i == n / 3 || gw_nonfinite(x[i]))
				continue;
			if (y[i] + res[i] != x[i]) {
				CU_FAIL("payload: y + res != x");
				break;
			}
		}
		for (uint64_t i = 0; i < n; i++)
			y[i] = 1;
		CU_ASSERT_EQUAL(gw_payload_decode_add(buf, (size_t)len, y, n), 0);
		CU_ASSERT(y[0] == 1 + (x[0] - res[0]));
		free(scratch), free(buf);
	}
	free(x), free(y), free(res);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "seed case: ratio 0.5 on [1,4,2,3]", test_seed_case },
		{ "error feedback accumulates", test_error_feedback },
		{ "ties to lowest index, non-finite never selected", test_ties_and_nonfinite },
		{ "bound, index width, -ENOSPC, -EINVAL", test_sizes_and_space },
		{ "random inputs vs sort reference, all variants", test_random_small },
		{ "adversarial inputs vs sort reference", test_adversarial },
		{ "n = 2^20 vs sort reference", test_large },
		{ "malformed sections rejected, output untouched", test_decode_rejects },
		{ "payload round trip", test_payload_roundtrip },
		CU_TEST_INFO_NULL,
	};
	return tu_run("topk", tests);
}
