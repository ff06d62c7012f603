/* SPDX-License-Identifier: MIT */
/*
 * coll_hier.c - the topology of the ranks and the hierarchical (2-D)
 * allreduce, over the ring engine (coll_ring.c) run on sub-groups.
 *
 * Topology. Every rank holds every rank's host id (gw_ctx_host_id(): read
 * from the store, the same list everywhere), so every rank computes the same
 * layout without a message: hosts in the order of their lowest rank, each
 * host's ranks in rank order; a rank's local index is its position on its
 * host. The hierarchical allreduce runs when GRADWIRE_ALGO is auto or hier,
 * there are at least 2 hosts, more than one rank on each, and the same
 * number on each; otherwise the flat ring over every rank (the reason is
 * logged: info for auto, warn when hier was asked for).
 *
 * The hierarchical allreduce of n values, L ranks per host, H hosts:
 *   1. reduce-scatter inside the host, exact (the local ring: c->local):
 *      local rank i then holds its host's sum of chunk (i + 1) % L;
 *   2. allreduce of that chunk across hosts among the H ranks of local index
 *      i (the cross ring: c->cross), with the negotiated codec when lossy:
 *      error feedback per (peer, slot) and the owner rule, so the H ranks
 *      end with the same bits of it;
 *   3. allgather inside the host, exact.
 * Every rank ends with the same bits: chunk k comes from the cross ring of
 * local index k - 1, whose members all hold the same bits, and travels
 * exactly after that. Only the hops across hosts may be lossy, and the
 * links between hosts carry each host's share once: a rank sends
 * 2 (H - 1) / H of n / L values across, its host n (H - 1) / H per
 * direction, where the flat ring sends about 2 n (H - 1) / H.
 *
 * Slots. The three steps use the tensor's stream (coll_stream_of()); the
 * local ring's reduce-scatter and allgather are the units of one ring (the
 * same segments, so different slots), and the cross ring talks only to ranks
 * of other hosts, so no (peer, slot) is shared by two steps.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "coll_impl.h"

/* Host index of every rank (hosts numbered in order of their lowest rank);
 * return: the number of hosts, or -ENOMEM. */
static int host_index(struct gw_coll *c, int *idx)
{
	int nhosts = 0;

	for (int r = 0; r < c->size; r++) {
		uint64_t h = gw_ctx_host_id(c->ctx, r);
		int k = 0;

		while (k < r && gw_ctx_host_id(c->ctx, k) != h)
			k++;
		idx[r] = k < r ? idx[k] : nhosts++;
	}
	return nhosts;
}

/* Why the hierarchical allreduce cannot run on this layout, or NULL. */
static const char *why_not(int nhosts, const int *count, char *why, size_t len)
{
	if (nhosts < 2)
		return "all ranks share one host";
	for (int h = 1; h < nhosts; h++) {
		if (count[h] != count[0]) {
			snprintf(why, len,
				 "the hosts hold different numbers of ranks (host 0 has %d, host "
				 "%d %d; hosts in order of their lowest rank)",
				 count[0], h, count[h]);
			return why;
		}
	}
	if (count[0] == 1)
		return "one rank per host";
	return NULL;
}

/* The local and cross groups of this rank (idx: host index of every rank). */
static int build_groups(struct gw_coll *c, const int *idx, int nhosts, int per_host)
{
	int mine = idx[c->rank], li = 0, n = 0;

	free(c->local.rank);
	free(c->cross.rank);
	c->local = (struct coll_group){ .size = per_host, .name = "allreduce inside the host" };
	c->cross = (struct coll_group){ .size = nhosts, .name = "allreduce across hosts" };
	c->local.rank = malloc((size_t)per_host * sizeof(int));
	c->cross.rank = malloc((size_t)nhosts * sizeof(int));
	if (!c->local.rank || !c->cross.rank)
		return -ENOMEM;
	for (int r = 0; r < c->size; r++) {
		if (idx[r] != mine)
			continue;
		if (r == c->rank)
			c->local.me = n;
		c->local.rank[n++] = r;
	}
	li = c->local.me;
	c->cross.me = mine;
	for (int h = 0; h < nhosts; h++) { /* the li-th rank of host h */
		int k = 0;

		for (int r = 0; r < c->size; r++)
			if (idx[r] == h && k++ == li)
				c->cross.rank[h] = r;
	}
	return 0;
}

int coll_decide(struct gw_coll *c)
{
	int *idx, *count, nhosts, rc = 0, lvl = gw_ctx_log_level(c->ctx);
	const char *why = NULL;
	char buf[160];

	if (c->decided)
		return 0;
	idx = calloc((size_t)c->size, sizeof(int));
	count = calloc((size_t)c->size, sizeof(int));
	if (!idx || !count) {
		rc = -ENOMEM;
		goto out;
	}
	nhosts = host_index(c, idx);
	for (int r = 0; r < c->size; r++)
		count[idx[r]]++;
	c->nhosts = nhosts;
	c->per_host = count[idx[c->rank]];
	c->hier = false;
	if (c->algo_set == GW_COLL_ALGO_RING)
		why = "GRADWIRE_ALGO=ring";
	else
		why = why_not(nhosts, count, buf, sizeof(buf));
	if (!why) {
		rc = build_groups(c, idx, nhosts, c->per_host);
		if (rc)
			goto out;
		c->hier = true;
		gw_log(lvl, GW_LOG_INFO, c->rank,
		       "allreduce: hierarchical, %d hosts x %d ranks (local index %d; "
		       "across hosts with ranks %d and %d)",
		       nhosts, c->per_host, c->local.me, group_peer(&c->cross, -1),
		       group_peer(&c->cross, 1));
	} else {
		gw_log(lvl, c->algo_set == GW_COLL_ALGO_HIER ? GW_LOG_WARN : GW_LOG_INFO, c->rank,
		       "allreduce: the ring over %d ranks on %d hosts%s: %s", c->size, nhosts,
		       c->algo_set == GW_COLL_ALGO_HIER
			       ? ", not the hierarchical allreduce asked for"
			       : "",
		       why);
	}
	c->decided = true;
out:
	free(idx);
	free(count);
	return rc;
}

const char *gw_coll_algo(struct gw_coll *c, int *hosts, int *per_host)
{
	if (coll_decide(c))
		return NULL;
	if (hosts)
		*hosts = c->nhosts;
	if (per_host)
		*per_host = c->per_host;
	return c->hier ? "hier" : "ring";
}

int coll_sum(struct gw_coll *c, uint64_t key, float *buf, uint64_t n, unsigned lossy)
{
	uint64_t q, rem;
	int own, rc;

	if (!c->hier)
		return coll_ring_allreduce(c, &c->world, key, buf, n, lossy, RING_ALL);
	q = n / (uint64_t)c->per_host;
	rem = n % (uint64_t)c->per_host;
	own = (c->local.me + 1) % c->per_host; /* the chunk step 1 leaves here */
	rc = coll_ring_allreduce(c, &c->local, key, buf, n, 0, RING_RS);
	if (!rc && CNT(own))
		rc = coll_ring_allreduce(c, &c->cross, key, buf + OFF(own), CNT(own), lossy,
					 RING_ALL);
	if (!rc)
		rc = coll_ring_allreduce(c, &c->local, key, buf, n, 0, RING_AG);
	return rc;
}
