/* SPDX-License-Identifier: MIT */
/*
 * test_powersgd.c - the PowerSGD codec: a matrix of exact rank r comes back
 * to float32 precision in a few warm-started steps, P is orthonormal, zero
 * and constant tensors give no NaN, error feedback makes the running sum of
 * what arrives follow the running sum of what was sent, the raw cases
 * (warm-up, not worth it, NaN/Inf), spec strings that fit the handshake,
 * state save/restore, and malformed sections rejected untouched.
 *
 * `test_powersgd --dump DIR` writes fixed cases (input, P, Q, decoded) for
 * tests/powersgd_ref.py, which recomputes them with numpy.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "tutil.h"
#include "codec_impl.h"
#include "../common/lowrank_math.h"

#define HDR 24

struct psgd {
	struct gw_codec c;
	struct gw_psgd_view v;
	void *state, *scratch;
	uint8_t *out;
	size_t cap;
};

static void psgd_open(struct psgd *s, const char *spec, uint64_t n)
{
	char err[128];

	if (gw_codec_parse(spec, &s->c, err, sizeof(err))) { /* a test bug */
		fprintf(stderr, "%s\n", err);
		abort();
	}
	gw_psgd_view(&s->c.p, n, &s->v);
	s->state = tu_alloc(gw_codec_state_size(&s->c, n));
	s->scratch = tu_alloc(gw_codec_scratch_size(&s->c, n));
	s->cap = s->c.ops->bound(&s->c, n);
	s->out = tu_alloc(s->cap);
}

static void psgd_close(struct psgd *s)
{
	free(s->state);
	free(s->scratch);
	free(s->out);
}

static ssize_t psgd_enc(struct psgd *s, const float *x, float *res, uint64_t n)
{
	struct gw_enc_info info = { 0 };

	return s->c.ops->encode(&s->c, s->state, s->scratch, x, res, res, n, s->out, s->cap, &info);
}

static double rel_err(const float *x, const float *y, uint64_t n)
{
	double e = 0, s = 0;

	for (uint64_t i = 0; i < n; i++) {
		e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
		s += (double)x[i] * x[i];
	}
	return s ? sqrt(e / s) : sqrt(e);
}

/* max |P^T P - I| of the section's P. */
static double ortho_err(const uint8_t *sec, const struct gw_psgd_view *v)
{
	const uint8_t *p = sec + HDR;
	double worst = 0;

	for (uint32_t a = 0; a < v->rank; a++)
		for (uint32_t b = 0; b < v->rank; b++) {
			double s = 0;

			for (uint64_t i = 0; i < v->rows; i++)
				s += (double)gw_u2f(gw_get32(p + 4 * (a * v->rows + i))) *
				     gw_u2f(gw_get32(p + 4 * (b * v->rows + i)));
			worst = fmax(worst, fabs(s - (a == b)));
		}
	return worst;
}

static void exact_rank(unsigned r, uint64_t rows, uint64_t cols)
{
	char spec[96];
	uint64_t n = rows * cols;
	float *x = tu_alloc(n * 4), *y = tu_alloc(n * 4);
	struct psgd s;
	double e = 1;

	snprintf(spec, sizeof(spec), "powersgd:rank=%u,cols=%llu", r, (unsigned long long)cols);
	psgd_open(&s, spec, n);
	CU_ASSERT_EQUAL_FATAL(s.v.rank, r);
	tu_low_rank(x, rows, cols, r, 42 + r, 43 + r);
	printf("\n  rank %u, %llu x %llu, relative error by step:", r, (unsigned long long)rows,
	       (unsigned long long)cols);
	for (int step = 0; step < 3; step++) {
		ssize_t len = psgd_enc(&s, x, NULL, n);

		CU_ASSERT_FATAL(len == (ssize_t)(HDR + (rows + cols) * r * 4));
		CU_ASSERT(ortho_err(s.out, &s.v) < 1e-5);
		CU_ASSERT_EQUAL_FATAL(s.c.ops->decode(s.out, (size_t)len, n, y), 0);
		e = rel_err(x, y, n);
		printf(" %.2e", e);
	}
	CU_ASSERT(e < 1e-5); /* float32 precision, summing ~cols products */
	psgd_close(&s);
	free(x);
	free(y);
}

