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
 * Two float corner cases the plain formulas get wrong, defined here once and
 * shared (through the gw_int8_* helpers below) with the SIMD variants:
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
#include "codec_impl.h"

/*
 * Helpers shared with int8_avx2.c and int8_avx512.c, which repeat these
 * declarations (codec_impl.h is not ours to extend): the scalar parts of
 * every variant are this very code, so they cannot drift apart.
 */
struct gw_int8_bk {
	float scale;	/* what goes on the wire */
	float inv;	/* 127 / (m * pre), 0 for an all-zero bucket */
	float pre;	/* 1, or 2^64 for buckets with m < 2^-64 */
};
size_t gw_int8_bound(const struct gw_codec *c, uint64_t n);
ssize_t gw_int8_begin(const struct gw_codec *c, void *state, const float *x,
		      const float *res, const float *res_out, uint64_t n,
		      void *out, size_t cap, uint64_t *s);
void gw_int8_bucket(float m, struct gw_int8_bk *k);
float gw_int8_max(const float *x, const float *res, uint64_t i, uint64_t e);
void gw_int8_encode_range(const float *x, const float *res, float *res_out,
			  uint64_t i, uint64_t e, const struct gw_int8_bk *k,
			  int stoch, uint64_t s, int8_t *code,
			  struct gw_enc_info *info);
int gw_int8_check(const void *in, size_t len, uint64_t n);

/* The stochastic-rounding offset u_i in [0, 1) of element i. */
static inline float gw_int8_u(uint64_t s, uint64_t i)
{
	uint32_t h = gw_hash32(gw_hash32((uint32_t)i ^ (uint32_t)s) ^
			       (uint32_t)(s >> 32) ^ (uint32_t)(i >> 32));

	return (float)(h >> 8) * 0x1p-24f;
}

#define HDR 8

size_t gw_int8_bound(const struct gw_codec *c, uint64_t n)
{
	uint32_t b = c->p.bucket;

	/* An invalid bucket makes encode() fail; bound it as bucket = 1. */
	if (b == 0 || b > GW_BUCKET_MAX)
		b = 1;
	return HDR + 4 * (size_t)gw_nbuckets(n, b) + (size_t)n;
}

static size_t int8_state_size(const struct gw_codec *c, uint64_t n)
{
	(void)c, (void)n;
	return sizeof(uint64_t);
}

ssize_t gw_int8_begin(const struct gw_codec *c, void *state, const float *x,
		      const float *res, const float *res_out, uint64_t n,
		      void *out, size_t cap, uint64_t *s)
{
	uint32_t b = c->p.bucket;
	size_t need;
	uint64_t ctr;

	if (!gw_enc_args_ok(x, res, res_out, n) || b == 0 || b > GW_BUCKET_MAX ||
	    c->p.rounding > GW_ROUND_STOCHASTIC)
		return -EINVAL;
	if (c->p.rounding == GW_ROUND_STOCHASTIC && !state)
		return -EINVAL;
	need = gw_int8_bound(c, n);
	if (cap < need)
		return -ENOSPC;
	if (!out)
		return -EINVAL;
	*s = 0;
	if (c->p.rounding == GW_ROUND_STOCHASTIC) {
		/* Advance only once the call is known to succeed. */
		memcpy(&ctr, state, sizeof(ctr));
		*s = gw_mix64(c->p.seed, ctr);
		ctr++;
		memcpy(state, &ctr, sizeof(ctr));
	}
	gw_put32(out, b);
	gw_put32((uint8_t *)out + 4, 0);
	return (ssize_t)need;
}

void gw_int8_bucket(float m, struct gw_int8_bk *k)
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

/* floorf(v) for |v| < 2^31. */
static inline float floor_small(float v)
{
	float t = (float)(int32_t)v;

	/* Branch-free: the comparison is a coin flip for random data. */
	return t - (float)(t > v);
}

static inline float clamp127(float q)
{
	q = q < 127.0f ? q : 127.0f;		/* minss / maxss */
	return q > -127.0f ? q : -127.0f;
}

void gw_int8_encode_range(const float *x, const float *res, float *res_out,
			  uint64_t i, uint64_t e, const struct gw_int8_bk *k,
			  int stoch, uint64_t s, int8_t *code,
			  struct gw_enc_info *info)
{
	for (; i < e; i++) {
		float y = res ? x[i] + res[i] : x[i];
		float v, q;

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
			q = round_even(v);
		q = clamp127(q);
		code[i] = (int8_t)q;
		if (res_out)
			res_out[i] = y - q * k->scale;
	}
}

