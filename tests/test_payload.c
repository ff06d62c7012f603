/* SPDX-License-Identifier: MIT */
/*
 * test_payload.c - the payload header: layout, round trip, and rejection of
 * every kind of malformed header (the codec sections have their own suites).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include "tutil.h"
#include "codec_impl.h"

#define N 37

static struct gw_codec none_codec(void)
{
	struct gw_codec c;

	gw_codec_init(&c, gw_codec_find("none"));
	return c;
}

static ssize_t enc(const float *x, uint64_t n, uint8_t *out, size_t cap)
{
	struct gw_codec c = none_codec();

	return gw_payload_encode(&c, NULL, NULL, x, NULL, NULL, n, out, cap);
}

static void test_layout(void)
{
	float x[N], y[N];
	uint8_t buf[GW_PAYLOAD_HDR + GW_PAYLOAD_NONFINITE_REC + 4 * N];
	struct gw_codec c = none_codec();
	struct gw_payload p;
	ssize_t len;

	tu_fill(x, N, 1);
	CU_ASSERT_EQUAL(gw_payload_bound(&c, N), sizeof(buf));
	len = enc(x, N, buf, sizeof(buf));
	CU_ASSERT_EQUAL_FATAL(len, GW_PAYLOAD_HDR + 4 * N);
	CU_ASSERT_EQUAL(buf[0], GW_PAYLOAD_VERSION);
	CU_ASSERT_EQUAL(buf[1], GW_CODEC_NONE);
	CU_ASSERT_EQUAL(buf[2], GW_DTYPE_F32);
	CU_ASSERT_EQUAL(buf[3], 0);
	CU_ASSERT_EQUAL(gw_get32(buf + 4), 0);
	CU_ASSERT_EQUAL(gw_get64(buf + 8), N);
	CU_ASSERT_EQUAL(gw_get64(buf + 16), 4 * N);
	CU_ASSERT_EQUAL(gw_get32(buf + 24), gw_f2u(x[0]));
	CU_ASSERT_EQUAL(gw_payload_parse(buf, (size_t)len, &p), 0);
	CU_ASSERT_EQUAL(p.n, N);
	CU_ASSERT_PTR_EQUAL(p.section, buf + GW_PAYLOAD_HDR);
	CU_ASSERT_EQUAL(gw_payload_decode(buf, (size_t)len, y, N), 0);
	CU_ASSERT_EQUAL(memcmp(x, y, sizeof(x)), 0);
	for (int i = 0; i < N; i++)
		y[i] = 1.0f;
	CU_ASSERT_EQUAL(gw_payload_decode_add(buf, (size_t)len, y, N), 0);
	for (int i = 0; i < N; i++)
		CU_ASSERT_EQUAL(y[i], 1.0f + x[i]);

	/* Too small an output buffer is -ENOSPC, never an overrun. */
	CU_ASSERT_EQUAL(enc(x, N, buf, GW_PAYLOAD_HDR + 4 * N), -ENOSPC);
	CU_ASSERT_EQUAL(enc(x, N, buf, 10), -ENOSPC);
	/* Residual in without residual out is a caller bug. */
	CU_ASSERT_EQUAL(gw_payload_encode(&c, NULL, NULL, x, x, NULL, N, buf, sizeof(buf)),
			-EINVAL);
}

static void test_empty(void)
{
	uint8_t buf[64];
	float y = 7;
	ssize_t len = enc(NULL, 0, buf, sizeof(buf));

	CU_ASSERT_EQUAL_FATAL(len, GW_PAYLOAD_HDR);
	CU_ASSERT_EQUAL(gw_payload_decode(buf, (size_t)len, &y, 0), 0);
	CU_ASSERT_EQUAL(y, 7);
}

/* A codec that cannot represent NaN/Inf (int8) carries the first in the
 * record, and the decoder writes it back at its index. */
