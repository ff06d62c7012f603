/* SPDX-License-Identifier: MIT */
/*
 * coll_allreduce.c - gw_coll_allreduce(): the call check (coll.c), then
 * PowerSGD's linear form when every rank agreed on it (coll_lowrank.c),
 * else the ring (coll_ring.c), then the average. The top of the
 * collectives: it calls them, none of them calls it.
 */
#include <errno.h>
#include "coll_impl.h"
#include "coll_lowrank.h"

static int allreduce(struct gw_coll *c, uint64_t key, float *buf, uint64_t n,
		     enum gw_coll_op op, unsigned flags)
{
	int size = c->size, rc;
	unsigned lossy = flags & GW_CTX_LOSSY;

	if (c->err)
		return c->err;
	if ((op != GW_COLL_SUM && op != GW_COLL_AVG) || (flags & ~GW_CTX_LOSSY) ||
	    (n && !buf))
		return -EINVAL;
	if (size > 1) {
		rc = coll_check_call(c, key, n, op, lossy);
		if (rc)
			return rc;
	}
	if (lossy && size > 1 && n) {	/* PowerSGD's own scheme, if agreed */
		rc = gw_coll_lowrank_allreduce(c, &c->lowrank,
					       slot_of(coll_stream_of(c, key), 0), buf, n);
		if (rc < 0)
			return coll_fail(c, rc, "allreduce (low rank)", 0);
		if (rc == 0)
			goto avg;
		if (rc == GW_LOWRANK_EXACT)
			lossy = 0;
	}
	if (size == 1 || !n)
		goto avg;
	rc = coll_ring_allreduce(c, key, buf, n, lossy);
	if (rc)
		return rc;
avg:
	if (op == GW_COLL_AVG && size > 1)
		for (uint64_t i = 0; i < n; i++)
			buf[i] /= (float)size;
	return 0;
}

int gw_coll_allreduce(struct gw_coll *c, float *buf, uint64_t n,
		      enum gw_coll_op op, unsigned flags)
{
	return allreduce(c, n & ~KEY_ID, buf, n, op, flags);
}

int gw_coll_allreduce_id(struct gw_coll *c, uint32_t id, float *buf,
			 uint64_t n, enum gw_coll_op op, unsigned flags)
{
	return allreduce(c, KEY_ID | id, buf, n, op, flags);
}
