/* SPDX-License-Identifier: MIT */
/*
 * randomk.c - random-k sparsification with indices both sides regenerate.
 *
 * Section, little-endian:
 *
 *  0        8        16                   16 + 4k
 *  +--------+--------+--------------------+
 *  | s u64  | k u64  | k values (f32)     |
 *  +--------+--------+--------------------+
 *
 * k = max(1, ceil(ratio * n)) (0 iff n == 0). Only values travel: the
 * indices come from s = gw_mix64(seed, counter++), the counter being the
 * codec's 8-byte state. Sampling without replacement by stratification:
 * stratum j < k is [lo_j, hi_j), lo_j = floor(j*n/k), size_j = hi_j - lo_j
 * >= 1, and its index is lo_j + floor(gw_mix64(s, j) * size_j / 2^64), so
 * indices are distinct and increasing and element i is sent with
 * probability 1/size_j (~k/n).
 *
 * value_j = y[idx_j] with error feedback; y[idx_j] * size_j without it (the
 * 1/p scaling makes the decoded tensor unbiased, and error feedback must not
 * scale). A non-finite y (flagged as everywhere) is sent as 0.
 * Residual: y everywhere except 0 at sampled and non-finite elements.
 * The decoder checks k <= n, (k == 0) == (n == 0) and len == 16 + 4k before
 * it writes.
 */
#include <math.h>
#include "codec_impl.h"

#define BLOCK 4096 /* values per non-finite check and gather round */

static int calc_k(const struct gw_codec *c, uint64_t n, uint64_t *kp)
{
	double ratio = c->p.ratio, k;

	if (!(ratio > 0 && ratio <= 1) || n > GW_MAX_ELEMS)
		return -EINVAL;
	*kp = 0;
	if (n) {
		k = ceil(ratio * (double)n);
		*kp = k < 1 ? 1 : k > (double)n ? n : (uint64_t)k;
	}
	return 0;
}

/*
 * Walk the strata without a division per stratum: hi_j = j*q + floor(j*r/k)
 * with q = n / k, r = n % k, the fraction kept as a remainder below k
 * (k <= 2^40, so nothing overflows). Equal to the __int128 formula.
 */
struct strata {
	uint64_t n, k, q, r, lo, frac;
};

static void strata_init(struct strata *st, uint64_t n, uint64_t k)
{
	st->n = n;
	st->k = k;
	st->q = n / k;
	st->r = n % k;
	st->lo = 0;
	st->frac = 0;
}

/* The next stratum's index (from hash h) and size. */
static uint64_t strata_next(struct strata *st, uint64_t h, uint64_t *size)
{
	uint64_t lo = st->lo, hi = lo + st->q, idx;

	st->frac += st->r;
	if (st->frac >= st->k) {
		st->frac -= st->k;
		hi++;
	}
	*size = hi - lo;
	idx = lo + (uint64_t)(((unsigned __int128)h * *size) >> 64);
	st->lo = hi;
	return idx;
}

static size_t randomk_state_size(const struct gw_codec *c, uint64_t n)
{
	(void)c, (void)n;
	return 8;
}

static size_t randomk_bound(const struct gw_codec *c, uint64_t n)
{
	uint64_t k;

	if (calc_k(c, n, &k))
		return 0;
	return (size_t)(16 + 4 * k);
}

static int block_bad(const float *y, uint64_t len)
{
	uint32_t bad = 0;

	for (uint64_t t = 0; t < len; t++) {
		uint32_t u = gw_f2u(y[t]);

		bad |= (u & 0x7f800000u) == 0x7f800000u;
	}
	return bad != 0;
}

/* res_out = x + res over one block; non-finite ones noted and zeroed. */
static void block_ef(const float *x, const float *res, float *res_out, uint64_t b, uint64_t len,
		     struct gw_enc_info *info)
{
	uint32_t bad = 0;

	for (uint64_t t = 0; t < len; t++) {
		float y = x[b + t] + res[b + t];
		uint32_t u = gw_f2u(y);

		bad |= (u & 0x7f800000u) == 0x7f800000u;
		res_out[b + t] = y;
	}
	if (!bad)
		return;
	for (uint64_t t = 0; t < len; t++) {
		if (gw_nonfinite(res_out[b + t])) {
			gw_note_nonfinite(info, b + t, res_out[b + t]);
			res_out[b + t] = 0;
		}
	}
}

