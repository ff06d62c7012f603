/* SPDX-License-Identifier: MIT */
/*
 * test_hier.c - the hierarchical allreduce (coll/hier.c) over
 * loopback, hosts emulated by host ids (what GRADWIRE_HOST_ID sets): 2x2
 * (interleaved: ranks 0, 2 on one host), 2x3, 3x2 and 1x4 ranks, every
 * codec; an uneven layout; error feedback across calls; a killed rank.
 *
 * Each rank opens one context and two sets of collectives over it, one that
 * runs the flat ring and one the algorithm GRADWIRE_ALGO=auto picks, and
 * reduces the same data with both from zero residuals, so it can check the
 * hierarchical result against the exact sum and against the ring's error.
 * Hashes of the results go to the parent's folder, which checks that every
 * replica is bit-identical.
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "tutil.h"
#include "tp_harness.h"
#include "coll_util.h"
#include "conn.h"
#include "coll.h"

struct hier_arg {
	const char *codec, *codec_local; /* codec_local: NULL, the same */
	int hosts;	 /* rank r is on host r % hosts (interleave) or r / (size / hosts) */
	bool interleave; /* (an uneven layout: host_of) */
	const int *host_of;
	enum gw_coll_algo algo; /* the second set's (the first runs the ring) */
	const char *want_algo;	/* what gw_coll_algo() must say */
	double bound;		/* the largest relative error; 0: exact */
	bool alone;		/* not compared with the ring's error (which runs
				 * another scheme in this configuration) */
	int timeout_ms;
	int kill_rank, kill_ms; /* dies kill_ms into its third call (or -1) */
	uint64_t piece;		/* the pipeline's pieces (gw_coll_set_piece()); 0: default */
	bool rs;		/* body_kill(): reduce-scatters, not allreduces */
	char dir[64];		/* the parent's folder for hashes */
};

static int host_of(const struct hier_arg *a, int rank, int size)
{
	if (a->host_of)
		return a->host_of[rank];
	return a->interleave ? rank % a->hosts : rank / (size / a->hosts);
}

struct rank_state {
	struct gw_store *st;
	struct gw_ctx *ctx;
	struct gw_coll *ring, *algo;
};

static int open_rank(const struct hier_arg *a, int rank, int size, const char *dir,
		     struct rank_state *s)
{
	int rc;

	memset(s, 0, sizeof(*s));
	rc = ct_open(rank, size, dir, a->codec, a->codec_local,
		     1000 + (uint64_t)host_of(a, rank, size), a->timeout_ms, &s->st, &s->ctx);
	if (!rc)
		rc = gw_coll_create(s->ctx, &s->ring);
	if (!rc)
		rc = gw_coll_create(s->ctx, &s->algo);
	if (rc)
		return rc;
	gw_coll_set_segment(s->ring, 8188); /* segments that do not divide the chunks */
	gw_coll_set_segment(s->algo, 8188);
	gw_coll_set_algo(s->ring, GW_COLL_ALGO_RING);
	gw_coll_set_algo(s->algo, a->algo);
	if (a->piece)
		gw_coll_set_piece(s->algo, a->piece);
	return 0;
}

static void close_rank(struct rank_state *s)
{
	gw_coll_destroy(s->ring);
	gw_coll_destroy(s->algo);
	gw_ctx_destroy(s->ctx);
	gw_store_destroy(s->st);
}

/* Bytes of tensor data this rank sent to ranks of its own host / of others. */
static void sent(struct gw_ctx *ctx, const struct hier_arg *a, uint64_t *local, uint64_t *remote,
		 uint64_t *wire_local, uint64_t *wire_remote, uint64_t *frames_remote)
{
	int rank = gw_ctx_rank(ctx), size = gw_ctx_size(ctx);

	*local = *remote = *wire_local = *wire_remote = *frames_remote = 0;
	for (int p = 0; p < size; p++) {
		struct gw_conn_stats s;

		if (p == rank || gw_ctx_stats(ctx, p, &s))
			continue;
		if (host_of(a, p, size) == host_of(a, rank, size)) {
			*local += s.raw_sent;
			*wire_local += s.wire_sent;
		} else {
			*remote += s.raw_sent;
			*wire_remote += s.wire_sent;
			*frames_remote += s.frames_sent;
		}
	}
}

