/* SPDX-License-Identifier: MIT */
/*
 * topk.c - exact top-k sparsification by magnitude (the generic reference,
 * and the driver, selection and decoders shared with the SIMD variants).
 *
 * Section, little-endian (iw = 4 if n <= 2^32, else 8):
 *
 *  0        8                       8 + k*iw                  8 + k*(iw+4)
 *  +--------+-----------------------+-------------------------+
 *  | k u64  | k indices (iw bytes)  | k values (f32 bits of y)|
 *  +--------+-----------------------+-------------------------+
 *
 * Invariants: k = min(max(1, ceil(ratio * n)), number of finite y) (0 when
 * n == 0); indices strictly increasing, < n; len is exactly 8 + k*(iw+4).
 * The k selected elements are the finite y with the largest |y|; ties at the
 * threshold magnitude go to the LOWEST indices. NaN/Inf are never selected
 * (the payload's non-finite record carries the first one). The choice is
 * unique, so every implementation writes the same bytes.
 * Residual: y at unselected finite elements, 0 at selected and non-finite.
 *
 * Algorithm, O(n) and no sort: magnitudes compare as the integer key
 * bits & 0x7fffffff. A strided sample of keys (one in SAMPLE_STRIDE, at
 * least SAMPLE_MIN and at most SAMPLE_MAX of them) gives a threshold tlow
 * that leaves, with overwhelming probability, between k and ~1.4k candidates;
 * one streaming pass (the part the SIMD variants vectorize) writes the
 * residual (0 for the candidates it keeps, so that only the few unselected
 * candidates need a scattered write later) and collects the candidates in
 * index order into scratch. A radix
 * select (three histogram levels: key bits 30..20, 19..9, 8..0) over the
 * candidates finds the exact threshold key T and how many keys == T to take.
 * If the sample misjudged (fewer than k candidates, or more than the scratch
 * holds), the same radix select runs over all n values instead (re-read from
 * res_out, which then holds y again, or from x), collecting candidates
 * again as soon as a histogram level proves they fit; only inputs with huge
 * runs of equal keys (all equal, mostly zero) need all three levels and a
 * final output pass over n.
 *
 * Scratch: (cap + 64) * 8 bytes of candidates plus the sample, where cap is
 * ~1.9k + n/256 for small ratios, and n when the ratio is large (>= ~0.25)
 * or n <= 65536 (then every finite value is a candidate): O(n) in the worst
 * case.
 */
#include <math.h>
#include "topk.h"

/* Keys sampled to guess the threshold. Each costs a cache miss that the
 * streaming pass does not overlap, so the sample stays a small share of an
 * encode of the ring's segments (docs/performance.md, "Codecs"). */
#define SAMPLE_MIN 4096u
#define SAMPLE_MAX 16384u
#define SAMPLE_STRIDE 128u
#define SMALL 65536u		  /* at or below: every finite value is a candidate */
#define CHUNK (UINT64_C(1) << 32) /* candidate indices are u32 per chunk */
#define MAX_CHUNKS (GW_MAX_ELEMS / CHUNK)
#define PREFETCH 32 /* scattered accesses requested this far ahead */

struct plan {
	uint64_t k0;	 /* k before the finite clamp */
	uint64_t cap;	 /* candidates scratch holds (plus GW_TOPK_PAD) */
	uint64_t rank;	 /* rank of the threshold within the sample */
	uint64_t sample; /* keys sampled */
	uint32_t iw;	 /* index width on the wire */
	int all;	 /* no sampling: tlow = 0 */
};

