/* SPDX-License-Identifier: MIT */
/*
 * lowrank.h - PowerSGD's allreduce (lowrank.c), called by
 * gw_coll_allreduce() (allreduce.c) for lossy tensors; it sums its
 * factors with the ring (ring.c).
 */
#ifndef GW_COLL_LOWRANK_H
#define GW_COLL_LOWRANK_H

#include <stdint.h>
#include "coll.h"

/* Return values besides 0 and -errno. */
#define GW_LOWRANK_DECLINED 1 /* not agreed: the ring with the per-hop codec */
#define GW_LOWRANK_EXACT 2    /* agreed, but this tensor travels exactly now */

/* Allreduce ids (gw_coll_allreduce_id) reserved for the factors. */
#define GW_COLL_ID_LOWRANK_P UINT32_C(0xfffffff0)
#define GW_COLL_ID_LOWRANK_Q UINT32_C(0xfffffff1)

/**
 * gw_coll_lowrank_allreduce() - allreduce buf[0..n) in place as PowerSGD's
 * linear form, when every connection of every rank negotiated powersgd with
 * the same parameters (c->lowrank: the first lossy call's agreement,
 * allreduce.c, which must have run). Its buffers are c->lr, which
 * gw_coll_destroy() frees.
 * @slot: the tensor's own slot; its residual and Q live in the context's
 *        residual store under (own rank, slot).
 * Return: 0 (done: buf holds the sum; the caller averages), GW_LOWRANK_DECLINED,
 * GW_LOWRANK_EXACT (buf may now hold x + residual: reduce it exactly), or
 * -errno.
 */
int gw_coll_lowrank_allreduce(struct gw_coll *c, uint32_t slot, float *buf, uint64_t n);

#endif