/* ---- every layout, every codec -------------------------------------------- */

static int body_layout(int rank, int size, const char *dir, void *arg)
{
	static const uint64_t sizes[] = { 1, 7, 1000, 65537 };
	const struct hier_arg *a = arg;
	/* Under half a byte a value on the wire: lossy calls run flat. */
	bool sparse = !strcmp(a->codec, "onebit") || !strcmp(a->codec, "randomk:ratio=0.1");
	struct rank_state s;
	struct gw_coll *flat = NULL;
	int hosts = 0, per_host = 0;
	const char *algo;

	if (open_rank(a, rank, size, dir, &s))
		return 10;
	algo = gw_coll_algo(s.algo, &hosts, &per_host);
	if (!algo || strcmp(algo, a->want_algo) ||
	    strcmp(gw_coll_algo(s.ring, NULL, NULL), "ring")) {
		fprintf(stderr, "rank %d: algorithm %s, want %s\n", rank, algo ? algo : "(none)",
			a->want_algo);
		return 11;
	}
	if (sparse && gw_coll_create(s.ctx, &flat))
		return 11;
	if (flat) {
		gw_coll_set_segment(flat, 8188);
		gw_coll_set_algo(flat, GW_COLL_ALGO_DIRECT);
	}
	for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
		uint64_t n = sizes[z], l0, r0, wl0, wr0, f0, l1, r1, wl1, wr1, f1;
		float *y = tu_alloc(n * 4 + 4), *yf = tu_alloc(n * 4 + 4);
		double *exact = tu_alloc(n * 8 + 8), *mag = tu_alloc(n * 8 + 8), err[2];

		ct_exact_sum(exact, mag, n, size, 0);
		/* The same data from zero residuals: the ring ([0]), then ours. */
		for (int k = 0; k < 2; k++) {
			gw_ctx_residuals_reset(s.ctx);
			tu_fill(y, n, ct_seed(rank, n, 0));
			sent(s.ctx, a, &l0, &r0, &wl0, &wr0, &f0);
			if (gw_coll_allreduce(k ? s.algo : s.ring, y, n, GW_COLL_SUM, GW_CTX_LOSSY))
				return 12;
			sent(s.ctx, a, &l1, &r1, &wl1, &wr1, &f1);
			err[k] = ct_rel_l2(y, exact, n, 1.0);
			for (uint64_t i = 0; i < n; i++)
				if (!isfinite(y[i]))
					return 13;
		}
		if (a->bound == 0) { /* exact: float rounding only */
			for (uint64_t i = 0; i < n; i++)
				if (!(fabs(y[i] - exact[i]) <= 1e-5 * mag[i] + 1e-30)) {
					fprintf(stderr, "rank %d n=%llu: y[%llu] = %g, want %g\n",
						rank, (unsigned long long)n, (unsigned long long)i,
						y[i], exact[i]);
					return 14;
				}
		} else if (err[1] > a->bound || (!a->alone && err[1] > err[0] * 1.02 + 1e-6)) {
			fprintf(stderr, "rank %d %s n=%llu: rel err %g (the ring's %g, bound %g)\n",
				rank, a->codec, (unsigned long long)n, err[1], err[0], a->bound);
			return 15;
		}
		if (rank == 0 && n == 65537)
			printf("\n  %s, %d ranks (%d hosts): rel err %.2e, the ring's %.2e",
			       a->codec, size, hosts, err[1], err[0]);
		if (ct_record(a->dir, "h", rank, y, n * 4))
			return 16;
		/* Sparse and 1-bit codecs: the bits of GRADWIRE_ALGO=direct. */
		if (flat) {
			gw_ctx_residuals_reset(s.ctx);
			tu_fill(yf, n, ct_seed(rank, n, 0));
			if (gw_coll_allreduce(flat, yf, n, GW_COLL_SUM, GW_CTX_LOSSY))
				return 25;
			if (memcmp(y, yf, n * 4)) {
				fprintf(stderr, "rank %d %s n=%llu: not the flat bits\n", rank,
					a->codec, (unsigned long long)n);
				return 26;
			}
		}
		if (!strcmp(algo, "hier") && !sparse && n == 65537) {
			/* Across hosts: the cross ring's 2 (H - 1) / H of this
			 * rank's slice of about n / L values, nothing more (but
			 * the call check's descriptors: 24 bytes, log2(size)
			 * rounds, to ranks that may be on other hosts, and
			 * each piece's rounding of its chunks). */
			uint64_t slice = n / (uint64_t)per_host + 1;
			uint64_t pieces = a->piece ? n * 4 / a->piece + 1 : 1;
			uint64_t most = 4 * 2 * (uint64_t)(hosts - 1) *
						(slice / (uint64_t)hosts + 2 * pieces) +
					24 * 2 * (uint64_t)size;

			if (r1 - r0 > most || r1 == r0) {
				fprintf(stderr, "rank %d: %llu bytes across hosts, want <= %llu\n",
					rank, (unsigned long long)(r1 - r0),
					(unsigned long long)most);
				return 17;
			}
			/* Every piece crossed in its own frames: 2 (H - 1)
			 * steps of its cross ring at least. */
			if (a->piece && f1 - f0 < 2 * (uint64_t)(hosts - 1) * (n * 4 / a->piece)) {
				fprintf(stderr, "rank %d: %llu frames across hosts, want pieces\n",
					rank, (unsigned long long)(f1 - f0));
				return 24;
			}
			/* Inside the host every frame is exact: wire >= raw. */
			if (wl1 - wl0 < l1 - l0 || l1 == l0)
				return 18;
			/* Across, a codec that always shrinks did. */
			if ((!strcmp(a->codec, "int8") || !strcmp(a->codec, "fp16")) &&
			    (double)(r1 - r0) / (double)(wr1 - wr0) < 1.5)
				return 19;
			/* PowerSGD's factors only (a few KiB), even where the
			 * links inside the host negotiated none. */
			if (!strncmp(a->codec, "powersgd", 8) && r1 - r0 > n)
				return 23;
		}
		/* AVG, and without GW_CTX_LOSSY every codec is exact. */
		tu_fill(y, n, ct_seed(rank, n, 0));
		if (gw_coll_allreduce(s.algo, y, n, GW_COLL_AVG, 0))
			return 20;
		for (uint64_t i = 0; i < n; i++)
			if (!(fabs(y[i] - exact[i] / size) <= 1e-5 * mag[i] / size + 1e-30))
				return 21;
		if (ct_record(a->dir, "h", rank, y, n * 4))
			return 22;
		free(y), free(yf), free(exact), free(mag);
	}
	gw_coll_destroy(flat);
	close_rank(&s);
	return 0;
}

