/* SPDX-License-Identifier: MIT */
/*
 * topk.h - private interface between the top-k driver (topk.c) and its
 * candidate-filter passes (generic in topk.c, topk_avx2.c, topk_avx512.c).
 *
 * Only the streaming pass over the n values is vectorized; everything after
 * it (exact selection among the candidates, the exact fallback, output,
 * decoding) is shared code in topk.c, so the variants differ in speed only.
 * Selection is exact, hence every variant writes identical bytes.
 */
#ifndef GW_TOPK_H
#define GW_TOPK_H

#include "codec_impl.h"

/* Magnitude key of a float: monotone in |y| for finite y. */
#define GW_TOPK_ABS 0x7fffffffu
/* Keys at or above this are NaN or +-Inf and never selected. */
#define GW_TOPK_INF 0x7f800000u
/* Slack after the candidate arrays: a pass may write whole vectors past the
 * last candidate it keeps (at most 63 entries beyond `room`). */
#define GW_TOPK_PAD 64

/* Non-finite values seen by a pass (absolute indices). */
struct gw_topk_nf {
	uint64_t count, first, last;
};

/* Record the non-finite lanes (bit t set: element pos + t). */
static inline void gw_topk_nf_mask(struct gw_topk_nf *nf, uint64_t pos, uint32_t mask)
{
	if (!mask)
		return;
	if (!nf->count)
		nf->first = pos + (uint64_t)__builtin_ctz(mask);
	nf->last = pos + 31 - (uint64_t)__builtin_clz(mask);
	nf->count += (uint64_t)__builtin_popcount(mask);
}

/*
 * gw_topk_collect_fn - one streaming pass over len <= 2^32 values.
 * y_i = x_i + res_i (x_i when res == NULL); when res_out is set, store
 * res_out_i = 0 for the candidates kept and y_i for every other i, including
 * non-finite ones (the driver restores the unselected candidates, or all kept
 * ones to read res_out back as y, and zeroes the non-finite ones at the end).
 * Non-finite y go to nf (base + i).
 * Candidates are the finite y with key >= tlow, kept in index order as
 * (cidx = i, local to this chunk; cval = y) while fewer than room are kept
 * (entries up to room + GW_TOPK_PAD - 1 may be written). If a candidate had
 * to be dropped, *overflow is set; the pass still finishes.
 * Return: the number of candidates kept.
 */
typedef uint64_t (*gw_topk_collect_fn)(const float *x, const float *res, float *res_out,
				       uint64_t len, uint64_t base, uint32_t tlow, uint32_t *cidx,
				       float *cval, uint64_t room, int *overflow,
				       struct gw_topk_nf *nf);

/* The generic filter pass (topk.c): the reference, and the SIMD tails. */
uint64_t gw_topk_collect_generic(const float *x, const float *res, float *res_out, uint64_t len,
				 uint64_t base, uint32_t tlow, uint32_t *cidx, float *cval,
				 uint64_t room, int *overflow, struct gw_topk_nf *nf);

size_t gw_topk_bound(const struct gw_codec *c, uint64_t n);
size_t gw_topk_scratch_size(const struct gw_codec *c, uint64_t n);
ssize_t gw_topk_encode(const struct gw_codec *c, void *scratch, const float *x, const float *res,
		       float *res_out, uint64_t n, void *out, size_t cap, struct gw_enc_info *info,
		       gw_topk_collect_fn collect);
int gw_topk_decode(const void *in, size_t len, uint64_t n, float *y);
int gw_topk_decode_add(const void *in, size_t len, uint64_t n, float *acc);

#endif
