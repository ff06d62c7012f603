/* SPDX-License-Identifier: MIT */
/*
 * coll_impl.h - inside the collectives: struct gw_coll, the slot layout
 * and what the files share. Each part of struct gw_coll that one file owns
 * is declared in that file's header (auto_codec.h, hier.h, lowrank.h).
 *
 * The calls go one way, down this list; nothing calls back up:
 *   allreduce.c   the entry: the allreduce, the reduce-scatter and the
 *                 float allgather, and the first lossy call's agreement
 *   lowrank.c     PowerSGD's linear form (its factors' sums: coll_sum())
 *   hier.c        the topology, coll_sum() and the hierarchical allreduce
 *   ring.c        the ring engine, over any group (group.h)
 *   direct.c      the ring engine's direct reduce-scatter
 *   auto_codec.c  auto's codec per link (each lossy send asks it)
 *   check.c       the slot streams and the call check
 *   exact.c       barrier, broadcast, allgather, and byte steps
 *   coll.c        the object, its settings, the first error, the groups' links
 * (gw_coll_destroy() frees the parts through their headers' inline
 * *_fini() helpers, so that it calls none of the files above it.)
 */
#ifndef GW_COLL_IMPL_H
#define GW_COLL_IMPL_H

#include <stdbool.h>
#include "coll.h"
#include "conn.h"
#include "group.h"
#include "auto_codec.h"
#include "hier.h"
#include "lowrank.h"

/*
 * Slot layout (all below GW_TP_SLOT_MAX):
 *
 *   GW_COLL_SLOT_BASE + (ident << STEP_BITS) + step
 *   ident 0: barrier (step = round), 1: broadcast, 2: allgather (exact.c),
 *         3 + k: allreduce stream k (step = unit: ring.c, hier.c),
 *         3 + GW_COLL_STREAMS: every call check (step = round; check.c),
 *         4 + GW_COLL_STREAMS: auto's probe (step = frame; auto_codec.c)
 */
#define STEP_BITS 16
#define ID_BARRIER 0u
#define ID_BCAST 1u
#define ID_ALLGATHER 2u
#define ID_ALLREDUCE 3u
#define ID_CALL (ID_ALLREDUCE + GW_COLL_STREAMS)
#define ID_AUTO_PROBE (ID_CALL + 1)

_Static_assert(GW_COLL_SLOT_BASE + ((uint64_t)(ID_AUTO_PROBE + 1) << STEP_BITS) <=
		       (uint64_t)GW_TP_SLOT_MAX + 1,
	       "every allreduce stream's slots, the call check's and auto's probe's fit below "
	       "GW_TP_SLOT_MAX");

struct gw_coll {
	struct gw_ctx *ctx;
	int rank, size;
	int err;			      /* first failure; every later call returns it */
	char errmsg[320];		      /* what it was, when there is more to say */
	uint32_t calls;			      /* allreduces so far (the call check) */
	struct call_msg *msgs;		      /* the call check's, one per rank (check.c) */
	uint64_t stream_key[GW_COLL_STREAMS]; /* the tensor of each stream */
	unsigned nstreams;
	uint64_t seg_bytes;   /* allreduce segment on the wire (0: whole chunks) */
	uint64_t piece_bytes; /* the hierarchical allreduce's pieces (0: one) */
	/* What the first lossy allreduce agreed on (allreduce.c): */
	bool agreed;			/* the agreement ran, and found: */
	bool lossy_links;		/* some rank's link to its next compresses */
	double wire_bpv;		/* the most wire bytes per value of any rank's
					 * link to its next (4 for one that does not) */
	struct coll_lowrank lr;		/* PowerSGD's linear form (lowrank.h) */
	struct ring_reqs {		/* the requests of the rings that run at once: */
		struct gw_ctx_req *req; /* RING_REQS_MAIN: the flat or the local ring, */
		size_t cap;		/* RING_REQS_CROSS: the ring across hosts */
	} reqs[2];
	struct coll_group world; /* every rank */
	struct coll_hier hier;	 /* the topology, the hierarchical allreduce (hier.h) */
	struct coll_auto au;	 /* GRADWIRE_CODEC=auto (auto_codec.h) */
	uint64_t *offs;		 /* size + 1: the shards of a call given counts (allreduce.c) */
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
/* Remember the first error, say where it happened, with whom and (when
 * that rank revoked) why, then coll_revoke(). Return: rc. */
int coll_fail(struct gw_coll *c, int rc, const char *what, int step);
/* After the first error (c->errmsg): a failed collective leaves the ranks'
 * sequence numbers out of step, so revoke the context, and every peer's
 * pending and later calls fail at once, naming this rank and c->errmsg.
 * Not when a rank's loss ended it: every rank sees that one for itself. */
void coll_revoke(struct gw_coll *c);
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
/* The stream the tensor key was given, or 0 when it has none of its own yet. */
uint32_t coll_stream_find(const struct gw_coll *c, uint64_t key);
/* The call check of an allreduce, a reduce-scatter or a float allgather
 * (check.c's opening comment). say: what this rank states for auto beside
 * its descriptor; heard: where every rank's statement goes (size entries,
 * by rank), or NULL. Return: 0, -EINVAL (the ranks disagree: c->errmsg
 * says how), or the transport's error. */
int coll_check_call(struct gw_coll *c, uint64_t key, uint64_t n, enum gw_coll_op op, unsigned lossy,
		    const struct coll_auto_say *say, struct coll_auto_say *heard);

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

/* direct.c */
/* Shape the direct reduce-scatter of g (coll_ring_begin() with RING_DIRECT). */
void coll_direct_begin(struct ring *g);
/* Move it on, as coll_ring_step() its units (the same blocks rule).
 * Return: 0 (done: member i holds chunk i + 1 + g->delta), RING_PENDING, or
 * a negative errno. */
int coll_direct_step(struct gw_coll *c, struct ring *g);

#endif
