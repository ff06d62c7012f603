/* SPDX-License-Identifier: MIT */
/*
 * hier.c - the topology of the ranks and the hierarchical (2-D)
 * allreduce, over the ring engine (ring.c) run on sub-groups.
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
 *   1. reduce-scatter inside the host, exact (the local ring: c->hier.local):
 *      local rank i then holds its host's sum of chunk (i + 1) % L;
 *   2. allreduce of that chunk across hosts among the H ranks of local index
 *      i (the cross ring: c->hier.cross), with the negotiated codec when lossy:
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
 * The pipeline. The three steps would add up: on a slow link the cross
 * ring is link-bound and the local ones CPU-bound, so they overlap instead.
 * The tensor is cut into P pieces of about c->piece_bytes (piece_count()), and
 * each goes through the three steps on its own: RS(p) inside the host,
 * X(p) across, AG(p) inside. One thread drives the two rings at once
 * (pipe_run()), stepping each without blocking (coll_ring_step()):
 *   - the local ring runs its stages in one fixed order, the same on every
 *     rank of the host: RS0, RS1, AG0, RS2, AG1, ..., RS(P-1), AG(P-2),
 *     AG(P-1) (local_stage()); AG(p) starts once X(p) completed on this
 *     rank, so the local ring has one piece of work to do while X(p) runs;
 *   - the cross ring runs X0, X1, ... in order, X(p) once RS(p) is done here.
 * A stage touches only its piece, and a stage of one ring starts only once
 * the other's stage on that piece has completed (every request waited:
 * sends out of the buffer have left, receives have landed), so the rings
 * never share memory in flight. X(p) is a whole ring allreduce of its chunk
 * (the owner rule per piece), so every replica still ends bit-identical.
 *
 * Slots. Everything uses the tensor's stream (coll_stream_of()), whose
 * 2^STEP_BITS steps are cut into 2P blocks: block p for the local ring's
 * piece p (its reduce-scatter and allgather are the units of one ring, the
 * same segments, so different slots), block P + p for the cross ring's. So
 * every (ring, piece, unit) has its own slot, the same at every call of
 * the tensor (P depends only on its length), and each (peer, slot)
 * residual of the lossy cross ring meets the same values again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

/* The grid (the rank of each local index on each host) and the local and
 * cross groups of this rank (idx: host index of every rank). */
static int build_groups(struct gw_coll *c, const int *idx, int nhosts, int per_host)
{
	int mine = idx[c->rank];

	free(c->hier.local.rank);
	free(c->hier.cross.rank);
	free(c->hier.grid);
	free(c->hier.rs.offs);
	c->hier.local =
		(struct coll_group){ .size = per_host, .name = "allreduce inside the host" };
	c->hier.cross = (struct coll_group){ .size = nhosts, .name = "allreduce across hosts" };
	c->hier.local.rank = malloc((size_t)per_host * sizeof(int));
	c->hier.cross.rank = malloc((size_t)nhosts * sizeof(int));
	c->hier.grid = malloc((size_t)nhosts * (size_t)per_host * sizeof(int));
	c->hier.rs.offs = malloc((2 * (size_t)per_host + (size_t)nhosts + 3) * sizeof(uint64_t));
	if (!c->hier.local.rank || !c->hier.cross.rank || !c->hier.grid || !c->hier.rs.offs)
		return -ENOMEM;
	for (int h = 0; h < nhosts; h++) {
		int k = 0;

		for (int r = 0; r < c->size; r++)
			if (idx[r] == h)
				c->hier.grid[h * per_host + k++] = r;
	}
	for (int i = 0; i < per_host; i++) {
		c->hier.local.rank[i] = c->hier.grid[mine * per_host + i];
		if (c->hier.local.rank[i] == c->rank)
			c->hier.local.me = i;
	}
	c->hier.cross.me = mine;
	for (int h = 0; h < nhosts; h++)
		c->hier.cross.rank[h] = c->hier.grid[h * per_host + c->hier.local.me];
	coll_group_links(c, &c->hier.local);
	coll_group_links(c, &c->hier.cross);
	return 0;
}

