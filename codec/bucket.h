/* SPDX-License-Identifier: MIT */
/*
 * bucket.h - the section header of the bucketed codecs (int8, onebit).
 *
 * Both sections open the same way, little-endian (nb = ceil(n / bucket)):
 *
 *   0        4          8                          8 + 4 nb
 *   +--------+----------+--------------------------+------------------+
 *   | bucket | reserved | scale[0] ... scale[nb-1] | codec data       |
 *   | u32    | u32 = 0  | f32 each, >= 0, finite   | `data` bytes     |
 *   +--------+----------+--------------------------+------------------+
 *
 * `data` is the codec's payload size for n values (n bytes for int8,
 * ceil(n / 8) for onebit). The helpers here write and check that header once
 * for every implementation of both codecs, so the rules (bucket range,
 * reserved word, length, scale sign and range) cannot drift apart. The codec
 * owns what follows the scales.
 */
#ifndef GW_BUCKET_H
#define GW_BUCKET_H

#include <float.h>
#include "codec_impl.h"

#define GW_BUCKET_HDR 8

/* True when b is a bucket size encode() accepts and a decoder allows. */
static inline int gw_bucket_ok(uint32_t b)
{
	return b != 0 && b <= GW_BUCKET_MAX;
}

/* Section size for n values; an invalid b (encode() fails) counts as 1. */
static inline size_t gw_bucket_bound(uint32_t b, uint64_t n, uint64_t data)
{
	if (!gw_bucket_ok(b))
		b = 1;
	return GW_BUCKET_HDR + 4 * (size_t)gw_nbuckets(n, b) + (size_t)data;
}

/* End (exclusive) of the bucket starting at b0. */
static inline uint64_t gw_bucket_end(uint64_t b0, uint32_t b, uint64_t n)
{
	return n - b0 < b ? n : b0 + b;
}

/* Offset of the codec data after the scales. */
static inline size_t gw_bucket_data(uint32_t b, uint64_t n)
{
	return GW_BUCKET_HDR + 4 * (size_t)gw_nbuckets(n, b);
}

static inline float gw_bucket_scale(const uint8_t *sec, uint64_t j)
{
	return gw_u2f(gw_get32(sec + GW_BUCKET_HDR + 4 * j));
}

static inline void gw_bucket_set_scale(uint8_t *sec, uint64_t j, float s)
{
	gw_put32(sec + GW_BUCKET_HDR + 4 * j, gw_f2u(s));
}

/*
 * gw_bucket_begin() - check the encode() arguments common to both codecs and
 * write the 8-byte parameter block.
 * Return: the section size (the bound), -EINVAL on bad arguments or -ENOSPC
 * when cap is too small (out untouched on error).
 */
static inline ssize_t gw_bucket_begin(uint32_t b, const float *x, const float *res,
				      const float *res_out, uint64_t n, uint64_t data, void *out,
				      size_t cap)
{
	size_t need;

	if (!gw_enc_args_ok(x, res, res_out, n) || !gw_bucket_ok(b))
		return -EINVAL;
	need = gw_bucket_bound(b, n, data);
	if (cap < need)
		return -ENOSPC;
	if (!out)
		return -EINVAL;
	gw_put32(out, b);
	gw_put32((uint8_t *)out + 4, 0);
	return (ssize_t)need;
}

/*
 * gw_bucket_check() - check a hostile section's header and its length.
 * @data: the codec data size for n values (n <= GW_MAX_ELEMS is checked
 *        first, so the caller may compute it from any n).
 * @mul:  every scale s must have mul * s <= FLT_MAX (int8: 127, so that
 *        every decoded value is finite; onebit: 1).
 * Return: 0 with *bucket set, or -EBADMSG.
 */
static inline int gw_bucket_check(const void *in, size_t len, uint64_t n, uint64_t data, float mul,
				  uint32_t *bucket)
{
	const uint8_t *p = in;
	uint64_t nb;
	uint32_t b;

	if (!p || n > GW_MAX_ELEMS || len < GW_BUCKET_HDR)
		return -EBADMSG;
	b = gw_get32(p);
	if (!gw_bucket_ok(b) || gw_get32(p + 4) != 0)
		return -EBADMSG;
	nb = gw_nbuckets(n, b);
	/* n <= 2^40 and nb <= n: no overflow in 64 bits. */
	if ((uint64_t)len != GW_BUCKET_HDR + 4 * nb + data)
		return -EBADMSG;
	for (uint64_t j = 0; j < nb; j++) {
		uint32_t u = gw_get32(p + GW_BUCKET_HDR + 4 * j);

		/* Sign bit (incl. -0), NaN/Inf, or a mul-multiple that overflows. */
		if ((u >> 31) || gw_nonfinite(gw_u2f(u)) || !(mul * gw_u2f(u) <= FLT_MAX))
			return -EBADMSG;
	}
	*bucket = b;
	return 0;
}

#endif
