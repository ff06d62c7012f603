/* SPDX-License-Identifier: MIT */
/*
 * test_speed.c - gw_codec_speed(): the wire bytes per value it reports for
 * codecs whose size is known, costs that are finite and positive, the
 * default n, every implementation of the table measurable, and the errors
 * (bad arguments, a codec's own error).
 */
#include <math.h>
#include <string.h>
#include <errno.h>
#include "tutil.h"
#include "gradwire/codec.h"

#define DEFAULT_N (UINT64_C(256) << 10)

/* Measure spec on n values; fails the test (and returns a zeroed result)
 * when it cannot. */
static struct gw_codec_speed measure(const char *spec, uint64_t n)
{
	struct gw_codec_speed s = { 0 };
	struct gw_codec c;
	char err[128] = "";
	int rc;

	CU_ASSERT_EQUAL_FATAL(gw_codec_parse(spec, &c, err, sizeof(err)), 0);
	rc = gw_codec_speed(&c, n, &s);
	if (rc)
		fprintf(stderr, "%s: %s\n", spec, gw_strerror(rc));
	CU_ASSERT_EQUAL(rc, 0);
	fprintf(stderr, "  %-18s n=%-7llu enc %.3f ns/value, dec %.3f ns/value, %.4f bytes/value\n",
		spec, (unsigned long long)n, s.enc_ns, s.dec_ns, s.bpv);
	return s;
}

static void assert_costs(const struct gw_codec_speed *s)
{
	CU_ASSERT(isfinite(s->enc_ns) && s->enc_ns > 0);
	CU_ASSERT(isfinite(s->dec_ns) && s->dec_ns > 0);
	CU_ASSERT(isfinite(s->bpv) && s->bpv > 0);
}

static void test_bytes_per_value(void)
{
	struct gw_codec_speed none = measure("none", DEFAULT_N);
	struct gw_codec_speed fp16 = measure("fp16", DEFAULT_N);
	struct gw_codec_speed bf16 = measure("bf16", DEFAULT_N);
	struct gw_codec_speed int8 = measure("int8", DEFAULT_N);
	struct gw_codec_speed topk = measure("topk:ratio=0.01", DEFAULT_N);

	/* none: 4 bytes a value plus the 24-byte header, exactly. */
	CU_ASSERT_DOUBLE_EQUAL(none.bpv, (24.0 + 4.0 * DEFAULT_N) / DEFAULT_N, 1e-12);
	CU_ASSERT(none.bpv >= 4.0 && none.bpv < 4.01);
	CU_ASSERT(fp16.bpv >= 2.0 && fp16.bpv < 2.01);
	CU_ASSERT(bf16.bpv >= 2.0 && bf16.bpv < 2.01);
	CU_ASSERT(int8.bpv > 1.0 && int8.bpv < 1.1);
	CU_ASSERT(topk.bpv > 0 && topk.bpv < 0.1);
	assert_costs(&none);
	assert_costs(&fp16);
	assert_costs(&bf16);
	assert_costs(&int8);
	assert_costs(&topk);
	/* A sanity bound, loose enough for a loaded machine: quantizing with
	 * error feedback is not fifty times dearer than a copy. */
	CU_ASSERT(int8.enc_ns < none.enc_ns * 50);
}

/* n = 0 is 256K values: the header's share says which n was measured. */
static void test_default_n(void)
{
	struct gw_codec_speed def = measure("none", 0), small = measure("none", 1000);

	CU_ASSERT_DOUBLE_EQUAL(def.bpv, (24.0 + 4.0 * DEFAULT_N) / DEFAULT_N, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(small.bpv, (24.0 + 4000.0) / 1000.0, 1e-12);
	assert_costs(&def);
}

/* Every implementation this CPU runs, with its defaults: measurable, and
 * within its own payload bound. PowerSGD (rank 4, no warm-up) is sent low
 * rank from the first step, so it must come out well below 4 bytes. */
static void test_every_implementation(void)
{
	const uint64_t n = 4096;

	for (size_t i = 0; i < gw_codec_count(); i++) {
		const struct gw_codec_ops *ops = gw_codec_at(i);
		struct gw_codec_speed s = { 0 };
		struct gw_codec c;
		int rc;

		if (ops->cpu_ok && !ops->cpu_ok())
			continue;
		gw_codec_init(&c, ops);
		rc = gw_codec_speed(&c, n, &s);
		if (rc)
			fprintf(stderr, "%s: %s\n", ops->impl, gw_strerror(rc));
		CU_ASSERT_EQUAL(rc, 0);
		CU_ASSERT(isfinite(s.enc_ns) && s.enc_ns > 0);
		CU_ASSERT(isfinite(s.dec_ns) && s.dec_ns > 0);
		CU_ASSERT(s.bpv > 0 && s.bpv <= (double)gw_payload_bound(&c, n) / (double)n);
		if (ops->id == GW_CODEC_POWERSGD)
			CU_ASSERT(s.bpv < 1.0);
	}
}

static void test_invalid(void)
{
	struct gw_codec_speed s = { .enc_ns = -1, .dec_ns = -1, .bpv = -1 };
	struct gw_codec c, bare = { 0 };

	gw_codec_init(&c, gw_codec_find("int8"));
	CU_ASSERT_EQUAL(gw_codec_speed(NULL, 0, &s), -EINVAL);
	CU_ASSERT_EQUAL(gw_codec_speed(&bare, 0, &s), -EINVAL);
	CU_ASSERT_EQUAL(gw_codec_speed(&c, 0, NULL), -EINVAL);
	CU_ASSERT_EQUAL(gw_codec_speed(&c, GW_MAX_ELEMS + 1, &s), -EINVAL);
	/* The codec's own error comes back, and out stays untouched. */
	gw_codec_init(&c, gw_codec_find("powersgd"));
	c.p.rank = 0;
	CU_ASSERT_EQUAL(gw_codec_speed(&c, 4096, &s), -EINVAL);
	CU_ASSERT(s.enc_ns == -1 && s.dec_ns == -1 && s.bpv == -1);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "bytes per value", test_bytes_per_value },
		{ "default n", test_default_n },
		{ "every implementation", test_every_implementation },
		{ "invalid", test_invalid },
		CU_TEST_INFO_NULL,
	};

	return tu_run("speed", tests);
}
