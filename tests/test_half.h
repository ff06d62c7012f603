/* SPDX-License-Identifier: MIT */
/*
 * test_half.h - the tests of a 16-bit float codec (fp16, bf16), shared by
 * test_fp16.c and test_bf16.c: each gives a format descriptor (its name, id,
 * hand-computed cases and the constants of its range) and calls th_main().
 *
 * What runs for every usable implementation of the codec: the hand cases
 * (bytes, flags, residual, decode), hand-chosen decodes, the residual
 * identity and half-ulp error bound on awkward data with feedback, bytes
 * identical to the generic one, malformed sections rejected, and the
 * payload layer (header, flags, non-finite record, truncations).
 */
#ifndef GW_TEST_HALF_H
#define GW_TEST_HALF_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "tutil.h"
#include "codec_impl.h"

#define MAXI 8

/* One hand-computed conversion. */
struct th_hand {
	uint32_t in;	/* float32 bits */
	uint16_t want;	/* section value */
	uint32_t flags; /* GW_PF_* for this value alone */
};

/* One hand-computed decode. */
struct th_dec {
	uint16_t h;
	uint32_t f; /* float32 bits */
};

/* struct th_fmt - a 16-bit float format as the tests see it. */
struct th_fmt {
	const char *name;    /* codec name, e.g. "fp16" */
	const char *generic; /* its reference implementation */
	unsigned id;	     /* wire id */
	const struct th_hand *hand;
	size_t nhand;
	const struct th_dec *dec;
	size_t ndec;
	/* float bits of finite h, from its fields (an independent reference) */
	uint32_t (*decoded_bits)(uint16_t h);
	/* fill(): a value beyond the range (half of them saturate) */
	float (*big)(float v);
	float tiny;		  /* fill(): scale into the subnormals */
	uint32_t tiemask, tiebit; /* fill(): float bits of a rounding tie */
	int mant_bits;		  /* stored mantissa bits */
	double min_ulp;		  /* ulp of the subnormals */
	float sat_from;		  /* smallest |y| that saturates */
	float maxv;		  /* largest finite value */
	float big_sat;		  /* a value that saturates to maxv */
};

static const struct th_fmt *F;
static const struct gw_codec_ops *impls[MAXI];
static int nimpls;

static void find_impls(void)
{
	nimpls = 0;
	for (size_t i = 0; i < gw_codec_count(); i++) {
		const struct gw_codec_ops *o = gw_codec_at(i);

		if (o->id == F->id && (!o->cpu_ok || o->cpu_ok()) && nimpls < MAXI)
			impls[nimpls++] = o;
	}
}

static const struct gw_codec_ops *generic(void)
{
	return gw_codec_find_impl(F->generic);
}

static ssize_t enc(const struct gw_codec_ops *o, const float *x, const float *res, float *res_out,
		   uint64_t n, void *out, size_t cap, struct gw_enc_info *info)
{
	struct gw_codec c;

	gw_codec_init(&c, o);
	memset(info, 0, sizeof(*info));
	return o->encode(&c, NULL, NULL, x, res, res_out, n, out, cap, info);
}

