/* SPDX-License-Identifier: MIT */
/*
 * allreduce.c - gw_coll_allreduce(): the call check (check.c), then
 * PowerSGD's linear form when every rank agreed on it (lowrank.c),
 * else the ring (its reduce-scatter direct, direct.c, for lossy calls)
 * or the hierarchical allreduce (hier.c), then the average. Also the allreduce's halves as
 * collectives of their own, with the same checks: the reduce-scatter and
 * the float allgather (member i owns chunk i). The top of the
 * collectives: it calls them, none of them calls it.
 *
 * The first lossy call's agreement. Everything a lossy allreduce must agree
 * on before data moves travels in one exact allgather at the first lossy
 * call on more than one rank, a struct first_lossy from each rank:
 *
 *   0 char spec[128]  PowerSGD's parameters on all its connections, or ""
 * 128 u32 powersgd    1: every connection negotiated powersgd with spec
 * 132 u32 lossy       1: its link to the next rank compresses
 * 136 f64 bpv         that link's wire bytes per value (4 when exact)
 *
 * In the hierarchical allreduce (hier.c, decided alike on every rank
 * before this) only the links across hosts may compress: "the next rank" is
 * the next of the ring across hosts, and "every connection" every connection
 * to a rank of another host.
 *
 * PowerSGD's scheme is used when every rank says powersgd with the same
 * spec; otherwise the ring cuts its segments for the largest bpv of any
 * link (every rank cuts the same ones) and runs lossy calls exactly when no
 * link compresses.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "coll_impl.h"
#include "lowrank.h"

#define SPEC_MAX 128

struct first_lossy {
	char spec[SPEC_MAX];
	uint32_t powersgd;
	uint32_t lossy;
	double bpv;
};
_Static_assert(sizeof(struct first_lossy) == 144, "the first lossy call's statement is 144 bytes");

/* What this rank states; *lowrank: its connections' PowerSGD codec. */
static void first_lossy_mine(struct gw_coll *c, struct first_lossy *m, struct gw_codec *lowrank)
{
	enum { PROBE = 1 << 20 };
	const struct gw_codec *k =
		gw_ctx_codec(c->ctx, group_peer(c->hier.on ? &c->hier.cross : &c->world, 1));
	uint64_t host = gw_ctx_host_id(c->ctx, c->rank);

	const struct gw_codec *set = k;
	int nset = gw_ctx_codec_set(c->ctx, group_peer(c->hier.on ? &c->hier.cross : &c->world, 1),
				    &set);

	memset(m, 0, sizeof(*m));
	m->powersgd = !nset;			    /* auto: the ring, whatever the set holds */
	for (int i = 0; i < (nset ? nset : 1); i++) /* auto: any may be lossy */
		m->lossy |= set[i].ops->lossy;
	m->bpv = sizeof(float);
	for (int i = 0; m->lossy && i < (nset ? nset : 1); i++) { /* auto: the set's widest */
		double bpv = (double)gw_payload_bound(&set[i], PROBE) / PROBE;

		m->bpv = !i || bpv > m->bpv ? bpv : m->bpv;
	}
	for (int p = 0; p < c->size; p++) {
		const struct gw_codec *cd = gw_ctx_codec(c->ctx, p);
		char spec[SPEC_MAX] = "";

		if (!cd || (c->hier.on && gw_ctx_host_id(c->ctx, p) == host))
			continue; /* our own rank, or exact links inside the host */
		if (cd->ops->id != GW_CODEC_POWERSGD ||
		    gw_codec_format(cd, spec, sizeof(spec)) < 0) {
			m->powersgd = 0;
			continue;
		}
		if (!m->spec[0]) {
			memcpy(m->spec, spec, sizeof(spec));
			*lowrank = *cd;
		} else if (strcmp(m->spec, spec)) {
			m->powersgd = 0;
		}
	}
}

/* The agreement (see the top of this file), once per gw_coll. */
static int agree_first_lossy(struct gw_coll *c)
{
	struct first_lossy mine, *all;
	struct gw_codec lowrank;
	int rc;

	if (c->agreed)
		return 0;
	memset(&lowrank, 0, sizeof(lowrank));
	first_lossy_mine(c, &mine, &lowrank);
	all = calloc((size_t)c->size, sizeof(*all));
	if (!all)
		return -ENOMEM;
	rc = gw_coll_allgather(c, &mine, all, sizeof(mine));
	if (!rc) {
		c->lr.on = true;
		c->lossy_links = false;
		c->wire_bpv = 0;
		for (int r = 0; r < c->size; r++) {
			c->wire_bpv = all[r].bpv > c->wire_bpv ? all[r].bpv : c->wire_bpv;
			c->lossy_links |= all[r].lossy != 0;
			if (!all[r].powersgd || strncmp(all[r].spec, all[0].spec, SPEC_MAX))
				c->lr.on = false;
		}
		c->lr.codec = lowrank;
		c->agreed = true;
	}
	free(all);
	return rc;
}