static int plan_make(const struct gw_codec *c, uint64_t n, struct plan *p)
{
	double ratio = c->p.ratio;

	if (!(ratio > 0 && ratio <= 1) || n > GW_MAX_ELEMS)
		return -EINVAL;
	p->k0 = 0;
	if (n) {
		double k = ceil(ratio * (double)n);

		p->k0 = k < 1 ? 1 : k > (double)n ? n : (uint64_t)k;
	}
	p->iw = n <= CHUNK ? 4 : 8;
	p->all = 1;
	p->cap = n;
	p->rank = 0;
	p->sample = n / SAMPLE_STRIDE;
	p->sample = p->sample < SAMPLE_MIN   ? SAMPLE_MIN
		    : p->sample > SAMPLE_MAX ? SAMPLE_MAX
					     : p->sample;
	if (n > SMALL) {
		/* Expected sample hits above the true threshold, plus four
		 * standard deviations: the real count then lands in [k, 1.4k]
		 * at ratio 0.01 and below the capacity with a wide margin. */
		double mu = (double)p->sample * (double)p->k0 / (double)n;
		double r = ceil(mu + 4 * sqrt(mu) + 4);
		double cap = ceil((double)n * (r + 6 * sqrt(r) + 16) / (double)p->sample) + 64;

		if (r <= (double)p->sample && cap < (double)n / 2) {
			p->all = 0;
			p->cap = (uint64_t)cap;
			p->rank = (uint64_t)r;
		}
	}
	return 0;
}

static size_t section_len(uint64_t k, uint32_t iw)
{
	return (size_t)(8 + k * (iw + 4));
}

size_t gw_topk_bound(const struct gw_codec *c, uint64_t n)
{
	struct plan p;

	if (plan_make(c, n, &p))
		return 0;
	return section_len(p.k0, p.iw);
}

size_t gw_topk_scratch_size(const struct gw_codec *c, uint64_t n)
{
	struct plan p;

	if (!n || plan_make(c, n, &p))
		return 0;
	return (size_t)((p.cap + GW_TOPK_PAD) * 8 + (p.all ? 0 : p.sample * 4));
}

/* ---- exact radix select ------------------------------------------------- */

/*
 * Selection state: the rank-th largest finite key has prefix `prefix` in the
 * bits fixed so far; `gt` keys are above the current bin, `ge` keys at or
 * above its lower end. After three levels prefix is the exact key T, gt the
 * number of keys > T, rank how many keys == T to take.
 */
struct sel {
	uint64_t rank, gt, ge;
	uint32_t prefix;
	int level;
};

static const int lvl_shift[3] = { 20, 9, 0 };
static const uint32_t lvl_bins[3] = { 2048, 2048, 512 };

static void sel_init(struct sel *s, uint64_t rank)
{
	s->rank = rank;
	s->gt = 0;
	s->ge = 0;
	s->prefix = 0;
	s->level = 0;
}

/* Lowest key of the current bin. */
static uint32_t sel_floor(const struct sel *s)
{
	return s->prefix;
}

/* One histogram level over v[0..m); rank must not exceed the finite keys. */
static void sel_step(const float *v, uint64_t m, struct sel *s)
{
	uint64_t hist[2048], acc = 0;
	int sh = lvl_shift[s->level];
	uint32_t nb = lvl_bins[s->level], fixed, b;

	/* Bits decided by earlier levels; level 0 fixes none, and its bins
	 * >= 2040 hold exactly the non-finite keys, which are skipped. */
	fixed = s->level ? ~0u << lvl_shift[s->level - 1] : 0;
	memset(hist, 0, sizeof(hist));
	for (uint64_t i = 0; i < m; i++) {
		uint32_t key = gw_f2u(v[i]) & GW_TOPK_ABS;

		if ((key & fixed) == s->prefix)
			hist[(key >> sh) & (nb - 1)]++;
	}
	b = s->level ? nb - 1 : (GW_TOPK_INF >> 20) - 1;
	for (;; b--) {
		if (acc + hist[b] >= s->rank || b == 0)
			break;
		acc += hist[b];
	}
	s->ge = s->gt + acc + hist[b];
	s->gt += acc;
	s->rank -= acc;
	s->prefix |= b << sh;
	s->level++;
}

/* ---- the generic pass ---------------------------------------------------- */

