/* SPDX-License-Identifier: MIT */
/*
 * powersgd.c - PowerSGD: a rank-r approximation P Q^T of the tensor seen as a
 * matrix M, by one power iteration with warm start (Vogels et al., 2019).
 *
 * Encoding y = x (+ res), viewed as M (rows x cols, lowrank.h):
 *   Q  <- the stream's Q (state), columns scaled to unit length
 *   P  <- M Q;  orthonormalize(P)
 *   Q  <- M^T P   (kept in the state: the next step's warm start)
 *   a  =  P Q^T;  residual = y - a
 * The residual is computed by gw_psgd_reconstruct() from the bytes written
 * to the section, the function the decoder runs, so residual + decoded
 * equals y up to one rounding.
 *
 * Section, little-endian:
 *
 *   0      1        4        8          16         24
 *   +------+--------+--------+----------+----------+
 *   | form | 0 0 0  | r' u32 | rows u64 | cols u64 |
 *   +------+--------+--------+----------+----------+
 *   form 1 (low rank): P (r' columns of rows f32) | Q (r' columns of cols f32)
 *   form 0 (raw):      r' = rows = cols = 0       | n f32 values
 *
 * A tensor travels raw when low rank does not save the configured factor
 * (n < min_factor * (rows + cols) * r'), during the first `warmup` steps of
 * a stream, and in a step whose y holds NaN/Inf (sent as 0, first one in the
 * payload's non-finite record, residual 0 everywhere) or a value beyond 2^60
 * (so that no product can overflow). A raw step leaves Q as it was.
 *
 * The decoder checks everything before it writes: form, zero padding,
 * 1 <= cols <= n, rows == ceil(n / cols), 1 <= r' <= min(rows, cols, 256),
 * the exact length, and that every P and Q value is finite.
 */
#include <math.h>
#include "codec_impl.h"
#include "powersgd_kern.h"

#define HDR 24
#define RANGE_MAX 0x1p60f

void gw_psgd_view(const struct gw_codec_params *p, uint64_t n, struct gw_psgd_view *v)
{
	uint64_t cols = p->cols, r;

	v->n = n;
	v->rows = v->cols = 0;
	v->rank = 0;
	if (!n || n > GW_MAX_ELEMS)
		return;
	if (!cols) {
		cols = (uint64_t)sqrt((double)n);
		while (cols * cols < n)
			cols++;
		while (cols > 1 && (cols - 1) * (cols - 1) >= n)
			cols--;
	}
	if (cols > n)
		cols = n;
	v->cols = cols;
	v->rows = n / cols + (n % cols != 0);
	r = p->rank < GW_PSGD_RANK_MAX ? p->rank : GW_PSGD_RANK_MAX;
	r = r < v->rows ? r : v->rows;
	r = r < v->cols ? r : v->cols;
	if (r && (double)n >= p->min_factor * (double)(v->rows + v->cols) * (double)r)
		v->rank = (uint32_t)r;
}

size_t gw_psgd_state_size(const struct gw_codec_params *p, uint64_t n)
{
	struct gw_psgd_view v;

	gw_psgd_view(p, n, &v);
	return GW_PSGD_STATE_HDR + (size_t)v.cols * v.rank * sizeof(float);
}

uint64_t gw_psgd_step(const void *state)
{
	return gw_get64(state);
}

void gw_psgd_set_step(void *state, uint64_t step)
{
	gw_put64(state, step);
}

float *gw_psgd_state_q(void *state)
{
	return (float *)(void *)((uint8_t *)state + GW_PSGD_STATE_HDR);
}

/* A uniform value in [-1, 1) for (seed, draw, index). */
static float draw(uint64_t seed, uint64_t ctr, uint64_t i)
{
	return (float)(gw_mix64(gw_mix64(seed, ctr), i) >> 40) * 0x1p-23f - 1.0f;
}

static double col_norm(const float *q, uint64_t len)
{
	double s = 0;

	for (uint64_t j = 0; j < len; j++)
		s += (double)q[j] * q[j];
	return sqrt(s);
}

