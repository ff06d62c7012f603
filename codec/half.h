/* SPDX-License-Identifier: MIT */
/*
 * half.h - what the two 16-bit float codecs (fp16, bf16) share: the section,
 * the argument and length checks, and the generic scalar encode and decode
 * loops, parameterized by a per-format conversion kernel.
 *
 * Both sections are n u16 bit patterns, exactly 2n bytes; anything else is
 * malformed (the byte layout is drawn in fp16.c and bf16.c).
 *
 * The encode rules both formats follow (fp16.c and bf16.c give the details
 * of each): finite y rounds to nearest even; a finite y that would round to
 * Inf (float bits |u| >= sat_from) becomes sign | largest finite value and
 * sets GW_PF_SATURATED; a NaN or Inf is converted by the format's own rule,
 * noted (gw_note_nonfinite) and leaves residual 0; otherwise
 * res_out = y - widen(h), the decoder's exact value.
 *
 * The kernels and drivers are always inlined: each codec file passes its
 * kernels as constant function pointers, so every implementation compiles
 * to its own loop with no indirect call (the SIMD drivers are in
 * half_avx2.h and half_avx512.h).
 */
#ifndef GW_HALF_H
#define GW_HALF_H

#include <stdbool.h>
#include "codec_impl.h"

#define GW_HALF_INLINE static inline __attribute__((always_inline))

/* bound(): the section of n values is 2n bytes. */
static inline size_t gw_half_bound(const struct gw_codec *c, uint64_t n)
{
	(void)c;
	return (size_t)n * 2;
}

/* Checks of encode() arguments: 0, -EINVAL or -ENOSPC. */
static inline int gw_half_enc_check(const float *x, const float *res, const float *res_out,
				    uint64_t n, size_t cap)
{
	if (!gw_enc_args_ok(x, res, res_out, n))
		return -EINVAL;
	if (cap < gw_half_bound(NULL, n))
		return -ENOSPC;
	return 0;
}

/* Check of a hostile section's length against n (2n cannot wrap). */
static inline bool gw_half_len_ok(size_t len, uint64_t n)
{
	return n <= GW_MAX_ELEMS && len == n * 2;
}

/*
 * Scalar kernels of a format:
 * narrow:    u16 of float bits u, finite and below saturation (sign included).
 * nonfinite: u16 of a NaN or Inf u (a: |u|).
 * widen:     float32 bits the decoder returns for h (exact).
 */
typedef uint32_t gw_half_narrow_fn(uint32_t u, uint32_t a);
typedef uint32_t gw_half_nonfinite_fn(uint32_t u, uint32_t a);
typedef uint32_t gw_half_widen_fn(uint32_t h);

/*
 * The reference encode loop: y = x (+ res) into o[2n], residual into res_out
 * (when wr), info updated. sat_from: float bits of the smallest |y| that
 * saturates to max16 (the largest finite u16, without sign).
 */
GW_HALF_INLINE void gw_half_enc_run(const float *x, const float *res, float *res_out, uint64_t n,
				    uint8_t *o, struct gw_enc_info *info, const bool wr,
				    const uint32_t sat_from, const uint32_t max16,
				    gw_half_narrow_fn *narrow, gw_half_nonfinite_fn *nonfinite,
				    gw_half_widen_fn *widen)
{
	uint32_t sat = 0;

	for (uint64_t i = 0; i < n; i++) {
		float y = wr ? x[i] + res[i] : x[i];
		uint32_t u = gw_f2u(y), a = u & 0x7fffffffu, h;
		float r;

		if (__builtin_expect(a >= 0x7f800000u, 0)) {
			gw_note_nonfinite(info, i, y);
			h = nonfinite(u, a);
			r = 0.0f;
		} else {
			sat |= a >= sat_from;
			h = a >= sat_from ? ((u >> 16) & 0x8000u) | max16 : narrow(u, a);
			r = y - gw_u2f(widen(h));
		}
		gw_put16(o + 2 * i, (uint16_t)h);
		if (wr)
			res_out[i] = r;
	}
	if (sat)
		info->flags |= GW_PF_SATURATED;
}

/*
 * GW_HALF_OPS(pfx, enc_run, dec_run) - define the encode, decode and
 * decode_add ops (pfx_encode, pfx_decode, pfx_decode_add) of one
 * implementation around its two loops:
 *   void enc_run(const float *x, const float *res, float *res_out, uint64_t n,
 *                uint8_t *o, struct gw_enc_info *info, const bool wr);
 *   void dec_run(const uint8_t *b, uint64_t n, float *y, const bool add);
 * The ops check their arguments (decoders before writing any output) and
 * call each loop with a constant wr or add, so each is compiled twice with
 * the residual (or the accumulation) in or out.
 */
#define GW_HALF_OPS(pfx, enc_run, dec_run)                                                         \
	static ssize_t pfx##_encode(const struct gw_codec *c, void *state, void *scratch,          \
				    const float *x, const float *res, float *res_out, uint64_t n,  \
				    void *out, size_t cap, struct gw_enc_info *info)               \
	{                                                                                          \
		int err = gw_half_enc_check(x, res, res_out, n, cap);                              \
                                                                                                   \
		(void)c, (void)state, (void)scratch;                                               \
		if (err)                                                                           \
			return err;                                                                \
		if (res)                                                                           \
			enc_run(x, res, res_out, n, out, info, true);                              \
		else                                                                               \
			enc_run(x, NULL, NULL, n, out, info, false);                               \
		return (ssize_t)(n * 2);                                                           \
	}                                                                                          \
                                                                                                   \
	static int pfx##_decode(const void *in, size_t len, uint64_t n, float *y)                  \
	{                                                                                          \
		if (!gw_half_len_ok(len, n))                                                       \
			return -EBADMSG;                                                           \
		dec_run(in, n, y, false);                                                          \
		return 0;                                                                          \
	}                                                                                          \
                                                                                                   \
	static int pfx##_decode_add(const void *in, size_t len, uint64_t n, float *acc)            \
	{                                                                                          \
		if (!gw_half_len_ok(len, n))                                                       \
			return -EBADMSG;                                                           \
		dec_run(in, n, acc, true);                                                         \
		return 0;                                                                          \
	}

/* The reference decode loop: y[i] = widen(h[i]), or y[i] += it when add. */
GW_HALF_INLINE void gw_half_dec_run(const uint8_t *b, uint64_t n, float *y, const bool add,
				    gw_half_widen_fn *widen)
{
	for (uint64_t i = 0; i < n; i++) {
		float v = gw_u2f(widen(gw_get16(b + 2 * i)));

		y[i] = add ? y[i] + v : v;
	}
}

#endif
