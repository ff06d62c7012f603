/* SPDX-License-Identifier: MIT */
/*
 * test_conformance.c - every implementation in the codec table, checked the
 * same way (crypto's testmgr for codecs):
 *
 *  - the payload fits bound(), and a buffer one byte short is -ENOSPC;
 *  - the bytes, the residual bits and the flags equal the generic
 *    implementation's for the same input (the SIMD contract);
 *  - the generic decoder and the chosen one decode to identical bits;
 *  - round trip within the codec's stated error bound (docs/codecs.md);
 *  - residual identity: x + r_old == decoded + r_new up to one rounding,
 *    and a residual never holds NaN/Inf;
 *  - decode_add adds exactly the decoded values;
 *  - golden vectors in tests/vectors (GW_WRITE_VECTORS=1 rewrites them).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "tutil.h"
#include "codec_impl.h"

/* Specs every implementation of a codec is run with. */
static const char *const specs[] = {
	"none",
	"fp16",
	"bf16",
	"int8",
	"int8:bucket=7",
	"int8:bucket=64,rounding=stochastic,seed=9",
	"onebit",
	"onebit:bucket=5",
	"onebit:bucket=24",
	"topk",
	"topk:ratio=0.3",
	"topk:ratio=1",
	"randomk",
	"randomk:ratio=0.5,seed=3",
	"powersgd",
	"powersgd:rank=1",
	"powersgd:rank=8,seed=5,min_factor=1",
	"powersgd:rank=2,warmup=1",
	"powersgd:rank=3,cols=5,min_factor=1.5",
};
#define NSPECS (sizeof(specs) / sizeof(specs[0]))