static ssize_t int8_encode(const struct gw_codec *c, void *state, void *scratch,
			   const float *x, const float *res, float *res_out,
			   uint64_t n, void *out, size_t cap,
			   struct gw_enc_info *info)
{
	uint32_t b = c->p.bucket;
	uint8_t *o = out;
	int8_t *code;
	uint64_t s, bi = 0;
	ssize_t len;

	(void)scratch;
	len = gw_int8_begin(c, state, x, res, res_out, n, out, cap, &s);
	if (len < 0)
		return len;
	code = (int8_t *)(o + HDR + 4 * gw_nbuckets(n, b));
	for (uint64_t b0 = 0; b0 < n; b0 += b, bi++) {
		uint64_t e = n - b0 < b ? n : b0 + b;
		struct gw_int8_bk k;

		gw_int8_bucket(gw_int8_max(x, res, b0, e), &k);
		gw_put32(o + HDR + 4 * bi, gw_f2u(k.scale));
		gw_int8_encode_range(x, res, res_out, b0, e, &k,
				     c->p.rounding == GW_ROUND_STOCHASTIC, s,
				     code, info);
	}
	return len;
}

int gw_int8_check(const void *in, size_t len, uint64_t n)
{
	const uint8_t *p = in;
	uint64_t nb;
	uint32_t b;

	if (!p || n > GW_MAX_ELEMS || len < HDR)
		return -EBADMSG;
	b = gw_get32(p);
	if (b == 0 || b > GW_BUCKET_MAX || gw_get32(p + 4) != 0)
		return -EBADMSG;
	nb = gw_nbuckets(n, b);
	/* n <= 2^40 and nb <= n: no overflow in 64 bits. */
	if ((uint64_t)len != HDR + 4 * nb + n)
		return -EBADMSG;
	for (uint64_t j = 0; j < nb; j++) {
		uint32_t u = gw_get32(p + HDR + 4 * j);

		/* Sign bit (incl. -0), NaN/Inf, or a 127-multiple that overflows. */
		if ((u >> 31) || gw_nonfinite(gw_u2f(u)) ||
		    !(127.0f * gw_u2f(u) <= FLT_MAX))
			return -EBADMSG;
	}
	{
		const uint8_t *q = p + HDR + 4 * nb;
		unsigned bad = 0;

		/* Branch-free so that the compiler can vectorise the scan. */
		for (uint64_t i = 0; i < n; i++)
			bad |= q[i] == 0x80;
		if (bad)
			return -EBADMSG;
	}
	return 0;
}

static int int8_decode_any(const void *in, size_t len, uint64_t n, float *y,
			   int add)
{
	const uint8_t *p = in;
	const int8_t *q;
	uint32_t b;
	int rc = gw_int8_check(in, len, n);

	if (rc)
		return rc;
	b = gw_get32(p);
	q = (const int8_t *)(p + HDR + 4 * gw_nbuckets(n, b));
	for (uint64_t b0 = 0, bi = 0; b0 < n; b0 += b, bi++) {
		uint64_t e = n - b0 < b ? n : b0 + b;
		float sc = gw_u2f(gw_get32(p + HDR + 4 * bi));

		if (add) {
			for (uint64_t i = b0; i < e; i++)
				y[i] += (float)q[i] * sc;
		} else {
			for (uint64_t i = b0; i < e; i++)
				y[i] = (float)q[i] * sc;
		}
	}
	return 0;
}

static int int8_decode(const void *in, size_t len, uint64_t n, float *y)
{
	return int8_decode_any(in, len, n, y, 0);
}

static int int8_decode_add(const void *in, size_t len, uint64_t n, float *acc)
{
	return int8_decode_any(in, len, n, acc, 1);
}

const struct gw_codec_ops gw_int8_generic = {
	GW_OPS_SIZE,
	.name = "int8",
	.impl = "int8-generic",
	.id = GW_CODEC_INT8,
	.lossy = true,
	.priority = 100,
	.params = gw_params_int8,
	.state_size = int8_state_size,
	.bound = gw_int8_bound,
	.encode = int8_encode,
	.decode = int8_decode,
	.decode_add = int8_decode_add,
};
