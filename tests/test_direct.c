/* SPDX-License-Identifier: MIT */
/*
 * test_direct.c - the direct lossy allreduce (coll/direct.c) against
 * the ring, on the same ranks and data: 2 to 8 ranks, lengths below the
 * ranks and not a multiple of them, every codec.
 *
 * Each rank opens one context and one collectives object, and sets it to
 * GW_COLL_ALGO_RING or GW_COLL_ALGO_DIRECT before each call; the two
 * algorithms' tensors have ids of their own, hence streams of their own, so
 * they never share a slot or a residual. Each rank checks:
 * `none` exact; every result finite; one call's error of the direct
 * allreduce at most the ring's (it compresses each value twice, the ring
 * size times), and below it from 4 ranks for the dense quantizers; no more
 * wire bytes sent than the ring's (frame headers aside); error feedback
 * converging over 30 calls as well as the ring's. The parent checks that
 * every replica is bit-identical.
 *
 * The allreduce's halves as collectives of their own: the reduce-scatter
 * (each rank's shard exact for `none`, within the codec's error otherwise,
 * in at most 0.55x the allreduce's wire bytes) and the float allgather
 * (exact without GW_CTX_LOSSY; lossy: every shard within the codec's
 * error and every replica identical, the owner's too).
 *
 * Shards given as counts per rank (gw_coll_reduce_scatter_counts(),
 * gw_coll_allgather_f32_counts()): counts with zeros and uneven ones, on
 * 2, 3 and 5 ranks, chunks cut in several segments: each rank's shard
 * exact for `none`, the direct reduce-scatter's error no worse than the
 * ring's on the same counts nor its wire bytes more, the allgather's
 * replicas identical; the chunk rule's own counts give the plain call's
 * bits and wire bytes; ranks that pass different counts all fail, saying so.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "tutil.h"
#include "tp_harness.h"
#include "coll_util.h"
#include "conn.h"
#include "coll.h"

struct direct_arg {
	const char *codec;
	bool dense;   /* a quantizer whose error scales with what it encodes */
	bool shm;     /* every rank on one host, over shm where libfabric has it */
	double bound; /* body_halves(): a shard's relative L2 error, at most */
	int mode;     /* body_counts_differ(): which disagreement */
	char dir[64];
};

enum { RING, DIRECT };

static uint64_t wire_sent(struct gw_ctx *ctx, int rank, int size)
{
	uint64_t sum = 0;

	for (int p = 0; p < size; p++) {
		struct gw_conn_stats s;

		if (p != rank && !gw_ctx_stats(ctx, p, &s))
			sum += s.wire_sent;
	}
	return sum;
}

/* A rank's context (each rank its own host, so every link is the network
 * provider's) and one collectives object over it, or NULL. */
struct rank_env {
	struct gw_store *st;
	struct gw_ctx *ctx;
	struct gw_coll *c;
};

/* A rank's context on host 1000 with every other rank, its peers over shm
 * where libfabric offers it (else the network provider). */
static int open_shm(const struct direct_arg *a, int rank, int size, const char *dir,
		    struct rank_env *e)
{
	struct tp_env env = { .provider = tp_net_provider(),
			      .iface = "lo",
			      .log_level = GW_LOG_ERROR,
			      .timeout_ms = 15000 };
	struct gw_ctx_cfg cfg = { .tp = tp_cfg(&env) };
	char err[512] = "store";
	int rc;

	cfg.tp.local_auto = true;
	cfg.codec = a->codec;
	cfg.min_compress_bytes = 64;
	cfg.host_id = 1000;
	rc = gw_store_file_create(dir, &e->st);
	if (!rc)
		rc = gw_ctx_create(&cfg, rank, size, e->st, &e->ctx, err, sizeof(err));
	if (rc)
		fprintf(stderr, "rank %d: open: %s (%s)\n", rank, err, gw_strerror(rc));
	return rc;
}

static struct gw_coll *open_rank(const struct direct_arg *a, int rank, int size, const char *dir,
				 struct rank_env *e)
{
	*e = (struct rank_env){ 0 };
	if (a->shm ? open_shm(a, rank, size, dir, e)
		   : ct_open(rank, size, dir, a->codec, NULL, (uint64_t)(rank + 1) * 1000, 0,
			     &e->st, &e->ctx))
		return NULL;
	if (gw_coll_create(e->ctx, &e->c))
		return NULL;
	return e->c;
}

/*
 * Over shm (a->shm): auto takes the direct allreduce for lossy calls there
 * too, and segments of 4 KiB give each peer several units (coll/direct.c
 * runs them one at a time over shm). Return: 0, or 18 when auto chose
 * otherwise. Without shm here it says so and checks nothing.
 */
static int shm_setup(const struct direct_arg *a, struct gw_coll *c, struct gw_ctx *ctx, int rank)
{
	const char *algo;

	if (!a->shm)
		return 0;
	if (!strstr(gw_ctx_provider(ctx), "shm")) {
		if (rank == 0)
			printf("\n  no shm provider here (%s): nothing over shm checked",
			       gw_ctx_provider(ctx));
		return 0;
	}
	gw_coll_set_segment(c, 4096);
	gw_coll_set_algo(c, GW_COLL_ALGO_AUTO);
	algo = gw_coll_algo(c, NULL, NULL);
	if (!algo || strcmp(algo, "direct")) {
		fprintf(stderr, "rank %d over %s: auto chose %s for lossy calls, not direct\n",
			rank, gw_ctx_provider(ctx), algo ? algo : "nothing");
		return 18;
	}
	return 0;
}