static void test_exact_rank(void)
{
	exact_rank(1, 300, 200);
	exact_rank(4, 512, 384);  /* Gram-Schmidt */
	exact_rank(16, 512, 384); /* Householder */
}

/* P^T P = I on full-rank data too, for every rank, with padding. */
static void test_orthonormal(void)
{
	static const unsigned ranks[] = { 1, 2, 3, 4, 5, 8, 16, 32 };
	uint64_t n = 100003;
	float *x = tu_alloc(n * 4);

	tu_fill(x, n, 3);
	for (size_t k = 0; k < sizeof(ranks) / sizeof(ranks[0]); k++) {
		char spec[64];
		struct psgd s;
		double worst = 0;

		snprintf(spec, sizeof(spec), "powersgd:rank=%u", ranks[k]);
		psgd_open(&s, spec, n);
		CU_ASSERT_EQUAL(s.v.rows * s.v.cols >= n, 1);
		for (int step = 0; step < 3; step++) {
			CU_ASSERT_FATAL(psgd_enc(&s, x, NULL, n) > 0);
			worst = fmax(worst, ortho_err(s.out, &s.v));
		}
		CU_ASSERT(worst < 1e-5);
		psgd_close(&s);
	}
	free(x);
}

/* Zero and constant tensors: finite, exact for zero, close for constant
 * (rank 1), and the zero Q the zero tensor leaves is drawn again. */
static void test_zero_constant(void)
{
	uint64_t n = 4096;
	float *x = tu_alloc(n * 4), *y = tu_alloc(n * 4), *r = tu_alloc(n * 4);
	struct psgd s;

	for (int rank = 1; rank <= 8; rank *= 8) {
		char spec[64];

		snprintf(spec, sizeof(spec), "powersgd:rank=%d", rank);
		psgd_open(&s, spec, n);
		memset(x, 0, n * 4);
		for (int step = 0; step < 2; step++) {
			ssize_t len = psgd_enc(&s, x, r, n);

			CU_ASSERT_EQUAL(s.out[0], 1);
			CU_ASSERT_EQUAL_FATAL(s.c.ops->decode(s.out, (size_t)len, n, y), 0);
			for (uint64_t i = 0; i < n; i++)
				CU_ASSERT_FATAL(y[i] == 0 && r[i] == 0);
		}
		for (uint64_t i = 0; i < n; i++)
			x[i] = -2.5f;
		for (int step = 0; step < 2; step++) {
			ssize_t len = psgd_enc(&s, x, NULL, n);

			CU_ASSERT_EQUAL_FATAL(s.c.ops->decode(s.out, (size_t)len, n, y), 0);
			for (uint64_t i = 0; i < n; i++)
				CU_ASSERT_FATAL(!gw_nonfinite(y[i]));
			CU_ASSERT(rel_err(x, y, n) < 1e-6);
		}
		psgd_close(&s);
	}
	free(x);
	free(y);
	free(r);
}

/*
 * Error feedback: sum(sent) - sum(arrived) is the residual (up to float
 * rounding), and it stays bounded: below 8 norms of one step's gradient
 * after 60 and after 240 steps, so relative to the growing sum it goes to
 * zero. Without error feedback the lost component piles up with T.
 */