int coll_decide(struct gw_coll *c)
{
	int *idx, *count, nhosts, rc = 0, lvl = gw_ctx_log_level(c->ctx);
	const char *why = NULL;
	char buf[160];

	if (c->hier.decided)
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
	c->hier.nhosts = nhosts;
	c->hier.per_host = count[idx[c->rank]];
	c->hier.on = false;
	if (c->hier.algo_set == GW_COLL_ALGO_RING || c->hier.algo_set == GW_COLL_ALGO_DIRECT)
		why = c->hier.algo_set == GW_COLL_ALGO_RING ? "GRADWIRE_ALGO=ring"
							    : "GRADWIRE_ALGO=direct";
	else
		why = why_not(nhosts, count, buf, sizeof(buf));
	if (!why) {
		rc = build_groups(c, idx, nhosts, c->hier.per_host);
		if (rc)
			goto out;
		c->hier.on = true;
		gw_log(lvl, GW_LOG_INFO, c->rank,
		       "allreduce: hierarchical, %d hosts x %d ranks (local index %d; "
		       "across hosts with ranks %d and %d)",
		       nhosts, c->hier.per_host, c->hier.local.me, group_peer(&c->hier.cross, -1),
		       group_peer(&c->hier.cross, 1));
	} else {
		gw_log(lvl, c->hier.algo_set == GW_COLL_ALGO_HIER ? GW_LOG_WARN : GW_LOG_INFO,
		       c->rank, "allreduce: the ring over %d ranks on %d host%s%s: %s", c->size,
		       nhosts, nhosts == 1 ? "" : "s",
		       c->hier.algo_set == GW_COLL_ALGO_HIER
			       ? ", not the hierarchical allreduce asked for"
			       : "",
		       why);
	}
	/* A lossy allreduce compresses each value twice, whatever the ranks
	 * (direct.c; in hier, across hosts), unless the ring was asked
	 * for. Over shm too: there it runs one unit at a time (direct.c),
	 * which keeps it near the ring's time where all peers at once were
	 * far slower (docs/performance.md, the table "8 ranks on loopback
	 * (2 cores)"). */
	c->hier.direct = c->hier.algo_set != GW_COLL_ALGO_RING;
	why = !c->hier.direct ? "GRADWIRE_ALGO=ring"
	      : !c->hier.on && c->world.shm
		      ? "every rank on this host, over shm: one peer at a time"
		      : NULL;
	gw_log(lvl, GW_LOG_INFO, c->rank, "allreduce: lossy calls %s%s%s%s",
	       c->hier.on ? "across hosts " : "",
	       c->hier.direct ? "direct (scatter-reduce-allgather: each value compressed twice, "
				"whatever the ranks)"
			      : "on the ring (each value compressed at every hop)",
	       why ? ": " : "", why ? why : "");
	c->hier.decided = true;
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
		*hosts = c->hier.nhosts;
	if (per_host)
		*per_host = c->hier.per_host;
	return c->hier.on ? "hier" : c->hier.direct ? "direct" : "ring";
}

/*
 * The pipeline (see the top of this file). Pieces of about c->piece_bytes,
 * but large enough that the chunk each cross ring member owns (a piece /
 * (L H)) is at least min_compress_bytes, so that cutting a tensor into
 * pieces never makes it travel exactly across hosts where it would not
 * have; at most PIECES_MAX, at least per_host values each, and few enough
 * that every (ring, piece) gets a block of the stream's steps with room for
 * each of its ring's steps. Every rank computes the same (the sizes are
 * agreed values).
 */
#define PIECES_MAX 64
/* Nothing moved for this long: wait on one stuck request with the
 * context's timeout (see pipe_run()). */
#define STALL_MS 250
/* A sleep in gw_ctx_progress() when neither ring can move, at most. */
#define SLEEP_MS 50

static uint32_t piece_count(const struct gw_coll *c, uint64_t n)
{
	uint32_t steps = 2 * (uint32_t)(c->hier.per_host > c->hier.nhosts ? c->hier.per_host
									  : c->hier.nhosts) -
			 2;
	uint64_t ranks = (uint64_t)c->hier.per_host * (uint64_t)c->hier.nhosts;
	uint64_t least = gw_ctx_min_compress_bytes(c->ctx) < UINT64_MAX / ranks
				 ? ranks * gw_ctx_min_compress_bytes(c->ctx)
				 : UINT64_MAX;
	uint64_t piece = c->piece_bytes > least ? c->piece_bytes : least;
	uint64_t bytes = n * sizeof(float);
	uint64_t p = c->piece_bytes ? bytes / piece + (bytes % piece != 0) : 1;
	uint64_t most = (UINT64_C(1) << STEP_BITS) / (2 * (uint64_t)steps);

	if (p > PIECES_MAX)
		p = PIECES_MAX;
	if (p > most)
		p = most;
	/* At least one value of each piece for every rank of the host. */
	if (p > n / (uint64_t)c->hier.per_host)
		p = n / (uint64_t)c->hier.per_host;
	return p ? (uint32_t)p : 1;
}

