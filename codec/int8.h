/* SPDX-License-Identifier: MIT */
/*
 * int8.h - private interface between the int8 driver (int8.c) and its
 * kernels (generic in int8.c, int8_avx2.c, int8_avx512.c).
 *
 * The driver owns everything outside a bucket: argument checks, the section
 * header (bucket.h), the stochastic counter, the per-bucket scale and its
 * float corner cases (gw_int8_bucket), and the section checks of decode. A
 * variant supplies only the per-bucket kernels below, so it differs from
 * int8-generic in speed, never in bytes.
 */
#ifndef GW_INT8_H
#define GW_INT8_H

#include "codec_impl.h"

/* One bucket's quantiser (see int8.c for why pre exists). */
struct gw_int8_bk {
	float scale; /* what goes on the wire */
	float inv;   /* 127 / (m * pre), 0 for an all-zero bucket */
	float pre;   /* 1, or 2^64 for buckets with m < 2^-64 */
};

/*
 * gw_int8_max_fn - max |y| over the finite y_i, i in [i, e) (0 if none);
 * y_i = x_i + res_i (x_i when res == NULL).
 */
typedef float (*gw_int8_max_fn)(const float *x, const float *res, uint64_t i, uint64_t e);
/*
 * gw_int8_range_fn - codes (and residuals, when res_out is set) of elements
 * [i, e) of one bucket; stoch selects stochastic rounding with stream value s.
 * code and res_out are indexed by the absolute element index.
 */
typedef void (*gw_int8_range_fn)(const float *x, const float *res, float *res_out, uint64_t i,
				 uint64_t e, const struct gw_int8_bk *k, int stoch, uint64_t s,
				 int8_t *code, struct gw_enc_info *info);
/* gw_int8_dec_fn - y[i] = code[i] * sc (add: y[i] += ...) for i in [i, e). */
typedef void (*gw_int8_dec_fn)(const int8_t *code, float *y, uint64_t i, uint64_t e, float sc,
			       int add);

/* The generic kernels; SIMD variants use them for their scalar tails. */
float gw_int8_max(const float *x, const float *res, uint64_t i, uint64_t e);
void gw_int8_encode_range(const float *x, const float *res, float *res_out, uint64_t i, uint64_t e,
			  const struct gw_int8_bk *k, int stoch, uint64_t s, int8_t *code,
			  struct gw_enc_info *info);
void gw_int8_decode_range(const int8_t *code, float *y, uint64_t i, uint64_t e, float sc, int add);

size_t gw_int8_bound(const struct gw_codec *c, uint64_t n);
size_t gw_int8_state_size(const struct gw_codec *c, uint64_t n);
/* encode() with the given kernels. */
ssize_t gw_int8_encode(const struct gw_codec *c, void *state, const float *x, const float *res,
		       float *res_out, uint64_t n, void *out, size_t cap, struct gw_enc_info *info,
		       gw_int8_max_fn max, gw_int8_range_fn range);
/* decode() / decode_add() (add != 0) with the given kernel. */
int gw_int8_decode(const void *in, size_t len, uint64_t n, float *y, int add, gw_int8_dec_fn dec);

#endif
