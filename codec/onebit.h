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

#include "codec_impl.h"

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
typedef float (*gw_onebit_scale_fn)(const float *x, const float *res,
				    uint64_t b0, uint64_t e);
/*
 * gw_onebit_bucket_fn - append the sign bits of elements [i, e) to w and
 * store their residuals (when res_out is set); non-finite ones go to info.
 */
typedef void (*gw_onebit_bucket_fn)(const float *x, const float *res,
				    float *res_out, uint64_t i, uint64_t e,
				    float scale, struct gw_onebit_bw *w,
				    struct gw_enc_info *info);

/* Generic pieces the SIMD kernels finish with. */
void gw_onebit_sums(const float *x, const float *res, uint64_t b0, uint64_t i,
		    uint64_t e, float s[8], uint32_t *count);
float gw_onebit_scale(const float s[8], uint32_t count, const float *x,
		      const float *res, uint64_t b0, uint64_t e);
void gw_onebit_encode_range(const float *x, const float *res, float *res_out,
			    uint64_t i, uint64_t e, float scale,
			    struct gw_onebit_bw *w, struct gw_enc_info *info);

size_t gw_onebit_bound(const struct gw_codec *c, uint64_t n);
/* encode() with the given kernels. */
ssize_t gw_onebit_encode(const struct gw_codec *c, const float *x,
			 const float *res, float *res_out, uint64_t n, void *out,
			 size_t cap, struct gw_enc_info *info,
			 gw_onebit_scale_fn scale, gw_onebit_bucket_fn bucket);
/* The section checks every decoder runs first: 0 with *bucket set, or -EBADMSG. */
int gw_onebit_check(const void *in, size_t len, uint64_t n, uint32_t *bucket);

#endif