uint64_t gw_topk_collect_generic(const float *x, const float *res, float *res_out, uint64_t len,
				 uint64_t base, uint32_t tlow, uint32_t *cidx, float *cval,
				 uint64_t room, int *overflow, struct gw_topk_nf *nf)
{
	uint64_t m = 0;

	for (uint64_t i = 0; i < len; i++) {
		float y = res ? x[i] + res[i] : x[i];
		uint32_t key = gw_f2u(y) & GW_TOPK_ABS;

		if (res_out)
			res_out[i] = y;
		if (key >= GW_TOPK_INF) {
			gw_topk_nf_mask(nf, base + i, 1);
		} else if (key >= tlow) {
			if (m < room) {
				cidx[m] = (uint32_t)i;
				cval[m] = y;
				m++;
				if (res_out)
					res_out[i] = 0;
			} else {
				*overflow = 1;
			}
		}
	}
	return m;
}

/* ---- the driver ---------------------------------------------------------- */

struct cands {
	uint32_t *idx;
	float *val;
	uint64_t m;
	uint64_t start[MAX_CHUNKS + 1]; /* first candidate of each chunk */
	int overflow;
};

/* Run a pass over all n values in chunks of 2^32. */
static void pass(gw_topk_collect_fn collect, const float *x, const float *res, float *res_out,
		 uint64_t n, uint32_t tlow, uint64_t cap, struct cands *cd, struct gw_topk_nf *nf)
{
	uint64_t c = 0;

	cd->m = 0;
	cd->overflow = 0;
	for (uint64_t base = 0; base < n; base += CHUNK, c++) {
		uint64_t len = n - base < CHUNK ? n - base : CHUNK;

		cd->start[c] = cd->m;
		cd->m += collect(x + base, res ? res + base : NULL, res_out ? res_out + base : NULL,
				 len, base, tlow, cd->idx + cd->m, cd->val + cd->m,
				 cd->m < cap ? cap - cd->m : 0, &cd->overflow, nf);
	}
	cd->start[c] = cd->m;
}

/* Threshold from a strided sample of y; 0 (take everything) if in doubt. */
static uint32_t sample_threshold(const float *x, const float *res, uint64_t n, const struct plan *p,
				 float *samp)
{
	uint64_t stride = n / p->sample, m = 0;
	struct sel s;

	for (uint64_t j = 0; j < p->sample; j++) {
		uint64_t i = j * stride + stride / 2, a = i + PREFETCH * stride;
		float y = res ? x[i] + res[i] : x[i];

		/* One cache (and TLB) miss per sample: overlap them. */
		if (j + PREFETCH < p->sample) {
			__builtin_prefetch(x + a);
			if (res)
				__builtin_prefetch(res + a);
		}

		if (!gw_nonfinite(y))
			samp[m++] = y;
	}
	if (m < p->rank)
		return 0;
	sel_init(&s, p->rank);
	while (s.level < 3)
		sel_step(samp, m, &s);
	return s.prefix;
}

/*
 * Output cursor. Main path: the pass zeroed the residual of every kept
 * candidate, so only the unselected ones are restored to y (restore).
 * Fallback: res_out holds y everywhere, the selected are zeroed (zero).
 */
struct out {
	uint8_t *idx, *val;
	uint32_t iw;
	uint64_t j;
	float *res_out;
	int zero, restore;
};

static void emit(struct out *o, uint64_t i, float y)
{
	if (o->iw == 4)
		gw_put32(o->idx + 4 * o->j, (uint32_t)i);
	else
		gw_put64(o->idx + 8 * o->j, i);
	gw_put32(o->val + 4 * o->j, gw_f2u(y));
	o->j++;
	if (o->zero)
		o->res_out[i] = 0;
}