static void test_error_feedback(void)
{
	enum { T = 240, T1 = 60 };
	uint64_t n = 128 * 96;
	float *x = tu_alloc(n * 4), *y = tu_alloc(n * 4), *r = tu_alloc(n * 4);
	float *sig = tu_alloc(n * 4);
	double *ss = tu_alloc(n * 8), *sr = tu_alloc(n * 8);
	double gap[2][2], rel[2][2], step_norm = 0;
	struct psgd s;

	tu_low_rank(sig, 128, 96, 3, 7, 8); /* rank 3 signal, sent at rank 2 */
	for (int ef = 1; ef >= 0; ef--) {
		psgd_open(&s, "powersgd:rank=2,cols=96", n);
		memset(r, 0, n * 4);
		memset(ss, 0, n * 8);
		memset(sr, 0, n * 8);
		for (int t = 0; t < T; t++) {
			ssize_t len;

			tu_fill(y, n, 1000 + (uint64_t)t); /* plus noise */
			for (uint64_t i = 0; i < n; i++)
				x[i] = sig[i] * 0.2f + y[i];
			len = psgd_enc(&s, x, ef ? r : NULL, n);
			CU_ASSERT_FATAL(len > 0);
			CU_ASSERT_EQUAL_FATAL(s.c.ops->decode(s.out, (size_t)len, n, y), 0);
			for (uint64_t i = 0; i < n; i++) {
				ss[i] += x[i];
				sr[i] += y[i];
			}
			if (t + 1 != T1 && t + 1 != T)
				continue;
			double g = 0, sum = 0;

			step_norm = 0;
			for (uint64_t i = 0; i < n; i++) {
				g += (ss[i] - sr[i]) * (ss[i] - sr[i]);
				sum += ss[i] * ss[i];
				step_norm += (double)x[i] * x[i];
				if (ef && fabs(ss[i] - sr[i] - r[i]) > 1e-3 * (1 + fabs(r[i]))) {
					CU_FAIL("sent - arrived != residual");
					break;
				}
			}
			gap[ef][t + 1 == T] = sqrt(g) / sqrt(step_norm);
			rel[ef][t + 1 == T] = sqrt(g) / sqrt(sum);
		}
		psgd_close(&s);
	}
	printf("\n  |sum sent - sum arrived| in step norms (and relative to |sum sent|):"
	       "\n    EF    after %d: %.2f (%.3f), after %d: %.2f (%.3f)"
	       "\n    no EF after %d: %.2f (%.3f), after %d: %.2f (%.3f)",
	       T1, gap[1][0], rel[1][0], T, gap[1][1], rel[1][1], T1, gap[0][0], rel[0][0], T,
	       gap[0][1], rel[0][1]);
	CU_ASSERT(gap[1][0] < 8 && gap[1][1] < 8);
	CU_ASSERT(rel[1][1] < 0.5 * rel[1][0]);
	CU_ASSERT(gap[0][1] > 2 * gap[1][1]);
	free(x);
	free(y);
	free(r);
	free(sig);
	free(ss);
	free(sr);
}

/* Raw form: not worth it, warm-up, NaN. */
static void test_raw(void)
{
	uint64_t n = 1000;
	float x[1000], y[1000], r[1000] = { 0 };
	struct psgd s;
	ssize_t len;

	tu_fill(x, n, 9);
	psgd_open(&s, "powersgd:rank=16", n); /* 32 x 32 at rank 16: no saving */
	CU_ASSERT_EQUAL(s.v.rank, 0);
	CU_ASSERT_EQUAL(psgd_enc(&s, x, NULL, n), HDR + 4 * 1000);
	CU_ASSERT_EQUAL(s.out[0], 0);
	psgd_close(&s);

	psgd_open(&s, "powersgd:rank=2,warmup=2", n);
	for (int step = 0; step < 3; step++) {
		len = psgd_enc(&s, x, r, n);
		CU_ASSERT_EQUAL(s.out[0], step >= 2);
		CU_ASSERT_EQUAL(gw_psgd_step(s.state), (uint64_t)step + 1);
		CU_ASSERT_EQUAL_FATAL(s.c.ops->decode(s.out, (size_t)len, n, y), 0);
		if (step < 2)
			CU_ASSERT_EQUAL(memcmp(x, y, sizeof(x)), 0);
	}
	x[10] = NAN;
	len = psgd_enc(&s, x, r, n);
	CU_ASSERT_EQUAL(s.out[0], 0);
	CU_ASSERT_EQUAL_FATAL(s.c.ops->decode(s.out, (size_t)len, n, y), 0);
	CU_ASSERT(y[10] == 0);
	for (uint64_t i = 0; i < n; i++)
		CU_ASSERT_FATAL(r[i] == 0);
	psgd_close(&s);
}