/* Run size ranks of body in a fresh folder for their hashes; with tag, every
 * replica's hashes of that tag must be identical. */
static void run(int size, int limit_s, tp_body body, struct hier_arg *a, const char *tag)
{
	int codes[TP_MAX_RANKS];

	strcpy(a->dir, "/tmp/gw-hier-XXXXXX");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(a->dir));
	CU_ASSERT_EQUAL_FATAL(tp_run(size, limit_s, body, a, codes), 0);
	for (int r = 0; r < size; r++) {
		if (r == a->kill_rank)
			continue;
		if (codes[r])
			printf("\n  %s, %d ranks: rank %d exited %d\n", a->codec, size, r,
			       codes[r]);
		CU_ASSERT_EQUAL(codes[r], 0);
	}
	if (tag)
		ct_check_identical(a->dir, tag, size);
	rmdir(a->dir);
}

static void layouts_in(const char *codec, double bound, uint64_t piece)
{
	static const struct {
		int hosts, size;
		bool interleave;
		const char *algo;
	} lay[] = {
		{ 2, 4, true, "hier" },
		{ 2, 6, false, "hier" },
		{ 3, 6, false, "hier" },
		{ 1, 4, false, "direct" },
	};

	for (size_t i = 0; i < sizeof(lay) / sizeof(lay[0]); i++) {
		struct hier_arg a = { .codec = codec,
				      .hosts = lay[i].hosts,
				      .interleave = lay[i].interleave,
				      .algo = GW_COLL_ALGO_AUTO,
				      .want_algo = lay[i].algo,
				      .bound = bound,
				      .kill_rank = -1,
				      .piece = piece };

		run(lay[i].size, 90, body_layout, &a, "h");
	}
}

static void layouts(const char *codec, double bound)
{
	layouts_in(codec, bound, 0);
}

