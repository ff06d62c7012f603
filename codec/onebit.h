/* SPDX-License-Identifier: MIT */
/*
 * onebit.h - private interface between the onebit driver (onebit.c) and its
 * kernels (generic in onebit.c, onebit_avx2.c).
 *
 * The driver owns the argument checks, the section header (bucket.h), the
 * bucket walk and the bit stream; a variant supplies the per-bucket scale and
 * sign kernels. Both kernels end in generic code (gw_onebit_sums and
 * gw_onebit_scale for the scale, gw_onebit_encode_range for a tail), so a
 * variant differs from onebit-generic in speed, never in bytes.
 */
#ifndef GW_ONEBIT_H
#define GW_ONEBIT_H

#include "bucket.h"

/* Appends bits LSB first; whole 32-bit words are stored as they fill. */
struct gw_onebit_bw {
	uint8_t *o;
	uint64_t acc;
	unsigned nb;
};

/* Append the k <= 32 low bits of bits. */
static inline void gw_onebit_put(struct gw_onebit_bw *w, uint32_t bits, unsigned k)
{
	w->acc |= (uint64_t)bits << w->nb;
	w->nb += k;
	if (w->nb >= 32) {
		gw_put32(w->o, (uint32_t)w->acc);
		w->o += 4;
		w->acc >>= 32;
		w->nb -= 32;
	}
}

/* Store the bits still held (the last byte's unused high bits are 0). */
static inline void gw_onebit_flush(struct gw_onebit_bw *w)
{
	for (; w->nb; w->nb = w->nb > 8 ? w->nb - 8 : 0, w->acc >>= 8)
		*w->o++ = (uint8_t)w->acc;
}

/* gw_onebit_scale_fn - the scale of the bucket [b0, e) (see onebit.c). */
typedef float (*gw_onebit_scale_fn)(const float *x, const float *res, uint64_t b0, uint64_t e);
/*
 * gw_onebit_bucket_fn - append the sign bits of elements [i, e) to w and
 * store their residuals (when res_out is set); non-finite ones go to info.
 */
typedef void (*gw_onebit_bucket_fn)(const float *x, const float *res, float *res_out, uint64_t i,
				    uint64_t e, float scale, struct gw_onebit_bw *w,
				    struct gw_enc_info *info);

/* Generic pieces the SIMD kernels finish with. */
void gw_onebit_sums(const float *x, const float *res, uint64_t b0, uint64_t i, uint64_t e,
		    float s[8], uint32_t *count);
float gw_onebit_scale(const float s[8], uint32_t count, const float *x, const float *res,
		      uint64_t b0, uint64_t e);
void gw_onebit_encode_range(const float *x, const float *res, float *res_out, uint64_t i,
			    uint64_t e, float scale, struct gw_onebit_bw *w,
			    struct gw_enc_info *info);

size_t gw_onebit_bound(const struct gw_codec *c, uint64_t n);

/* Bytes of sign bits for n values. */
static inline uint64_t gw_onebit_nbytes(uint64_t n)
{
	return n / 8 + (n % 8 != 0);
}

/*
 * encode() with the given kernels. Inline, so that each variant's encode()
 * gets its kernels inlined and the bit writer kept in registers across
 * buckets (through pointers, onebit-avx2 encoded measurably slower).
 */
static inline ssize_t gw_onebit_encode(const struct gw_codec *c, const float *x, const float *res,
				       float *res_out, uint64_t n, void *out, size_t cap,
				       struct gw_enc_info *info, gw_onebit_scale_fn scale,
				       gw_onebit_bucket_fn bucket)
{
	uint32_t b = c->p.bucket;
	uint8_t *o = out;
	struct gw_onebit_bw w;
	uint64_t bi = 0;
	ssize_t len = gw_bucket_begin(b, x, res, res_out, n, gw_onebit_nbytes(n), out, cap);

	if (len < 0)
		return len;
	w.o = o + gw_bucket_data(b, n);
	w.acc = 0;
	w.nb = 0;
	for (uint64_t b0 = 0; b0 < n; b0 += b, bi++) {
		uint64_t e = gw_bucket_end(b0, b, n);
		float sc = scale(x, res, b0, e);

		gw_bucket_set_scale(o, bi, sc);
		bucket(x, res, res_out, b0, e, sc, &w, info);
	}
	gw_onebit_flush(&w);
	return len;
}

/* The section checks every decoder runs first: 0 with *bucket set, or -EBADMSG. */
int gw_onebit_check(const void *in, size_t len, uint64_t n, uint32_t *bucket);

#endif
