/* SPDX-License-Identifier: MIT */
/*
 * coll_impl.h - inside the collectives: struct gw_coll, the slot layout
 * (coll.c's opening comment) and what the files share. The calls go one
 * way: allreduce.c (the entry) -> lowrank.c (PowerSGD) ->
 * ring.c (the ring engine) -> coll.c (the object, the exact
 * collectives, the call check); nothing calls back up. hier.c (the
 * topology and the hierarchical allreduce) sits between lowrank.c and
 * ring.c: PowerSGD's exact sums of its factors go through it too.
 */
#ifndef GW_COLL_IMPL_H
#define GW_COLL_IMPL_H

#include <stdbool.h>
#include "coll.h"
#include "conn.h"

/*
 * Slot layout (all below GW_TP_SLOT_MAX):
 *
 *   GW_COLL_SLOT_BASE + (ident << STEP_BITS) + step
 *   ident 0: barrier (step = round), 1: broadcast, 2: allgather (exact.c),
 *         3 + k: allreduce stream k (step = unit: ring.c, hier.c),
 *         3 + GW_COLL_STREAMS: every call check (step = round; check.c)
 */
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
 * the hierarchical allreduce (hier.c): the ranks of this host
 * (c->local), or the ranks of the same local index on every host (c->cross).
 */
struct coll_group {
	int size;	  /* members */
	int me;		  /* this rank's position among them */
	int *rank;	  /* the context's rank of each member, in ring order */
	const char *name; /* for error messages, e.g. "allreduce" */
	bool shm;	  /* every member on this host, reached over shm (coll_group_links()) */
};

/* The context's rank of the member d places after this rank (d may be < 0). */
static inline int group_peer(const struct coll_group *g, int d)
{
	int i = ((g->me + d) % g->size + g->size) % g->size;

	return g->rank[i];
}

#define COLL_AUTO_IDS 16 /* codec wire ids auto keeps costs for */

struct gw_coll {
	struct gw_ctx *ctx;
	int rank, size;
	int err;			      /* first failure; every later call returns it */
	char errmsg[320];		      /* what it was, when there is more to say */
	uint32_t calls;			      /* allreduces so far (the call check) */
	struct call_desc *descs;	      /* the call check's, one per rank */
	uint64_t stream_key[GW_COLL_STREAMS]; /* the tensor of each stream */
	unsigned nstreams;
	uint64_t seg_bytes;   /* allreduce segment on the wire (0: whole chunks) */
	uint64_t piece_bytes; /* the hierarchical allreduce's pieces (0: one) */
	/* What the first lossy allreduce agreed on (allreduce.c): */
	bool agreed;			/* the agreement ran, and found: */
	bool lossy_links;		/* some rank's link to its next compresses */
	double wire_bpv;		/* the most wire bytes per value of any rank's
					 * link to its next (4 for one that does not) */
	bool lowrank;			/* every connection of every rank negotiated
					 * powersgd with the same parameters, */
	struct gw_codec lowrank_codec;	/* these */
	struct ring_reqs {		/* the requests of the rings that run at once: */
		struct gw_ctx_req *req; /* RING_REQS_MAIN: the flat or the local ring, */
		size_t cap;		/* RING_REQS_CROSS: the ring across hosts */
	} reqs[2];
	struct lowrank_bufs {	   /* PowerSGD's allreduce (lowrank.c grows them) */
		float *p, *q, *qn; /* rows * r + 1, cols * r, cols * r */
		double *work;	   /* the orthonormalization's */
		size_t p_cap, q_cap, qn_cap, work_cap;
	} lr;
	/* The topology (hier.c), decided at the first allreduce: */
	enum gw_coll_algo algo_set; /* what was asked for */
	bool decided;		    /* hier, local, cross and the counts hold: */
	bool hier;		    /* the hierarchical allreduce runs */
	bool direct;		    /* else lossy calls run direct.c's */
	uint8_t hier_said[2];	    /* what coll_hier_for() logged for the allreduce,
				     * the reduce-scatter: 1 hierarchical, 2 flat */
	int nhosts, per_host;	    /* hosts, ranks on this rank's host */
	struct coll_group world, local, cross;
	int *grid;		/* nhosts * per_host: the rank of local index i
				 * on host h at [h * per_host + i] */
	struct hier_rs {	/* the hierarchical reduce-scatter's (hier.c): */
		float *tmp;	/* the tensor by pieces, each by slices (rs_piece()) */
		uint64_t cap;	/* values tmp holds */
		uint64_t *offs; /* per_host + 1 slices (the local ring's), per_host + 1 (scratch),
				   nhosts + 1 shards (the cross ring's) */
	} hrs;
	struct coll_auto {	       /* GRADWIRE_CODEC=auto (auto_codec.c) */
		bool init, on;	       /* looked at; the lossy group's links are auto */
		uint8_t *want;	       /* size: each rank's choice (wire id + 1, 0 none) */
		uint8_t *rate_of;      /* size: each rank's rate class | 0x80 probe */
		uint8_t ag;	       /* owners' payloads this call (id + 1, 0 default) */
		uint8_t say[2];	       /* stated in the call check: choice, rate class */
		uint8_t mine;	       /* what this rank states (id + 1): its choice, or
					* while exploring the codec tried */
		uint8_t chosen, cand;  /* its choice; another measured faster */
		int streak;	       /* calls cand has been GAIN faster */
		bool probe;	       /* ask for a probe at the next call check */
		int explore;	       /* the next codec of the set to try, or -1 */
		uint32_t epoch;	       /* explorations so far */
		unsigned quiet, nlast; /* calls since the last choice; of last[] */
		double last[3];	       /* the last calls' time per value, ns */
		double tau_ref;	       /* the median of the first 3 calls after it */
		double tau_chosen;     /* what it measured when chosen */
		double rate;	       /* bytes/s into this rank, 0 unknown */
		uint64_t n;	       /* this call's values, */
		uint64_t ref;	       /* the tensor explorations time (its key) */
		bool timed;	       /* this call is of ref: it counts */
		int64_t t0;	       /* and when its data phase began */
		float *probe_buf;
		uint8_t force[64];		   /* gw_coll_auto_force(): ids, */
		uint32_t nforce, iforce;	   /* their number, the next */
		double tau[COLL_AUTO_IDS];	   /* ns per value, measured per codec */
		uint32_t tau_epoch[COLL_AUTO_IDS]; /* in that exploration */
		int8_t measured[COLL_AUTO_IDS];	   /* gw_codec_speed(): 1 done, -1 failed */
		struct gw_codec_speed speed[COLL_AUTO_IDS];
	} au;
	uint64_t *offs; /* size + 1: the shards of a call given counts (allreduce.c) */
};

