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
#include "codec_impl.h"

#define HDR 8

/*
 * Helpers shared with onebit_avx2.c, which repeats these declarations
 * (codec_impl.h is not ours to extend): its scalar parts are this code.
 */
size_t gw_onebit_bound(const struct gw_codec *c, uint64_t n);
ssize_t gw_onebit_begin(const struct gw_codec *c, const float *x,
			const float *res, const float *res_out, uint64_t n,
			void *out, size_t cap);
void gw_onebit_sums(const float *x, const float *res, uint64_t b0, uint64_t i,
		    uint64_t e, float s[8], uint32_t *count);
float gw_onebit_scale(const float s[8], uint32_t count, const float *x,
		      const float *res, uint64_t b0, uint64_t e);
int gw_onebit_check(const void *in, size_t len, uint64_t n);

size_t gw_onebit_bound(const struct gw_codec *c, uint64_t n)
{
	uint32_t b = c->p.bucket;

	if (b == 0 || b > GW_BUCKET_MAX)
		b = 1;
	return HDR + 4 * (size_t)gw_nbuckets(n, b) + (size_t)(n / 8 + (n % 8 != 0));
}

ssize_t gw_onebit_begin(const struct gw_codec *c, const float *x,
			const float *res, const float *res_out, uint64_t n,
			void *out, size_t cap)
{
	uint32_t b = c->p.bucket;
	size_t need;

	if (!gw_enc_args_ok(x, res, res_out, n) || b == 0 || b > GW_BUCKET_MAX)
		return -EINVAL;
	need = gw_onebit_bound(c, n);
	if (cap < need)
		return -ENOSPC;
	if (!out)
		return -EINVAL;
	gw_put32(out, b);
	gw_put32((uint8_t *)out + 4, 0);
	return (ssize_t)need;
}

/*
 * Add |y| of elements [i, e) of the bucket starting at b0 into the partial
 * sums (s[(i - b0) % 8]) and count the finite ones.
 */
void gw_onebit_sums(const float *x, const float *res, uint64_t b0, uint64_t i,
		    uint64_t e, float s[8], uint32_t *count)
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
float gw_onebit_scale(const float s[8], uint32_t count, const float *x,
		      const float *res, uint64_t b0, uint64_t e)
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

static ssize_t onebit_encode(const struct gw_codec *c, void *state,
			     void *scratch, const float *x, const float *res,
			     float *res_out, uint64_t n, void *out, size_t cap,
			     struct gw_enc_info *info)
{
	uint32_t b = c->p.bucket;
	uint8_t *o = out, *bits;
	uint64_t bi = 0;
	ssize_t len;

	(void)state, (void)scratch;
	len = gw_onebit_begin(c, x, res, res_out, n, out, cap);
	if (len < 0)
		return len;
	bits = o + HDR + 4 * gw_nbuckets(n, b);
	memset(bits, 0, (size_t)(n / 8 + (n % 8 != 0)));
	for (uint64_t b0 = 0; b0 < n; b0 += b, bi++) {
		uint64_t e = n - b0 < b ? n : b0 + b;
		float s[8] = { 0 }, sc;
		uint32_t count = 0;

		gw_onebit_sums(x, res, b0, b0, e, s, &count);
		sc = gw_onebit_scale(s, count, x, res, b0, e);
		gw_put32(o + HDR + 4 * bi, gw_f2u(sc));
		for (uint64_t i = b0; i < e; i++) {
			float y = res ? x[i] + res[i] : x[i];

			if (gw_nonfinite(y)) {
				gw_note_nonfinite(info, i, y);
				bits[i >> 3] |= (uint8_t)(1u << (i & 7));
				if (res_out)
					res_out[i] = 0.0f;
				continue;
			}
			if (y >= 0.0f)
				bits[i >> 3] |= (uint8_t)(1u << (i & 7));
			if (res_out)
				res_out[i] = y - (y >= 0.0f ? sc : -sc);
		}
	}
	return len;
}

int gw_onebit_check(const void *in, size_t len, uint64_t n)
{
	const uint8_t *p = in;
	uint64_t nb, nbytes = n / 8 + (n % 8 != 0);
	uint32_t b;

	if (!p || n > GW_MAX_ELEMS || len < HDR)
		return -EBADMSG;
	b = gw_get32(p);
	if (b == 0 || b > GW_BUCKET_MAX || gw_get32(p + 4) != 0)
		return -EBADMSG;
	nb = gw_nbuckets(n, b);
	if ((uint64_t)len != HDR + 4 * nb + nbytes)
		return -EBADMSG;
	for (uint64_t j = 0; j < nb; j++) {
		uint32_t u = gw_get32(p + HDR + 4 * j);

		if ((u >> 31) || gw_nonfinite(gw_u2f(u)))
			return -EBADMSG;
	}
	if ((n % 8) && (p[len - 1] >> (n % 8)))
		return -EBADMSG;
	return 0;
}

static int onebit_decode_any(const void *in, size_t len, uint64_t n, float *y,
			     int add)
{
	const uint8_t *p = in, *bits;
	uint32_t b;
	int rc = gw_onebit_check(in, len, n);

	if (rc)
		return rc;
	b = gw_get32(p);
	bits = p + HDR + 4 * gw_nbuckets(n, b);
	for (uint64_t b0 = 0, bi = 0; b0 < n; b0 += b, bi++) {
		uint64_t e = n - b0 < b ? n : b0 + b;
		float sc = gw_u2f(gw_get32(p + HDR + 4 * bi));

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
	GW_OPS_SIZE,
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