/* Specs: defaults, every key, and the widest spec fits the handshake. */
static void test_spec(void)
{
	struct gw_codec c;
	char err[160], buf[160];
	ssize_t len;

	CU_ASSERT_EQUAL_FATAL(gw_codec_parse("powersgd:rank=4", &c, err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(c.p.rank, 4);
	CU_ASSERT_EQUAL(c.p.min_factor, 2);
	CU_ASSERT_EQUAL(c.p.warmup, 0);
	CU_ASSERT_EQUAL(c.p.cols, 0);
	len = gw_codec_format(&c, buf, sizeof(buf));
	CU_ASSERT_STRING_EQUAL(buf, "powersgd:rank=4,min_factor=2,warmup=0,seed=0,cols=0");
	CU_ASSERT_EQUAL_FATAL(gw_codec_parse("powersgd:rank=256,min_factor=999999.123456789,"
					     "warmup=4294967295,seed=18446744073709551615,"
					     "cols=1099511627776",
					     &c, err, sizeof(err)),
			      0);
	len = gw_codec_format(&c, buf, sizeof(buf));
	CU_ASSERT(len > 0 && len <= 127); /* GW_HS_SPEC_MAX */
	CU_ASSERT(gw_codec_parse("powersgd:rank=0", &c, err, sizeof(err)) < 0);
	CU_ASSERT(gw_codec_parse("powersgd:rank=257", &c, err, sizeof(err)) < 0);
	CU_ASSERT(gw_codec_parse("powersgd:min_factor=0.5", &c, err, sizeof(err)) < 0);
}

/* The state is a plain blob: a copy restores the stream bit for bit. */
static void test_state_restore(void)
{
	uint64_t n = 64 * 64;
	float *x = tu_alloc(n * 4), *r1 = tu_alloc(n * 4), *r2 = tu_alloc(n * 4);
	struct psgd a, b;
	size_t ss;

	psgd_open(&a, "powersgd:rank=3,seed=11", n);
	psgd_open(&b, "powersgd:rank=3,seed=11", n);
	ss = gw_codec_state_size(&a.c, n);
	CU_ASSERT_EQUAL(ss, GW_PSGD_STATE_HDR + 64 * 3 * 4);
	for (int t = 0; t < 3; t++) {
		tu_fill(x, n, (uint64_t)t);
		CU_ASSERT_FATAL(psgd_enc(&a, x, r1, n) > 0);
	}
	memcpy(b.state, a.state, ss); /* "checkpoint" */
	memcpy(r2, r1, n * 4);
	tu_fill(x, n, 77);
	CU_ASSERT_FATAL(psgd_enc(&a, x, r1, n) == psgd_enc(&b, x, r2, n));
	CU_ASSERT_EQUAL(memcmp(a.out, b.out, a.cap < 4096 ? a.cap : 4096), 0);
	CU_ASSERT_EQUAL(memcmp(r1, r2, n * 4), 0);
	psgd_close(&a);
	psgd_close(&b);
	free(x);
	free(r1);
	free(r2);
}

/* Malformed sections: rejected, output untouched. */
static void test_hostile(void)
{
	uint64_t n = 20; /* cols 5, rows 4 */
	uint8_t sec[HDR + 4 * 64] = { 0 }, bad[sizeof(sec) + 4];
	float y[20], canary[20];
	size_t good = HDR + 4 * (4 + 5) * 2;
	const struct gw_codec_ops *o = gw_codec_find("powersgd");

	for (int i = 0; i < 20; i++)
		canary[i] = y[i] = -7;
	sec[0] = 1;
	gw_put32(sec + 4, 2);
	gw_put64(sec + 8, 4);
	gw_put64(sec + 16, 5);
	for (size_t t = HDR; t < good; t += 4)
		gw_put32(sec + t, gw_f2u(0.25f));
	CU_ASSERT_EQUAL(o->decode(sec, good, n, y), 0);
	CU_ASSERT(y[19] == 0.125f);
#define REJECT(buf, len, nn)                                                                       \
	do {                                                                                       \
		for (int i_ = 0; i_ < 20; i_++)                                                    \
			y[i_] = -7;                                                                \
		CU_ASSERT_EQUAL(o->decode(buf, len, nn, y), -EBADMSG);                             \
		CU_ASSERT_EQUAL(o->decode_add(buf, len, nn, y), -EBADMSG);                         \
		CU_ASSERT_EQUAL(memcmp(y, canary, sizeof(y)), 0);                                  \
	} while (0)
	REJECT(sec, good - 4, n); /* short */
	REJECT(sec, good + 4, n); /* trailing */
	REJECT(sec, 10, n);	  /* no header */
	REJECT(sec, good, 15);	  /* rows 4 != ceil(15 / 5) */
	REJECT(sec, good, 0);
	memcpy(bad, sec, sizeof(sec));
	bad[0] = 2; /* unknown form */
	REJECT(bad, good, n);
	bad[0] = 1;
	bad[2] = 1; /* reserved */
	REJECT(bad, good, n);
	bad[2] = 0;
	gw_put32(bad + HDR + 8, gw_f2u(NAN)); /* a P value */
	REJECT(bad, good, n);
	gw_put32(bad + HDR + 8, gw_f2u(INFINITY));
	REJECT(bad, good, n);
	memcpy(bad, sec, sizeof(sec));
	gw_put32(bad + 4, 5); /* r' > rows */
	REJECT(bad, HDR + 4 * 9 * 5, n);
	gw_put32(bad + 4, 0); /* r' = 0 */
	REJECT(bad, HDR, n);
	gw_put32(bad + 4, 2);
	gw_put64(bad + 16, 0); /* cols 0 */
	REJECT(bad, good, n);
	gw_put64(bad + 8, 1); /* cols > n */
	gw_put64(bad + 16, 21);
	REJECT(bad, HDR + 4 * 22 * 2, n);
	gw_put64(bad + 8, UINT64_C(1) << 62); /* overflowing sizes */
	gw_put64(bad + 16, UINT64_C(1) << 62);
	REJECT(bad, good, n);
	memset(bad, 0, sizeof(bad)); /* raw */
	CU_ASSERT_EQUAL(o->decode(bad, HDR + 80, n, y), 0);
	gw_put64(bad + 8, 4);
	REJECT(bad, HDR + 80, n);
	gw_put64(bad + 8, 0);
	REJECT(bad, HDR + 76, n);
#undef REJECT
}

int main(int argc, char **argv);

/* ---- cases for tests/powersgd_ref.py ------------------------------------ */

static int dump(const char *dir)
{
	static const struct {
		uint64_t n, cols;
		unsigned rank;
		uint64_t seed;
	} cases[] = {
		{ 64 * 48, 48, 4, 1 },	{ 64 * 48, 48, 1, 2 },	   { 1000, 0, 3, 3 },
		{ 100 * 70, 70, 8, 4 }, { 300 * 200, 200, 16, 5 },
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		char spec[128], path[512];
		struct psgd s;
		uint64_t n = cases[k].n, hdr[5];
		float *x = tu_alloc(n * 4), *y = tu_alloc(n * 4);
		ssize_t len;
		FILE *f;

		snprintf(spec, sizeof(spec), "powersgd:rank=%u,cols=%llu,seed=%llu,min_factor=1",
			 cases[k].rank, (unsigned long long)cases[k].cols,
			 (unsigned long long)cases[k].seed);
		psgd_open(&s, spec, n);
		tu_fill(x, n, 100 + k);
		len = psgd_enc(&s, x, NULL, n);
		if (len <= 0 || s.out[0] != 1 || s.c.ops->decode(s.out, (size_t)len, n, y))
			return 1;
		hdr[0] = n;
		hdr[1] = s.v.rows;
		hdr[2] = s.v.cols;
		hdr[3] = s.v.rank;
		hdr[4] = cases[k].seed;
		snprintf(path, sizeof(path), "%s/case%zu.bin", dir, k);
		f = fopen(path, "wb");
		if (!f)
			return 1;
		fwrite(hdr, 8, 5, f);
		fwrite(x, 4, n, f);
		fwrite(s.out + HDR, 1, (size_t)len - HDR, f); /* P, Q */
		fwrite(y, 4, n, f);
		fclose(f);
		psgd_close(&s);
		free(x);
		free(y);
	}
	return 0;
}

int main(int argc, char **argv)
{
	static CU_TestInfo tests[] = {
		{ "exact rank r, reproduced", test_exact_rank },
		{ "P^T P = I", test_orthonormal },
		{ "zero and constant tensors", test_zero_constant },
		{ "error feedback", test_error_feedback },
		{ "raw: not worth it, warm-up, NaN", test_raw },
		{ "spec strings", test_spec },
		{ "state restore", test_state_restore },
		{ "hostile sections", test_hostile },
		CU_TEST_INFO_NULL,
	};
	if (argc == 3 && !strcmp(argv[1], "--dump"))
		return dump(argv[2]);
	return tu_run("powersgd", tests);
}
