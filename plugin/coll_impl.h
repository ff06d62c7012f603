/* SPDX-License-Identifier: MIT */
/*
 * coll_impl.h - inside the collectives: struct gw_coll, the slot layout
 * (coll.c's opening comment) and what the files share. The calls go one
 * way: coll_allreduce.c (the entry) -> coll_lowrank.c (PowerSGD) ->
 * coll_ring.c (the ring engine) -> coll.c (the object, the exact
 * collectives, the call check); nothing calls back up. coll_hier.c (the
 * topology and the hierarchical allreduce) sits between coll_lowrank.c and
 * coll_ring.c: PowerSGD's exact sums of its factors go through it too.
 */
#ifndef GW_COLL_IMPL_H
#define GW_COLL_IMPL_H

#include "coll.h"

#define STEP_BITS 16
#define ID_BARRIER 0u
#define ID_BCAST 1u
#define ID_ALLGATHER 2u
#define ID_ALLREDUCE 3u
#define ID_CALL (ID_ALLREDUCE + GW_COLL_STREAMS)

_Static_assert(GW_COLL_SLOT_BASE + ((uint64_t)(ID_CALL + 1) << STEP_BITS) <=
		       (uint64_t)GW_TP_SLOT_MAX + 1,
	       "every allreduce stream's slots and the call check's fit below GW_TP_SLOT_MAX");

/*
 * A ring of ranks: every rank of the context (c->world), or a sub-group of
 * the hierarchical allreduce (coll_hier.c): the ranks of this host
 * (c->local), or the ranks of the same local index on every host (c->cross).
 */
struct coll_group {
	int size;	  /* members */
	int me;		  /* this rank's position among them */
	int *rank;	  /* the context's rank of each member, in ring order */
	const char *name; /* for error messages, e.g. "allreduce" */
};

/* The context's rank of the member d places after this rank (d may be < 0). */
static inline int group_peer(const struct coll_group *g, int d)
{
	int i = ((g->me + d) % g->size + g->size) % g->size;

	return g->rank[i];
}

struct gw_coll {
	struct gw_ctx *ctx;
	int rank, size;
	int err;			      /* first failure; every later call returns it */
	char errmsg[320];		      /* what it was, when there is more to say */
	uint32_t calls;			      /* allreduces so far (the call check) */
	uint64_t staged;		      /* values of lossy sends in flight (ring_run) */
	struct call_desc *descs;	      /* the call check's, one per rank */
	uint64_t stream_key[GW_COLL_STREAMS]; /* the tensor of each stream */
	unsigned nstreams;
	uint64_t seg_bytes; /* allreduce segment on the wire (0: whole chunks) */
	/* What the first lossy allreduce agreed on (coll_allreduce.c): */
	bool agreed;		       /* the agreement ran, and found: */
	bool lossy_links;	       /* some rank's link to its next compresses */
	double wire_bpv;	       /* the most wire bytes per value of any rank's
					* link to its next (4 for one that does not) */
	bool lowrank;		       /* every connection of every rank negotiated
					* powersgd with the same parameters, */
	struct gw_codec lowrank_codec; /* these */
	float *scratch;		       /* the owner's segment as the next rank decodes it */
	size_t scratch_cap;	       /* bytes, as req_cap (gw_grow()) */
	struct gw_ctx_req *req;	       /* allreduce: receives, then sends, per unit */
	size_t req_cap;
	struct lowrank_bufs {	   /* PowerSGD's allreduce (coll_lowrank.c grows them) */
		float *p, *q, *qn; /* rows * r + 1, cols * r, cols * r */
		double *work;	   /* the orthonormalization's */
		size_t p_cap, q_cap, qn_cap, work_cap;
	} lr;
	/* The topology (coll_hier.c), decided at the first allreduce: */
	enum gw_coll_algo algo_set; /* what was asked for */
	bool decided;		    /* hier, local, cross and the counts hold: */
	bool hier;		    /* the hierarchical allreduce runs */
	int nhosts, per_host;	    /* hosts, ranks on this rank's host */
	struct coll_group world, local, cross;
};

/* Chunk k of a tensor of n = q * size + rem values (uses q and rem in scope). */
#define OFF(k) ((uint64_t)(k)*q + ((uint64_t)(k) < rem ? (uint64_t)(k) : rem))
#define CNT(k) (q + ((uint64_t)(k) < rem))

static inline uint32_t slot_of(uint32_t ident, uint32_t step)
{
	return GW_COLL_SLOT_BASE + (ident << STEP_BITS) + step;
}

static inline int mod(int a, int m)
{
	return ((a % m) + m) % m;
}

/* The stream of slots of a tensor (key: its length, or KEY_ID | the
 * caller's id): first come, first served, the same order on every rank. */
#define KEY_ID (UINT64_C(1) << 63)

/* coll.c */
/* Remember the first error and say where it happened, and with whom. */
int coll_fail(struct gw_coll *c, int rc, const char *what, int step);
/* One step of byte messages on slot: receive len bytes from `from` (>= 0)
 * into rbuf and send len bytes of sbuf to `to` (>= 0); both are waited. */
int coll_bytes_step(struct gw_coll *c, uint32_t slot, int to, const void *sbuf, int from,
		    void *rbuf, size_t len);
uint32_t coll_stream_of(struct gw_coll *c, uint64_t key);
/* The call check of an allreduce (coll.c's opening comment). Return: 0,
 * -EINVAL (the ranks disagree: c->errmsg says how), or the transport's error. */
int coll_check_call(struct gw_coll *c, uint64_t key, uint64_t n, enum gw_coll_op op,
		    unsigned lossy);

/* coll_ring.c */
#define RING_RS 1u /* the reduce-scatter: member i then owns chunk i + 1 */
#define RING_AG 2u /* the allgather of the owned chunks */
#define RING_ALL (RING_RS | RING_AG)
/* The ring allreduce (sum) of buf[0..n) of the tensor key over the group g
 * of more than one rank, n > 0, after its call check: the phases asked for
 * (RING_ALL: the allreduce). lossy: GW_CTX_LOSSY (only once c->agreed) or 0. */
int coll_ring_allreduce(struct gw_coll *c, const struct coll_group *g, uint64_t key, float *buf,
			uint64_t n, unsigned lossy, unsigned phases);

/* coll_hier.c */
/* Decide the algorithm and build the groups, once (gw_coll_algo()).
 * Return: 0 or -ENOMEM. */
int coll_decide(struct gw_coll *c);
/* The sum of buf[0..n) of the tensor key on every rank, by the algorithm
 * decided (coll_decide() must have run): the ring over c->world, or the
 * hierarchical allreduce. Same contract as coll_ring_allreduce(). */
int coll_sum(struct gw_coll *c, uint64_t key, float *buf, uint64_t n, unsigned lossy);

#endif
