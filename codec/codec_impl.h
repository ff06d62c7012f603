/* SPDX-License-Identifier: MIT */
/*
 * codec_impl.h - private helpers shared by the codec implementations.
 *
 * Little-endian loads and stores (unaligned-safe), the float classification
 * every encode pass uses, the counter-based generators (SplitMix64 for
 * indices, a 32-bit integer hash for stochastic rounding) and the declarations
 * of every implementation the registry lists.
 *
 * All arithmetic that decides output bytes is plain IEEE float32 without
 * contraction (the build passes -ffp-contract=off), so SIMD variants can
 * reproduce the generic code bit for bit.
 */
#ifndef GW_CODEC_IMPL_H
#define GW_CODEC_IMPL_H

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include "gradwire/codec.h"
#include "../common/bytes.h"
#include "../common/rng.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gradwire's codecs assume a little-endian host"
#endif

static inline uint32_t gw_f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float gw_u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* True for NaN and +-Inf: the exponent is all ones. */
static inline int gw_nonfinite(float f)
{
	return (gw_f2u(f) & 0x7f800000u) == 0x7f800000u;
}

/* A stateless mix of a counter, by SplitMix64 (common/rng.h). */
static inline uint64_t gw_mix64(uint64_t seed, uint64_t ctr)
{
	uint64_t s = seed ^ (ctr * UINT64_C(0xD1B54A32D192ED03));

	return gw_splitmix64(&s);
}

/*
 * 32-bit counter hash ("lowbias32", Wellons): cheap in 32-bit SIMD lanes.
 * Used for stochastic rounding: u = (hash >> 8) * 2^-24 in [0, 1).
 */
static inline uint32_t gw_hash32(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

/* Record the first non-finite value an encode pass meets. */

static inline void gw_note_nonfinite(struct gw_enc_info *info, uint64_t i, float v)
{
	if (!(info->flags & GW_PF_NONFINITE)) {
		info->flags |= GW_PF_NONFINITE;
		info->nonfinite_index = i;
		info->nonfinite_bits = gw_f2u(v);
	}
}

/* Common checks of encode() arguments. */
static inline int gw_enc_args_ok(const float *x, const float *res, const float *res_out, uint64_t n)
{
	if (n > GW_MAX_ELEMS || (n && !x) || (!res != !res_out))
		return 0;
	return 1;
}

/* Number of buckets of size b covering n values. */
static inline uint64_t gw_nbuckets(uint64_t n, uint32_t b)
{
	return n / b + (n % b != 0);
}

/* CPU probes (codec/cpu.c). */
int gw_cpu_avx2(void);	 /* AVX2 + F16C + BMI2 + FMA present, OS enabled */
int gw_cpu_avx512(void); /* AVX-512 F, BW, VL, DQ + the above */

/* Spec keys shared by all implementations of a codec (codec/params.c). */
#define GW_BUCKET_MAX (1u << 24)
#define GW_PSGD_RANK_MAX 256u
extern const struct gw_param_desc gw_params_topk[], gw_params_randomk[];
extern const struct gw_param_desc gw_params_int8[], gw_params_onebit[];
extern const struct gw_param_desc gw_params_powersgd[];

/* Every implementation the registry lists (codec/registry.c). */
extern const struct gw_codec_ops gw_none_generic;
extern const struct gw_codec_ops gw_topk_generic, gw_topk_avx2, gw_topk_avx512;
extern const struct gw_codec_ops gw_randomk_generic;
extern const struct gw_codec_ops gw_fp16_generic, gw_fp16_avx2, gw_fp16_avx512;
extern const struct gw_codec_ops gw_bf16_generic, gw_bf16_avx2, gw_bf16_avx512;
extern const struct gw_codec_ops gw_int8_generic, gw_int8_avx2, gw_int8_avx512;
extern const struct gw_codec_ops gw_onebit_generic, gw_onebit_avx2;
extern const struct gw_codec_ops gw_powersgd_generic, gw_powersgd_avx2;

#endif