static void test_none(void)
{
	layouts("none", 0);
}
static void test_fp16(void)
{
	layouts("fp16", 1e-2);
}
static void test_bf16(void)
{
	layouts("bf16", 2e-2);
}
static void test_int8(void)
{
	layouts("int8", 5e-2);
}
/* Sparse, 1-bit and low-rank codecs keep a fraction per call: finite,
 * identical, and no farther from the sum than the ring's result. Codecs of
 * under half a byte a value (onebit, randomk 10%) run flat and direct on
 * every layout: the bits of GRADWIRE_ALGO=direct. */
static void test_onebit(void)
{
	layouts("onebit", 1.5);
}
static void test_topk(void)
{
	layouts("topk:ratio=0.1", 1.5);
}
static void test_randomk(void)
{
	layouts("randomk:ratio=0.1", 1.5);
}
static void test_powersgd(void)
{
	layouts("powersgd:rank=4", 1.5);
}

/* The pipeline in several pieces: 65537 values in pieces of 40000 bytes
 * are 7 pieces of 2 or 3 segments inside the host (8188 bytes each), so
 * the rings inside and across hosts run at once, the slots of every piece
 * apart. */
#define PIECE_SMALL 40000
static void test_pieces_none(void)
{
	layouts_in("none", 0, PIECE_SMALL);
}
static void test_pieces_int8(void)
{
	layouts_in("int8", 5e-2, PIECE_SMALL);
}
static void test_pieces_topk(void)
{
	layouts_in("topk:ratio=0.1", 1.5, PIECE_SMALL);
}

/* PowerSGD across hosts, `none` inside: the linear form still applies (only
 * connections to other hosts need to have negotiated it; the flat ring sees
 * links that did not, so it runs the per-hop codec: no comparison). */
static void test_powersgd_local_none(void)
{
	struct hier_arg a = { .codec = "powersgd:rank=4",
			      .codec_local = "none",
			      .alone = true,
			      .hosts = 2,
			      .algo = GW_COLL_ALGO_AUTO,
			      .want_algo = "hier",
			      .bound = 1.5,
			      .kill_rank = -1 };

	run(4, 90, body_layout, &a, "h");
}

/* ---- hosts of different sizes: the ring, even when hier is asked for ------- */

static void test_uneven(void)
{
	static const int three_one[] = { 0, 0, 1, 0 };
	struct hier_arg a = { .codec = "int8",
			      .host_of = three_one,
			      .algo = GW_COLL_ALGO_HIER,
			      .want_algo = "direct",
			      .bound = 5e-2,
			      .kill_rank = -1 };

	run(4, 60, body_layout, &a, "h");
}

/* ---- the hierarchical reduce-scatter --------------------------------------- */

/* counts[0..size) of n: rank 0 none, the others uneven (1, 2, 3, ...), the
 * rest to the last rank. */
static void uneven_counts(uint64_t n, int size, uint64_t *counts)
{
	uint64_t w = (uint64_t)size * (uint64_t)(size - 1) / 2, at = 0;

	for (int r = 0; r < size; r++) {
		counts[r] = n * (uint64_t)r / w / 2;
		at += counts[r];
	}
	counts[size - 1] += n - at;
}

/*
 * Every rank reduce-scatters the same data with the flat ring and with the
 * hierarchical reduce-scatter, from zero residuals, with the chunk rule and
 * with uneven counts (a rank of none): its shard exact for `none`, within
 * the codec's bound otherwise and, for the dense quantizers, no farther
 * from the sum than the ring's (which re-encodes at every hop); across
 * hosts it sends its part of its slice to the ranks of its local index,
 * (H - 1) shards of about n / size values, not the flat reduce-scatter's
 * (H - 1) L; inside the host every frame is exact. Codecs of under half
 * a byte a value (topk 1%, onebit) keep the flat reduce-scatter: the
 * bits of GRADWIRE_ALGO=direct's.
 */