/* Stage s of the local ring (0 <= s < 2 P): RS0, RS1, AG0, RS2, AG1, ...,
 * RS(P-1), AG(P-2), AG(P-1). *piece: its piece; return: RING_RS or RING_AG. */
static unsigned local_stage(uint32_t s, uint32_t npieces, uint32_t *piece)
{
	if (s == 0 || (s + 1 < 2 * npieces && s % 2)) {
		*piece = (s + 1) / 2;
		return RING_RS;
	}
	*piece = s + 1 == 2 * npieces ? npieces - 1 : s / 2 - 1;
	return RING_AG;
}

struct pipe {
	struct gw_coll *c;
	float *buf;
	uint64_t n;
	uint32_t npieces, id, budget;
	unsigned lossy;
	struct ring local, cross;
	bool rs;	      /* the reduce-scatter (coll_hier_reduce_scatter()): */
	const uint64_t *offs; /* its shards (NULL: the chunk rule) */
	uint32_t stage;	      /* the local ring's next stage (or the one running) */
	uint32_t xp;	      /* the cross ring's next piece (or the one running) */
	uint32_t rs_done;     /* pieces reduced inside the host (in order) */
	bool local_on, cross_on;
};

/* Piece p of the tensor: its first value, *cnt values. */
static float *piece_of(const struct pipe *pp, uint32_t p, uint64_t *cnt)
{
	uint64_t q = pp->n / pp->npieces, rem = pp->n % pp->npieces;

	*cnt = chunk_cnt(p, q, rem);
	return pp->buf + chunk_off(p, q, rem);
}

/* Shard r of the reduce-scatter's tensor: its first value, *cnt values. */
static uint64_t shard_of(const struct pipe *pp, int r, uint64_t *cnt)
{
	uint64_t q = pp->n / (uint64_t)pp->c->size, rem = pp->n % (uint64_t)pp->c->size;

	*cnt = pp->offs ? pp->offs[r + 1] - pp->offs[r] : chunk_cnt(r, q, rem);
	return pp->offs ? pp->offs[r] : chunk_off(r, q, rem);
}

/* Piece p of shard r: its first value, *cnt values (pieces of every shard
 * as the chunk rule cuts a tensor). */
static uint64_t shard_piece(const struct pipe *pp, int r, uint32_t p, uint64_t *cnt)
{
	uint64_t k, at = shard_of(pp, r, &k), q = k / pp->npieces, rem = k % pp->npieces;

	*cnt = chunk_cnt(p, q, rem);
	return at + chunk_off(p, q, rem);
}

/*
 * Piece p of the reduce-scatter in c->hier.rs.tmp, which holds the pieces in
 * turn, each the slices of its local indices in turn, each slice the
 * pieces of its ranks' shards host after host. Return: where piece p
 * begins; *np its values, lo[0..L] its slices' offsets in it, and xo[0..H]
 * (when not NULL) this rank's slice cut by host.
 */
static uint64_t rs_piece(const struct pipe *pp, uint32_t p, uint64_t *np, uint64_t *lo,
			 uint64_t *xo)
{
	const struct gw_coll *c = pp->c;
	const int L = c->hier.per_host, H = c->hier.nhosts;
	uint64_t begin = 0, at = 0, k;

	for (int r = 0; r < c->size; r++) /* the pieces before p of every shard */
		begin += shard_piece(pp, r, p, &k) - shard_of(pp, r, &k);
	for (int i = 0; i < L; i++) {
		lo[i] = at;
		for (int h = 0; h < H; h++) {
			if (xo && i == c->hier.local.me)
				xo[h] = at - lo[i];
			shard_piece(pp, c->hier.grid[h * L + i], p, &k);
			at += k;
		}
	}
	lo[L] = at;
	if (xo)
		xo[H] = lo[c->hier.local.me + 1] - lo[c->hier.local.me];
	*np = at;
	return begin;
}

/* Copy piece p of every shard into c->hier.rs.tmp (in: before its reduce-
 * scatter inside the host), or this rank's back into the tensor (out:
 * once it went across hosts). */
