/* SPDX-License-Identifier: MIT */
/*
 * lowrank.h - PowerSGD's allreduce (lowrank.c), called by
 * gw_coll_allreduce() (allreduce.c) for lossy tensors; it sums its
 * factors exactly with coll_sum() (hier.h: the ring, or the hierarchical
 * allreduce). The state struct gw_coll holds for it, and its call.
 */
#ifndef GW_COLL_LOWRANK_H
#define GW_COLL_LOWRANK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include "gradwire/codec.h"
#include "coll.h"

/* What the first lossy call's agreement found (allreduce.c), and the
 * buffers of PowerSGD's allreduce (lowrank.c grows them). */
struct coll_lowrank {
	bool on;	       /* every connection of every rank negotiated
				* powersgd with the same parameters, */
	struct gw_codec codec; /* these */
	struct lowrank_bufs {
		float *p, *q, *qn; /* rows * r + 1, cols * r, cols * r */
		double *work;	   /* the orthonormalization's */
		size_t p_cap, q_cap, qn_cap, work_cap;
	} bufs;
};

/* Free what lr holds (gw_coll_destroy()). */
static inline void coll_lowrank_fini(struct coll_lowrank *lr)
{
	free(lr->bufs.p);
	free(lr->bufs.q);
	free(lr->bufs.qn);
	free(lr->bufs.work);
}

/* Return values besides 0 and -errno. */
#define GW_LOWRANK_DECLINED 1 /* not agreed: the ring with the per-hop codec */
#define GW_LOWRANK_EXACT 2    /* agreed, but this tensor travels exactly now */

/* Allreduce ids (gw_coll_allreduce_id) reserved for the factors. */
#define GW_COLL_ID_LOWRANK_P UINT32_C(0xfffffff0)
#define GW_COLL_ID_LOWRANK_Q UINT32_C(0xfffffff1)

/**
 * gw_coll_lowrank_allreduce() - allreduce buf[0..n) in place as PowerSGD's
 * linear form, when every connection of every rank negotiated powersgd with
 * the same parameters (c->lr.on: the first lossy call's agreement,
 * allreduce.c, which must have run). Its buffers are c->lr.bufs, which
 * gw_coll_destroy() frees.
 * @slot: the tensor's own slot; its residual and Q live in the context's
 *        residual store under (own rank, slot).
 * Return: 0 (done: buf holds the sum; the caller averages), GW_LOWRANK_DECLINED,
 * GW_LOWRANK_EXACT (buf may now hold x + residual: reduce it exactly), or
 * -errno.
 */
int gw_coll_lowrank_allreduce(struct gw_coll *c, uint32_t slot, float *buf, uint64_t n);

#endif