/* Each hand case alone through every variant: bytes, flag, residual, decode. */
static void test_hand(void)
{
	for (int k = 0; k < nimpls; k++) {
		for (size_t i = 0; i < F->nhand; i++) {
			const struct th_hand *h = &F->hand[i];
			float x = gw_u2f(h->in), r = -0.0f, y;
			uint8_t out[2];
			struct gw_enc_info info;

			/* Without a residual: the value itself. */
			CU_ASSERT_EQUAL_FATAL(enc(impls[k], &x, NULL, NULL, 1, out, 2, &info), 2);
			if (gw_get16(out) != h->want || info.flags != h->flags)
				printf("\n  %s: %08x -> %04x flags %x, want %04x flags %x\n",
				       impls[k]->impl, h->in, gw_get16(out), info.flags, h->want,
				       h->flags);
			CU_ASSERT_EQUAL(gw_get16(out), h->want);
			CU_ASSERT_EQUAL(info.flags, h->flags);
			CU_ASSERT_EQUAL(impls[k]->decode(out, 2, 1, &y), 0);
			if (h->flags & GW_PF_NONFINITE) {
				CU_ASSERT_EQUAL(info.nonfinite_index, 0);
				CU_ASSERT_EQUAL(info.nonfinite_bits, h->in);
				CU_ASSERT(isnan(x) ? isnan(y) && !signbit(y) == !signbit(x)
						   : gw_f2u(y) == h->in);
			} else {
				CU_ASSERT_EQUAL(gw_f2u(y), F->decoded_bits(h->want));
			}
			/* With residual -0 (x + -0 == x, even for -0): the new residual. */
			CU_ASSERT_EQUAL_FATAL(enc(impls[k], &x, &r, &r, 1, out, 2, &info), 2);
			CU_ASSERT_EQUAL(info.flags, h->flags);
			if (h->flags & GW_PF_NONFINITE) {
				CU_ASSERT_EQUAL(gw_f2u(r), 0); /* +0 */
			} else {
				CU_ASSERT_EQUAL(gw_get16(out), h->want);
				CU_ASSERT_EQUAL(gw_f2u(r), gw_f2u(x - y));
			}
		}
	}
}

/* Decoded values of hand-chosen patterns. */
static void test_decode_values(void)
{
	for (int k = 0; k < nimpls; k++) {
		for (size_t i = 0; i < F->ndec; i++) {
			uint8_t in[2];
			float y = 42, acc = 1.5f;

			gw_put16(in, F->dec[i].h);
			CU_ASSERT_EQUAL(impls[k]->decode(in, 2, 1, &y), 0);
			CU_ASSERT_EQUAL(gw_f2u(y), F->dec[i].f);
			CU_ASSERT_EQUAL(impls[k]->decode_add(in, 2, 1, &acc), 0);
			if (isnan(gw_u2f(F->dec[i].f))) {
				CU_ASSERT(isnan(acc));
			} else {
				CU_ASSERT_EQUAL(acc, 1.5f + gw_u2f(F->dec[i].f));
			}
		}
	}
}

/* Data with every hazard: ties, subnormals, beyond-range values, NaN/Inf. */
static void fill(float *x, uint64_t n, uint64_t seed, int nonfinite)
{
	tu_fill_hard(x, n, seed, nonfinite);
	for (uint64_t i = 0; i < n; i++) {
		switch ((i * 7 + seed) % 11) {
		case 0:
			x[i] = F->big(x[i]);
			break;
		case 1:
			x[i] *= F->tiny;
			break;
		case 2:
			x[i] = gw_u2f((gw_f2u(x[i]) & ~F->tiemask) | F->tiebit);
			break;
		default:
			break;
		}
	}
}

/* |y - dec| <= half an ulp of the target format in y's binade. */
static int within_half_ulp(float y, float dec)
{
	double ay = fabs((double)y), ulp;
	int e;

	if (ay == 0)
		return dec == 0;
	frexp(ay, &e); /* ay in [2^(e-1), 2^e) */
	ulp = ldexp(1.0, e - 1 - F->mant_bits);
	if (ulp < F->min_ulp)
		ulp = F->min_ulp;
	return fabs((double)y - (double)dec) <= ulp / 2;
}