void gw_psgd_q_prepare(const struct gw_codec_params *p, const struct gw_psgd_view *v, void *state,
		       float *qn)
{
	uint8_t *st = state;
	float *q = gw_psgd_state_q(state);
	uint64_t cols = v->cols, step = gw_get64(st);
	uint32_t r = v->rank;

	if (gw_get32(st + 8) != 1 || gw_get32(st + 12) != r) {
		for (uint64_t t = 0; t < (uint64_t)r * cols; t++)
			q[t] = draw(p->seed, 0, t);
		gw_put32(st + 8, 1);
		gw_put32(st + 12, r);
	}
	for (uint32_t k = 0; k < r; k++) {
		float *qk = q + (uint64_t)k * cols;
		double nrm = col_norm(qk, cols);

		if (!(nrm > 0 && nrm < INFINITY)) { /* zero, NaN or Inf */
			for (uint64_t j = 0; j < cols; j++)
				qk[j] = draw(p->seed, step + 1, (uint64_t)k * cols + j);
			nrm = col_norm(qk, cols);
		}
		for (uint64_t j = 0; j < cols; j++)
			qn[(uint64_t)k * cols + j] = (float)(qk[j] / nrm);
	}
}

/*
 * The kernels of the best usable implementation, chosen the way the codec
 * table chooses (gw_codec_find()): every implementation gives the same bits
 * (tests/test_conformance.c), so this only decides the speed.
 */
static const struct gw_psgd_kernels *best(void)
{
	const struct gw_codec_ops *o = gw_codec_find("powersgd");

	return o == &gw_powersgd_avx2 ? &gw_psgd_kernels_avx2 : &gw_psgd_kernels_generic;
}

void gw_psgd_mq(const float *m, const struct gw_psgd_view *v, const float *qt, float *pt)
{
	best()->mq(m, v, qt, pt);
}

void gw_psgd_mtp(const float *m, const struct gw_psgd_view *v, const float *pt, float *qt)
{
	best()->mtp(m, v, pt, qt);
}

size_t gw_psgd_work_size(uint64_t rows, uint32_t r)
{
	return (size_t)rows * (r + 1) + r;
}

static double ddot(const double *a, const double *b, uint64_t len)
{
	double s = 0;

	for (uint64_t i = 0; i < len; i++)
		s += a[i] * b[i];
	return s;
}

/* Modified Gram-Schmidt, each projection done twice ("twice is enough"). */
static void gram_schmidt(double *w, uint64_t rows, uint32_t r)
{
	for (uint32_t k = 0; k < r; k++) {
		double *v = w + (uint64_t)k * rows, n0, n1;

		n0 = sqrt(ddot(v, v, rows));
		for (int pass = 0; pass < 2 && n0 > 0; pass++) {
			for (uint32_t j = 0; j < k; j++) {
				const double *u = w + (uint64_t)j * rows;
				double d = ddot(u, v, rows);

				for (uint64_t i = 0; i < rows; i++)
					v[i] -= d * u[i];
			}
		}
		n1 = sqrt(ddot(v, v, rows));
		/* Zero, or (almost) in the span of the columns before it. */
		if (!(n0 > 0) || !(n1 > n0 * 1e-4)) {
			memset(v, 0, (size_t)rows * sizeof(double));
			continue;
		}
		for (uint64_t i = 0; i < rows; i++)
			v[i] /= n1;
	}
}

/*
 * Householder QR (LAPACK's sign convention: the reflector sends x to
 * -sign(x_k) ||x|| e_k), then the thin Q formed explicitly in place of the
 * input. A zero column gets no reflector, so Q stays orthonormal.
 */