static void rs_copy(struct pipe *pp, uint32_t p, bool in)
{
	struct gw_coll *c = pp->c;
	const int L = c->hier.per_host, H = c->hier.nhosts;
	uint64_t *lo = c->hier.rs.offs + L + 1, xo[2], np, k, o;
	float *t = c->hier.rs.tmp + rs_piece(pp, p, &np, lo, NULL);

	if (!in) {
		xo[0] = xo[1] = lo[c->hier.local.me];
		for (int h = 0; h <= c->hier.cross.me; h++) {
			xo[0] = xo[1];
			shard_piece(pp, c->hier.grid[h * L + c->hier.local.me], p, &k);
			xo[1] += k;
		}
		o = shard_piece(pp, c->rank, p, &k);
		memcpy(pp->buf + o, t + xo[0], k * sizeof(float));
		return;
	}
	for (int i = 0; i < L; i++)
		for (int h = 0; h < H; h++) {
			o = shard_piece(pp, c->hier.grid[h * L + i], p, &k);
			memcpy(t, pp->buf + o, k * sizeof(float));
			t += k;
		}
}

/* What the cross ring of piece p reduces: its first value, *cnt values and
 * *offs its chunks (NULL: the chunk rule). The allreduce: the chunk of the
 * piece the reduce-scatter inside the host left here; the reduce-scatter:
 * this rank's slice of the piece, cut by host (rs_piece()). */
static float *cross_piece(struct pipe *pp, uint32_t p, uint64_t *cnt, const uint64_t **offs)
{
	struct gw_coll *c = pp->c;
	uint64_t *lo = c->hier.rs.offs + c->hier.per_host + 1, *xo = lo + c->hier.per_host + 1, q,
		 rem, k;
	uint32_t mine = (uint32_t)((c->hier.local.me + 1) % c->hier.per_host);
	float *b;

	if (pp->rs) {
		b = c->hier.rs.tmp + rs_piece(pp, p, &k, lo, xo);
		*cnt = xo[c->hier.nhosts];
		*offs = xo;
		return b + lo[c->hier.local.me];
	}
	b = piece_of(pp, p, &k);
	q = k / (uint64_t)c->hier.per_host;
	rem = k % (uint64_t)c->hier.per_host;
	*cnt = chunk_cnt(mine, q, rem);
	*offs = NULL;
	return b + chunk_off(mine, q, rem);
}

/* Start what may start: the local ring's next stage (an allgather once its
 * piece went across hosts), the cross ring's next piece (once reduced
 * inside the host). Return: 0, 1 (something started), -ENOMEM. */
static int start_stages(struct pipe *pp)
{
	struct gw_coll *c = pp->c;
	const uint64_t *offs;
	uint64_t cnt;
	unsigned ph;
	uint32_t p;
	float *b;
	int rc, started = 0;

	while (!pp->cross_on && pp->xp < pp->npieces && pp->rs_done > pp->xp) {
		b = cross_piece(pp, pp->xp, &cnt, &offs);
		started = 1;
		if (!cnt) { /* nothing of this piece crosses from here */
			pp->xp++;
			continue;
		}
		coll_ring_init(c, &pp->cross, &c->hier.cross, b, cnt, offs, pp->lossy, pp->id,
			       (pp->npieces + pp->xp) * pp->budget, pp->budget);
		pp->cross.delta = pp->rs ? -1 : 0;
		rc = coll_ring_begin(c, &pp->cross,
				     (pp->rs ? RING_RS : RING_ALL) |
					     (pp->lossy && c->hier.direct ? RING_DIRECT : 0),
				     RING_REQS_CROSS);
		if (rc)
			return rc;
		pp->cross_on = true;
	}
	while (pp->rs && !pp->local_on && pp->stage < pp->npieces) {
		uint64_t *lo = c->hier.rs.offs;

		p = pp->stage;
		b = c->hier.rs.tmp + rs_piece(pp, p, &cnt, lo, NULL);
		started = 1;
		if (!cnt) { /* an empty piece (shards shorter than the pieces) */
			pp->stage++;
			pp->rs_done++;
			continue;
		}
		rs_copy(pp, p, true);
		coll_ring_init(c, &pp->local, &c->hier.local, b, cnt, lo, 0, pp->id, p * pp->budget,
			       pp->budget);
		pp->local.delta = -1;
		rc = coll_ring_begin(c, &pp->local, RING_RS, RING_REQS_MAIN);
		if (rc)
			return rc;
		pp->local_on = true;
	}
	if (!pp->rs && !pp->local_on && pp->stage < 2 * pp->npieces) {
		ph = local_stage(pp->stage, pp->npieces, &p);
		if (ph == RING_AG && pp->xp <= p)
			return started; /* piece p is still on its way across */
		b = piece_of(pp, p, &cnt);
		coll_ring_init(c, &pp->local, &c->hier.local, b, cnt, NULL, 0, pp->id,
			       p * pp->budget, pp->budget);
		rc = coll_ring_begin(c, &pp->local, ph, RING_REQS_MAIN);
		if (rc)
			return rc;
		pp->local_on = true;
		started = 1;
	}
	return started;
}