static void close_rank(struct rank_env *e)
{
	gw_coll_destroy(e->c);
	gw_ctx_destroy(e->ctx);
	gw_store_destroy(e->st);
}

/* A lossy allreduce of y by algorithm k: the ring's tensor is id 1, the
 * direct one's id 2. */
static int call(struct gw_coll *c, int k, float *y, uint64_t n)
{
	gw_coll_set_algo(c, k == RING ? GW_COLL_ALGO_RING : GW_COLL_ALGO_DIRECT);
	if (strcmp(gw_coll_algo(c, NULL, NULL), k == RING ? "ring" : "direct"))
		return -EPROTO;
	return gw_coll_allreduce_id(c, 1 + (uint32_t)k, y, n, GW_COLL_SUM, GW_CTX_LOSSY);
}

/* One lossy allreduce of rank's data for n by algorithm k, its error
 * against the exact sum and the wire bytes it sent. */
static int one_call(struct gw_coll *c, struct gw_ctx *ctx, int k, int rank, int size, uint64_t n,
		    float *y, const double *exact, double *err, uint64_t *wire)
{
	uint64_t w0 = wire_sent(ctx, rank, size);
	int rc;

	tu_fill(y, n, ct_seed(rank, n, 0));
	rc = call(c, k, y, n);
	if (rc) {
		fprintf(stderr, "rank %d n=%llu algo %d: %s\n", rank, (unsigned long long)n, k,
			gw_strerror(rc));
		return rc;
	}
	*wire = wire_sent(ctx, rank, size) - w0;
	for (uint64_t i = 0; i < n; i++)
		if (!isfinite(y[i]))
			return -ERANGE;
	*err = ct_rel_l2(y, exact, n, 1.0);
	return 0;
}

static int body_against_ring(int rank, int size, const char *dir, void *arg)
{
	const struct direct_arg *a = arg;
	const uint64_t sizes[] = { 1, 7, (uint64_t)size * 1000 + 3, 65537 };
	struct rank_env e;
	struct gw_coll *c;
	int rc;

	if (!(c = open_rank(a, rank, size, dir, &e)))
		return 10;
	if ((rc = shm_setup(a, c, e.ctx, rank)))
		return rc;
	for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
		uint64_t n = sizes[z], wire[2];
		float *y = tu_alloc(n * 4);
		double *exact = tu_alloc(n * 8), *mag = tu_alloc(n * 8), err[2];

		ct_exact_sum(exact, mag, n, size, 0);
		for (int k = RING; k <= DIRECT; k++) {
			if (one_call(c, e.ctx, k, rank, size, n, y, exact, &err[k], &wire[k]))
				return 13;
			if (k == DIRECT && ct_record(a->dir, "direct", rank, y, n * 4))
				return 14;
		}
		if (!strcmp(a->codec, "none")) {
			for (uint64_t i = 0; i < n; i++)
				if (fabs(y[i] - exact[i]) > 1e-5 * mag[i] + 1e-30)
					return 15;
		} else if (n > 1000) {
			/* Per value two compressions against size. */
			double most = size == 2 || !a->dense ? 1.02 * err[RING] : err[RING] / 1.05;

			if (rank == 0)
				printf("\n  %s, %d ranks, n %llu: rel err direct %.4g, ring %.4g; "
				       "wire bytes %llu, %llu",
				       a->codec, size, (unsigned long long)n, err[DIRECT],
				       err[RING], (unsigned long long)wire[DIRECT],
				       (unsigned long long)wire[RING]);
			if (!(err[DIRECT] <= most + 1e-9)) {
				fprintf(stderr, "rank %d %s n=%llu: direct %g, ring %g\n", rank,
					a->codec, (unsigned long long)n, err[DIRECT], err[RING]);
				return 16;
			}
		}
		/* The same payload bytes; the segments may cut differently. */
		if (wire[DIRECT] > wire[RING] + wire[RING] / 50 + 2048) {
			fprintf(stderr, "rank %d %s n=%llu: direct sent %llu bytes, ring %llu\n",
				rank, a->codec, (unsigned long long)n,
				(unsigned long long)wire[DIRECT], (unsigned long long)wire[RING]);
			return 17;
		}
		free(y), free(exact), free(mag);
	}
	close_rank(&e);
	return 0;
}

/* Run body on each count of ranks (a fresh folder each): every rank exits 0
 * and every replica recorded under tag is bit-identical. */
