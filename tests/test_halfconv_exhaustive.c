/* SPDX-License-Identifier: MIT */
/*
 * test_halfconv_exhaustive.c - every float32 bit pattern through every usable
 * fp16 and bf16 implementation, against independent scalar references.
 *
 * fp16 reference: GCC's (_Float16)f. This file is compiled without F16C, so
 * that is libgcc's soft-float conversion (correctly rounded, no shared code
 * with the codecs), with the codec's rules on top: finite |f| >= 65520
 * saturates to +-65504, NaN becomes sign | 0x7e00 | (mant >> 13), and
 * |f| < 2^-25 is +-0 without asking libgcc (see ref_fp16()).
 * bf16 reference: the two bf16 neighbours of f (truncation and one step
 * away from zero) compared by distance in double, ties to the even one; a
 * finite f that would round to Inf saturates to 0x7f7f | sign.
 *
 * The 2^32 patterns go in chunks of 2^20 consecutive patterns through
 * ops->encode (no residual); each u16 must match bit for bit, and the info
 * (first non-finite, saturation) must match what the chunk holds. Then all
 * 65536 u16 patterns of each format are decoded and compared with the
 * reference widening. Two threads share the chunks.
 *
 * GW_EXHAUSTIVE_STRIDE=s (e.g. under sanitizers) tests every s-th pattern
 * only, and says so.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "tutil.h"
#include "codec_impl.h"

#ifndef GW_HAVE_FLOAT16
/* The fp16 reference is the compiler's own conversion; without it there is
 * no independent reference, and the test says so instead of passing. */
int main(void)
{
	tu_skip("this compiler has no _Float16 (GCC >= 12 and clang >= 15 have "
		"it): no independent fp16 reference to test against");
}
#else

#define CHUNK (1u << 20)
#define MAX_IMPLS 8
#define NTHREADS 2

struct family {
	unsigned id;
	const char *name;
	const struct gw_codec_ops *impl[MAX_IMPLS];
	int nimpl;
	uint16_t (*ref)(float f);
	float (*widen)(uint16_t h);
};

static uint64_t stride = 1;
static uint64_t total; /* patterns tested per family */

static uint16_t f16_bits(_Float16 h)
{
	uint16_t b;

	memcpy(&b, &h, 2);
	return b;
}

static uint16_t nan_rule16(uint32_t u)
{
	return (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((u & 0x7fffffu) >> 13));
}

static uint16_t ref_fp16(float f)
{
	uint32_t u = gw_f2u(f);

	if (isnan(f))
		return nan_rule16(u);
	if (isfinite(f) && fabsf(f) >= 65520.0f)
		return (uint16_t)(((u >> 16) & 0x8000u) | 0x7bffu);
	/*
	 * Below half the smallest subnormal (2^-25) everything rounds to +-0.
	 * Said here directly because libgcc raises the underflow exception
	 * through the x87 environment (slow, call by call), and 40% of all
	 * patterns live here; the range just above it still goes to libgcc.
	 */
	if (fabsf(f) < 0x1p-25f)
		return (uint16_t)((u >> 16) & 0x8000u);
	return f16_bits((_Float16)f);
}

static float widen_fp16(uint16_t h)
{
	_Float16 v;

	memcpy(&v, &h, 2);
	return (float)v;
}

static uint16_t ref_bf16(float f)
{
	uint32_t u = gw_f2u(f), t = u >> 16, pick;
	double lo, hi, dlo, dhi;

	if (isnan(f))
		return (uint16_t)((u >> 16) | 0x40u);
	if (isinf(f))
		return (uint16_t)t;
	lo = (double)gw_u2f(t << 16);
	if ((t & 0x7fffu) == 0x7f7fu) /* the next one away from zero is Inf */
		hi = copysign(ldexp(1.0, 128), (double)f);
	else
		hi = (double)gw_u2f((t + 1) << 16);
	dlo = fabs((double)f - lo);
	dhi = fabs(hi - (double)f);
	if (dlo < dhi)
		pick = t;
	else if (dhi < dlo)
		pick = t + 1;
	else
		pick = (t & 1) ? t + 1 : t;
	if ((pick & 0x7fffu) == 0x7f80u) /* finite f rounded to Inf */
		pick = (pick & 0x8000u) | 0x7f7fu;
	return (uint16_t)pick;
}