static int body_rs(int rank, int size, const char *dir, void *arg)
{
	static const uint64_t sizes[] = { 1, 7, 1000, 65537 };
	const struct hier_arg *a = arg;
	bool dense = !strcmp(a->codec, "int8") || !strcmp(a->codec, "fp16");
	/* Under half a byte a value on the wire (topk 10% is 0.8). */
	bool sparse = !strcmp(a->codec, "topk:ratio=0.01") || !strcmp(a->codec, "onebit");
	uint64_t counts[TP_MAX_RANKS];
	struct rank_state s;
	struct gw_coll *flat;
	int hosts = 0, per_host = 0;

	if (open_rank(a, rank, size, dir, &s))
		return 10;
	if (strcmp(gw_coll_algo(s.algo, &hosts, &per_host), "hier") || gw_coll_create(s.ctx, &flat))
		return 11;
	gw_coll_set_segment(flat, 8188);
	gw_coll_set_algo(flat, GW_COLL_ALGO_DIRECT);
	for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
		uint64_t n = sizes[z];
		float *y = tu_alloc(n * 4 + 4), *yf = tu_alloc(n * 4 + 4);
		double *exact = tu_alloc(n * 8 + 8), *mag = tu_alloc(n * 8 + 8);

		ct_exact_sum(exact, mag, n, size, 0);
		uneven_counts(n, size, counts);
		for (int cnt = 0; cnt < 2; cnt++) {
			const uint64_t *cn = cnt ? counts : NULL;
			uint64_t off = 0, len, l0, r0, wl0, wr0, f0, l1, r1, wl1, wr1, f1, most;
			double err[2];

			for (int r = 0; r < rank; r++)
				off += cn ? cn[r] : n / size + ((uint64_t)r < n % size);
			len = cn ? cn[rank] : n / size + ((uint64_t)rank < n % size);
			for (int k = 0; k < 2; k++) { /* the ring ([0]), then hier */
				gw_ctx_residuals_reset(s.ctx);
				tu_fill(y, n, ct_seed(rank, n, 0));
				sent(s.ctx, a, &l0, &r0, &wl0, &wr0, &f0);
				if (gw_coll_reduce_scatter_counts(k ? s.algo : s.ring, 9, y, n, cn,
								  GW_COLL_SUM, GW_CTX_LOSSY))
					return 12;
				sent(s.ctx, a, &l1, &r1, &wl1, &wr1, &f1);
				err[k] = len ? ct_rel_l2(y + off, exact + off, len, 1.0) : 0;
			}
			if (a->bound == 0) {
				for (uint64_t i = off; i < off + len; i++)
					if (!(fabs(y[i] - exact[i]) <= 1e-5 * mag[i] + 1e-30))
						return 13;
			} else if (err[1] > a->bound || (dense && err[1] > err[0] * 1.02 + 1e-6)) {
				fprintf(stderr, "rank %d %s n=%llu: rel err %g (the ring's %g)\n",
					rank, a->codec, (unsigned long long)n, err[1], err[0]);
				return 14;
			}
			if (rank == 0 && n == 65537 && !cnt)
				printf("\n  %s, %d ranks (%d hosts): rel err %.2e, the ring's %.2e",
				       a->codec, size, hosts, err[1], err[0]);
			/* Across: H - 1 shards of at most n / size + 1 (the
			 * counts': of the largest), and the call check's
			 * descriptors (from n = 1000: the first calls
			 * agreed on the links already). */
			most = 4 * (uint64_t)(hosts - 1) * (cn ? cn[size - 1] : n / size + 1) +
			       24 * 2 * (uint64_t)size;
			if (n >= 1000 && !sparse && r1 - r0 > most) {
				fprintf(stderr,
					"rank %d n=%llu: %llu bytes across hosts, want <= %llu\n",
					rank, (unsigned long long)n, (unsigned long long)(r1 - r0),
					(unsigned long long)most);
				return 15;
			}
			if (n == 65537 && !sparse && (l1 == l0 || wl1 - wl0 < l1 - l0))
				return 16; /* inside the host: something, exactly */
			/* Flat: the bits of GRADWIRE_ALGO=direct's reduce-scatter. */
			if (sparse) {
				gw_ctx_residuals_reset(s.ctx);
				tu_fill(yf, n, ct_seed(rank, n, 0));
				if (gw_coll_reduce_scatter_counts(flat, 9, yf, n, cn, GW_COLL_SUM,
								  GW_CTX_LOSSY))
					return 17;
				if (memcmp(y + off, yf + off, len * 4)) {
					fprintf(stderr, "rank %d %s n=%llu: not the flat bits\n",
						rank, a->codec, (unsigned long long)n);
					return 18;
				}
			}
		}
		free(y), free(yf), free(exact), free(mag);
	}
	gw_coll_destroy(flat);
	close_rank(&s);
	return 0;
}