static void on_ranks(tp_body body, struct direct_arg a, const int *ranks, size_t n, const char *tag)
{
	for (size_t i = 0; i < n; i++) {
		int codes[TP_MAX_RANKS];

		strcpy(a.dir, "/tmp/gw-direct-XXXXXX");
		CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(a.dir));
		CU_ASSERT_EQUAL_FATAL(tp_run(ranks[i], 120, body, &a, codes), 0);
		for (int r = 0; r < ranks[i]; r++) {
			if (codes[r])
				printf("\n  %s, %d ranks: rank %d exited %d\n", a.codec, ranks[i],
				       r, codes[r]);
			CU_ASSERT_EQUAL(codes[r], 0);
		}
		ct_check_identical(a.dir, tag, ranks[i]);
		rmdir(a.dir);
	}
}

static void against_ring(const char *codec, bool dense)
{
	static const int ranks[] = { 2, 3, 5, 8 };

	on_ranks(body_against_ring, (struct direct_arg){ .codec = codec, .dense = dense }, ranks,
		 sizeof(ranks) / sizeof(ranks[0]), "direct");
}

static void test_none(void)
{
	against_ring("none", false);
}
static void test_fp16(void)
{
	against_ring("fp16", true);
}
static void test_bf16(void)
{
	against_ring("bf16", true);
}
static void test_int8(void)
{
	against_ring("int8", true);
}
static void test_sparse(void)
{
	against_ring("onebit", false);
	against_ring("randomk:ratio=0.1", false);
	against_ring("topk:ratio=0.1", false);
}

/* Every rank on one host, over shm: auto's choice is direct, and it does as
 * the ring does (above), in 4 KiB segments. */
static void test_shm(void)
{
	static const int ranks[] = { 3, 8 };

	on_ranks(body_against_ring,
		 (struct direct_arg){ .codec = "int8", .dense = true, .shm = true }, ranks,
		 sizeof(ranks) / sizeof(ranks[0]), "direct");
	on_ranks(body_against_ring,
		 (struct direct_arg){ .codec = "fp16", .dense = true, .shm = true }, ranks, 1,
		 "direct");
}

/* ---- the halves as collectives: reduce-scatter, float allgather ------------ */

/* Shard r of n values on size ranks (the allreduce's chunk rule). */
static void shard(uint64_t n, int size, int r, uint64_t *off, uint64_t *cnt)
{
	uint64_t q = n / (uint64_t)size, rem = n % (uint64_t)size;

	*off = (uint64_t)r * q + ((uint64_t)r < rem ? (uint64_t)r : rem);
	*cnt = q + ((uint64_t)r < rem);
}

/* Its error, at most the codec's bound; 0 for `none` within rounding. */
static int check_shard(const struct direct_arg *a, const float *y, const double *exact,
		       const double *mag, uint64_t off, uint64_t cnt, double scale)
{
	if (!strcmp(a->codec, "none")) {
		for (uint64_t i = off; i < off + cnt; i++)
			if (fabs(y[i] - exact[i] * scale) > 1e-5 * mag[i] * scale + 1e-30)
				return -1;
		return 0;
	}
	return ct_rel_l2(y + off, exact + off, cnt, scale) <= a->bound ? 0 : -1;
}

static int body_halves(int rank, int size, const char *dir, void *arg)
{
	const struct direct_arg *a = arg;
	const uint64_t sizes[] = { 1, 7, (uint64_t)size * 1000 + 3, 65537 };
	struct rank_env e;
	struct gw_coll *c;

	if (!(c = open_rank(a, rank, size, dir, &e)))
		return 10;
	for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
		uint64_t n = sizes[z], off, cnt, w0, rs_wire, ar_wire;
		float *y = tu_alloc(n * 4), *x = tu_alloc(n * 4);
		double *exact = tu_alloc(n * 8), *mag = tu_alloc(n * 8);

		ct_exact_sum(exact, mag, n, size, 0);
		shard(n, size, rank, &off, &cnt);
		/* Reduce-scatter, sum and average: this rank's shard only. */
		for (int op = GW_COLL_SUM; op <= GW_COLL_AVG; op++) {
			tu_fill(y, n, ct_seed(rank, n, 0));
			w0 = wire_sent(e.ctx, rank, size);
			if (gw_coll_reduce_scatter_id(c, 3, y, n, op, GW_CTX_LOSSY))
				return 12;
			rs_wire = wire_sent(e.ctx, rank, size) - w0;
			if (check_shard(a, y, exact, mag, off, cnt,
					op == GW_COLL_AVG ? 1.0 / size : 1.0)) {
				fprintf(stderr, "rank %d %s n=%llu op %d: reduce-scatter wrong\n",
					rank, a->codec, (unsigned long long)n, op);
				return 13;
			}
		}
		/* Half the allreduce's bytes, about (frame headers aside). */
		tu_fill(y, n, ct_seed(rank, n, 0));
		w0 = wire_sent(e.ctx, rank, size);
		if (gw_coll_allreduce_id(c, 4, y, n, GW_COLL_SUM, GW_CTX_LOSSY))
			return 14;
		ar_wire = wire_sent(e.ctx, rank, size) - w0;
		if (n > 1000 && rs_wire > 0.55 * (double)ar_wire) {
			fprintf(stderr,
				"rank %d %s n=%llu: reduce-scatter sent %llu, allreduce %llu\n",
				rank, a->codec, (unsigned long long)n, (unsigned long long)rs_wire,
				(unsigned long long)ar_wire);
			return 15;
		}
		/* Allgather: each rank gives its shard of its own data; every
		 * rank ends with the same bits, near every rank's data. */
		for (unsigned flags = 0; flags <= GW_CTX_LOSSY; flags += GW_CTX_LOSSY) {
			for (uint64_t i = 0; i < n; i++)
				y[i] = (float)rank; /* overwritten, but for this rank's shard */
			tu_fill(x, n, ct_seed(rank, n, 0));
			memcpy(y + off, x + off, cnt * 4);
			if (gw_coll_allgather_f32(c, 5, y, n, flags))
				return 16;
			for (int r = 0; r < size; r++) {
				uint64_t o, k;
				double e = 0, t = 0;

				shard(n, size, r, &o, &k);
				tu_fill(x, n, ct_seed(r, n, 0));
				for (uint64_t i = o; i < o + k; i++) {
					e += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
					t += (double)x[i] * x[i];
				}
				if (flags == 0 || !strcmp(a->codec, "none")
					    ? e != 0
					    : e > a->bound * a->bound * t) {
					fprintf(stderr,
						"rank %d %s n=%llu flags %u: shard %d wrong\n",
						rank, a->codec, (unsigned long long)n, flags, r);
					return 17;
				}
			}
			if (ct_record(a->dir, "gather", rank, y, n * 4))
				return 18;
		}
		free(y), free(x), free(exact), free(mag);
	}
	close_rank(&e);
	return 0;
}