/* Residual identity, error bound and flags on awkward data, with feedback. */
static void test_residual_and_bound(void)
{
	enum { N = 1031 };
	float *x = tu_alloc(N * 4), *res = tu_alloc(N * 4), *y = tu_alloc(N * 4);
	float *dec = tu_alloc(N * 4), *acc = tu_alloc(N * 4);
	uint8_t *out = tu_alloc(N * 2);

	for (int k = 0; k < nimpls; k++) {
		memset(res, 0, N * 4);
		for (int step = 0; step < 3; step++) {
			struct gw_enc_info info;
			uint32_t want_flags = 0;
			int bad = 0;

			fill(x, N, 100 + (uint64_t)step, step == 2);
			for (int i = 0; i < N; i++) {
				y[i] = x[i] + res[i];
				if (gw_nonfinite(y[i]))
					want_flags |= GW_PF_NONFINITE;
				else if (fabsf(y[i]) >= F->sat_from)
					want_flags |= GW_PF_SATURATED;
			}
			CU_ASSERT_EQUAL_FATAL(enc(impls[k], x, res, res, N, out, N * 2, &info),
					      N * 2);
			CU_ASSERT_EQUAL(info.flags, want_flags);
			CU_ASSERT_EQUAL(impls[k]->decode(out, N * 2, N, dec), 0);
			for (int i = 0; i < N; i++) {
				acc[i] = 0.25f;
				if (gw_nonfinite(y[i])) {
					bad += gw_f2u(res[i]) != 0;
					continue;
				}
				/* y == dec + res_out, with res_out = y - dec exactly */
				bad += gw_f2u(res[i]) != gw_f2u(y[i] - dec[i]);
				bad += !gw_nonfinite(res[i]) ? 0 : 1;
				if (fabsf(y[i]) >= F->sat_from)
					bad += fabsf(dec[i]) != F->maxv ||
					       !signbit(dec[i]) != !signbit(y[i]);
				else
					bad += !within_half_ulp(y[i], dec[i]);
			}
			CU_ASSERT_EQUAL(bad, 0);
			CU_ASSERT_EQUAL(impls[k]->decode_add(out, N * 2, N, acc), 0);
			for (int i = 0; i < N; i++)
				bad += gw_f2u(acc[i]) != gw_f2u(0.25f + dec[i]);
			CU_ASSERT_EQUAL(bad, 0);
		}
	}
	free(x), free(res), free(y), free(dec), free(acc), free(out);
}

/* Every variant gives the generic bytes, residual bits and info. */
static void test_variants_identical(void)
{
	static const uint64_t sizes[] = { 0,  1,  2,  3,  7,  8,   9,	15,  16,  17,	31,
					  32, 33, 63, 64, 65, 100, 255, 256, 257, 1000, 4099 };
	enum { NMAX = 4099 };
	const struct gw_codec_ops *g = generic();
	float *x = tu_alloc(NMAX * 4), *r0 = tu_alloc(NMAX * 4);
	float *rg = tu_alloc(NMAX * 4), *rv = tu_alloc(NMAX * 4);
	float *dg = tu_alloc(NMAX * 4), *dv = tu_alloc(NMAX * 4);
	uint8_t *og = tu_alloc(NMAX * 2), *ov = tu_alloc(NMAX * 2);

	CU_ASSERT_PTR_NOT_NULL_FATAL(g);
	for (int k = 0; k < nimpls; k++) {
		if (impls[k] == g)
			continue;
		for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
			for (int mode = 0; mode < 6; mode++) {
				uint64_t n = sizes[si];
				struct gw_enc_info ig, iv;
				int wr = mode & 1;
				ssize_t lg, lv;

				fill(x, n, n * 10 + (uint64_t)mode, mode >= 2);
				fill(r0, n, n * 10 + (uint64_t)mode + 77, mode >= 4);
				memcpy(rg, r0, n * 4);
				memcpy(rv, r0, n * 4);
				/* residual in place (res == res_out) */
				lg = enc(g, x, wr ? rg : NULL, wr ? rg : NULL, n, og, n * 2, &ig);
				lv = enc(impls[k], x, wr ? rv : NULL, wr ? rv : NULL, n, ov, n * 2,
					 &iv);
				CU_ASSERT_EQUAL(lg, (ssize_t)n * 2);
				CU_ASSERT_EQUAL(lv, lg);
				CU_ASSERT_EQUAL(memcmp(og, ov, n * 2), 0);
				CU_ASSERT_EQUAL(memcmp(rg, rv, n * 4), 0);
				CU_ASSERT_EQUAL(ig.flags, iv.flags);
				CU_ASSERT_EQUAL(ig.nonfinite_index, iv.nonfinite_index);
				CU_ASSERT_EQUAL(ig.nonfinite_bits, iv.nonfinite_bits);
				/* separate res_out */
				if (wr) {
					enc(g, x, r0, rg, n, og, n * 2, &ig);
					enc(impls[k], x, r0, rv, n, ov, n * 2, &iv);
					CU_ASSERT_EQUAL(memcmp(og, ov, n * 2), 0);
					CU_ASSERT_EQUAL(memcmp(rg, rv, n * 4), 0);
					CU_ASSERT_EQUAL(ig.flags, iv.flags);
				}
				/* decoding random bit patterns, incl. NaN payloads */
				for (uint64_t i = 0; i < n; i++)
					gw_put16(og + 2 * i, (uint16_t)gw_mix64(n, i));
				for (uint64_t i = 0; i < n; i++)
					dg[i] = dv[i] = (float)i;
				CU_ASSERT_EQUAL(g->decode(og, n * 2, n, dg), 0);
				CU_ASSERT_EQUAL(impls[k]->decode(og, n * 2, n, dv), 0);
				CU_ASSERT_EQUAL(memcmp(dg, dv, n * 4), 0);
				CU_ASSERT_EQUAL(g->decode_add(og, n * 2, n, dg), 0);
				CU_ASSERT_EQUAL(impls[k]->decode_add(og, n * 2, n, dv), 0);
				CU_ASSERT_EQUAL(memcmp(dg, dv, n * 4), 0);
			}
		}
	}
	free(x), free(r0), free(rg), free(rv), free(dg), free(dv), free(og), free(ov);
}

