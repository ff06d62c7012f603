/* SPDX-License-Identifier: MIT */
/*
 * powersgd_kern.h - PowerSGD's matrix kernels (P = M Q, Q = M^T P, and
 * a = P Q^T), compiled once per ISA like every other codec's SIMD variant:
 * powersgd.c builds them for baseline x86-64 (powersgd-generic, the
 * reference), powersgd_avx2.c with the AVX2 flags (powersgd-avx2, chosen by
 * its cpu_ok probe). Same C, the same operations in the same order and no
 * contraction into FMA (-ffp-contract=off): the AVX2 build only does more
 * lanes per instruction, so both give the same bits (the conformance suite
 * checks it). The codec's encode and decode take the kernels of their
 * implementation; lowrank.h's functions use the best usable one.
 *
 * Include once per translation unit: the kernels are static.
 */
#ifndef GW_POWERSGD_KERN_H
#define GW_POWERSGD_KERN_H

#include <string.h>
#include "codec_impl.h"
#include "../common/lowrank_math.h"

#define LANES 16

/* One ISA's build of the kernels (the contracts are lowrank.h's). */
struct gw_psgd_kernels {
	void (*mq)(const float *m, const struct gw_psgd_view *v, const float *qt, float *pt);
	void (*mtp)(const float *m, const struct gw_psgd_view *v, const float *pt, float *qt);
	void (*reconstruct)(const void *p, const void *q, const struct gw_psgd_view *v,
			    const float *y, float *out, enum gw_psgd_mode mode);
};
extern const struct gw_psgd_kernels gw_psgd_kernels_generic, gw_psgd_kernels_avx2;

/* The codec's ops, shared by its implementations (powersgd.c). */
size_t gw_psgd_op_state_size(const struct gw_codec *c, uint64_t n);
size_t gw_psgd_op_scratch_size(const struct gw_codec *c, uint64_t n);
size_t gw_psgd_op_bound(const struct gw_codec *c, uint64_t n);
ssize_t gw_psgd_encode(const struct gw_psgd_kernels *k, const struct gw_codec *c, void *state,
		       void *scratch, const float *x, const float *res, float *res_out, uint64_t n,
		       void *out, size_t cap, struct gw_enc_info *info);
int gw_psgd_decode(const struct gw_psgd_kernels *k, const void *in, size_t len, uint64_t n,
		   float *y, int add);

/* Row i of M: its values and their count (the last row may be short). */
static uint64_t row_len(const struct gw_psgd_view *v, uint64_t i)
{
	uint64_t b = i * v->cols;

	return v->n - b < v->cols ? v->n - b : v->cols;
}

/* Fixed order: LANES partial sums, a pairwise tree, then the tail. */
static float dot(const float *a, const float *b, uint64_t len)
{
	float s[LANES] = { 0 }, t = 0;
	uint64_t j = 0;

	for (; j + LANES <= len; j += LANES)
		for (int l = 0; l < LANES; l++)
			s[l] += a[j + l] * b[j + l];
	for (; j < len; j++)
		t += a[j] * b[j];
	for (int w = LANES / 2; w > 0; w /= 2)
		for (int l = 0; l < w; l++)
			s[l] += s[l + w];
	return s[0] + t;
}

/* The sums of dot() for four rows against one b: the same bits as four
 * calls, with b loaded once (four times fewer trips to L2 for Q). */
static void dot4(const float *const a[4], const float *b, uint64_t len, float out[4])
{
	float s[4][LANES] = { { 0 } }, t[4] = { 0 };
	uint64_t j = 0;

	for (; j + LANES <= len; j += LANES)
		for (int l = 0; l < LANES; l++) {
			float bb = b[j + l];

			s[0][l] += a[0][j + l] * bb;
			s[1][l] += a[1][j + l] * bb;
			s[2][l] += a[2][j + l] * bb;
			s[3][l] += a[3][j + l] * bb;
		}
	for (; j < len; j++)
		for (int r = 0; r < 4; r++)
			t[r] += a[r][j] * b[j];
	for (int r = 0; r < 4; r++) {
		for (int w = LANES / 2; w > 0; w /= 2)
			for (int l = 0; l < w; l++)
				s[r][l] += s[r][l + w];
		out[r] = s[r][0] + t[r];
	}
}

static void mq_kernel(const float *m, const struct gw_psgd_view *v, const float *qt, float *pt)
{
	uint64_t i = 0, cols = v->cols, rows = v->rows;

	/* Full rows four at a time, then the rest (the last may be short). */
	for (; i + 4 <= rows && (i + 4) * cols <= v->n; i += 4) {
		const float *a[4] = { m + i * cols, m + (i + 1) * cols, m + (i + 2) * cols,
				      m + (i + 3) * cols };

		for (uint32_t k = 0; k < v->rank; k++) {
			float d[4];

			dot4(a, qt + (uint64_t)k * cols, cols, d);
			for (int r = 0; r < 4; r++)
				pt[(uint64_t)k * rows + i + r] = d[r];
		}
	}
	for (; i < rows; i++) {
		const float *row = m + i * cols;
		uint64_t len = row_len(v, i);

		for (uint32_t k = 0; k < v->rank; k++)
			pt[(uint64_t)k * rows + i] = dot(row, qt + (uint64_t)k * cols, len);
	}
}

/*
 * Q[j][k] = sum over rows i ascending of M[i][j] P[i][k], each step one
 * product added to the running value; four rows per pass over Q (the same
 * additions in the same order, Q loaded and stored a quarter as often).
 */