static const uint64_t sizes[] = { 0,   1,   2,	 3,   7,    8,	  9,	 15,	16,
				  17,  31,  32,	 33,  63,   64,	  65,	 127,	129,
				  255, 511, 512, 513, 1000, 4097, 65537, 300007 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

enum { DATA_NORMAL, DATA_HARD, DATA_NONFINITE, DATA_KINDS };

struct run {
	uint8_t *pay;
	ssize_t len;
	float *res; /* residual out (EF) */
};

struct bufs {
	float *x, *r, *y, *dec, *dec2, *acc;
	uint8_t *pay, *pay2;
	void *state, *scratch;
	size_t cap, state_cap, scratch_cap;
};

static unsigned checked_impls, skipped_impls;

static void fill(float *x, uint64_t n, int kind, uint64_t seed)
{
	if (kind == DATA_NORMAL)
		tu_fill(x, n, seed);
	else
		tu_fill_hard(x, n, seed, kind == DATA_NONFINITE);
}

/* Encode with c from a zeroed state. */
static ssize_t encode(const struct gw_codec *c, struct bufs *b, const float *x, const float *r,
		      float *rout, uint64_t n, uint8_t *out, size_t cap)
{
	size_t ss = gw_codec_state_size(c, n), sc = gw_codec_scratch_size(c, n);

	CU_ASSERT_FATAL(ss <= b->state_cap && sc <= b->scratch_cap);
	memset(b->state, 0, ss);
	if (r)
		memcpy(rout, r, (size_t)n * 4); /* in place: res == res_out */
	return gw_payload_encode(c, b->state, b->scratch, x, r ? rout : NULL, r ? rout : NULL, n,
				 out, cap);
}

/* Half an ulp of a format with `bits` mantissa bits at |v|, at least `min`. */
static float half_ulp(float v, int bits, float min)
{
	return v == 0 ? min : fmaxf(ldexpf(1, ilogbf(fabsf(v)) - bits), min);
}

static float ulp(float v)
{
	v = fabsf(v);
	return v < 0x1p-126f ? 0x1p-149f : nextafterf(v, INFINITY) - v;
}

/* Largest finite |y| in [lo, hi). */
static float maxabs(const float *y, uint64_t lo, uint64_t hi)
{
	float m = 0;

	for (uint64_t i = lo; i < hi; i++)
		if (!gw_nonfinite(y[i]) && fabsf(y[i]) > m)
			m = fabsf(y[i]);
	return m;
}

/*
 * PowerSGD: P P^T M is an orthogonal projection of M, so the error norm is at
 * most the input norm; a step with NaN/Inf travels raw (finite values exact).
 */
static void check_bound_powersgd(const float *y, const float *dec, uint64_t n, uint32_t flags)
{
	double ey = 0, ee = 0;
	int exact = 1;

	for (uint64_t i = 0; i < n; i++) {
		if (gw_nonfinite(y[i]))
			continue;
		ey += (double)y[i] * y[i];
		ee += ((double)y[i] - dec[i]) * ((double)y[i] - dec[i]);
		exact &= gw_f2u(y[i]) == gw_f2u(dec[i]) || (y[i] == 0 && dec[i] == 0);
	}
	CU_ASSERT(ee <= ey * (1 + 1e-5) + 1e-30);
	if (flags & GW_PF_NONFINITE)
		CU_ASSERT(exact);
}

/* The stated error bound of each codec (docs/codecs.md, "Error bound"). */
static void check_bound(const struct gw_codec *c, const float *y, const float *dec, uint64_t n,
			int ef, uint32_t flags)
{
	const struct gw_codec_params *p = &c->p;
	uint64_t sent = 0, finite = 0;
	float min_sent = INFINITY, max_unsent = 0;
	int ok = 1;

	for (uint64_t i = 0; i < n && ok; i++) {
		float v = y[i], d = dec[i], e = fabsf(v - d);

		if (gw_nonfinite(v))
			continue;
		finite++;
		switch (c->ops->id) {
		case GW_CODEC_NONE:
			ok = gw_f2u(v) == gw_f2u(d);
			break;
		case GW_CODEC_FP16:
			if (fabsf(v) >= 65520.0f)
				ok = fabsf(d) == 65504.0f && (flags & GW_PF_SATURATED);
			else /* half an fp16 ulp; 2^-25 below the normal range */
				ok = e <= half_ulp(v, 11, 0x1p-25f);
			break;
		case GW_CODEC_BF16:
			if (fabsf(v) > 0x1.fefffep127f)
				ok = (flags & GW_PF_SATURATED) != 0;
			else
				ok = e <= half_ulp(v, 8, 0x1p-134f);
			break;
		case GW_CODEC_INT8: {
			uint64_t lo = i / p->bucket * p->bucket;
			float scale =
				maxabs(y, lo, lo + p->bucket < n ? lo + p->bucket : n) / 127.0f;
			float lim = p->rounding == GW_ROUND_NEAREST ? 0.5f * scale : scale;

			ok = e <= lim * (1 + 0x1p-18f) + ulp(v);
			break;
		}
		case GW_CODEC_ONEBIT: /* the sign survives; zero is positive */
			ok = (v >= 0) == (d >= 0) && !gw_nonfinite(d);
			break;
		case GW_CODEC_TOPK:
			if (gw_f2u(d) == gw_f2u(v) && d != 0) {
				sent++;
				min_sent = fminf(min_sent, fabsf(v));
			} else {
				ok = d == 0;
				max_unsent = fmaxf(max_unsent, fabsf(v));
			}
			break;
		case GW_CODEC_POWERSGD: /* finite; the norm is checked below */
			ok = !gw_nonfinite(d);
			break;
		case GW_CODEC_RANDOMK: /* sent values are y (EF) or y / p */
			if (d != 0) {
				sent++;
				ok = ef ? gw_f2u(d) == gw_f2u(v) : fabsf(d) >= fabsf(v);
			}
			break;
		}
		if (!ok)
			printf("\n  %s n=%llu i=%llu: y=%a decoded=%a out of bound\n", c->ops->impl,
			       (unsigned long long)n, (unsigned long long)i, v, d);
	}
	CU_ASSERT(ok);
	if (c->ops->id == GW_CODEC_POWERSGD)
		check_bound_powersgd(y, dec, n, flags);
	if (c->ops->id == GW_CODEC_TOPK && finite) {
		uint64_t k = (uint64_t)ceil(p->ratio * (double)n);

		k = k ? k : 1;
		CU_ASSERT(sent <= (k < finite ? k : finite));
		CU_ASSERT(min_sent >= max_unsent);
	}
	if (c->ops->id == GW_CODEC_RANDOMK)
		CU_ASSERT(sent <= (uint64_t)ceil(p->ratio * (double)n) + 1);
}

static void check_one(const char *spec, const struct gw_codec_ops *impl, struct bufs *b, uint64_t n,
		      int kind, int ef)
{
	struct gw_codec c, g;
	char err[128];
	ssize_t len, glen;
	uint64_t first_nf = UINT64_MAX;
	int rc;

	CU_ASSERT_EQUAL_FATAL(gw_codec_parse(spec, &c, err, sizeof(err)), 0);
	g = c;
	c.ops = impl;
	g.ops = gw_codec_generic(impl);

	fill(b->x, n, kind, n * 31 + (uint64_t)kind);
	if (ef)
		tu_fill(b->r, n, n + 77); /* a residual of a previous step */

	len = encode(&c, b, b->x, ef ? b->r : NULL, b->dec2, n, b->pay, b->cap);
	if (len == -ENOSYS) {
		CU_FAIL("codec not implemented");
		return;
	}
	CU_ASSERT_FATAL(len > 0);
	CU_ASSERT((size_t)len <= gw_payload_bound(&c, n));
	/* y = x + r_old, as the codec saw it; the residual out is in dec2. */
	for (uint64_t i = 0; i < n; i++) {
		b->y[i] = ef ? b->x[i] + b->r[i] : b->x[i];
		if (gw_nonfinite(b->y[i]) && first_nf == UINT64_MAX)
			first_nf = i;
	}
	if (ef)
		memcpy(b->acc, b->dec2, (size_t)n * 4); /* keep r_new */

	/* Identical to the generic implementation: bytes and residual. */
	glen = encode(&g, b, b->x, ef ? b->r : NULL, b->dec2, n, b->pay2, b->cap);
	CU_ASSERT_EQUAL(glen, len);
	if (glen == len && memcmp(b->pay, b->pay2, (size_t)len)) {
		printf("\n  %s '%s' n=%llu kind=%d ef=%d: bytes differ from %s\n", impl->impl, spec,
		       (unsigned long long)n, kind, ef, g.ops->impl);
		CU_FAIL("bytes differ from the generic implementation");
	}
	if (ef)
		CU_ASSERT_EQUAL(memcmp(b->acc, b->dec2, (size_t)n * 4), 0);

	/* One byte short never overruns. */
	CU_ASSERT_EQUAL(encode(&c, b, b->x, ef ? b->r : NULL, b->dec2, n, b->pay2, (size_t)len - 1),
			-ENOSPC);

	/* Non-finite input is flagged, and the first one is recorded; `none`
	 * carries every value as itself and never adds the record. */
	if (c.ops->id == GW_CODEC_NONE) {
		CU_ASSERT_EQUAL(b->pay[3], 0);
		CU_ASSERT_EQUAL(memcmp(b->pay + GW_PAYLOAD_HDR, b->y, (size_t)n * 4), 0);
	} else {
		CU_ASSERT_EQUAL(!!(b->pay[3] & GW_PF_NONFINITE), first_nf != UINT64_MAX);
		if (first_nf != UINT64_MAX)
			CU_ASSERT_EQUAL(gw_get64(b->pay + GW_PAYLOAD_HDR), first_nf);
	}

	/* Decode: chosen decoder == generic decoder, bit for bit. */
	rc = gw_payload_decode(b->pay, (size_t)len, b->dec, n);
	CU_ASSERT_EQUAL_FATAL(rc, 0);
	{
		struct gw_payload p;

		CU_ASSERT_EQUAL_FATAL(gw_payload_parse(b->pay, (size_t)len, &p), 0);
		CU_ASSERT_EQUAL(g.ops->decode(p.section, p.section_len, n, b->dec2), 0);
		if (p.flags & GW_PF_NONFINITE)
			b->dec2[p.nonfinite_index] = gw_u2f(p.nonfinite_bits);
		CU_ASSERT_EQUAL(memcmp(b->dec, b->dec2, (size_t)n * 4), 0);
	}
	if (first_nf != UINT64_MAX)
		CU_ASSERT(gw_nonfinite(b->dec[first_nf]));
	check_bound(&c, b->y, b->dec, n, ef, b->pay[3]);

	/* Residual identity and finiteness (r_new was kept in acc). */
	if (ef) {
		int ok = 1;

		for (uint64_t i = 0; i < n && ok; i++) {
			float rn = b->acc[i];

			ok = !gw_nonfinite(rn);
			if (ok && !gw_nonfinite(b->y[i]) && !gw_nonfinite(b->dec[i]))
				ok = fabsf(b->y[i] - (b->dec[i] + rn)) <=
				     ulp(fmaxf(fabsf(b->y[i]), fabsf(b->dec[i])));
			if (ok && gw_nonfinite(b->y[i]))
				ok = rn == 0;
			if (!ok)
				printf("\n  %s '%s' n=%llu i=%llu: y=%a dec=%a r=%a\n", impl->impl,
				       spec, (unsigned long long)n, (unsigned long long)i, b->y[i],
				       b->dec[i], rn);
		}
		CU_ASSERT(ok);
	}

	/* decode_add adds exactly what decode gives. */
	fill(b->acc, n, DATA_NORMAL, 5);
	memcpy(b->dec2, b->acc, (size_t)n * 4);
	CU_ASSERT_EQUAL(gw_payload_decode_add(b->pay, (size_t)len, b->acc, n), 0);
	for (uint64_t i = 0; i < n; i++) {
		float want = b->dec2[i] + b->dec[i];

		if (gw_f2u(b->acc[i]) != gw_f2u(want) && !(isnan(want) && isnan(b->acc[i]))) {
			CU_FAIL("decode_add differs from decode + add");
			break;
		}
	}
}

static void test_walk_table(void)
{
	uint64_t nmax = sizes[NSIZES - 1];
	struct bufs b = { 0 };

	b.cap = 64 + 16 * nmax;
	b.state_cap = b.scratch_cap = 64 * nmax + (1 << 20);
	b.x = tu_alloc(nmax * 4);
	b.r = tu_alloc(nmax * 4);
	b.y = tu_alloc(nmax * 4);
	b.dec = tu_alloc(nmax * 4);
	b.dec2 = tu_alloc(nmax * 4);
	b.acc = tu_alloc(nmax * 4);
	b.pay = tu_alloc(b.cap);
	b.pay2 = tu_alloc(b.cap);
	b.state = tu_alloc(b.state_cap);
	b.scratch = tu_alloc(b.scratch_cap);

	for (size_t t = 0; t < gw_codec_count(); t++) {
		const struct gw_codec_ops *impl = gw_codec_at(t);

		if (impl->cpu_ok && !impl->cpu_ok()) {
			printf("\n  %s: this CPU cannot run it, skipped", impl->impl);
			skipped_impls++;
			continue;
		}
		checked_impls++;
		for (size_t s = 0; s < NSPECS; s++) {
			if (strncmp(specs[s], impl->name, strlen(impl->name)) ||
			    (specs[s][strlen(impl->name)] != '\0' &&
			     specs[s][strlen(impl->name)] != ':'))
				continue;
			for (size_t z = 0; z < NSIZES; z++)
				for (int kind = 0; kind < DATA_KINDS; kind++)
					for (int ef = 0; ef < 2; ef++)
						check_one(specs[s], impl, &b, sizes[z], kind, ef);
		}
	}
	printf("\n  %u implementations checked, %u skipped (CPU)\n", checked_impls, skipped_impls);
	CU_ASSERT(checked_impls >= 8);
	free(b.x);
	free(b.r);
	free(b.y);
	free(b.dec);
	free(b.dec2);
	free(b.acc);
	free(b.pay);
	free(b.pay2);
	free(b.state);
	free(b.scratch);
}

/* Golden vectors: a fixed input, each spec's payload as committed. */
static void test_golden(void)
{
	const char *dir = getenv("GW_VECTORS");
	int write = getenv("GW_WRITE_VECTORS") != NULL;
	enum { GN = 1000 };
	static float x[GN], xf[GN], r[GN];
	static uint8_t pay[64 + 16 * GN], want[64 + 16 * GN];
	static uint8_t state[4096];

	if (!dir)
		tu_skip("GW_VECTORS is not set (meson test sets it)");
	tu_fill_hard(x, GN, 7, 1);
	tu_fill_hard(xf, GN, 7, 0); /* PowerSGD sends NaN/Inf steps raw */
	for (size_t s = 0; s < NSPECS; s++) {
		struct gw_codec c;
		char err[128], path[512], name[64];
		const float *in;
		ssize_t len;
		size_t got;
		FILE *f;

		CU_ASSERT_EQUAL_FATAL(gw_codec_parse(specs[s], &c, err, sizeof(err)), 0);
		c.ops = gw_codec_generic(c.ops);
		snprintf(name, sizeof(name), "%s", specs[s]);
		for (char *q = name; *q; q++)
			if (*q == ':' || *q == ',' || *q == '=')
				*q = '_';
		snprintf(path, sizeof(path), "%s/%s.bin", dir, name);
		/* Two steps with error feedback: the second shows the residual
		 * and the state (counters) at work. */
		void *scratch = tu_alloc(gw_codec_scratch_size(&c, GN));

		memset(state, 0, sizeof(state));
		memset(r, 0, sizeof(r));
		CU_ASSERT_FATAL(gw_codec_state_size(&c, GN) <= sizeof(state));
		in = c.ops->id == GW_CODEC_POWERSGD ? xf : x;
		len = gw_payload_encode(&c, state, scratch, in, r, r, GN, pay, sizeof(pay));
		CU_ASSERT_FATAL(len > 0);
		len = gw_payload_encode(&c, state, scratch, in, r, r, GN, pay, sizeof(pay));
		free(scratch);
		CU_ASSERT_FATAL(len > 0);
		if (write) {
			f = fopen(path, "wb");
			CU_ASSERT_PTR_NOT_NULL_FATAL(f);
			CU_ASSERT_EQUAL(fwrite(pay, 1, (size_t)len, f), (size_t)len);
			fclose(f);
			continue;
		}
		f = fopen(path, "rb");
		if (!f) {
			printf("\n  missing golden vector %s\n", path);
			CU_FAIL("missing golden vector");
			continue;
		}
		got = fread(want, 1, sizeof(want), f);
		fclose(f);
		CU_ASSERT_EQUAL(got, (size_t)len);
		if (got != (size_t)len || memcmp(want, pay, got)) {
			printf("\n  %s: payload differs from %s\n", specs[s], path);
			CU_FAIL("golden vector differs");
		}
	}
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "every implementation, every size", test_walk_table },
		{ "golden vectors", test_golden },
		CU_TEST_INFO_NULL,
	};
	return tu_run("conformance", tests);
}