static void test_nonfinite_record(void)
{
	float x[N], y[N], acc[N] = { 0 };
	uint8_t buf[1024];
	struct gw_codec c;
	void *scratch;
	ssize_t len;

	CU_ASSERT_EQUAL_FATAL(gw_codec_parse("int8", &c, NULL, 0), 0);
	scratch = malloc(gw_codec_scratch_size(&c, N) + 1);
	CU_ASSERT_FATAL(scratch != NULL);
	tu_fill(x, N, 2);
	x[5] = -INFINITY;
	x[9] = NAN;
	len = gw_payload_encode(&c, NULL, scratch, x, NULL, NULL, N, buf, sizeof(buf));
	free(scratch);
	CU_ASSERT_FATAL(len > GW_PAYLOAD_HDR + GW_PAYLOAD_NONFINITE_REC);
	CU_ASSERT_EQUAL(buf[3] & GW_PF_NONFINITE, GW_PF_NONFINITE);
	CU_ASSERT_EQUAL(gw_get64(buf + 24), 5); /* the first one */
	CU_ASSERT_EQUAL(gw_get32(buf + 32), gw_f2u(-INFINITY));
	CU_ASSERT_EQUAL(gw_payload_decode(buf, (size_t)len, y, N), 0);
	CU_ASSERT(isinf(y[5]) && y[5] < 0);
	CU_ASSERT_EQUAL(gw_payload_decode_add(buf, (size_t)len, acc, N), 0);
	CU_ASSERT(isinf(acc[5]) && acc[5] < 0);
}

/* `none` carries every NaN/Inf as itself, so it never adds the record. */
static void test_none_nonfinite(void)
{
	float x[N], y[N], acc[N] = { 0 };
	uint8_t buf[GW_PAYLOAD_HDR + GW_PAYLOAD_NONFINITE_REC + 4 * N];
	ssize_t len;

	tu_fill(x, N, 2);
	x[5] = -INFINITY;
	x[9] = NAN;
	x[N - 1] = INFINITY;
	len = enc(x, N, buf, sizeof(buf));
	CU_ASSERT_EQUAL_FATAL(len, GW_PAYLOAD_HDR + 4 * N);
	CU_ASSERT_EQUAL(buf[3], 0);
	CU_ASSERT_EQUAL(memcmp(buf + GW_PAYLOAD_HDR, x, 4 * N), 0);
	CU_ASSERT_EQUAL(gw_payload_decode(buf, (size_t)len, y, N), 0);
	CU_ASSERT_EQUAL(memcmp(y, x, sizeof(x)), 0);
	CU_ASSERT_EQUAL(gw_payload_decode_add(buf, (size_t)len, acc, N), 0);
	CU_ASSERT(isinf(acc[5]) && acc[5] < 0);
	CU_ASSERT(isnan(acc[9]));
	CU_ASSERT(isinf(acc[N - 1]) && acc[N - 1] > 0);
}

/* The header of an exact payload, then x itself: gw_payload_encode()'s
 * bytes, whatever x holds. */
static void test_head_exact(void)
{
	uint8_t want[GW_PAYLOAD_HDR + GW_PAYLOAD_NONFINITE_REC + 4 * N];
	uint8_t got[sizeof(want)];
	float x[N];
	ssize_t h, len;

	tu_fill(x, N, 3);
	for (int pass = 0; pass < 3; pass++) {
		if (pass == 1)
			x[N - 1] = INFINITY;
		if (pass == 2)
			x[2] = NAN;
		len = enc(x, N, want, sizeof(want));
		h = gw_payload_head_exact(N, got, sizeof(got));
		CU_ASSERT_EQUAL_FATAL(h, GW_PAYLOAD_HDR);
		memcpy(got + h, x, 4 * N);
		CU_ASSERT_EQUAL_FATAL(h + 4 * N, len);
		CU_ASSERT_EQUAL(memcmp(got, want, (size_t)len), 0);
	}
	CU_ASSERT_EQUAL(gw_payload_head_exact(N, got, GW_PAYLOAD_HDR - 1), -ENOSPC);
	CU_ASSERT_EQUAL(gw_payload_head_exact(N, NULL, sizeof(got)), -EINVAL);
	CU_ASSERT_EQUAL(gw_payload_head_exact(GW_MAX_ELEMS + 1, got, sizeof(got)), -EINVAL);
	CU_ASSERT_EQUAL(gw_payload_head_exact(0, got, sizeof(got)), GW_PAYLOAD_HDR);
}

/* Decode must fail with want and leave y exactly as it was. */
static void reject(const uint8_t *buf, size_t len, uint64_t n, int want)
{
	float y[N + 1];
	int rc;

	for (int i = 0; i <= N; i++)
		y[i] = 42.0f;
	rc = gw_payload_decode(buf, len, y, n);
	CU_ASSERT_EQUAL(rc, want);
	CU_ASSERT_EQUAL(gw_payload_decode_add(buf, len, y, n), want);
	for (int i = 0; i <= N; i++)
		CU_ASSERT_EQUAL(y[i], 42.0f);
}