static void householder(double *a, uint64_t rows, uint32_t r, double *u, double *beta)
{
	for (uint32_t k = 0; k < r; k++) {
		double *x = a + (uint64_t)k * rows, nrm, alpha;

		nrm = sqrt(ddot(x + k, x + k, rows - k));
		beta[k] = 0;
		if (!(nrm > 0))
			continue;
		alpha = x[k] >= 0 ? -nrm : nrm;
		x[k] -= alpha; /* x[k..] is now the reflector v */
		beta[k] = 1 / (nrm * (nrm + fabs(x[k] + alpha))); /* 2 / v.v */
		for (uint32_t c = k + 1; c < r; c++) {
			double *y = a + (uint64_t)c * rows;
			double s = beta[k] * ddot(x + k, y + k, rows - k);

			for (uint64_t i = k; i < rows; i++)
				y[i] -= s * x[i];
		}
	}
	/* Column c of Q = H_0 H_1 ... H_{r-1} e_c = H_0 ... H_c e_c (H_k only
	 * touches rows >= k), built in u and stored over column c, whose
	 * reflector is the last one it needs: so from the last column down. */
	for (uint32_t c = r; c-- > 0;) {
		memset(u, 0, (size_t)rows * sizeof(double));
		u[c] = 1;
		for (uint32_t k = c + 1; k-- > 0;) {
			const double *v = a + (uint64_t)k * rows;
			double s;

			if (!beta[k])
				continue;
			s = beta[k] * ddot(v + k, u + k, rows - k);
			for (uint64_t i = k; i < rows; i++)
				u[i] -= s * v[i];
		}
		memcpy(a + (uint64_t)c * rows, u, (size_t)rows * sizeof(double));
	}
}

void gw_psgd_orthonormalize(float *pt, uint64_t rows, uint32_t r, double *work)
{
	uint64_t len = rows * r;

	for (uint64_t t = 0; t < len; t++)
		work[t] = pt[t];
	if (r <= GW_PSGD_GS_MAX)
		gram_schmidt(work, rows, r);
	else
		householder(work, rows, r, work + len, work + len + rows);
	for (uint64_t t = 0; t < len; t++)
		pt[t] = (float)work[t];
}

void gw_psgd_reconstruct(const void *p, const void *q, const struct gw_psgd_view *v, const float *y,
			 float *out, enum gw_psgd_mode mode)
{
	best()->reconstruct(p, q, v, y, out, mode);
}

/* ---- the codec ------------------------------------------------------------ */

static size_t align64(size_t b)
{
	return (b + 63) & ~(size_t)63;
}

size_t gw_psgd_op_state_size(const struct gw_codec *c, uint64_t n)
{
	return gw_psgd_state_size(&c->p, n);
}

/* Scratch: qn (cols x r') | pt (rows x r') | work (doubles). */
size_t gw_psgd_op_scratch_size(const struct gw_codec *c, uint64_t n)
{
	struct gw_psgd_view v;

	gw_psgd_view(&c->p, n, &v);
	if (!v.rank)
		return 0;
	return align64((size_t)v.cols * v.rank * 4) + align64((size_t)v.rows * v.rank * 4) +
	       gw_psgd_work_size(v.rows, v.rank) * sizeof(double) + 64;
}

size_t gw_psgd_op_bound(const struct gw_codec *c, uint64_t n)
{
	(void)c;
	return n > GW_MAX_ELEMS ? 0 : HDR + (size_t)n * 4;
}

/* Largest finite |y|, and whether some y is NaN/Inf (noting the first). */
static float scan(const float *x, const float *res, uint64_t n, struct gw_enc_info *info)
{
	float m = 0;

	for (uint64_t i = 0; i < n; i++) {
		float y = res ? x[i] + res[i] : x[i], a = fabsf(y);

		if (a > m && a < INFINITY)
			m = a;
		if (gw_nonfinite(y))
			gw_note_nonfinite(info, i, y);
	}
	return m;
}

static void put_hdr(uint8_t *o, uint8_t form, const struct gw_psgd_view *v)
{
	memset(o, 0, HDR);
	o[0] = form;
	if (!form)
		return;
	gw_put32(o + 4, v->rank);
	gw_put64(o + 8, v->rows);
	gw_put64(o + 16, v->cols);
}