/* Malformed sections: -EBADMSG and the output untouched. */
static void test_rejects(void)
{
	enum { N = 13 };
	float x[N], y[N + 1];
	uint8_t sec[N * 2 + 2] = { 0 };
	struct gw_enc_info info;

	tu_fill(x, N, 5);
	for (int k = 0; k < nimpls; k++) {
		const struct gw_codec_ops *o = impls[k];

		CU_ASSERT_EQUAL_FATAL(enc(o, x, NULL, NULL, N, sec, sizeof(sec), &info), N * 2);
#define REJECT(len, n)                                                                             \
	do {                                                                                       \
		for (int i = 0; i <= N; i++)                                                       \
			y[i] = 42.0f;                                                              \
		CU_ASSERT_EQUAL(o->decode(sec, (len), (n), y), -EBADMSG);                          \
		CU_ASSERT_EQUAL(o->decode_add(sec, (len), (n), y), -EBADMSG);                      \
		for (int i = 0; i <= N; i++)                                                       \
			CU_ASSERT_EQUAL(y[i], 42.0f);                                              \
	} while (0)
		for (size_t l = 0; l < N * 2; l++) /* every truncation */
			REJECT(l, N);
		REJECT(N * 2 + 1, N); /* trailing byte */
		REJECT(N * 2 + 2, N);
		REJECT(N * 2, N - 1); /* n and length disagree */
		REJECT(N * 2, N + 1);
		REJECT(N * 2, GW_MAX_ELEMS + 1);
		REJECT(N * 2, UINT64_MAX);
		/* 2n wraps to a small length: still rejected */
		REJECT(0, UINT64_C(1) << 63);
		REJECT(N * 2, (UINT64_C(1) << 63) + N);
#undef REJECT
		/* n = 0 wants an empty section */
		CU_ASSERT_EQUAL(o->decode(sec, 0, 0, y), 0);
		CU_ASSERT_EQUAL(o->decode(sec, 1, 0, y), -EBADMSG);
		/* encode argument checks */
		CU_ASSERT_EQUAL(enc(o, x, NULL, NULL, N, sec, N * 2 - 1, &info), -ENOSPC);
		CU_ASSERT_EQUAL(enc(o, x, x, NULL, N, sec, sizeof(sec), &info), -EINVAL);
		CU_ASSERT_EQUAL(enc(o, NULL, NULL, NULL, N, sec, sizeof(sec), &info), -EINVAL);
		CU_ASSERT_EQUAL(enc(o, x, NULL, NULL, GW_MAX_ELEMS + 1, sec, sizeof(sec), &info),
				-EINVAL);
		CU_ASSERT_EQUAL(enc(o, NULL, NULL, NULL, 0, NULL, 0, &info), 0);
	}
}