/* Step ring g (on: running); *moved when it did something. Return: 0 (still
 * running or done: *on updated), or its error. */
static int step_ring(struct pipe *pp, struct ring *g, bool *on, int blocks, bool *moved, bool *done)
{
	uint64_t m0 = g->moves;
	int rc;

	*done = false;
	if (!*on)
		return 0;
	rc = coll_ring_step(pp->c, g, blocks);
	if (rc < 0)
		return rc;
	*moved |= g->moves != m0 || !rc;
	if (!rc) {
		*on = false;
		*done = true;
	}
	return 0;
}

/* Fail the run: where (g, which got rc, if any), and withdraw both rings'
 * requests. */
static int pipe_fail(struct pipe *pp, struct ring *g, int rc)
{
	if (pp->local_on && g != &pp->local) /* so that all drain together */
		coll_ring_abort_begin(pp->c, &pp->local);
	if (pp->cross_on && g != &pp->cross)
		coll_ring_abort_begin(pp->c, &pp->cross);
	if (g)
		coll_ring_fail(pp->c, g, rc);
	if (pp->local_on && g != &pp->local)
		coll_ring_abort(pp->c, &pp->local);
	if (pp->cross_on && g != &pp->cross)
		coll_ring_abort(pp->c, &pp->cross);
	return rc;
}

/*
 * Drive both rings in this thread: start what may start, step the cross
 * ring (the slow link's) and the local one, and when neither moved sleep
 * in gw_ctx_progress() until something completes.
 *
 * Timeouts. Requests fail by themselves only when their connection does;
 * a peer that stops answering is found by a wait of the context, which
 * gives up after its timeout and names the peer. So once nothing moved for
 * STALL_MS, the next step waits on the request its ring is stuck on: the
 * cross ring's while it runs, else the local one's. That wait cannot be one
 * that only this rank's other ring could end: X(p) needs nothing of the
 * local rings but RS(0..p), which this rank finished before it started
 * X(p) (and the local rings of other hosts need only their own ranks' cross
 * rings), while the local ring waits alone only when the cross ring waits
 * for it. A dead peer is thus reported after at most STALL_MS plus the
 * timeout, or twice the timeout when the cross ring's wait ends first.
 */
static int pipe_run(struct pipe *pp)
{
	struct gw_coll *c = pp->c;
	int64_t idle = gw_now_ms();
	bool moved, done;
	uint32_t p;
	int rc, blocks = 0, bx;

	pp->npieces = piece_count(c, pp->n);
	pp->budget = (UINT32_C(1) << STEP_BITS) / (2 * pp->npieces);
	for (;;) {
		rc = start_stages(pp);
		if (rc < 0) {
			coll_fail(c, rc,
				  pp->rs ? "reduce-scatter (the pipeline)"
					 : "allreduce (the pipeline)",
				  0);
			return pipe_fail(pp, NULL, rc);
		}
		moved = rc > 0;
		if (!pp->local_on && !pp->cross_on)
			break;			/* every stage ran */
		bx = pp->cross_on ? blocks : 0; /* a stuck cross ring first */
		rc = step_ring(pp, &pp->cross, &pp->cross_on, bx, &moved, &done);
		if (rc)
			return pipe_fail(pp, &pp->cross, rc);
		if (done && pp->rs)
			rs_copy(pp, pp->xp, false);
		if (done)
			pp->xp++;
		rc = step_ring(pp, &pp->local, &pp->local_on, bx ? 0 : blocks, &moved, &done);
		if (rc)
			return pipe_fail(pp, &pp->local, rc);
		if (done) {
			if (pp->rs || local_stage(pp->stage, pp->npieces, &p) == RING_RS)
				pp->rs_done++;
			pp->stage++;
		}
		blocks = 0;
		if (moved) {
			idle = gw_now_ms();
			continue;
		}
		if (gw_now_ms() - idle >= STALL_MS) {
			blocks = 1; /* the next wait of the next ring stepped */
			continue;
		}
		rc = gw_ctx_progress(c->ctx, SLEEP_MS);
		if (rc)
			return pipe_fail(pp, pp->cross_on ? &pp->cross : &pp->local, rc);
	}
	return 0;
}

