/* SPDX-License-Identifier: MIT */
/*
 * int8.c - 8-bit linear quantisation with one scale per bucket (generic C).
 *
 * Section, little-endian (nb = ceil(n / bucket)):
 *
 *   0        4          8                        8 + 4 nb              8 + 4 nb + n
 *   +--------+----------+------------------------+---------------------+
 *   | bucket | reserved | scale[0] ... scale[nb-1] | code[0] ... code[n-1] |
 *   | u32    | u32 = 0  | f32 each, >= 0, finite   | i8 each, -127..127    |
 *   +--------+----------+------------------------+---------------------+
 *
 * Element i belongs to bucket i / bucket and decodes to (float)code[i] * scale.
 *
 * Encoding a bucket: m = max |y| over its finite elements (0 if none),
 * scale = m / 127, inv = 127 / m (0 when m == 0), then
 *   nearest:    q = nearbyintf(y * inv)             (ties to even)
 *   stochastic: q = floorf(y * inv + u_i), u_i in [0, 1) from a counter hash
 * clamped to [-127, 127]; non-finite y get code 0 and residual 0 and do not
 * count towards m. -128 is never written, so the code range is symmetric and a
 * decoder rejects it. The per-bucket scale keeps a bucket of tiny values
 * precise next to a bucket of big ones (the seed had one scale per tensor,
 * and truncated instead of rounding).
 *
 * Error bound per element (decoded = q * scale, y finite):
 *   nearest     |y - decoded| <= scale / 2  (+ float rounding of y*inv and q*scale)
 *   stochastic  |y - decoded| <  scale      (+ the same rounding), E[decoded] = y
 * The largest element is never clamped (|y * inv| rounds to at most 127), so
 * nothing saturates and GW_PF_SATURATED is never set.
 *
 * Two float corner cases the plain formulas get wrong, defined here once, in
 * the driver every variant runs (int8.h: variants supply only the kernels):
 *  - m < 2^-64: 127 / m overflows to +inf for m < 2^-121 (subnormal buckets).
 *    Such buckets multiply y by pre = 2^64 first and use inv = 127 / (m * 2^64).
 *    Scaling by a power of two is exact here, so for 2^-121 <= m < 2^-64 this
 *    gives the very bits of y * (127 / m); it only changes the cases that
 *    would otherwise be inf/NaN. Everywhere else pre = 1 (an exact multiply).
 *  - m near FLT_MAX: 127 * (m / 127) can round up to +inf. The scale is then
 *    stepped one ulp down so that every decoded value is finite. The decoder
 *    likewise rejects a scale whose 127-multiple overflows.
 *
 * Stochastic rounding is reproducible: the state is a u64 counter (zeroed by
 * the caller once); each encode uses s = gw_mix64(seed, counter++) and
 * u_i = (h >> 8) * 2^-24 with
 *   h = hash32(hash32(lo32(i) ^ lo32(s)) ^ hi32(s) ^ hi32(i)),
 * i being the element's index in the tensor. The SIMD variants compute the
 * same hash in 32-bit lanes.
 */
#include <float.h>
#include <math.h>
#include "bucket.h"
#include "int8.h"

/* The stochastic-rounding offset u_i in [0, 1) of element i. */
static inline float gw_int8_u(uint64_t s, uint64_t i)
{
	uint32_t h = gw_hash32(gw_hash32((uint32_t)i ^ (uint32_t)s) ^ (uint32_t)(s >> 32) ^
			       (uint32_t)(i >> 32));

	return (float)(h >> 8) * 0x1p-24f;
}

size_t gw_int8_bound(const struct gw_codec *c, uint64_t n)
{
	return gw_bucket_bound(c->p.bucket, n, n);
}

size_t gw_int8_state_size(const struct gw_codec *c, uint64_t n)
{
	(void)c, (void)n;
	return sizeof(uint64_t);
}

static void bucket_quant(float m, struct gw_int8_bk *k)
{
	k->pre = 1.0f;
	k->scale = m / 127.0f;
	if (!(127.0f * k->scale <= FLT_MAX))
		k->scale = nextafterf(k->scale, 0.0f);
	if (m == 0.0f) {
		k->inv = 0.0f;
		return;
	}
	if (m < 0x1p-64f) {
		k->pre = 0x1p64f;
		m *= 0x1p64f;
	}
	k->inv = 127.0f / m;
}

float gw_int8_max(const float *x, const float *res, uint64_t i, uint64_t e)
{
	float m = 0.0f;

	for (; i < e; i++) {
		float a = fabsf(res ? x[i] + res[i] : x[i]);

		/* NaN fails both compares; +inf fails the first. */
		if (a < INFINITY && a > m)
			m = a;
	}
	return m;
}

/*
 * nearbyintf(v) for |v| < 2^22 without a libm call: adding and subtracting
 * 1.5 * 2^23 rounds to an integer in the current (nearest-even) mode.
 */
static inline float round_even(float v)
{
	return (v + 0x1.8p23f) - 0x1.8p23f;
}

/*
 * (int)floorf(v) for |v| < 2^31 (here |v| < 129) without a libm call (no
 * roundss in the x86-64 baseline). All integer: the compare becomes a setcc,
 * not a branch, and a branch mispredicts on every other element of random
 * data. The result is an exact integer, so it equals floorf(v) as a float.
 */