static void halves(const char *codec, double bound)
{
	static const int ranks[] = { 2, 3, 5 };

	on_ranks(body_halves, (struct direct_arg){ .codec = codec, .bound = bound }, ranks,
		 sizeof(ranks) / sizeof(ranks[0]), "gather");
}

static void test_halves(void)
{
	halves("none", 0);
	halves("int8", 2e-2);
	halves("fp16", 1e-3);
	halves("topk:ratio=0.1", 1.0);
}

/* Ranks that call different collectives on the same tensor fail at once,
 * each saying which (the call check's key carries the kind). */
static int body_kinds(int rank, int size, const char *dir, void *arg)
{
	const struct direct_arg *a = arg;
	struct rank_env e;
	struct gw_coll *c;
	float y[1000];
	const char *msg;
	int rc;

	if (!(c = open_rank(a, rank, size, dir, &e)))
		return 10;
	tu_fill(y, 1000, ct_seed(rank, 1000, 0));
	rc = rank ? gw_coll_reduce_scatter_id(c, 3, y, 1000, GW_COLL_SUM, GW_CTX_LOSSY)
		  : gw_coll_allreduce_id(c, 3, y, 1000, GW_COLL_SUM, GW_CTX_LOSSY);
	msg = gw_coll_error(c);
	if (rc != -EINVAL || !msg || !strstr(msg, "rank 0 calls allreduce of tensor id 3") ||
	    !strstr(msg, "rank 1 reduce-scatter of tensor id 3")) {
		fprintf(stderr, "rank %d: rc %d, \"%s\"\n", rank, rc, msg ? msg : "");
		return 12;
	}
	close_rank(&e);
	return 0;
}

static void test_kinds(void)
{
	struct direct_arg a = { .codec = "int8" };
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(2, 60, body_kinds, &a, codes), 0);
	CU_ASSERT_EQUAL(codes[0], 0);
	CU_ASSERT_EQUAL(codes[1], 0);
}

/* ---- shards given as counts per rank ----------------------------------------- */

#define PATTERNS 4

/* counts[0..size) of n values by pattern p: 0 rank 0 holds none (weights
 * 0, 1, 2, ...); 1 the last rank none, the others uneven (5, 1, 5, ...); 2
 * uneven, none empty unless n is small (1, 4, 9, ...); 3 the chunk rule's
 * own. The rest of n goes to the rank of the largest weight. */
static void pattern(int p, uint64_t n, int size, uint64_t *counts)
{
	uint64_t w[TP_MAX_RANKS], sum = 0, at = 0;
	int big = 0;

	for (int r = 0; r < size; r++) {
		w[r] = p == 0	? (uint64_t)r
		       : p == 1 ? (r == size - 1 ? 0
				   : r % 2	 ? 1
						 : 5)
				: (uint64_t)(r + 1) * (uint64_t)(r + 1);
		sum += w[r];
		big = w[r] > w[big] ? r : big;
	}
	for (int r = 0; r < size; r++) {
		counts[r] = p == 3 ? n / (uint64_t)size + ((uint64_t)r < n % (uint64_t)size)
				   : n * w[r] / sum;
		at += counts[r];
	}
	counts[big] += n - at;
}

static uint64_t offset_of(const uint64_t *counts, int r)
{
	uint64_t off = 0;

	for (int i = 0; i < r; i++)
		off += counts[i];
	return off;
}

/* A lossy reduce-scatter of this rank's data for n given counts, by
 * algorithm k on tensor id: the shard's error (0 when empty) and the wire
 * bytes sent. Return: 0, or the exit code. */