static void rs_layouts(const char *codec, double bound, uint64_t piece)
{
	static const struct {
		int hosts, size;
		bool interleave;
	} lay[] = { { 2, 4, true }, { 2, 6, false }, { 3, 6, false } };

	for (size_t i = 0; i < sizeof(lay) / sizeof(lay[0]); i++) {
		struct hier_arg a = { .codec = codec,
				      .hosts = lay[i].hosts,
				      .interleave = lay[i].interleave,
				      .algo = GW_COLL_ALGO_AUTO,
				      .bound = bound,
				      .kill_rank = -1,
				      .piece = piece };

		run(lay[i].size, 90, body_rs, &a, NULL);
	}
}

static void test_rs(void)
{
	rs_layouts("none", 0, 0);
	rs_layouts("int8", 2e-2, 0);
	rs_layouts("fp16", 1e-3, 0);
	rs_layouts("topk:ratio=0.1", 1.0, 0);
	rs_layouts("topk:ratio=0.01", 1.0, 0);
	rs_layouts("onebit", 1.0, 0);
}

/* The same in pieces (7 of 65537 values, the chunk rule's shards and the
 * uneven counts cut in pieces each): X(p) beside RS(p + 1). */
static void test_rs_pieces(void)
{
	rs_layouts("none", 0, PIECE_SMALL);
	rs_layouts("int8", 2e-2, PIECE_SMALL);
	rs_layouts("topk:ratio=0.1", 1.0, PIECE_SMALL);
}

/* ---- error feedback: the running average converges ---------------------------- */

#define EF_N 10000
#define EF_STEPS 30

static int body_feedback(int rank, int size, const char *dir, void *arg)
{
	const struct hier_arg *a = arg;
	struct rank_state s;
	float *y = tu_alloc(EF_N * 4);
	double *exact = tu_alloc(EF_N * 8), *mag = tu_alloc(EF_N * 8), *avg = tu_alloc(EF_N * 8);
	double e1 = 0, e30 = 0;

	if (open_rank(a, rank, size, dir, &s))
		return 10;
	ct_exact_sum(exact, mag, EF_N, size, 3);
	for (int step = 1; step <= EF_STEPS; step++) {
		double e = 0, t = 0;

		tu_fill(y, EF_N, ct_seed(rank, EF_N, 3)); /* the same gradient */
		if (gw_coll_allreduce(s.algo, y, EF_N, GW_COLL_SUM, GW_CTX_LOSSY))
			return 11;
		for (int i = 0; i < EF_N; i++) {
			avg[i] += (y[i] - avg[i]) / step;
			e += (avg[i] - exact[i]) * (avg[i] - exact[i]);
			t += exact[i] * exact[i];
		}
		if (step == 1)
			e1 = sqrt(e / t);
		e30 = sqrt(e / t);
		if (ct_record(a->dir, "ef", rank, y, EF_N * 4))
			return 12;
	}
	if (rank == 0)
		printf("\n  %s, %d ranks on %d hosts: rel err %.3f after 1 step, %.4f averaged "
		       "over %d ",
		       a->codec, size, a->hosts, e1, e30, EF_STEPS);
	if (!(e1 > 0.05) || !(e30 < e1 / 3))
		return 13;
	free(y), free(exact), free(mag), free(avg);
	close_rank(&s);
	return 0;
}

static void test_feedback(void)
{
	struct hier_arg a = { .codec = "topk:ratio=0.1",
			      .hosts = 2,
			      .algo = GW_COLL_ALGO_HIER,
			      .want_algo = "hier",
			      .kill_rank = -1 };

	run(4, 60, body_feedback, &a, "ef");
}

/* The same in 5 pieces: each keeps its residuals across calls. */
static void test_feedback_pieces(void)
{
	struct hier_arg a = { .codec = "topk:ratio=0.1",
			      .hosts = 2,
			      .algo = GW_COLL_ALGO_HIER,
			      .want_algo = "hier",
			      .kill_rank = -1,
			      .piece = EF_N * 4 / 5 };

	run(4, 60, body_feedback, &a, "ef");
}

/* ---- a rank killed mid-call ------------------------------------------------- */