/* Emit the candidates with key > T, and the first `take` with key == T. */
static void emit_cands(struct out *o, const struct cands *cd, uint32_t t, uint64_t take)
{
	for (uint64_t c = 0; cd->start[c] < cd->m; c++) {
		for (uint64_t j = cd->start[c]; j < cd->start[c + 1]; j++) {
			uint32_t key = gw_f2u(cd->val[j]) & GW_TOPK_ABS;

			/* The residual writes hit scattered cache lines that no
			 * hardware prefetcher predicts: ask for them early. */
			if (o->res_out && j + PREFETCH < cd->start[c + 1])
				__builtin_prefetch(o->res_out + (c << 32) + cd->idx[j + PREFETCH],
						   1);
			if (key > t || (key == t && take && take--))
				emit(o, (c << 32) + cd->idx[j], cd->val[j]);
			else if (o->restore)
				o->res_out[(c << 32) + cd->idx[j]] = cd->val[j];
		}
	}
}

/* Exact selection of k among the candidates; the caller knows k <= m. */
static void select_cands(struct out *o, const struct cands *cd, uint64_t k)
{
	struct sel s;

	sel_init(&s, k);
	while (s.level < 3)
		sel_step(cd->val, cd->m, &s);
	emit_cands(o, cd, s.prefix, s.rank);
}

/*
 * The sample misjudged: select over all n values of yv. Stop refining as
 * soon as the keys at or above the current bin fit in the candidate scratch.
 */
static void select_all(struct out *o, gw_topk_collect_fn collect, const float *yv, uint64_t n,
		       uint64_t k, const struct plan *p, struct cands *cd)
{
	struct gw_topk_nf dummy = { 0 };
	uint64_t take;
	struct sel s;
	uint32_t t;

	o->zero = o->res_out != NULL;
	o->restore = 0;
	sel_init(&s, k);
	while (s.level < 3) {
		sel_step(yv, n, &s);
		if (s.ge <= p->cap) {
			pass(collect, yv, NULL, NULL, n, sel_floor(&s), p->cap, cd, &dummy);
			select_cands(o, cd, k);
			return;
		}
	}
	t = s.prefix;
	take = s.rank;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t key = gw_f2u(yv[i]) & GW_TOPK_ABS;

		if (key < GW_TOPK_INF && (key > t || (key == t && take && take--)))
			emit(o, i, yv[i]);
	}
}

static uint64_t count_finite(const float *x, const float *res, uint64_t n)
{
	uint64_t f = 0;

	for (uint64_t i = 0; i < n; i++)
		f += !gw_nonfinite(res ? x[i] + res[i] : x[i]);
	return f;
}

ssize_t gw_topk_encode(const struct gw_codec *c, void *scratch, const float *x, const float *res,
		       float *res_out, uint64_t n, void *out, size_t cap, struct gw_enc_info *info,
		       gw_topk_collect_fn collect)
{
	struct gw_topk_nf nf = { 0 };
	const float *yv = res_out ? res_out : x;
	struct cands cd;
	struct out o;
	struct plan p;
	uint32_t tlow;
	uint64_t k;

	if (!gw_enc_args_ok(x, res, res_out, n) || plan_make(c, n, &p))
		return -EINVAL;
	if (cap < section_len(p.k0, p.iw)) {
		/* Non-finite values may shrink k: decide from the exact size,
		 * before anything is written. */
		k = count_finite(x, res, n);
		if (cap < section_len(k < p.k0 ? k : p.k0, p.iw))
			return -ENOSPC;
	}
	if (!out || (n && !scratch))
		return -EINVAL;
	if (!n) {
		gw_put64(out, 0);
		return 8;
	}
	cd.idx = scratch;
	cd.val = (float *)(cd.idx + p.cap + GW_TOPK_PAD);
	tlow = p.all ? 0 : sample_threshold(x, res, n, &p, cd.val + p.cap + GW_TOPK_PAD);
	pass(collect, x, res, res_out, n, tlow, p.cap, &cd, &nf);

	k = n - nf.count < p.k0 ? n - nf.count : p.k0;
	if (nf.count)
		gw_note_nonfinite(info, nf.first, yv[nf.first]);
	o.idx = (uint8_t *)out + 8;
	o.val = o.idx + k * p.iw;
	o.iw = p.iw;
	o.j = 0;
	o.res_out = res_out;
	o.zero = 0;
	o.restore = res_out != NULL;
	gw_put64(out, k);
	if (k && !cd.overflow && cd.m >= k) {
		select_cands(&o, &cd, k);
	} else {
		/* Give the kept candidates their y back, then select over all. */
		for (uint64_t c = 0; res_out && cd.start[c] < cd.m; c++)
			for (uint64_t j = cd.start[c]; j < cd.start[c + 1]; j++)
				res_out[(c << 32) + cd.idx[j]] = cd.val[j];
		if (k)
			select_all(&o, collect, yv, n, k, &p, &cd);
	}
	if (res_out && nf.count) {
		for (uint64_t i = nf.first; i <= nf.last; i++)
			if (gw_nonfinite(res_out[i]))
				res_out[i] = 0;
	}
	return (ssize_t)section_len(k, p.iw);
}