static int rs_counts(struct gw_coll *c, struct gw_ctx *ctx, const struct direct_arg *a, int k,
		     uint32_t id, int rank, int size, uint64_t n, const uint64_t *counts, float *y,
		     const double *exact, const double *mag, double *err, uint64_t *wire)
{
	uint64_t off = offset_of(counts, rank), w0;

	gw_coll_set_algo(c, k == RING ? GW_COLL_ALGO_RING : GW_COLL_ALGO_DIRECT);
	tu_fill(y, n, ct_seed(rank, n, 0));
	w0 = wire_sent(ctx, rank, size);
	if (gw_coll_reduce_scatter_counts(c, id, y, n, counts, GW_COLL_SUM, GW_CTX_LOSSY)) {
		fprintf(stderr, "rank %d: %s\n", rank, gw_coll_error(c));
		return 21;
	}
	*wire = wire_sent(ctx, rank, size) - w0;
	if (check_shard(a, y, exact, mag, off, counts[rank], 1.0)) {
		fprintf(stderr, "rank %d %s n=%llu algo %d: shard [%llu, +%llu) wrong\n", rank,
			a->codec, (unsigned long long)n, k, (unsigned long long)off,
			(unsigned long long)counts[rank]);
		return 22;
	}
	*err = counts[rank] ? ct_rel_l2(y + off, exact + off, counts[rank], 1.0) : 0;
	return 0;
}

/* The float allgather given counts, exact then lossy: shard r is rank r's
 * data (within the codec's error when lossy), every replica recorded. */
static int ag_counts(struct gw_coll *c, const struct direct_arg *a, uint32_t id, int rank, int size,
		     uint64_t n, const uint64_t *counts, float *y, float *x)
{
	uint64_t off = offset_of(counts, rank);

	for (unsigned flags = 0; flags <= GW_CTX_LOSSY; flags += GW_CTX_LOSSY) {
		for (uint64_t i = 0; i < n; i++)
			y[i] = (float)rank; /* overwritten, but for this rank's shard */
		tu_fill(x, n, ct_seed(rank, n, 0));
		memcpy(y + off, x + off, counts[rank] * 4);
		if (gw_coll_allgather_f32_counts(c, id, y, n, counts, flags))
			return 31;
		for (int r = 0; r < size; r++) {
			uint64_t o = offset_of(counts, r);
			double e = 0, t = 0;

			tu_fill(x, n, ct_seed(r, n, 0));
			for (uint64_t i = o; i < o + counts[r]; i++) {
				e += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
				t += (double)x[i] * x[i];
			}
			if (flags == 0 || !strcmp(a->codec, "none") ? e != 0
								    : e > a->bound * a->bound * t) {
				fprintf(stderr, "rank %d %s n=%llu flags %u: shard %d wrong\n",
					rank, a->codec, (unsigned long long)n, flags, r);
				return 32;
			}
		}
		if (ct_record(a->dir, "gather", rank, y, n * 4))
			return 33;
	}
	return 0;
}

/* The chunk rule's own counts: the plain reduce-scatter's bits and wire
 * bytes (each from fresh residuals: tensors of their own). */
static int rule_counts(struct gw_coll *c, struct gw_ctx *ctx, uint32_t id, int rank, int size,
		       uint64_t n, const uint64_t *counts, float *y, float *x)
{
	uint64_t off = offset_of(counts, rank), w[2];

	/* The algorithm stays the last call's (direct): setting it again would
	 * add the first lossy call's agreement to the plain call's bytes. */
	for (int i = 0; i < 2; i++) {
		float *b = i ? x : y;
		uint64_t w0 = wire_sent(ctx, rank, size);

		tu_fill(b, n, ct_seed(rank, n, 0));
		if (i ? gw_coll_reduce_scatter_counts(c, id + 1, b, n, counts, GW_COLL_AVG,
						      GW_CTX_LOSSY)
		      : gw_coll_reduce_scatter_id(c, id, b, n, GW_COLL_AVG, GW_CTX_LOSSY))
			return 41;
		w[i] = wire_sent(ctx, rank, size) - w0;
	}
	if (memcmp(y + off, x + off, counts[rank] * 4) || w[0] != w[1]) {
		fprintf(stderr, "rank %d n=%llu: the rule's counts differ from the plain call\n",
			rank, (unsigned long long)n);
		return 42;
	}
	return 0;
}