/* The chunk rule: chunk k of a tensor of n = q * size + rem values (q =
 * n / size, rem = n % size) begins at chunk_off() and holds chunk_cnt()
 * values, the first rem chunks one more than the others. */
static inline uint64_t chunk_off(uint64_t k, uint64_t q, uint64_t rem)
{
	return k * q + (k < rem ? k : rem);
}

static inline uint64_t chunk_cnt(uint64_t k, uint64_t q, uint64_t rem)
{
	return q + (k < rem);
}

static inline uint32_t slot_of(uint32_t ident, uint32_t step)
{
	return GW_COLL_SLOT_BASE + (ident << STEP_BITS) + step;
}

static inline int mod(int a, int m)
{
	return ((a % m) + m) % m;
}

/* The stream of slots of a tensor (key: its length, or KEY_ID | the
 * caller's id): first come, first served, the same order on every rank.
 * A reduce-scatter's and a float allgather's tensors are streams of their
 * own (KEY_RS, KEY_AG), apart from an allreduce of the same length or id. */
#define KEY_ID (UINT64_C(1) << 63)
#define KEY_RS (UINT64_C(1) << 62)
#define KEY_AG (UINT64_C(1) << 61)
/* Only in the call check's key: a reduce-scatter or float allgather whose
 * shards were given as counts per rank, other than the chunk rule's; the
 * descriptor's n then holds FNV-1a 64 of the counts (which fix n too). */
#define KEY_CNT (UINT64_C(1) << 60)

/* coll.c */
/* Remember the first error and say where it happened, and with whom. */
int coll_fail(struct gw_coll *c, int rc, const char *what, int step);
/* g->shm: every other member is reached over the shm provider. Then all are
 * on this rank's host, and each member finds the same (host ids and the
 * local provider agree on every rank: transport/tp.c). */
void coll_group_links(const struct gw_coll *c, struct coll_group *g);

/* exact.c */
/* One step of byte messages on slot: receive len bytes from `from` (>= 0)
 * into rbuf and send len bytes of sbuf to `to` (>= 0); both are waited. */
int coll_bytes_step(struct gw_coll *c, uint32_t slot, int to, const void *sbuf, int from,
		    void *rbuf, size_t len);