static int allreduce(struct gw_coll *c, uint64_t key, float *buf, uint64_t n, enum gw_coll_op op,
		     unsigned flags)
{
	int size = c->size, rc;
	unsigned lossy = flags & GW_CTX_LOSSY;

	if (c->err)
		return c->err;
	if ((op != GW_COLL_SUM && op != GW_COLL_AVG) || (flags & ~GW_CTX_LOSSY) || (n && !buf))
		return -EINVAL;
	if (size > 1) {
		rc = coll_decide(c);
		if (!rc)
			rc = coll_auto_init(c);
		if (rc)
			return coll_fail(c, rc, "allreduce (the topology)", 0);
		rc = coll_check_call(c, key, n, op, lossy, &c->au.say, c->au.heard);
		if (rc)
			return rc;
	}
	if (lossy && size > 1 && n) { /* PowerSGD's own scheme, if agreed */
		rc = agree_first_lossy(c);
		if (rc)
			return coll_fail(c, rc, "allreduce (the first lossy call's agreement)", 0);
		rc = gw_coll_lowrank_allreduce(c, slot_of(coll_stream_of(c, key), 0), buf, n);
		if (rc < 0)
			return coll_fail(c, rc, "allreduce (low rank)", 0);
		if (rc == 0)
			goto avg;
		if (rc == GW_LOWRANK_EXACT)
			lossy = 0;
	}
	if (size == 1 || !n)
		goto avg;
	if (lossy && !c->lossy_links) /* no link compresses */
		lossy = 0;
	rc = lossy ? coll_auto_begin(c, key, n) : 0;
	if (!rc)
		rc = coll_sum(c, key, buf, n, lossy && !coll_auto_exact(c));
	if (rc)
		return rc;
	if (lossy)
		coll_auto_end(c);
avg:
	if (op == GW_COLL_AVG && size > 1)
		for (uint64_t i = 0; i < n; i++)
			buf[i] /= (float)size;
	return 0;
}

int gw_coll_allreduce(struct gw_coll *c, float *buf, uint64_t n, enum gw_coll_op op, unsigned flags)
{
	return allreduce(c, n & ~KEY_ID, buf, n, op, flags);
}

int gw_coll_allreduce_id(struct gw_coll *c, uint32_t id, float *buf, uint64_t n, enum gw_coll_op op,
			 unsigned flags)
{
	return allreduce(c, KEY_ID | id, buf, n, op, flags);
}

/*
 * The shards of a call given counts (counts[r] values for rank r, in rank
 * order, summing to n; NULL: the chunk rule): *offs the size + 1 offsets
 * (c->offs), or NULL when counts are the chunk rule's own, so that such a
 * call is the plain one, wire bytes and all; *hash FNV-1a 64 of the counts
 * (their 8 bytes each, least significant first) for the call check.
 * Return: 0, -EINVAL (counts do not sum to n) or -ENOMEM.
 */
static int shard_offsets(struct gw_coll *c, uint64_t n, const uint64_t *counts,
			 const uint64_t **offs, uint64_t *hash)
{
	uint64_t q = n / (uint64_t)c->size, rem = n % (uint64_t)c->size, at = 0;
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	bool rule = true;

	*offs = NULL;
	*hash = 0;
	if (!counts)
		return 0;
	if (!c->offs && !(c->offs = malloc(((size_t)c->size + 1) * sizeof(*c->offs))))
		return -ENOMEM;
	for (int r = 0; r < c->size; r++) {
		if (counts[r] > n - at)
			return -EINVAL;
		c->offs[r] = at;
		at += counts[r];
		rule &= counts[r] == chunk_cnt(r, q, rem);
		for (int b = 0; b < 64; b += 8)
			h = (h ^ ((counts[r] >> b) & 0xff)) * UINT64_C(0x100000001b3);
	}
	if (at != n)
		return -EINVAL;
	c->offs[c->size] = n;
	*offs = rule ? NULL : c->offs;
	*hash = h;
	return 0;
}

/*
 * The start of a reduce-scatter or a float allgather: an allreduce's checks
 * (the call check, on a key of its own kind: with offs, KEY_CNT and the
 * counts' hash in place of n) and the first lossy call's agreement.
 * *lossy: GW_CTX_LOSSY when asked for and some link compresses.
 */