static int body_counts(int rank, int size, const char *dir, void *arg)
{
	const struct direct_arg *a = arg;
	const uint64_t sizes[] = { 7, (uint64_t)size * 1000 + 3, 65537 };
	uint64_t counts[TP_MAX_RANKS];
	uint32_t id = 100;
	float small[100] = { 0 };
	struct rank_env e;
	struct gw_coll *c;

	if (!(c = open_rank(a, rank, size, dir, &e)))
		return 10;
	gw_coll_set_segment(c, 16384); /* several segments a chunk */
	/* Counts that do not sum to n: refused here, nothing sent. */
	pattern(2, 100, size, counts);
	counts[0]++;
	if (gw_coll_reduce_scatter_counts(c, 1, small, 100, counts, GW_COLL_SUM, 0) != -EINVAL ||
	    gw_coll_error(c))
		return 11;
	for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
		uint64_t n = sizes[z], wire[2];
		float *y = tu_alloc(n * 4), *x = tu_alloc(n * 4);
		double *exact = tu_alloc(n * 8), *mag = tu_alloc(n * 8), err[2];
		int rc;

		ct_exact_sum(exact, mag, n, size, 0);
		for (int p = 0; p < PATTERNS; p++, id += 4) {
			pattern(p, n, size, counts);
			for (int k = RING; k <= DIRECT; k++)
				if ((rc = rs_counts(c, e.ctx, a, k, id + (uint32_t)k, rank, size, n,
						    counts, y, exact, mag, &err[k], &wire[k])))
					return rc;
			if (rank == 0 && n > 1000 && counts[0] && strcmp(a->codec, "none"))
				printf("\n  %s, %d ranks, n %llu, pattern %d: shard 0 rel err "
				       "direct %.4g, ring %.4g; wire bytes %llu, %llu",
				       a->codec, size, (unsigned long long)n, p, err[DIRECT],
				       err[RING], (unsigned long long)wire[DIRECT],
				       (unsigned long long)wire[RING]);
			if (n > 1000 && counts[rank] > 1000 &&
			    !(err[DIRECT] <= 1.02 * err[RING] + 1e-9)) {
				fprintf(stderr, "rank %d %s n=%llu p %d: direct %g, ring %g\n",
					rank, a->codec, (unsigned long long)n, p, err[DIRECT],
					err[RING]);
				return 23;
			}
			if (wire[DIRECT] > wire[RING] + wire[RING] / 50 + 2048)
				return 24;
			if ((rc = ag_counts(c, a, id + 2, rank, size, n, counts, y, x)))
				return rc;
		}
		pattern(3, n, size, counts);
		if ((rc = rule_counts(c, e.ctx, id, rank, size, n, counts, y, x)))
			return rc;
		id += 2;
		free(y), free(x), free(exact), free(mag);
	}
	close_rank(&e);
	return 0;
}

static void counts(const char *codec, double bound)
{
	static const int ranks[] = { 2, 3, 5 };

	on_ranks(body_counts, (struct direct_arg){ .codec = codec, .bound = bound }, ranks,
		 sizeof(ranks) / sizeof(ranks[0]), "gather");
}

static void test_counts(void)
{
	counts("none", 0);
	counts("int8", 2e-2);
	counts("topk:ratio=0.1", 1.0);
}

/* Ranks that pass different counts all fail at once, saying so: mode 0 the
 * last rank's reduce-scatter counts swapped, mode 1 rank 0's allgather
 * given counts and the others' the chunk rule. */
static int body_counts_differ(int rank, int size, const char *dir, void *arg)
{
	const struct direct_arg *a = arg;
	uint64_t counts[TP_MAX_RANKS], t;
	struct rank_env e;
	struct gw_coll *c;
	float y[1000];
	const char *msg, *want;
	int rc;

	if (!(c = open_rank(a, rank, size, dir, &e)))
		return 10;
	tu_fill(y, 1000, ct_seed(rank, 1000, 0));
	pattern(2, 1000, size, counts);
	if (a->mode == 0) {
		if (rank == size - 1)
			t = counts[0], counts[0] = counts[1], counts[1] = t;
		rc = gw_coll_reduce_scatter_counts(c, 7, y, 1000, counts, GW_COLL_SUM,
						   GW_CTX_LOSSY);
		want = "the counts per rank differ: rank 0 passes counts per rank, hash";
	} else {
		rc = gw_coll_allgather_f32_counts(c, 7, y, 1000, rank ? NULL : counts, 0);
		want = "rank 1 the chunk rule's counts";
	}
	msg = gw_coll_error(c);
	if (rc != -EINVAL || !msg || !strstr(msg, want) || !strstr(msg, "tensor id 7")) {
		fprintf(stderr, "rank %d: rc %d, \"%s\"\n", rank, rc, msg ? msg : "");
		return 12;
	}
	close_rank(&e);
	return 0;
}

static void test_counts_differ(void)
{
	for (int mode = 0; mode < 2; mode++) {
		struct direct_arg a = { .codec = "int8", .mode = mode };
		int codes[TP_MAX_RANKS], size = 3 - mode;

		CU_ASSERT_EQUAL_FATAL(tp_run(size, 60, body_counts_differ, &a, codes), 0);
		for (int r = 0; r < size; r++)
			CU_ASSERT_EQUAL(codes[r], 0);
	}
}

/* ---- error feedback: the mean over 30 calls converges ------------------------ */

#define EF_N 20000
#define EF_STEPS 30