/* check.c */
/* The stream (slot ident) of the tensor key. */
uint32_t coll_stream_of(struct gw_coll *c, uint64_t key);
/* The call check of an allreduce (coll.c's opening comment). Return: 0,
 * -EINVAL (the ranks disagree: c->errmsg says how), or the transport's error. */
int coll_check_call(struct gw_coll *c, uint64_t key, uint64_t n, enum gw_coll_op op,
		    unsigned lossy);

/* auto_codec.c (GRADWIRE_CODEC=auto; all of them do nothing without it) */
/* Look at the lossy group's links once (after coll_decide()). Return: 0, -ENOMEM. */
int coll_auto_init(struct gw_coll *c);
/* After the call check of a lossy call of n values of the tensor key: the
 * owners' codec, and the probe if some rank asked for one. Return: 0 or the
 * probe's error (coll_fail()). */
int coll_auto_begin(struct gw_coll *c, uint64_t key, uint64_t n);
/* The isend flag for a lossy send to peer (owner: an owner's payload). */
unsigned coll_auto_flag(const struct gw_coll *c, int peer, bool owner);
/* After a lossy call that succeeded: measure, and choose for the next. */
void coll_auto_end(struct gw_coll *c);
#define COLL_AUTO_TRIAL 0x40u /* a stated choice (id + 1) that is an exploration's trial */
/* An exploration begins (every rank at the same call, after the probe). */
void coll_auto_explore(struct coll_auto *a);
/* What a timed call of tau ns per value decides: the next trial, the end
 * of an exploration, a new one asked for, or a switch (tests/test_auto.c
 * feeds it times). */
void coll_auto_timed(struct gw_coll *c, const struct gw_codec *set, int n, double tau);

/* ring.c */
#define RING_RS 1u /* the reduce-scatter: member i then owns chunk i + 1 */
#define RING_AG 2u /* the allgather of the owned chunks */
#define RING_ALL (RING_RS | RING_AG)
#define RING_DIRECT 4u	   /* the reduce-scatter direct (direct.c) */
#define RING_REQS_MAIN 0u  /* c->reqs[] of the flat ring, or the local one */
#define RING_REQS_CROSS 1u /* of the ring across hosts */
#define RING_PENDING 1	   /* coll_ring_step(): not done yet */

/*
 * A ring allreduce in progress (ring.c): its shape, and where it stands,
 * so that a caller can drive two at once (hier.c). Filled by
 * coll_ring_init() and coll_ring_begin(); the fields are the engine's.
 */
struct ring {
	const struct coll_group *grp;
	int next, prev; /* the context's ranks of the neighbours */
	float *buf;
	uint64_t q, rem;		  /* chunk k: chunk_off(), chunk_cnt(), */
	const uint64_t *offs;		  /* or [offs[k], offs[k + 1]) when not NULL */
	int delta;			  /* 0: member i owns chunk i + 1 after the reduce-scatter
					   * (the allreduce's rule); -1: chunk i (coll_ring_run()) */
	bool direct;			  /* the reduce-scatter runs in direct.c: */
	uint32_t dwindow, dposted, ddone; /* units in flight at most, posted, done */
	uint64_t seg;			  /* values per segment */
	uint32_t nseg, units, id;
	uint32_t base;	      /* unit u's slot: slot_of(id, base + u) */
	uint32_t first, last; /* the units this run moves: [first, last) */
	unsigned lossy;
	struct gw_ctx_req *rr, *sr; /* receives, sends: units each */
	/* Where the run stands (coll_ring_step()): */
	uint32_t u, posted, swaited, rwaited;
	unsigned phase;	 /* of unit u, or the drain */
	int blocks;	 /* waits that may block: < 0 all, else that many */
	uint64_t staged; /* values of lossy sends in flight */
	uint64_t moves;	 /* requests posted or completed so far */
};

/* Segment j of chunk k of g's tensor: its offset in *off, its length
 * returned (0 past the chunk's end). Every segment but a chunk's last holds
 * g->seg values. */
static inline uint64_t ring_seg_span(const struct ring *g, int k, uint32_t j, uint64_t *off)
{
	uint64_t lo = (uint64_t)j * g->seg;
	uint64_t at = g->offs ? g->offs[k] : chunk_off((uint64_t)k, g->q, g->rem);
	uint64_t cnt = g->offs ? g->offs[k + 1] - g->offs[k] : chunk_cnt((uint64_t)k, g->q, g->rem);

	*off = at + lo;
	return lo >= cnt ? 0 : cnt - lo < g->seg ? cnt - lo : g->seg;
}