static inline int32_t floor_small(float v)
{
	int32_t t = (int32_t)v; /* truncates towards 0 */

	return t - ((float)t > v);
}

/* Clamp to [-127, 127] on integers (cmov, never a branch). */
static inline int32_t clamp127(int32_t q)
{
	q = q < 127 ? q : 127;
	return q > -127 ? q : -127;
}

void gw_int8_encode_range(const float *x, const float *res, float *res_out, uint64_t i, uint64_t e,
			  const struct gw_int8_bk *k, int stoch, uint64_t s, int8_t *code,
			  struct gw_enc_info *info)
{
	for (; i < e; i++) {
		float y = res ? x[i] + res[i] : x[i];
		float v;
		int32_t q;

		if (gw_nonfinite(y)) {
			gw_note_nonfinite(info, i, y);
			code[i] = 0;
			if (res_out)
				res_out[i] = 0.0f;
			continue;
		}
		v = (y * k->pre) * k->inv;
		if (stoch)
			q = floor_small(v + gw_int8_u(s, i));
		else
			q = (int32_t)round_even(v);
		q = clamp127(q);
		code[i] = (int8_t)q;
		if (res_out)
			res_out[i] = y - (float)q * k->scale;
	}
}

ssize_t gw_int8_encode(const struct gw_codec *c, void *state, const float *x, const float *res,
		       float *res_out, uint64_t n, void *out, size_t cap, struct gw_enc_info *info,
		       gw_int8_max_fn max, gw_int8_range_fn range)
{
	uint32_t b = c->p.bucket;
	int stoch = c->p.rounding == GW_ROUND_STOCHASTIC;
	uint8_t *o = out;
	int8_t *code;
	uint64_t s = 0, ctr, bi = 0;
	ssize_t len;

	if (c->p.rounding > GW_ROUND_STOCHASTIC || (stoch && !state))
		return -EINVAL;
	len = gw_bucket_begin(b, x, res, res_out, n, n, out, cap);
	if (len < 0)
		return len;
	if (stoch) {
		/* Advance only once the call is known to succeed. */
		memcpy(&ctr, state, sizeof(ctr));
		s = gw_mix64(c->p.seed, ctr);
		ctr++;
		memcpy(state, &ctr, sizeof(ctr));
	}
	code = (int8_t *)(o + gw_bucket_data(b, n));
	for (uint64_t b0 = 0; b0 < n; b0 += b, bi++) {
		uint64_t e = gw_bucket_end(b0, b, n);
		struct gw_int8_bk k;

		bucket_quant(max(x, res, b0, e), &k);
		gw_bucket_set_scale(o, bi, k.scale);
		range(x, res, res_out, b0, e, &k, stoch, s, code, info);
	}
	return len;
}

/* Header, length and scales (bucket.h), then no code may be -128. */
static int check(const void *in, size_t len, uint64_t n, uint32_t *b)
{
	const uint8_t *q;
	unsigned bad = 0;
	int rc = gw_bucket_check(in, len, n, n, 127.0f, b);

	if (rc)
		return rc;
	q = (const uint8_t *)in + gw_bucket_data(*b, n);
	/* Branch-free so that the compiler can vectorise the scan. */
	for (uint64_t i = 0; i < n; i++)
		bad |= q[i] == 0x80;
	return bad ? -EBADMSG : 0;
}

int gw_int8_decode(const void *in, size_t len, uint64_t n, float *y, int add, gw_int8_dec_fn dec)
{
	const uint8_t *p = in;
	const int8_t *q;
	uint32_t b;
	int rc = check(in, len, n, &b);

	if (rc)
		return rc;
	q = (const int8_t *)(p + gw_bucket_data(b, n));
	for (uint64_t b0 = 0, bi = 0; b0 < n; b0 += b, bi++)
		dec(q, y, b0, gw_bucket_end(b0, b, n), gw_bucket_scale(p, bi), add);
	return 0;
}

static ssize_t int8_encode(const struct gw_codec *c, void *state, void *scratch, const float *x,
			   const float *res, float *res_out, uint64_t n, void *out, size_t cap,
			   struct gw_enc_info *info)
{
	(void)scratch;
	return gw_int8_encode(c, state, x, res, res_out, n, out, cap, info, gw_int8_max,
			      gw_int8_encode_range);
}

void gw_int8_decode_range(const int8_t *q, float *y, uint64_t i, uint64_t e, float sc, int add)
{
	if (add) {
		for (; i < e; i++)
			y[i] += (float)q[i] * sc;
	} else {
		for (; i < e; i++)
			y[i] = (float)q[i] * sc;
	}
}

static int int8_decode(const void *in, size_t len, uint64_t n, float *y)
{
	return gw_int8_decode(in, len, n, y, 0, gw_int8_decode_range);
}

static int int8_decode_add(const void *in, size_t len, uint64_t n, float *acc)
{
	return gw_int8_decode(in, len, n, acc, 1, gw_int8_decode_range);
}

const struct gw_codec_ops gw_int8_generic = {
	.size = sizeof(struct gw_codec_ops),
	.name = "int8",
	.impl = "int8-generic",
	.id = GW_CODEC_INT8,
	.lossy = true,
	.priority = 100,
	.params = gw_params_int8,
	.state_size = gw_int8_state_size,
	.bound = gw_int8_bound,
	.encode = int8_encode,
	.decode = int8_decode,
	.decode_add = int8_decode_add,
};
