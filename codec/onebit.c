/* SPDX-License-Identifier: MIT */
/*
 * onebit.c - sign quantisation with a mean-magnitude scale per bucket
 * (generic C; the reference for onebit_avx2.c).
 *
 * Section, little-endian (nb = ceil(n / bucket), nbytes = ceil(n / 8)):
 *
 *   0        4          8                        8 + 4 nb             8 + 4 nb + nbytes
 *   +--------+----------+------------------------+--------------------+
 *   | bucket | reserved | scale[0] ... scale[nb-1] | sign bits          |
 *   | u32    | u32 = 0  | f32 each, >= 0, finite   | LSB first, 8/byte  |
 *   +--------+----------+------------------------+--------------------+
 *
 * Element i is bit (i % 8) of byte i / 8 (bits run over the whole tensor, not
 * per bucket). 1 means y >= 0, so +0 and -0 encode positive (the seed sent
 * zero as negative); 0 means y < 0. Unused high bits of the last byte are 0
 * and a decoder rejects them set. Element i decodes to +scale or -scale of
 * bucket i / bucket.
 *
 * The scale of a bucket is the mean |y| over its finite elements, summed in a
 * fixed order so that the SIMD variant is bit-identical: 8 interleaved float
 * partial sums, s[j] accumulating |y| at bucket positions p with p % 8 == j in
 * increasing p, then ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)),
 * divided by the count of finite elements (0 if there are none). If that sum
 * overflows to +inf (finite values near FLT_MAX), the same sums are redone on
 * |y| * 2^-64 and the mean scaled back by 2^64 (FLT_MAX if even that
 * overflows): a mean of finite values is finite, and so must the scale be.
 *
 * Non-finite y: bit 1, residual 0, not counted. Finite y: residual
 * y - (+-scale), which cannot overflow because the sign matches y's.
 */
#include <float.h>
#include <math.h>
#include "bucket.h"
#include "onebit.h"

size_t gw_onebit_bound(const struct gw_codec *c, uint64_t n)
{
	return gw_bucket_bound(c->p.bucket, n, gw_onebit_nbytes(n));
}

/*
 * Add |y| of elements [i, e) of the bucket starting at b0 into the partial
 * sums (s[(i - b0) % 8]) and count the finite ones.
 */
void gw_onebit_sums(const float *x, const float *res, uint64_t b0, uint64_t i, uint64_t e,
		    float s[8], uint32_t *count)
{
	for (; i < e; i++) {
		float y = res ? x[i] + res[i] : x[i];

		if (!gw_nonfinite(y)) {
			s[(i - b0) & 7] += fabsf(y);
			(*count)++;
		}
	}
}

static float combine(const float s[8])
{
	return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

/* The bucket [b0, e)'s scale from its partial sums (see the file comment). */
float gw_onebit_scale(const float s[8], uint32_t count, const float *x, const float *res,
		      uint64_t b0, uint64_t e)
{
	float sum = combine(s), t[8] = { 0 }, r;

	if (!count)
		return 0.0f;
	if (sum <= FLT_MAX)
		return sum / (float)count;
	/* Overflow: a rare, scalar path shared by every variant. */
	for (uint64_t i = b0; i < e; i++) {
		float y = res ? x[i] + res[i] : x[i];

		if (!gw_nonfinite(y))
			t[(i - b0) & 7] += fabsf(y) * 0x1p-64f;
	}
	r = (combine(t) / (float)count) * 0x1p64f;
	return r <= FLT_MAX ? r : FLT_MAX;
}

/* The generic scale kernel: the sums in the defined order, then the mean. */
static float bucket_scale(const float *x, const float *res, uint64_t b0, uint64_t e)
{
	float s[8] = { 0 };
	uint32_t count = 0;

	gw_onebit_sums(x, res, b0, b0, e, s, &count);
	return gw_onebit_scale(s, count, x, res, b0, e);
}

void gw_onebit_encode_range(const float *x, const float *res, float *res_out, uint64_t i,
			    uint64_t e, float scale, struct gw_onebit_bw *wp,
			    struct gw_enc_info *info)
{
	/* A copy whose address never escapes stays in registers. */
	struct gw_onebit_bw w = *wp;
	uint32_t bits = 0;
	unsigned k = 0;

	for (; i < e; i++) {
		float y = res ? x[i] + res[i] : x[i];

		if (gw_nonfinite(y)) {
			gw_note_nonfinite(info, i, y);
			bits |= 1u << k;
			if (res_out)
				res_out[i] = 0.0f;
		} else {
			bits |= (uint32_t)(y >= 0.0f) << k;
			if (res_out)
				res_out[i] = y - (y >= 0.0f ? scale : -scale);
		}
		if (++k == 32) {
			gw_onebit_put(&w, bits, 32);
			bits = 0;
			k = 0;
		}
	}
	if (k)
		gw_onebit_put(&w, bits, k);
	*wp = w;
}

static ssize_t onebit_encode(const struct gw_codec *c, void *state, void *scratch, const float *x,
			     const float *res, float *res_out, uint64_t n, void *out, size_t cap,
			     struct gw_enc_info *info)
{
	(void)state, (void)scratch;
	return gw_onebit_encode(c, x, res, res_out, n, out, cap, info, bucket_scale,
				gw_onebit_encode_range);
}

/* Header, length and scales (bucket.h), then the padding bits must be 0. */
int gw_onebit_check(const void *in, size_t len, uint64_t n, uint32_t *bucket)
{
	const uint8_t *p = in;
	int rc = gw_bucket_check(in, len, n, gw_onebit_nbytes(n), 1.0f, bucket);

	if (rc)
		return rc;
	if ((n % 8) && (p[len - 1] >> (n % 8)))
		return -EBADMSG;
	return 0;
}

static int onebit_decode_any(const void *in, size_t len, uint64_t n, float *y, int add)
{
	const uint8_t *p = in, *bits;
	uint32_t b;
	int rc = gw_onebit_check(in, len, n, &b);

	if (rc)
		return rc;
	bits = p + gw_bucket_data(b, n);
	for (uint64_t b0 = 0, bi = 0; b0 < n; b0 += b, bi++) {
		uint64_t e = gw_bucket_end(b0, b, n);
		float sc = gw_bucket_scale(p, bi);

		for (uint64_t i = b0; i < e; i++) {
			float v = (bits[i >> 3] >> (i & 7)) & 1 ? sc : -sc;

			y[i] = add ? y[i] + v : v;
		}
	}
	return 0;
}

static int onebit_decode(const void *in, size_t len, uint64_t n, float *y)
{
	return onebit_decode_any(in, len, n, y, 0);
}

static int onebit_decode_add(const void *in, size_t len, uint64_t n, float *acc)
{
	return onebit_decode_any(in, len, n, acc, 1);
}

const struct gw_codec_ops gw_onebit_generic = {
	.size = sizeof(struct gw_codec_ops),
	.name = "onebit",
	.impl = "onebit-generic",
	.id = GW_CODEC_ONEBIT,
	.lossy = true,
	.priority = 100,
	.params = gw_params_onebit,
	.bound = gw_onebit_bound,
	.encode = onebit_encode,
	.decode = onebit_decode,
	.decode_add = onebit_decode_add,
};