/* Without error feedback only the first non-finite value matters. */
static void block_plain(const float *x, uint64_t b, uint64_t len, struct gw_enc_info *info)
{
	if (!block_bad(x + b, len))
		return;
	for (uint64_t t = 0; t < len; t++) {
		if (gw_nonfinite(x[b + t])) {
			gw_note_nonfinite(info, b + t, x[b + t]);
			return;
		}
	}
}

/*
 * One streaming pass in blocks; after each block, the strata whose index
 * falls inside it are gathered while the block is still in L1 (a separate
 * gather after the pass would miss the cache on every sample).
 */
static ssize_t randomk_encode(const struct gw_codec *c, void *state, void *scratch, const float *x,
			      const float *res, float *res_out, uint64_t n, void *out, size_t cap,
			      struct gw_enc_info *info)
{
	uint8_t *o = out;
	uint64_t k, ctr, s, j = 0, i = 0, size = 0;
	int scan = 1;
	struct strata st;

	(void)scratch;
	if (!gw_enc_args_ok(x, res, res_out, n) || calc_k(c, n, &k))
		return -EINVAL;
	if (cap < 16 + 4 * k)
		return -ENOSPC;
	if (!state || !out)
		return -EINVAL;
	memcpy(&ctr, state, 8);
	s = gw_mix64(c->p.seed, ctr);
	ctr++;
	memcpy(state, &ctr, 8);
	gw_put64(o, s);
	gw_put64(o + 8, k);
	if (!k)
		return 16;

	strata_init(&st, n, k);
	i = strata_next(&st, gw_mix64(s, 0), &size);
	for (uint64_t b = 0; b < n; b += BLOCK) {
		uint64_t len = n - b < BLOCK ? n - b : BLOCK;

		if (res) {
			block_ef(x, res, res_out, b, len, info);
		} else if (scan) {
			block_plain(x, b, len, info);
			scan = !(info->flags & GW_PF_NONFINITE);
		}
		for (; j < k && i < b + len;) {
			float v;

			if (res) {
				/* res_out holds y, or 0 where y was non-finite. */
				v = res_out[i];
				res_out[i] = 0;
			} else {
				v = gw_nonfinite(x[i]) ? 0.0f : x[i] * (float)size;
			}
			gw_put32(o + 16 + 4 * j, gw_f2u(v));
			if (++j < k)
				i = strata_next(&st, gw_mix64(s, j), &size);
		}
	}
	return (ssize_t)(16 + 4 * k);
}

static int parse(const uint8_t *b, size_t len, uint64_t n, uint64_t *s, uint64_t *k)
{
	if (n > GW_MAX_ELEMS || len < 16 || !b)
		return -EBADMSG;
	*s = gw_get64(b);
	*k = gw_get64(b + 8);
	if (*k > n || (*k == 0) != (n == 0) || len - 16 != 4 * *k)
		return -EBADMSG;
	return 0;
}

static int decode(const void *in, size_t len, uint64_t n, float *y, int add)
{
	const uint8_t *b = in;
	uint64_t s, k;
	struct strata st;
	int rc = parse(b, len, n, &s, &k);

	if (rc)
		return rc;
	if (!n)
		return 0;
	if (!add)
		memset(y, 0, (size_t)n * sizeof(float));
	strata_init(&st, n, k);
	for (uint64_t j = 0; j < k; j++) {
		uint64_t size, i = strata_next(&st, gw_mix64(s, j), &size);
		float v = gw_u2f(gw_get32(b + 16 + 4 * j));

		y[i] = add ? y[i] + v : v;
	}
	return 0;
}

static int randomk_decode(const void *in, size_t len, uint64_t n, float *y)
{
	return decode(in, len, n, y, 0);
}

static int randomk_decode_add(const void *in, size_t len, uint64_t n, float *acc)
{
	return decode(in, len, n, acc, 1);
}

const struct gw_codec_ops gw_randomk_generic = {
	.size = sizeof(struct gw_codec_ops),
	.name = "randomk",
	.impl = "randomk-generic",
	.id = GW_CODEC_RANDOMK,
	.lossy = true,
	.priority = 100,
	.params = gw_params_randomk,
	.state_size = randomk_state_size,
	.bound = randomk_bound,
	.encode = randomk_encode,
	.decode = randomk_decode,
	.decode_add = randomk_decode_add,
};