static int body_feedback(int rank, int size, const char *dir, void *arg)
{
	const struct direct_arg *a = arg;
	struct rank_env e;
	struct gw_coll *c;
	float *y = tu_alloc(EF_N * 4);
	double *exact = tu_alloc(EF_N * 8), *mag = tu_alloc(EF_N * 8);
	double *avg[2], e1[2], e30[2];

	if (!(c = open_rank(a, rank, size, dir, &e)))
		return 10;
	ct_exact_sum(exact, mag, EF_N, size, 0);
	for (int k = RING; k <= DIRECT; k++) {
		avg[k] = tu_alloc(EF_N * 8);
		memset(avg[k], 0, EF_N * 8);
	}
	for (int s = 1; s <= EF_STEPS; s++) {
		for (int k = RING; k <= DIRECT; k++) {
			tu_fill(y, EF_N, ct_seed(rank, EF_N, 0)); /* the same gradient */
			if (call(c, k, y, EF_N))
				return 12;
			for (int i = 0; i < EF_N; i++)
				avg[k][i] += (y[i] - avg[k][i]) / s;
			if (s == 1)
				e1[k] = ct_rel_l2(y, exact, EF_N, 1.0);
		}
	}
	for (int k = RING; k <= DIRECT; k++) {
		double e = 0, t = 0;

		for (int i = 0; i < EF_N; i++) {
			e += (avg[k][i] - exact[i]) * (avg[k][i] - exact[i]);
			t += exact[i] * exact[i];
		}
		e30[k] = sqrt(e / t);
	}
	if (rank == 0)
		printf("\n  %s, %d ranks: rel err after 1 call ring %.3f, direct %.3f; "
		       "of the mean of %d ring %.4f, direct %.4f",
		       a->codec, size, e1[RING], e1[DIRECT], EF_STEPS, e30[RING], e30[DIRECT]);
	/* It converges, and no worse than the ring. */
	if (!(e30[DIRECT] < e1[DIRECT] / 2) || !(e30[DIRECT] <= 1.05 * e30[RING]))
		return 13;
	for (int k = RING; k <= DIRECT; k++)
		free(avg[k]);
	free(y), free(exact), free(mag);
	close_rank(&e);
	return 0;
}

static void test_feedback(void)
{
	static const char *const codecs[] = { "topk:ratio=0.1", "onebit", "randomk:ratio=0.1" };

	for (size_t i = 0; i < sizeof(codecs) / sizeof(codecs[0]); i++) {
		struct direct_arg a = { .codec = codecs[i] };
		int codes[TP_MAX_RANKS];

		CU_ASSERT_EQUAL_FATAL(tp_run(4, 120, body_feedback, &a, codes), 0);
		for (int r = 0; r < 4; r++)
			CU_ASSERT_EQUAL(codes[r], 0);
	}
}

/*
 * gw_coll_residual_sum(): what a rank's residuals owe a tensor, as one
 * vector. Error feedback conserves the sum: after each lossy call, the
 * result plus every rank's residual sum equals every rank's values plus
 * their residual sums before it, up to float rounding (an exact allreduce
 * of the differences checks it); a vector that missed or misplaced any
 * residual would be off by about the codec's error. Then the last rank
 * leaves: the others open a context of size - 1, add their vector to their
 * values at its first call, and the same holds with it counted in - what a
 * survivor owed enters the new context's sum. Ring and direct, segments
 * of 4 KiB (several a chunk).
 */
#define RS_N 10007
#define RS_CALLS 3

/* One lossy call of x (ring or direct, tensor id 1 + k) whose result plus
 * the change in every rank's residual sum (*owed: this rank's, before,
 * updated) must equal the sum of x over the ranks. Return: 0 or a code. */
static int conserving_call(struct gw_coll *c, int k, float *x, float *owed, uint64_t n, double *off)
{
	float *y = tu_alloc(n * 4), *d = tu_alloc(n * 4), *after = tu_alloc(n * 4);
	double e = 0, t = 0;
	int rc = 0;

	memcpy(y, x, n * 4);
	if (call(c, k, y, n) || gw_coll_residual_sum(c, 1 + (uint32_t)k, after, n))
		rc = 31;
	for (uint64_t i = 0; !rc && i < n; i++)
		d[i] = after[i] - owed[i];
	/* Every rank's x and residual changes, summed exactly. */
	if (!rc && (gw_coll_allreduce_id(c, 8, x, n, GW_COLL_SUM, 0) ||
		    gw_coll_allreduce_id(c, 9, d, n, GW_COLL_SUM, 0)))
		rc = 32;
	for (uint64_t i = 0; !rc && i < n; i++) {
		double r = (double)y[i] + (double)d[i] - (double)x[i];

		e += r * r;
		t += (double)x[i] * x[i];
	}
	memcpy(owed, after, n * 4);
	*off = rc ? 1 : sqrt(e / t);
	free(y), free(d), free(after);
	return rc;
}

