/* SPDX-License-Identifier: MIT */
/*
 * topk_avx2.c - top-k with the candidate-filter pass in AVX2.
 *
 * Same section and selection as topk.c (see there); only the streaming pass
 * differs. AVX2 has no compress instruction: the 8-bit candidate mask is
 * turned into a vpermd index vector with BMI2 (pdep spreads the mask to one
 * byte per lane, pext gathers the wanted lane numbers), both index and value
 * vectors are permuted so the candidates come first, and the whole vectors
 * are stored at the cursor, which advances by the popcount. Keys are < 2^31,
 * so the signed compares are exact. The tail (< 8 values) runs the scalar
 * loop. The residual goes out with streaming stores when it is aligned, as
 * in topk_avx512.c.
 */
#include <immintrin.h>
#include "topk.h"

/* vpermd indices that move the lanes set in mask (8 bits) to the front. */
static inline __m256i compress_idx(uint32_t mask)
{
	uint64_t spread = _pdep_u64(mask, UINT64_C(0x0101010101010101)) * 0xff;
	uint64_t lanes = _pext_u64(UINT64_C(0x0706050403020100), spread);

	return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)lanes));
}

static inline uint64_t body(const float *x, const float *res, float *res_out, uint64_t len,
			    uint64_t base, uint32_t tlow, uint32_t *cidx, float *cval,
			    uint64_t room, int *overflow, struct gw_topk_nf *nf, const int ef)
{
	const __m256i abs = _mm256_set1_epi32((int)GW_TOPK_ABS);
	const __m256i big = _mm256_set1_epi32((int)(GW_TOPK_INF - 1));
	const __m256i lo = _mm256_set1_epi32((int)tlow - 1);
	const __m256i step = _mm256_set1_epi32(8);
	__m256i iv = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	uint64_t m = 0, i = 0;
	const int nt = ef && !((uintptr_t)res_out & 31);

	for (; len - i >= 8; i += 8) {
		__m256 y = _mm256_loadu_ps(x + i);
		__m256i key, p, nv, cv;
		uint32_t nfm, cm;

		if (ef)
			y = _mm256_add_ps(y, _mm256_loadu_ps(res + i));
		key = _mm256_and_si256(_mm256_castps_si256(y), abs);
		nv = _mm256_cmpgt_epi32(key, big);
		cv = _mm256_andnot_si256(nv, _mm256_cmpgt_epi32(key, lo));
		nfm = (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(nv));
		cm = (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(cv));
		if (__builtin_expect(nfm != 0, 0))
			gw_topk_nf_mask(nf, base + i, nfm);
		if (__builtin_expect(m < room, 1)) {
			p = compress_idx(cm);
			_mm256_storeu_si256((__m256i *)(cidx + m),
					    _mm256_permutevar8x32_epi32(iv, p));
			_mm256_storeu_ps(cval + m, _mm256_permutevar8x32_ps(y, p));
			m += (uint64_t)__builtin_popcount(cm);
		} else {
			*overflow |= cm != 0;
			cv = _mm256_setzero_si256();
		}
		/* Residual: y, and 0 for the candidates kept. */
		if (nt)
			_mm256_stream_ps(res_out + i, _mm256_andnot_ps(_mm256_castsi256_ps(cv), y));
		else if (ef)
			_mm256_storeu_ps(res_out + i, _mm256_andnot_ps(_mm256_castsi256_ps(cv), y));
		iv = _mm256_add_epi32(iv, step);
	}
	if (nt)
		_mm_sfence();
	if (i < len) { /* the last few values: the generic pass, shifted by i */
		/* Whole-vector stores may leave m up to 7 past room (the
		 * scratch has slack for that): then the tail has no room. */
		uint64_t got = gw_topk_collect_generic(
			x + i, ef ? res + i : NULL, ef ? res_out + i : NULL, len - i, base + i,
			tlow, cidx + m, cval + m, room > m ? room - m : 0, overflow, nf);

		for (uint64_t k = m; k < m + got; k++)
			cidx[k] += (uint32_t)i;
		m += got;
	}
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
	return gw_cpu_avx2();
}

const struct gw_codec_ops gw_topk_avx2 = {
	.size = sizeof(struct gw_codec_ops),
	.name = "topk",
	.impl = "topk-avx2",
	.id = GW_CODEC_TOPK,
	.lossy = true,
	.priority = 150,
	.cpu_ok = probe,
	.params = gw_params_topk,
	.scratch_size = gw_topk_scratch_size,
	.bound = gw_topk_bound,
	.encode = topk_encode,
	.decode = gw_topk_decode,
	.decode_add = gw_topk_decode_add,
};
