/* SPDX-License-Identifier: MIT */
/*
 * lowrank_math.h - the linear algebra of PowerSGD, shared by codec/ and
 * coll/: the codec (codec/powersgd.c, point to point, which implements
 * these functions) and the low-rank allreduce (coll/lowrank.c) both use it,
 * so that both compute the same bits. It sits in common/ because two floors
 * share it; it needs nothing of codec_impl.h.
 *
 * Layouts. A tensor of n values is a row-major matrix M of rows x cols
 * (rows = ceil(n / cols); the tail of the last row is zero padding that is
 * never stored). P (rows x r) and Q (cols x r) are kept column by column:
 * pt[k * rows + i] = P[i][k], qt[k * cols + j] = Q[j][k]. That is also their
 * order on the wire.
 *
 * Every function is deterministic: fixed summation orders, no contraction
 * (-ffp-contract=off), no dependence on the CPU or on threads.
 */
#ifndef GW_LOWRANK_MATH_H
#define GW_LOWRANK_MATH_H

#include <stddef.h>
#include <stdint.h>
#include "gradwire/codec.h"

/* struct gw_psgd_view - how n values are seen as a matrix. */
struct gw_psgd_view {
	uint64_t n, rows, cols;
	uint32_t rank; /* r' = min(rows, cols, r); 0: not worth it, send raw */
};

/*
 * gw_psgd_view() - the matrix view of n values under p: cols = p->cols, or
 * ceil(sqrt(n)) when that is 0 (capped at n); rows = ceil(n / cols). rank is
 * 0 when n < p->min_factor * (rows + cols) * r'.
 */
void gw_psgd_view(const struct gw_codec_params *p, uint64_t n, struct gw_psgd_view *v);

/*
 * State (a plain byte blob, zeroed by the caller = not initialised):
 *   u64 step | u32 initialised | u32 r' | Q (cols x r' f32, column-major)
 */
#define GW_PSGD_STATE_HDR 16
size_t gw_psgd_state_size(const struct gw_codec_params *p, uint64_t n);
uint64_t gw_psgd_step(const void *state);
void gw_psgd_set_step(void *state, uint64_t step);
/* Q of the state (16-byte aligned when the state is). */
float *gw_psgd_state_q(void *state);

/*
 * gw_psgd_q_prepare() - make the state's Q usable and write it, each column
 * scaled to unit length, to qn (cols x r'). Initialises Q from the seeded
 * generator on first use; a column that is zero or not finite (a zero
 * tensor, a corrupt checkpoint) is drawn again from the generator, mixed
 * with the step, so a stream never stays stuck at zero.
 */
void gw_psgd_q_prepare(const struct gw_codec_params *p, const struct gw_psgd_view *v, void *state,
		       float *qn);

/* gw_psgd_mq() - pt = M qt (P = M Q), M being n values. */
void gw_psgd_mq(const float *m, const struct gw_psgd_view *v, const float *qt, float *pt);

/*
 * gw_psgd_orthonormalize() - make the r columns of pt (rows each)
 * orthonormal, in double: modified Gram-Schmidt, twice, for r <= 4 (a column
 * that is zero or lost to cancellation becomes zero instead of NaN);
 * Householder QR for larger r (always orthonormal). work: at least
 * gw_psgd_work_size(rows, r) doubles.
 */
void gw_psgd_orthonormalize(float *pt, uint64_t rows, uint32_t r, double *work);
size_t gw_psgd_work_size(uint64_t rows, uint32_t r);
#define GW_PSGD_GS_MAX 4

/* gw_psgd_mtp() - qt = M^T pt (Q = M^T P). */
void gw_psgd_mtp(const float *m, const struct gw_psgd_view *v, const float *pt, float *qt);

enum gw_psgd_mode {
	GW_PSGD_SET, /* out[i] = a[i] */
	GW_PSGD_ADD, /* out[i] += a[i] */
	GW_PSGD_SUB, /* out[i] = y[i] - a[i] (the residual; out may be y) */
};

/*
 * gw_psgd_reconstruct() - a = P Q^T over the first n values, into out by
 * mode. p and q are bytes (the wire's float32 LE, any alignment): the decoder
 * reads them in place, and the encoder computes its residual with this very
 * function from the bytes it wrote. a[i] = sum over k ascending of
 * P[row][k] * Q[col][k], starting from the k = 0 product.
 */
void gw_psgd_reconstruct(const void *p, const void *q, const struct gw_psgd_view *v, const float *y,
			 float *out, enum gw_psgd_mode mode);

#endif