ssize_t gw_psgd_encode(const struct gw_psgd_kernels *k, const struct gw_codec *c, void *state,
		       void *scratch, const float *x, const float *res, float *res_out, uint64_t n,
		       void *out, size_t cap, struct gw_enc_info *info)
{
	struct gw_psgd_view v;
	uint8_t *o = out;
	uint64_t step;
	size_t size;
	float mx;
	int raw;

	if (!gw_enc_args_ok(x, res, res_out, n) || !state || !out || !(c->p.min_factor >= 1) ||
	    !c->p.rank)
		return -EINVAL;
	gw_psgd_view(&c->p, n, &v);
	step = gw_psgd_step(state);
	mx = scan(x, res, n, info);
	raw = !v.rank || step < c->p.warmup || (info->flags & GW_PF_NONFINITE) || mx > RANGE_MAX;
	size = raw ? HDR + (size_t)n * 4 : HDR + (size_t)(v.rows + v.cols) * v.rank * 4;
	if (cap < size)
		return -ENOSPC;
	if (!raw && !scratch)
		return -EINVAL;
	gw_psgd_set_step(state, step + 1);

	if (raw) {
		put_hdr(o, 0, &v);
		for (uint64_t i = 0; i < n; i++) {
			float y = res ? x[i] + res[i] : x[i];

			gw_put32(o + HDR + 4 * i, gw_f2u(gw_nonfinite(y) ? 0.0f : y));
			if (res)
				res_out[i] = 0;
		}
		return (ssize_t)size;
	}

	{
		uint8_t *s = scratch;
		float *qn = (float *)(void *)s;
		float *pt = (float *)(void *)(s + align64((size_t)v.cols * v.rank * 4));
		double *work =
			(double *)(void *)((uint8_t *)pt + align64((size_t)v.rows * v.rank * 4));
		float *q = gw_psgd_state_q(state);
		const float *m = x;
		uint8_t *po = o + HDR, *qo = po + (size_t)v.rows * v.rank * 4;

		if (res) { /* M = y, built in res_out (finite: checked) */
			for (uint64_t i = 0; i < n; i++)
				res_out[i] = x[i] + res[i];
			m = res_out;
		}
		gw_psgd_q_prepare(&c->p, &v, state, qn);
		k->mq(m, &v, qn, pt);
		gw_psgd_orthonormalize(pt, v.rows, v.rank, work);
		k->mtp(m, &v, pt, q);
		put_hdr(o, 1, &v);
		memcpy(po, pt, (size_t)v.rows * v.rank * 4);
		memcpy(qo, q, (size_t)v.cols * v.rank * 4);
		if (res)
			k->reconstruct(po, qo, &v, res_out, res_out, GW_PSGD_SUB);
	}
	return (ssize_t)size;
}

/* Check a hostile section; v->rank = 0 for the raw form. */
static int parse(const uint8_t *b, size_t len, uint64_t n, struct gw_psgd_view *v)
{
	uint64_t vals;

	if (!b || len < HDR || n > GW_MAX_ELEMS || b[1] || b[2] || b[3])
		return -EBADMSG;
	v->n = n;
	v->rank = gw_get32(b + 4);
	v->rows = gw_get64(b + 8);
	v->cols = gw_get64(b + 16);
	if (b[0] == 0) {
		if (v->rank || v->rows || v->cols || len - HDR != n * 4)
			return -EBADMSG;
		return 0;
	}
	if (b[0] != 1 || !n || !v->cols || v->cols > n ||
	    v->rows != n / v->cols + (n % v->cols != 0) || !v->rank || v->rank > GW_PSGD_RANK_MAX ||
	    v->rank > v->rows || v->rank > v->cols)
		return -EBADMSG;
	vals = (v->rows + v->cols) * v->rank;
	if (len - HDR != vals * 4)
		return -EBADMSG;
	for (uint64_t t = 0; t < vals; t++)
		if (gw_nonfinite(gw_u2f(gw_get32(b + HDR + 4 * t))))
			return -EBADMSG;
	return 0;
}

int gw_psgd_decode(const struct gw_psgd_kernels *k, const void *in, size_t len, uint64_t n,
		   float *y, int add)
{
	const uint8_t *b = in;
	struct gw_psgd_view v;
	int rc = parse(b, len, n, &v);

	if (rc)
		return rc;
	if (!v.rank) {
		for (uint64_t i = 0; i < n; i++) {
			float f = gw_u2f(gw_get32(b + HDR + 4 * i));

			y[i] = add ? y[i] + f : f;
		}
		return 0;
	}
	k->reconstruct(b + HDR, b + HDR + (size_t)v.rows * v.rank * 4, &v, NULL, y,
		       add ? GW_PSGD_ADD : GW_PSGD_SET);
	return 0;
}

GW_PSGD_OPS(gw_powersgd_generic, gw_psgd_kernels_generic, "powersgd-generic", 100, NULL)