/*
 * 2 hosts x 2 ranks; rank kill_rank dies kill_ms into its third allreduce of
 * 16 MiB (long enough on a loaded machine that it dies with segments in
 * flight inside the host or across; should the call be done by then, in a
 * later one). Every other rank - its host peer, its peer across hosts and
 * the rank that shares neither - must fail the call the victim died in,
 * within the timeout (plus docs/reliability.md's 1.5 s), and later calls
 * fail at once with the same error.
 */
static int body_kill(int rank, int size, const char *dir, void *arg)
{
	const struct hier_arg *a = arg;
	uint64_t n = UINT64_C(1) << 22;
	float *y = tu_alloc(n * 4);
	struct rank_state s;
	int64_t t0 = 0, t1;
	int rc = 0, call;
	pthread_t th;

	if (open_rank(a, rank, size, dir, &s))
		return 10;
	for (call = 0; call < 8; call++) {
		tu_fill(y, n, ct_seed(rank, n, call));
		t0 = gw_now_ms();
		if (call == 2 && rank == a->kill_rank &&
		    pthread_create(&th, NULL, ct_killer, (void *)&a->kill_ms))
			return 11;
		rc = a->rs ? gw_coll_reduce_scatter(s.algo, y, n, GW_COLL_SUM, GW_CTX_LOSSY)
			   : gw_coll_allreduce(s.algo, y, n, GW_COLL_SUM, GW_CTX_LOSSY);
		if (rc)
			break;
	}
	t1 = gw_now_ms();
	if (rank == a->kill_rank)
		return 12; /* every call outlived the killer */
	if (!rc || call < 2) {
		fprintf(stderr, "rank %d: call %d returned %s\n", rank, call, gw_strerror(rc));
		return 20;
	}
	if (rank == 0)
		printf("\n  rank 0 failed call %d after %lld ms: %s ", call, (long long)(t1 - t0),
		       gw_coll_error(s.algo));
	if (gw_coll_allreduce(s.algo, y, n, GW_COLL_SUM, 0) != rc || gw_coll_barrier(s.algo) != rc)
		return 21;
	if (t1 - t0 > a->timeout_ms + 1500) {
		fprintf(stderr, "rank %d: failed after %lld ms\n", rank, (long long)(t1 - t0));
		return 22;
	}
	free(y);
	close_rank(&s);
	return 0;
}

static void test_killed(void)
{
	struct hier_arg a = { .codec = "int8",
			      .hosts = 2,
			      .algo = GW_COLL_ALGO_HIER,
			      .want_algo = "hier",
			      .timeout_ms = 3000,
			      .kill_rank = 1,
			      .kill_ms = 20 };

	run(4, 60, body_kill, &a, NULL);
}

/* The same in the hierarchical reduce-scatter, rank 2 dying (the other host). */
static void test_killed_rs(void)
{
	struct hier_arg a = { .codec = "int8",
			      .hosts = 2,
			      .algo = GW_COLL_ALGO_HIER,
			      .want_algo = "hier",
			      .timeout_ms = 3000,
			      .kill_rank = 2,
			      .kill_ms = 20,
			      .rs = true };

	run(4, 60, body_kill, &a, NULL);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "none: 2x2, 2x3, 3x2, 1x4 exact and identical", test_none },
		{ "fp16", test_fp16 },
		{ "bf16", test_bf16 },
		{ "int8", test_int8 },
		{ "onebit", test_onebit },
		{ "topk", test_topk },
		{ "randomk", test_randomk },
		{ "powersgd (linear form, factors summed hierarchically)", test_powersgd },
		{ "pipeline of 7 pieces: none, exact and identical", test_pieces_none },
		{ "pipeline of 7 pieces: int8", test_pieces_int8 },
		{ "pipeline of 7 pieces: topk", test_pieces_topk },
		{ "powersgd across hosts, none inside", test_powersgd_local_none },
		{ "uneven hosts: the ring, hier asked for", test_uneven },
		{ "error feedback across calls", test_feedback },
		{ "error feedback across calls, 5 pieces", test_feedback_pieces },
		{ "rank killed mid-call", test_killed },
		{ "reduce-scatter: 2x2, 2x3, 3x2, counts, every kind of codec", test_rs },
		{ "reduce-scatter in pieces", test_rs_pieces },
		{ "rank killed mid reduce-scatter", test_killed_rs },
		CU_TEST_INFO_NULL,
	};
	tp_pin_loopback();
	return tu_run("hier", tests);
}