static void mtp_kernel(const float *m, const struct gw_psgd_view *v, const float *pt, float *qt)
{
	uint64_t i = 0, cols = v->cols, rows = v->rows;

	memset(qt, 0, (size_t)cols * v->rank * sizeof(float));
	for (; i + 4 <= rows && (i + 4) * cols <= v->n; i += 4) {
		const float *m0 = m + i * cols, *m1 = m0 + cols, *m2 = m1 + cols, *m3 = m2 + cols;

		for (uint32_t k = 0; k < v->rank; k++) {
			const float *p = pt + (uint64_t)k * rows + i;
			float a0 = p[0], a1 = p[1], a2 = p[2], a3 = p[3];
			float *q = qt + (uint64_t)k * cols;

			for (uint64_t j = 0; j < cols; j++)
				q[j] = (((q[j] + a0 * m0[j]) + a1 * m1[j]) + a2 * m2[j]) +
				       a3 * m3[j];
		}
	}
	for (; i < rows; i++) {
		const float *row = m + i * cols;
		uint64_t len = row_len(v, i);

		for (uint32_t k = 0; k < v->rank; k++) {
			float a = pt[(uint64_t)k * rows + i], *q = qt + (uint64_t)k * cols;

			for (uint64_t j = 0; j < len; j++)
				q[j] += a * row[j];
		}
	}
}

static void reconstruct_kernel(const void *p, const void *q, const struct gw_psgd_view *v,
			       const float *y, float *out, enum gw_psgd_mode mode)
{
	enum { BUF = 2048 };
	const uint8_t *pb = p, *qb = q;
	float qblk[BUF], t[BUF];
	uint64_t cols = v->cols, rows = v->rows, n = v->n;
	uint32_t r = v->rank;
	uint64_t width = BUF / r;

	/* A block of columns at a time, its slice of Q copied once (aligned,
	 * and read from the wire bytes with memcpy). */
	for (uint64_t jb = 0; jb < cols; jb += width) {
		uint64_t w = cols - jb < width ? cols - jb : width;

		for (uint32_t k = 0; k < r; k++)
			memcpy(qblk + k * w, qb + 4 * ((uint64_t)k * cols + jb), 4 * w);
		for (uint64_t i = 0; i < rows; i++) {
			uint64_t base = i * cols + jb, wl;
			float *o = out + base;
			float pk = gw_u2f(gw_get32(pb + 4 * i));

			if (base >= n)
				break;
			wl = n - base < w ? n - base : w;
			for (uint64_t j = 0; j < wl; j++)
				t[j] = pk * qblk[j];
			for (uint32_t k = 1; k < r; k++) {
				const float *qk = qblk + k * w;

				pk = gw_u2f(gw_get32(pb + 4 * ((uint64_t)k * rows + i)));
				for (uint64_t j = 0; j < wl; j++)
					t[j] += pk * qk[j];
			}
			switch (mode) {
			case GW_PSGD_SET:
				memcpy(o, t, wl * sizeof(float));
				break;
			case GW_PSGD_ADD:
				for (uint64_t j = 0; j < wl; j++)
					o[j] += t[j];
				break;
			case GW_PSGD_SUB:
				for (uint64_t j = 0; j < wl; j++)
					o[j] = y[base + j] - t[j];
				break;
			}
		}
	}
}

/*
 * GW_PSGD_OPS() - this translation unit's kernels as `kern`, and the codec
 * implementation `sym` over them.
 */
#define GW_PSGD_OPS(sym, kern, impl_name, prio, probe)                                             \
	const struct gw_psgd_kernels kern = { mq_kernel, mtp_kernel, reconstruct_kernel };         \
                                                                                                   \
	static ssize_t psgd_encode(const struct gw_codec *c, void *state, void *scratch,           \
				   const float *x, const float *res, float *res_out, uint64_t n,   \
				   void *out, size_t cap, struct gw_enc_info *info)                \
	{                                                                                          \
		return gw_psgd_encode(&kern, c, state, scratch, x, res, res_out, n, out, cap,      \
				      info);                                                       \
	}                                                                                          \
                                                                                                   \
	static int psgd_decode(const void *in, size_t len, uint64_t n, float *y)                   \
	{                                                                                          \
		return gw_psgd_decode(&kern, in, len, n, y, 0);                                    \
	}                                                                                          \
                                                                                                   \
	static int psgd_decode_add(const void *in, size_t len, uint64_t n, float *acc)             \
	{                                                                                          \
		return gw_psgd_decode(&kern, in, len, n, acc, 1);                                  \
	}                                                                                          \
                                                                                                   \
	const struct gw_codec_ops sym = {                                                          \
		.size = sizeof(struct gw_codec_ops),                                               \
		.name = "powersgd",                                                                \
		.impl = impl_name,                                                                 \
		.id = GW_CODEC_POWERSGD,                                                           \
		.lossy = true,                                                                     \
		.priority = prio,                                                                  \
		.cpu_ok = probe,                                                                   \
		.params = gw_params_powersgd,                                                      \
		.state_size = gw_psgd_op_state_size,                                               \
		.scratch_size = gw_psgd_op_scratch_size,                                           \
		.bound = gw_psgd_op_bound,                                                         \
		.encode = psgd_encode,                                                             \
		.decode = psgd_decode,                                                             \
		.decode_add = psgd_decode_add,                                                     \
	};

#endif
