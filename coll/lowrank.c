/* SPDX-License-Identifier: MIT */
/*
 * lowrank.c - PowerSGD's allreduce: the linear form of the power
 * iteration, so that only the factors travel and every rank ends with the
 * same low-rank approximation of the sum.
 *
 * Each rank r holds M_r = x_r + e_r (its gradient plus its residual), seen
 * as a rows x cols matrix (common/lowrank_math.h), and a Q that is the same on
 * every rank (drawn from the agreed seed, then always the reduced Q):
 *
 *   P_r = M_r Q (Q's columns at unit length)   P = sum_r P_r  (exact ring*)
 *   orthonormalize(P)                          (same bits everywhere)
 *   Q_r = M_r^T P;  e_r = M_r - P Q_r^T         Q = sum_r Q_r  (exact ring*)
 *   result = P Q^T = P P^T sum_r M_r, kept Q for the next step's warm start
 *
 * (*: or the exact hierarchical allreduce where hier.c chose it.)
 * Per step and rank, (rows + cols) * r' values enter the ring allreduces
 * instead of n. The exact ring gives every rank the same bits of P and Q,
 * and everything else is deterministic, so the replicas are bit-identical.
 *
 * When is it used. At the first lossy allreduce every rank states whether
 * all its connections negotiated powersgd with identical parameters, in the
 * one exact allgather of that call (allreduce.c), which makes the
 * decision unanimous: PowerSGD for every lossy allreduce of this gw_coll,
 * or never (the ring with the per-hop codec). A tensor then travels exactly (GW_LOWRANK_EXACT) when
 * it is below min_compress_bytes, when low rank does not save min_factor, during the first `warmup`
 * steps of its stream (with its residual added), and in a step where any rank's M holds NaN/Inf or
 * a value beyond 2^60: a flag appended to P's allreduce lets all ranks see it together; the
 * residuals are then dropped and Q kept.
 *
 * State: (own rank, slot) entries of the context's residual store hold e_r
 * and the codec state (step counter, Q), so residual checkpoints cover them.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../common/lowrank_math.h"
#include "../common/grow.h"
#include "coll_impl.h"
#include "lowrank.h"

#define RANGE_MAX 0x1p60f

/*
 * The exact sum of the factor called id (GW_COLL_ID_LOWRANK_*) on every
 * rank: what gw_coll_allreduce_id() does with it (the call check, then the
 * ring or the hierarchical allreduce: coll_sum()), done here so that the allreduce this serves is
 * not entered again.
 */
static int factor_sum(struct gw_coll *c, uint32_t id, float *buf, uint64_t n)
{
	uint64_t key = KEY_ID | id;
	int rc;

	if (c->err)
		return c->err;
	rc = coll_check_call(c, key, n, GW_COLL_SUM, 0, &c->au.say, c->au.heard);
	return rc ? rc : coll_sum(c, key, buf, n, 0);
}

static int buffers(struct lowrank_bufs *lr, const struct gw_psgd_view *v)
{
	size_t q = (size_t)v->cols * v->rank * sizeof(float);
	int rc;

	rc = gw_grow((void **)&lr->p, &lr->p_cap, ((size_t)v->rows * v->rank + 1) * sizeof(float));
	if (!rc)
		rc = gw_grow((void **)&lr->q, &lr->q_cap, q);
	if (!rc)
		rc = gw_grow((void **)&lr->qn, &lr->qn_cap, q);
	if (!rc)
		rc = gw_grow((void **)&lr->work, &lr->work_cap,
			     gw_psgd_work_size(v->rows, v->rank) * sizeof(double));
	return rc;
}

/* M = buf + res in buf; 1 when some M value is NaN/Inf or beyond range. */
static int form_m(float *buf, const float *res, uint64_t n)
{
	uint32_t bad = 0;

	for (uint64_t i = 0; i < n; i++) {
		float y = buf[i] + res[i];

		buf[i] = y;
		bad |= !(fabsf(y) <= RANGE_MAX);
	}
	return bad != 0;
}

int gw_coll_lowrank_allreduce(struct gw_coll *c, uint32_t slot, float *buf, uint64_t n)
{
	struct gw_ctx *ctx = gw_coll_ctx(c);
	const struct gw_codec *codec = &c->lr.codec;
	struct lowrank_bufs *lr = &c->lr.bufs;
	struct gw_ctx_own e;
	struct gw_psgd_view v;
	uint64_t step, np;
	float flag;
	int rc;

	if (!c->lr.on)
		return GW_LOWRANK_DECLINED;

	gw_psgd_view(&codec->p, n, &v);
	if (n * sizeof(float) < gw_ctx_min_compress_bytes(ctx) || !v.rank)
		return GW_LOWRANK_EXACT;
	rc = gw_ctx_own_residual(ctx, slot, n, codec, &e);
	if (!rc)
		rc = buffers(lr, &v);
	if (rc)
		return rc;
	step = gw_psgd_step(e.state);
	gw_psgd_set_step(e.state, step + 1);
	flag = (float)form_m(buf, e.res->buf, n); /* buf = M from here on */
	if (step < codec->p.warmup) {
		gw_residual_reset(e.res);
		return GW_LOWRANK_EXACT;
	}

	/* P = M Q, summed with the "some rank cannot" flag behind it. */
	np = v.rows * v.rank;
	gw_psgd_q_prepare(&codec->p, &v, e.state, lr->qn);
	gw_psgd_mq(buf, &v, lr->qn, lr->p);
	lr->p[np] = flag;
	rc = factor_sum(c, GW_COLL_ID_LOWRANK_P, lr->p, np + 1);
	if (rc)
		return rc;
	if (lr->p[np] != 0) {
		gw_residual_reset(e.res);
		return GW_LOWRANK_EXACT;
	}
	gw_psgd_orthonormalize(lr->p, v.rows, v.rank, lr->work);

	/* Q_r = M^T P; e_r = M - P Q_r^T; Q = sum Q_r; result P Q^T. */
	gw_psgd_mtp(buf, &v, lr->p, lr->q);
	gw_psgd_reconstruct(lr->p, lr->q, &v, buf, e.res->buf, GW_PSGD_SUB);
	rc = factor_sum(c, GW_COLL_ID_LOWRANK_Q, lr->q, v.cols * v.rank);
	if (rc)
		return rc;
	memcpy(gw_psgd_state_q(e.state), lr->q, (size_t)v.cols * v.rank * 4);
	gw_psgd_reconstruct(lr->p, lr->q, &v, NULL, buf, GW_PSGD_SET);
	return 0;
}