/* ---- decoding ------------------------------------------------------------ */

/* Check a hostile section; 0 and (k, iw) when it is well formed. */
static int parse(const uint8_t *b, size_t len, uint64_t n, uint64_t *kp, uint32_t *iwp)
{
	uint32_t iw = n <= CHUNK ? 4 : 8;
	uint64_t k, prev = 0;

	if (n > GW_MAX_ELEMS || len < 8 || !b)
		return -EBADMSG;
	k = gw_get64(b);
	if (k > n || len - 8 != k * (iw + 4))
		return -EBADMSG;
	for (uint64_t j = 0; j < k; j++) {
		uint64_t i = iw == 4 ? gw_get32(b + 8 + 4 * j) : gw_get64(b + 8 + 8 * j);

		if (i >= n || (j && i <= prev))
			return -EBADMSG;
		prev = i;
	}
	*kp = k;
	*iwp = iw;
	return 0;
}

static int decode(const void *in, size_t len, uint64_t n, float *y, int add)
{
	const uint8_t *b = in;
	uint64_t k;
	uint32_t iw;
	int rc = parse(b, len, n, &k, &iw);

	if (rc)
		return rc;
	if (!add && n)
		memset(y, 0, (size_t)n * sizeof(float));
	for (uint64_t j = 0; j < k; j++) {
		uint64_t i = iw == 4 ? gw_get32(b + 8 + 4 * j) : gw_get64(b + 8 + 8 * j);
		float v = gw_u2f(gw_get32(b + 8 + k * iw + 4 * j));

		y[i] = add ? y[i] + v : v;
	}
	return 0;
}

int gw_topk_decode(const void *in, size_t len, uint64_t n, float *y)
{
	return decode(in, len, n, y, 0);
}

int gw_topk_decode_add(const void *in, size_t len, uint64_t n, float *acc)
{
	return decode(in, len, n, acc, 1);
}

static ssize_t topk_encode(const struct gw_codec *c, void *state, void *scratch, const float *x,
			   const float *res, float *res_out, uint64_t n, void *out, size_t cap,
			   struct gw_enc_info *info)
{
	(void)state;
	return gw_topk_encode(c, scratch, x, res, res_out, n, out, cap, info,
			      gw_topk_collect_generic);
}

const struct gw_codec_ops gw_topk_generic = {
	.size = sizeof(struct gw_codec_ops),
	.name = "topk",
	.impl = "topk-generic",
	.id = GW_CODEC_TOPK,
	.lossy = true,
	.priority = 100,
	.params = gw_params_topk,
	.scratch_size = gw_topk_scratch_size,
	.bound = gw_topk_bound,
	.encode = topk_encode,
	.decode = gw_topk_decode,
	.decode_add = gw_topk_decode_add,
};