/*
 * Whether a call runs hierarchically: where the hierarchical allreduce was
 * decided, unless the call is lossy with a codec of under HIER_BPV wire
 * bytes a value across hosts (sparse and 1-bit codecs). Those run flat and
 * direct, every value encoded once to its owner: with so few bytes on the
 * link between hosts, the exact phases inside the host cost more CPU than
 * they save across, so the hierarchical allreduce and reduce-scatter were
 * slower than the flat direct ones for top-k and 1-bit, and faster for
 * int8 (see docs/performance.md, the section "... sparse codecs flat on
 * several hosts" and "The hierarchical reduce-scatter"). Logged at info
 * when the choice changes; what: "allreduce" or "reduce-scatter".
 */
#define HIER_BPV 0.5
bool coll_hier_for(struct gw_coll *c, unsigned lossy, const char *what)
{
	bool hier = c->hier.on && (!lossy || c->wire_bpv >= HIER_BPV);
	uint8_t said = hier ? 1 : 2, *was = &c->hier.said[*what == 'r'];

	if (c->hier.on && *was != said)
		gw_log(gw_ctx_log_level(c->ctx), GW_LOG_INFO, c->rank, "%s: %s", what,
		       hier ? "hierarchical (exact inside the host, then "
			      "across hosts, each value encoded once)"
			    : "flat, direct: the codec sends under half a "
			      "byte a value across hosts, where the exact "
			      "phases inside the host cost more than they save");
	*was = said;
	return hier;
}

int coll_sum(struct gw_coll *c, uint64_t key, float *buf, uint64_t n, unsigned lossy)
{
	struct pipe pp = { .c = c, .buf = buf, .n = n, .lossy = lossy };

	if (!coll_hier_for(c, lossy, "allreduce"))
		return coll_ring_run(c, &c->world, key, buf, n, NULL, lossy,
				     RING_ALL | (lossy && c->hier.direct ? RING_DIRECT : 0), 0);
	pp.id = coll_stream_of(c, key);
	return pipe_run(&pp);
}

/*
 * The hierarchical reduce-scatter. Rank (h, i), local index i on host h,
 * owns shard s(h, i); the slice of local index i is s(0, i) ... s(H-1, i):
 *   1. reduce-scatter inside the host, exact: local rank i ends with its
 *      host's sum of slice i;
 *   2. reduce-scatter of slice i across hosts among the ranks of local
 *      index i (lossy as the allreduce's cross ring: each value encoded
 *      once, direct unless the ring was asked for): rank (h, i) ends with
 *      the sum of s(h, i) over every rank.
 * A rank sends (H - 1) / (H L) of n values across hosts, where the flat
 * reduce-scatter sends (H - 1) / H: L times less on the links between
 * hosts, for (L - 1) / L of n exactly inside the host. A slice is not
 * contiguous in buf, so each piece is copied slice after slice into
 * c->hier.rs.tmp (n values, kept for the next call; rs_piece()) before its
 * reduce-scatter inside the host, and this rank's part copied back once it
 * went across. The pipeline is the allreduce's without the allgathers:
 * RS(p) inside the host, then X(p) across, X(p) beside RS(p + 1).
 */
int coll_hier_reduce_scatter(struct gw_coll *c, uint64_t key, float *buf, uint64_t n,
			     const uint64_t *offs, unsigned lossy)
{
	struct pipe pp = { .c = c,
			   .buf = buf,
			   .n = n,
			   .lossy = lossy,
			   .id = coll_stream_of(c, key),
			   .rs = true,
			   .offs = offs };
	float *t;

	if (n > c->hier.rs.cap) {
		t = n <= SIZE_MAX / sizeof(float) ? realloc(c->hier.rs.tmp, n * sizeof(float))
						  : NULL;
		if (!t)
			return coll_fail(c, -ENOMEM, "reduce-scatter (its copy by slices)", 0);
		c->hier.rs.tmp = t;
		c->hier.rs.cap = n;
	}
	return pipe_run(&pp);
}