static int body_residual_sum(int rank, int size, const char *dir, void *arg)
{
	const struct direct_arg *a = arg;
	float *x = tu_alloc(RS_N * 4), *owed[2];
	double off, worst = 0, mass = 0;
	struct rank_env e;
	struct gw_coll *c;
	char sub[600];
	int rc = 0;

	if (!(c = open_rank(a, rank, size, dir, &e)))
		return 30;
	gw_coll_set_segment(c, 4096);
	for (int k = RING; k <= DIRECT && !rc; k++) {
		owed[k] = tu_alloc(RS_N * 4);
		memset(owed[k], 0, RS_N * 4);
		for (int s = 0; s < RS_CALLS && !rc; s++) {
			tu_fill(x, RS_N, ct_seed(rank, RS_N, s));
			rc = conserving_call(c, k, x, owed[k], RS_N, &off);
			worst = off > worst ? off : worst;
		}
		for (uint64_t i = 0; i < RS_N; i++)
			mass += fabs(owed[k][i]);
	}
	close_rank(&e);
	if (rc)
		return rc;
	if (!(worst < 1e-5) || !(mass > 0)) {
		fprintf(stderr,
			"rank %d: %s: result + residual sums off by %.3g (rel L2), "
			"residual mass %.3g\n",
			rank, a->codec, worst, mass);
		return 33;
	}
	if (rank == size - 1) /* it leaves */
		goto out;
	snprintf(sub, sizeof(sub), "%s/smaller", dir);
	if (mkdir(sub, 0700) && errno != EEXIST)
		return 34;
	if (!(c = open_rank(a, rank, size - 1, sub, &e)))
		return 35;
	gw_coll_set_segment(c, 4096);
	for (int k = RING; k <= DIRECT && !rc; k++) {
		float *zero = tu_alloc(RS_N * 4);

		memset(zero, 0, RS_N * 4);
		tu_fill(x, RS_N, ct_seed(rank, RS_N, 7));
		for (uint64_t i = 0; i < RS_N; i++)
			x[i] += owed[k][i]; /* what it owed, into its values */
		rc = conserving_call(c, k, x, zero, RS_N, &off);
		worst = off > worst ? off : worst;
		free(zero);
	}
	close_rank(&e);
	if (rc || !(worst < 1e-5)) {
		fprintf(stderr, "rank %d of %d after a rank left: %s, off by %.3g\n", rank,
			size - 1, rc ? "a call failed" : "not conserved", worst);
		return rc ? rc : 36;
	}
	if (rank == 0)
		printf("\n  %s, %d ranks then %d: result + residual sums within %.1e of the sum",
		       a->codec, size, size - 1, worst);
out:
	for (int k = RING; k <= DIRECT; k++)
		free(owed[k]);
	free(x);
	return 0;
}

/*
 * A tensor past the streams shares one with others (coll/coll.h), so its
 * residual cannot be told apart: gw_coll_residual_sum() says so (-ENOSPC)
 * rather than return zeros that would drop what it owes. A tensor with a
 * stream of its own still answers.
 */
static int body_residual_shared(int rank, int size, const char *dir, void *arg)
{
	const struct direct_arg *a = arg;
	float v[64], out[64];
	struct rank_env e;
	struct gw_coll *c;
	int rc = 0, own, shared;

	if (!(c = open_rank(a, rank, size, dir, &e)))
		return 40;
	for (uint32_t id = 0; id < GW_COLL_STREAMS && !rc; id++) {
		v[0] = 1;
		rc = gw_coll_allreduce_id(c, 100 + id, v, 1, GW_COLL_SUM, 0);
	}
	tu_fill(v, 64, ct_seed(rank, 64, 1));
	if (rc || gw_coll_allreduce_id(c, 7, v, 64, GW_COLL_SUM, GW_CTX_LOSSY))
		rc = 41;
	own = gw_coll_residual_sum(c, 100, out, 64);
	shared = gw_coll_residual_sum(c, 7, out, 64);
	close_rank(&e);
	if (!rc && (own != 0 || shared != -ENOSPC)) {
		fprintf(stderr,
			"rank %d: residual sum of a tensor with a stream %d, of one "
			"sharing a stream %d (want 0, -ENOSPC)\n",
			rank, own, shared);
		rc = 42;
	}
	return rc;
}

static void test_residual_sum(void)
{
	static const char *const codecs[] = { "int8", "topk:ratio=0.1" };

	for (size_t i = 0; i < sizeof(codecs) / sizeof(codecs[0]); i++)
		for (int size = 3; size <= 4; size++) {
			struct direct_arg a = { .codec = codecs[i] };
			int codes[TP_MAX_RANKS];

			CU_ASSERT_EQUAL_FATAL(tp_run(size, 120, body_residual_sum, &a, codes), 0);
			for (int r = 0; r < size; r++)
				CU_ASSERT_EQUAL(codes[r], 0);
		}
}

static void test_residual_shared(void)
{
	struct direct_arg a = { .codec = "int8" };
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(2, 120, body_residual_shared, &a, codes), 0);
	CU_ASSERT_EQUAL(codes[0], 0);
	CU_ASSERT_EQUAL(codes[1], 0);
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "direct against the ring: none exact, 2 to 8 ranks", test_none },
		{ "direct against the ring: fp16", test_fp16 },
		{ "direct against the ring: bf16", test_bf16 },
		{ "direct against the ring: int8", test_int8 },
		{ "direct against the ring: onebit, randomk, topk", test_sparse },
		{ "over shm on one host: auto takes direct; against the ring", test_shm },
		{ "error feedback over 30 calls, as the ring's", test_feedback },
		{ "reduce-scatter and float allgather, exact and lossy", test_halves },
		{ "ranks that call different collectives fail at once", test_kinds },
		{ "shards given as counts per rank: zeros, uneven, the rule's own", test_counts },
		{ "ranks that pass different counts fail at once", test_counts_differ },
		{ "residual sums: conserved, and carried to a smaller context", test_residual_sum },
		{ "residual sums: refused for a tensor that shares a stream",
		  test_residual_shared },
		CU_TEST_INFO_NULL,
	};

	return tu_run("direct", tests);
}