static int shard_begin(struct gw_coll *c, uint64_t key, uint64_t n, const uint64_t *offs,
		       uint64_t hash, enum gw_coll_op op, unsigned flags, unsigned *lossy,
		       const char *what)
{
	int rc;

	*lossy = flags & GW_CTX_LOSSY;
	if (c->size == 1)
		return 0;
	rc = coll_decide(c);
	if (!rc)
		rc = coll_auto_init(c);
	if (rc)
		return coll_fail(c, rc, what, 0);
	rc = coll_check_call(c, offs ? key | KEY_CNT : key, offs ? hash : n, op, *lossy, &c->au.say,
			     c->au.heard);
	if (rc)
		return rc;
	if (*lossy && n) {
		rc = agree_first_lossy(c);
		if (rc)
			return coll_fail(c, rc, what, 0);
		if (!c->lossy_links)
			*lossy = 0;
	}
	return *lossy && n ? coll_auto_begin(c, key, n) : 0;
}

/* The arguments every shard collective checks first; then its offsets. */
static int shard_args(struct gw_coll *c, float *buf, uint64_t n, const uint64_t *counts,
		      enum gw_coll_op op, unsigned flags, const uint64_t **offs, uint64_t *hash)
{
	if (c->err)
		return c->err;
	if ((op != GW_COLL_SUM && op != GW_COLL_AVG) || (flags & ~GW_CTX_LOSSY) || (n && !buf))
		return -EINVAL;
	return shard_offsets(c, n, counts, offs, hash);
}

static int reduce_scatter(struct gw_coll *c, uint64_t key, float *buf, uint64_t n,
			  const uint64_t *counts, enum gw_coll_op op, unsigned flags)
{
	uint64_t q = n / (uint64_t)c->size, rem = n % (uint64_t)c->size, hash, lo, hi;
	const uint64_t *offs;
	unsigned lossy, run;
	int rc = shard_args(c, buf, n, counts, op, flags, &offs, &hash);

	if (!rc)
		rc = shard_begin(c, key, n, offs, hash, op, flags, &lossy, "reduce-scatter");
	if (rc || c->size == 1 || !n)
		return rc;
	/* Lossy: each value compressed once, on its way to its owner. */
	run = lossy && !coll_auto_exact(c);
	rc = coll_hier_for(c, run, "reduce-scatter")
		     ? coll_hier_reduce_scatter(c, key, buf, n, offs, run)
		     : coll_ring_run(c, &c->world, key, buf, n, offs, run,
				     RING_RS | (run && c->hier.direct ? RING_DIRECT : 0), -1);
	if (rc)
		return rc;
	lo = offs ? offs[c->rank] : chunk_off(c->rank, q, rem);
	hi = offs ? offs[c->rank + 1] : chunk_off(c->rank, q, rem) + chunk_cnt(c->rank, q, rem);
	if (lossy)
		coll_auto_end(c);
	if (op == GW_COLL_AVG)
		for (uint64_t i = lo; i < hi; i++)
			buf[i] /= (float)c->size;
	return 0;
}

int gw_coll_reduce_scatter(struct gw_coll *c, float *buf, uint64_t n, enum gw_coll_op op,
			   unsigned flags)
{
	return reduce_scatter(c, KEY_RS | (n & ~(KEY_ID | KEY_RS | KEY_AG | KEY_CNT)), buf, n, NULL,
			      op, flags);
}

int gw_coll_reduce_scatter_id(struct gw_coll *c, uint32_t id, float *buf, uint64_t n,
			      enum gw_coll_op op, unsigned flags)
{
	return reduce_scatter(c, KEY_RS | KEY_ID | id, buf, n, NULL, op, flags);
}

int gw_coll_reduce_scatter_counts(struct gw_coll *c, uint32_t id, float *buf, uint64_t n,
				  const uint64_t *counts, enum gw_coll_op op, unsigned flags)
{
	return reduce_scatter(c, KEY_RS | KEY_ID | id, buf, n, counts, op, flags);
}

int gw_coll_allgather_f32_counts(struct gw_coll *c, uint32_t id, float *buf, uint64_t n,
				 const uint64_t *counts, unsigned flags)
{
	const uint64_t *offs;
	uint64_t hash;
	unsigned lossy;
	int rc = shard_args(c, buf, n, counts, GW_COLL_SUM, flags, &offs, &hash);

	if (!rc)
		rc = shard_begin(c, KEY_AG | KEY_ID | id, n, offs, hash, GW_COLL_SUM, flags, &lossy,
				 "allgather");
	if (rc || c->size == 1 || !n)
		return rc;
	/* Lossy: the owner's hop encodes once and keeps what its next
	 * decodes; later hops forward that payload (ring.c). */
	rc = coll_ring_run(c, &c->world, KEY_AG | KEY_ID | id, buf, n, offs,
			   lossy && !coll_auto_exact(c), RING_AG, -1);
	if (!rc && lossy)
		coll_auto_end(c);
	return rc;
}

int gw_coll_allgather_f32(struct gw_coll *c, uint32_t id, float *buf, uint64_t n, unsigned flags)
{
	return gw_coll_allgather_f32_counts(c, id, buf, n, NULL, flags);
}