/* bf16 widening computed from the fields, not by shifting the bits. */
static float widen_bf16(uint16_t h)
{
	int e = (h >> 7) & 0xff, m = h & 0x7f;
	double v;

	if (e == 0xff)
		return m ? gw_u2f((uint32_t)h << 16) : (h & 0x8000 ? -INFINITY : INFINITY);
	v = e ? ldexp(128 + m, e - 127 - 7) : ldexp(m, -126 - 7);
	return (float)(h & 0x8000 ? -v : v);
}

static struct family fams[2] = {
	{ GW_CODEC_FP16, "fp16", { 0 }, 0, ref_fp16, widen_fp16 },
	{ GW_CODEC_BF16, "bf16", { 0 }, 0, ref_bf16, widen_bf16 },
};

struct worker {
	int tid;
	uint64_t fails;
	char msg[256];
};

static void fail(struct worker *w, const char *fmt, const char *a, const char *b, uint32_t u,
		 unsigned got, unsigned want)
{
	if (!w->fails++)
		snprintf(w->msg, sizeof(w->msg), fmt, a, b, u, got, want);
}

static void *work(void *arg)
{
	struct worker *w = arg;
	float *x = tu_alloc(CHUNK * sizeof(float));
	uint16_t *ref = tu_alloc(CHUNK * 2), *out = tu_alloc(CHUNK * 2);
	uint64_t nchunks = (total + CHUNK - 1) / CHUNK;

	for (uint64_t ch = (uint64_t)w->tid; ch < nchunks; ch += NTHREADS) {
		uint64_t first = ch * CHUNK;
		uint32_t m = (uint32_t)(total - first < CHUNK ? total - first : CHUNK);

		for (uint32_t j = 0; j < m; j++)
			x[j] = gw_u2f((uint32_t)((first + j) * stride));
		for (int fi = 0; fi < 2; fi++) {
			struct family *f = &fams[fi];
			struct gw_enc_info want = { 0 };

			for (uint32_t j = 0; j < m; j++) {
				ref[j] = f->ref(x[j]);
				if (gw_nonfinite(x[j]))
					gw_note_nonfinite(&want, j, x[j]);
				else if ((ref[j] & 0x7fff) == (fi ? 0x7f7f : 0x7bff) &&
					 (fi ? fabsf(x[j]) >= 0x1.ffp127f
					     : fabsf(x[j]) >= 65520.0f))
					want.flags |= GW_PF_SATURATED;
			}
			for (int k = 0; k < f->nimpl; k++) {
				const struct gw_codec_ops *o = f->impl[k];
				struct gw_codec c;
				struct gw_enc_info info = { 0 };
				ssize_t len;

				gw_codec_init(&c, o);
				len = o->encode(&c, NULL, NULL, x, NULL, NULL, m, out, CHUNK * 2,
						&info);
				if (len != (ssize_t)m * 2) {
					fail(w, "%s %s: encode failed at chunk %08x (%d, %d)",
					     o->impl, "", (uint32_t)first, (unsigned)len, 0);
					continue;
				}
				if (info.flags != want.flags ||
				    info.nonfinite_index != want.nonfinite_index ||
				    info.nonfinite_bits != want.nonfinite_bits)
					fail(w, "%s%s: info of chunk at %08x: flags %x, want %x",
					     o->impl, "", gw_f2u(x[0]), info.flags, want.flags);
				if (!memcmp(out, ref, (size_t)m * 2))
					continue;
				for (uint32_t j = 0; j < m; j++)
					if (out[j] != ref[j])
						fail(w, "%s%s: %08x -> %04x, want %04x", o->impl,
						     "", gw_f2u(x[j]), out[j], ref[j]);
			}
		}
	}
	free(x);
	free(ref);
	free(out);
	return NULL;
}