/*
 * coll_ring_init() - shape g: the ring over grp of buf[0..n), n > 0, its
 * units on steps [base, base + budget) of the stream id (budget at least
 * 2 (grp->size - 1)). lossy: GW_CTX_LOSSY (only once c->agreed) or 0.
 * offs: grp->size + 1 chunk offsets (offs[0] = 0, offs[size] = n), kept by
 * the caller until the run ends, or NULL for the chunk rule (chunk_off(), chunk_cnt()).
 */
void coll_ring_init(struct gw_coll *c, struct ring *g, const struct coll_group *grp, float *buf,
		    uint64_t n, const uint64_t *offs, unsigned lossy, uint32_t id, uint32_t base,
		    uint32_t budget);
/*
 * coll_ring_begin() - start the phases asked for (RING_RS, RING_AG, both) of
 * g, with the requests c->reqs[reqs] (which no other ring in flight uses).
 * Return: 0 or -ENOMEM.
 */
int coll_ring_begin(struct gw_coll *c, struct ring *g, unsigned phases, unsigned reqs);
/*
 * coll_ring_step() - move g on as far as it goes: post what its windows
 * allow and finish what completed, in the engine's order. A wait blocks
 * (with the context's timeout) while blocks allows it (< 0: always; n: the
 * next n waits), else the run stops at the first request not complete.
 * Return: 0 (the run is done: nothing of it in flight), RING_PENDING, or a
 * negative errno (then coll_ring_fail()).
 */
int coll_ring_step(struct gw_coll *c, struct ring *g, int blocks);
/* coll_ring_fail() - after coll_ring_step() returned rc < 0: say where (coll_fail())
 * and withdraw what g still has in flight. Return: rc. */
int coll_ring_fail(struct gw_coll *c, struct ring *g, int rc);
/*
 * coll_ring_abort() - withdraw what g has in flight (another ring failed),
 * within one bounded drain. Several rings: begin each first, so that they
 * share that drain.
 */
void coll_ring_abort_begin(struct gw_coll *c, struct ring *g);
void coll_ring_abort(struct gw_coll *c, struct ring *g);

/* The ring allreduce (sum) of buf[0..n) of the tensor key over the group g
 * of more than one rank, n > 0, after its call check: the phases asked for
 * (RING_ALL: the allreduce). lossy: GW_CTX_LOSSY (only once c->agreed) or 0. */
int coll_ring_allreduce(struct gw_coll *c, const struct coll_group *g, uint64_t key, float *buf,
			uint64_t n, unsigned lossy, unsigned phases);
/* The same with the owners delta places on (struct ring): -1 for a
 * reduce-scatter or an allgather whose member i holds chunk i; and the
 * chunks offs bounds (NULL: the chunk rule; coll_ring_init()). */
int coll_ring_run(struct gw_coll *c, const struct coll_group *g, uint64_t key, float *buf,
		  uint64_t n, const uint64_t *offs, unsigned lossy, unsigned phases, int delta);

/* hier.c */
/* Decide the algorithm and build the groups, once (gw_coll_algo()).
 * Return: 0 or -ENOMEM. */
int coll_decide(struct gw_coll *c);
/* Whether a call (lossy or not) of what ("allreduce", "reduce-scatter")
 * runs hierarchically: c->hier, unless lossy with a sparse or 1-bit codec. */
bool coll_hier_for(struct gw_coll *c, unsigned lossy, const char *what);
/* The sum of buf[0..n) of the tensor key on every rank, by the algorithm
 * decided (coll_decide() must have run): the ring over c->world, or the
 * hierarchical allreduce (coll_hier_for()). Same contract as
 * coll_ring_allreduce(). */
int coll_sum(struct gw_coll *c, uint64_t key, float *buf, uint64_t n, unsigned lossy);
/* The reduce-scatter of buf[0..n) of the tensor key when c->hier, after its
 * call check: rank r ends with the sum of buf[offs[r], offs[r + 1]) (offs:
 * size + 1 offsets, or NULL for the chunk rule), the rest of buf undefined.
 * Return: 0 or -errno (coll_fail() said where). */
int coll_hier_reduce_scatter(struct gw_coll *c, uint64_t key, float *buf, uint64_t n,
			     const uint64_t *offs, unsigned lossy);

/* direct.c */
/* Shape the direct reduce-scatter of g (coll_ring_begin() with RING_DIRECT). */
void coll_direct_begin(struct ring *g);
/* Move it on, as coll_ring_step() its units (the same blocks rule).
 * Return: 0 (done: member i holds chunk i + 1 + g->delta), RING_PENDING, or
 * a negative errno. */
int coll_direct_step(struct gw_coll *c, struct ring *g);

#endif
