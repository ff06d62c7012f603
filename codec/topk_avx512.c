/* SPDX-License-Identifier: MIT */
/*
 * topk_avx512.c - top-k with the candidate-filter pass in AVX-512.
 *
 * Same section and selection as topk.c (see there); only the streaming pass
 * differs. Per 16 values: y = x + r (one vaddps, the same IEEE operation as
 * the scalar code), store y as the provisional residual, compare keys, and
 * compress the candidate lanes' indices and values INTO A REGISTER
 * (vpcompressd/vcompressps with a register destination) whose whole vector
 * is stored at the candidate cursor: the memory-destination form is
 * microcoded and very slow on Zen 4. The cursor then advances by the
 * popcount, so the garbage lanes are overwritten by the next store (the
 * scratch keeps GW_TOPK_PAD entries of slack for them). The residual store
 * zeroes the kept candidates' lanes with the same mask; when res_out is
 * aligned (the residual store allocates it so) it is a streaming store: the
 * residual is read again only at the next call, and a plain store would
 * first read every line it writes (docs/performance.md has the ring's
 * allreduce of top-k either way). Same bytes either way.
 */
#include <immintrin.h>
#include "topk.h"

static inline uint64_t body(const float *x, const float *res, float *res_out, uint64_t len,
			    uint64_t base, uint32_t tlow, uint32_t *cidx, float *cval,
			    uint64_t room, int *overflow, struct gw_topk_nf *nf, const int ef)
{
	const __m512i abs = _mm512_set1_epi32((int)GW_TOPK_ABS);
	const __m512i inf = _mm512_set1_epi32((int)GW_TOPK_INF);
	const __m512i lo = _mm512_set1_epi32((int)tlow);
	const __m512i step = _mm512_set1_epi32(16);
	__m512i iv = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	uint64_t m = 0, i = 0;
	const int nt = ef && !((uintptr_t)res_out & 63);

	for (;; i += 16) {
		__mmask16 lanes = 0xffff, fin, cm;
		__m512 y;
		__m512i key;

		if (__builtin_expect(len - i >= 16, 1)) {
			y = _mm512_loadu_ps(x + i);
			if (ef)
				y = _mm512_add_ps(y, _mm512_loadu_ps(res + i));
		} else {
			if (i == len)
				break;
			lanes = (__mmask16)((1u << (len - i)) - 1);
			y = _mm512_maskz_loadu_ps(lanes, x + i);
			if (ef)
				y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(lanes, res + i));
		}
		key = _mm512_and_si512(_mm512_castps_si512(y), abs);
		fin = _mm512_mask_cmplt_epu32_mask(lanes, key, inf);
		cm = _mm512_mask_cmpge_epu32_mask(fin, key, lo);
		if (__builtin_expect(fin != lanes, 0))
			gw_topk_nf_mask(nf, base + i, (uint32_t)(lanes & ~fin));
		if (__builtin_expect(m < room, 1)) {
			_mm512_storeu_si512(cidx + m, _mm512_maskz_compress_epi32(cm, iv));
			_mm512_storeu_ps(cval + m, _mm512_maskz_compress_ps(cm, y));
			m += (uint64_t)__builtin_popcount(cm);
		} else {
			*overflow |= cm != 0;
			cm = 0;
		}
		/* Residual: y, and 0 for the candidates kept. */
		if (nt && lanes == 0xffff)
			_mm512_stream_ps(res_out + i, _mm512_maskz_mov_ps(~cm, y));
		else if (ef)
			_mm512_mask_storeu_ps(res_out + i, lanes, _mm512_maskz_mov_ps(~cm, y));
		iv = _mm512_add_epi32(iv, step);
		if (lanes != 0xffff)
			break;
	}
	if (nt)
		_mm_sfence();
	return m;
}

static uint64_t collect(const float *x, const float *res, float *res_out, uint64_t len,
			uint64_t base, uint32_t tlow, uint32_t *cidx, float *cval, uint64_t room,
			int *overflow, struct gw_topk_nf *nf)
{
	if (res)
		return body(x, res, res_out, len, base, tlow, cidx, cval, room, overflow, nf, 1);
	return body(x, res, res_out, len, base, tlow, cidx, cval, room, overflow, nf, 0);
}

static ssize_t topk_encode(const struct gw_codec *c, void *state, void *scratch, const float *x,
			   const float *res, float *res_out, uint64_t n, void *out, size_t cap,
			   struct gw_enc_info *info)
{
	(void)state;
	return gw_topk_encode(c, scratch, x, res, res_out, n, out, cap, info, collect);
}

static bool probe(void)
{
	return gw_cpu_avx512();
}

const struct gw_codec_ops gw_topk_avx512 = {
	.size = sizeof(struct gw_codec_ops),
	.name = "topk",
	.impl = "topk-avx512",
	.id = GW_CODEC_TOPK,
	.lossy = true,
	.priority = 200,
	.cpu_ok = probe,
	.params = gw_params_topk,
	.scratch_size = gw_topk_scratch_size,
	.bound = gw_topk_bound,
	.encode = topk_encode,
	.decode = gw_topk_decode,
	.decode_add = gw_topk_decode_add,
};