/* Check the reference NaN rules once: a NaN, the same sign, quiet. */
static void test_nan_rules(void)
{
	for (uint32_t mant = 1; mant < 0x800000u; mant += 0x1357u) {
		for (uint32_t s = 0; s < 2; s++) {
			uint32_t u = (s << 31) | 0x7f800000u | mant;
			uint16_t h = ref_fp16(gw_u2f(u)), b = ref_bf16(gw_u2f(u));

			CU_ASSERT((h & 0x7e00u) == 0x7e00u && (h >> 15) == s);
			CU_ASSERT(isnan(widen_fp16(h)));
			CU_ASSERT((b & 0x7fc0u) == 0x7fc0u && (b >> 15) == s);
			/* libgcc's soft conversion agrees with the stated rule */
			CU_ASSERT_EQUAL(f16_bits((_Float16)gw_u2f(u)), h);
		}
	}
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void test_encode_all(void)
{
	pthread_t th[NTHREADS];
	struct worker w[NTHREADS];
	double t0 = now();

	for (int i = 0; i < NTHREADS; i++) {
		w[i] = (struct worker){ .tid = i };
		CU_ASSERT_FATAL(pthread_create(&th[i], NULL, work, &w[i]) == 0);
	}
	for (int i = 0; i < NTHREADS; i++) {
		pthread_join(th[i], NULL);
		if (w[i].fails)
			printf("\n  thread %d: %llu mismatches, first: %s\n", i,
			       (unsigned long long)w[i].fails, w[i].msg);
		CU_ASSERT_EQUAL(w[i].fails, 0);
	}
	printf("\n  %s: %llu float32 patterns x (%d fp16 + %d bf16 impls) in %.1f s\n",
	       stride == 1 ? "EXHAUSTIVE" : "SAMPLED (GW_EXHAUSTIVE_STRIDE)",
	       (unsigned long long)total, fams[0].nimpl, fams[1].nimpl, now() - t0);
}

static void test_decode_all(void)
{
	static uint8_t in[65536 * 2];
	static float y[65536];

	for (uint32_t h = 0; h < 65536; h++)
		gw_put16(in + 2 * h, (uint16_t)h);
	for (int fi = 0; fi < 2; fi++) {
		struct family *f = &fams[fi];

		for (int k = 0; k < f->nimpl; k++) {
			uint64_t bad = 0;

			CU_ASSERT_EQUAL_FATAL(f->impl[k]->decode(in, sizeof(in), 65536, y), 0);
			for (uint32_t h = 0; h < 65536; h++) {
				if (gw_f2u(y[h]) != gw_f2u(f->widen((uint16_t)h)) && !bad++)
					printf("\n  %s: %04x -> %08x, want %08x\n",
					       f->impl[k]->impl, h, gw_f2u(y[h]),
					       gw_f2u(f->widen((uint16_t)h)));
			}
			CU_ASSERT_EQUAL(bad, 0);
		}
	}
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "reference NaN rules", test_nan_rules },
		{ "decode all 65536 patterns", test_decode_all },
		{ "encode every float32 pattern", test_encode_all },
		CU_TEST_INFO_NULL,
	};
	const char *s = getenv("GW_EXHAUSTIVE_STRIDE");

	if (s && *s) {
		stride = strtoull(s, NULL, 0);
		if (stride < 1)
			stride = 1;
	}
	total = ((UINT64_C(1) << 32) + stride - 1) / stride;
	for (size_t i = 0; i < gw_codec_count(); i++) {
		const struct gw_codec_ops *o = gw_codec_at(i);

		for (int fi = 0; fi < 2; fi++)
			if (o->id == fams[fi].id && (!o->cpu_ok || o->cpu_ok()) &&
			    fams[fi].nimpl < MAX_IMPLS)
				fams[fi].impl[fams[fi].nimpl++] = o;
	}
	printf("fp16 impls: %d, bf16 impls: %d%s\n", fams[0].nimpl, fams[1].nimpl,
	       stride == 1 ? "" : " -- SAMPLED run, not exhaustive");
	if (!fams[0].nimpl || !fams[1].nimpl)
		tu_skip("no fp16/bf16 implementation registered");
	return tu_run("halfconv_exhaustive", tests);
}
#endif /* GW_HAVE_FLOAT16 */