static void test_rejects(void)
{
	float x[N];
	uint8_t good[GW_PAYLOAD_HDR + GW_PAYLOAD_NONFINITE_REC + 4 * N + 8];
	uint8_t b[sizeof(good)];
	size_t len;

	tu_fill(x, N, 3);
	len = (size_t)enc(x, N, good, sizeof(good));

#define MUTATE(stmt, l, n, want)                                                                   \
	do {                                                                                       \
		memcpy(b, good, sizeof(b));                                                        \
		stmt;                                                                              \
		reject(b, l, n, want);                                                             \
	} while (0)
	for (size_t l = 0; l < len; l++) /* every truncation */
		MUTATE((void)0, l, N, -EBADMSG);
	MUTATE((void)0, len + 1, N, -EBADMSG); /* trailing byte */
	MUTATE((void)0, len, N - 1, -EBADMSG); /* n is not what we expect */
	MUTATE((void)0, len, N + 1, -EBADMSG);
	MUTATE(b[0] = 2, len, N, -EPROTONOSUPPORT);  /* version skew */
	MUTATE(b[1] = 99, len, N, -EPROTONOSUPPORT); /* unknown codec */
	MUTATE(b[2] = 0, len, N, -EBADMSG);	     /* dtype */
	MUTATE(b[3] = 0x80, len, N, -EBADMSG);	     /* unknown flag */
	MUTATE(b[5] = 1, len, N, -EBADMSG);	     /* reserved */
	MUTATE(gw_put64(b + 8, GW_MAX_ELEMS + 1), len, N, -EBADMSG);
	MUTATE(gw_put64(b + 8, UINT64_MAX), len, N, -EBADMSG);
	MUTATE(gw_put64(b + 16, 4 * N + 1), len, N, -EBADMSG);
	MUTATE(gw_put64(b + 16, UINT64_MAX), len, N, -EBADMSG);
	/* Header says n = N - 1 and a matching section length: the codec must
	 * notice that the section is not N - 1 values. */
	MUTATE((gw_put64(b + 8, N - 1)), len, N - 1, -EBADMSG);
	/* NONFINITE set but no record, or a bad record. */
	MUTATE(b[3] = GW_PF_NONFINITE, len, N, -EBADMSG);
#undef MUTATE

	/* A well-formed record (on a `none` payload, which never sends one,
	 * but the parser takes it from any codec), then broken ones. */
	x[3] = INFINITY;
	len = (size_t)enc(x, N, b, sizeof(b));
	memcpy(good, b, GW_PAYLOAD_HDR);
	memcpy(good + GW_PAYLOAD_HDR + GW_PAYLOAD_NONFINITE_REC, b + GW_PAYLOAD_HDR,
	       len - GW_PAYLOAD_HDR);
	good[3] = GW_PF_NONFINITE;
	gw_put64(good + 24, 3);
	gw_put32(good + 32, gw_f2u(INFINITY));
	gw_put32(good + 36, 0);
	len += GW_PAYLOAD_NONFINITE_REC;
	{
		float y[N];

		CU_ASSERT_EQUAL(gw_payload_decode(good, len, y, N), 0);
		CU_ASSERT(isinf(y[3]) && y[3] > 0);
	}
	memcpy(b, good, sizeof(b));
	gw_put64(b + 24, N); /* index out of range */
	reject(b, len, N, -EBADMSG);
	memcpy(b, good, sizeof(b));
	gw_put32(b + 32, gw_f2u(1.0f)); /* a finite "non-finite" */
	reject(b, len, N, -EBADMSG);
	memcpy(b, good, sizeof(b));
	b[39] = 1; /* reserved */
	reject(b, len, N, -EBADMSG);
	reject(NULL, 0, N, -EBADMSG);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "header layout and round trip", test_layout },
		{ "empty tensor", test_empty },
		{ "non-finite record", test_nonfinite_record },
		{ "none carries non-finite values without the record", test_none_nonfinite },
		{ "exact payload header for a gathered send", test_head_exact },
		{ "malformed headers rejected, output untouched", test_rejects },
		CU_TEST_INFO_NULL,
	};
	return tu_run("payload", tests);
}
