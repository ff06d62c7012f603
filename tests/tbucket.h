/* SPDX-License-Identifier: MIT */
/*
 * tbucket.h - checks shared by the suites of the bucketed codecs
 * (test_int8.c, test_onebit.c): a hostile section rejected by every usable
 * implementation, and a variant's encode compared with the generic one.
 */
#ifndef GW_TBUCKET_H
#define GW_TBUCKET_H

#include <stdio.h>
#include "tutil.h"
#include "codec_impl.h"

/* Every usable implementation of codec id rejects buf, output untouched. */
static inline void tb_reject(unsigned id, const uint8_t *buf, size_t len, uint64_t n)
{
	float y[40];

	for (int i = 0; i < 40; i++)
		y[i] = 42.0f;
	for (size_t k = 0; k < gw_codec_count(); k++) {
		const struct gw_codec_ops *o = gw_codec_at(k);

		if (o->id != id || (o->cpu_ok && !o->cpu_ok()))
			continue;
		CU_ASSERT_EQUAL(o->decode(buf, len, n, y), -EBADMSG);
		CU_ASSERT_EQUAL(o->decode_add(buf, len, n, y), -EBADMSG);
	}
	for (int i = 0; i < 40; i++)
		CU_ASSERT_EQUAL(y[i], 42.0f);
}

/* One encode's results: section, length, info, residual out, decode buffer. */
struct tb_enc {
	uint8_t *out;
	ssize_t len;
	struct gw_enc_info info;
	float *res;
	float *y;
};

/*
 * The generic encode a and the variant o's encode b of the same n values
 * (residuals started from r0) must agree in bytes, info and residual bits,
 * and both decoders must give the same decode and decode_add of a.
 */
static inline void tb_same(const struct gw_codec_ops *g, const struct gw_codec_ops *o,
			   struct tb_enc *a, struct tb_enc *b, const float *r0, uint64_t n,
			   uint32_t bucket, int v)
{
	CU_ASSERT_EQUAL_FATAL(a->len, b->len);
	CU_ASSERT_FATAL(a->len > 0);
	if (memcmp(a->out, b->out, (size_t)a->len) || memcmp(&a->info, &b->info, sizeof(a->info)) ||
	    memcmp(a->res, b->res, n * 4)) {
		CU_FAIL("variant differs from generic");
		printf("\n%s n=%llu bucket=%u v=%d\n", o->impl, (unsigned long long)n, bucket, v);
		return;
	}
	CU_ASSERT_EQUAL(g->decode(a->out, (size_t)a->len, n, a->y), 0);
	CU_ASSERT_EQUAL(o->decode(a->out, (size_t)a->len, n, b->y), 0);
	CU_ASSERT_EQUAL(memcmp(a->y, b->y, n * 4), 0);
	memcpy(a->y, r0, n * 4);
	memcpy(b->y, r0, n * 4);
	CU_ASSERT_EQUAL(g->decode_add(a->out, (size_t)a->len, n, a->y), 0);
	CU_ASSERT_EQUAL(o->decode_add(a->out, (size_t)a->len, n, b->y), 0);
	CU_ASSERT_EQUAL(memcmp(a->y, b->y, n * 4), 0);
}

#endif