/* Through the payload layer: header, flags, non-finite record, round trip. */
static void test_payload(void)
{
	enum { N = 37 };
	float x[N], y[N], acc[N], res[N] = { 0 };
	uint8_t buf[GW_PAYLOAD_HDR + GW_PAYLOAD_NONFINITE_REC + N * 2];
	struct gw_codec c;
	ssize_t len;

	for (int k = 0; k < nimpls; k++) {
		gw_codec_init(&c, impls[k]);
		memset(res, 0, sizeof(res));
		CU_ASSERT_EQUAL(gw_payload_bound(&c, N), sizeof(buf));
		tu_fill(x, N, 9);
		x[4] = F->big_sat;
		x[6] = NAN;
		x[20] = -INFINITY;
		len = gw_payload_encode(&c, NULL, NULL, x, res, res, N, buf, sizeof(buf));
		CU_ASSERT_EQUAL_FATAL(len, (ssize_t)sizeof(buf));
		CU_ASSERT_EQUAL(buf[1], F->id);
		CU_ASSERT_EQUAL(buf[3], GW_PF_NONFINITE | GW_PF_SATURATED);
		CU_ASSERT_EQUAL(gw_get64(buf + 24), 6);
		CU_ASSERT_EQUAL(gw_get64(buf + 16), N * 2);
		CU_ASSERT_EQUAL(gw_f2u(res[6]), 0);
		CU_ASSERT_EQUAL(gw_f2u(res[20]), 0);
		CU_ASSERT_EQUAL(res[4], F->big_sat - F->maxv);
		CU_ASSERT_EQUAL(gw_payload_decode(buf, (size_t)len, y, N), 0);
		CU_ASSERT(isnan(y[6]));
		CU_ASSERT(isinf(y[20]) && y[20] < 0);
		CU_ASSERT_EQUAL(y[4], F->maxv);
		for (int i = 0; i < N; i++) {
			acc[i] = 2.0f;
			if (i != 4 && i != 6 && i != 20) {
				CU_ASSERT(within_half_ulp(x[i], y[i]));
				CU_ASSERT_EQUAL(res[i], x[i] - y[i]);
			}
		}
		CU_ASSERT_EQUAL(gw_payload_decode_add(buf, (size_t)len, acc, N), 0);
		CU_ASSERT_EQUAL(acc[0], 2.0f + y[0]);
		CU_ASSERT(isnan(acc[6]));
		/* every truncation of the payload is rejected */
		for (size_t l = 0; l < (size_t)len; l++)
			CU_ASSERT_EQUAL(gw_payload_decode(buf, l, y, N), -EBADMSG);
		/* without non-finite values: no record, plain header */
		tu_fill(x, N, 10);
		len = gw_payload_encode(&c, NULL, NULL, x, NULL, NULL, N, buf, sizeof(buf));
		CU_ASSERT_EQUAL(len, GW_PAYLOAD_HDR + N * 2);
		CU_ASSERT_EQUAL(buf[3], 0);
	}
}

static void test_registry(void)
{
	const struct gw_codec_ops *g = generic();

	CU_ASSERT_PTR_NOT_NULL_FATAL(g);
	CU_ASSERT(nimpls >= 1);
	for (int k = 0; k < nimpls; k++) {
		CU_ASSERT_STRING_EQUAL(impls[k]->name, F->name);
		CU_ASSERT(impls[k]->lossy);
		CU_ASSERT_PTR_NULL(impls[k]->params);
		CU_ASSERT_EQUAL(impls[k]->bound(NULL, 1000), 2000);
	}
	CU_ASSERT_EQUAL(g->priority, 100);
	printf("\n  usable %s implementations:", F->name);
	for (int k = 0; k < nimpls; k++)
		printf(" %s", impls[k]->impl);
	printf("\n");
}

/* Run the suite (named after the codec) on format f. */
static int th_main(const struct th_fmt *f)
{
	static CU_TestInfo tests[] = {
		{ "implementations", test_registry },
		{ "hand-computed conversions", test_hand },
		{ "hand-computed decodes", test_decode_values },
		{ "residual identity and error bound", test_residual_and_bound },
		{ "variants identical to generic", test_variants_identical },
		{ "malformed sections rejected", test_rejects },
		{ "through the payload layer", test_payload },
		CU_TEST_INFO_NULL,
	};

	F = f;
	find_impls();
	return tu_run(f->name, tests);
}

#endif
