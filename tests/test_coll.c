/* SPDX-License-Identifier: MIT */
/*
 * test_coll.c - the collectives (coll/coll.c) over loopback: allreduce with
 * every kind of codec on 1..5 ranks, allgather, broadcast and barrier exact,
 * error feedback across calls, and a rank killed mid-collective.
 *
 * Ranks are forked (tp_harness.h). Each rank checks its own result against
 * the exact sum computed in double from every rank's deterministic data, and
 * writes a hash of its result bits to a folder of the parent's, which then
 * checks that every replica is bit-identical.
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

#define MAX_SIZES 6

struct coll_arg {
	const char *codec;
	uint64_t sizes[MAX_SIZES];
	int nsizes;
	int timeout_ms;
	int kill_rank; /* dies before its kill_call-th allreduce, or -1 */
	int kill_call;
	int kill_ms;  /* how far into that call it dies */
	double bound; /* relative L2 error allowed (lossy codecs); 0: none */
	double wire;  /* least raw/wire ratio of a lossy allreduce, or 0 */
	uint64_t seg; /* allreduce segment bytes (0: the default) */
	char dir[64]; /* the parent's folder for hashes */
};

static struct gw_coll *open_coll(const struct coll_arg *a, int rank, int size, const char *dir,
				 struct gw_store **st, struct gw_ctx **ctx)
{
	struct gw_coll *c = NULL;
	int rc = ct_open(rank, size, dir, a->codec, NULL, (uint64_t)(rank + 1) * 1000,
			 a->timeout_ms, st, ctx);

	if (!rc)
		rc = gw_coll_create(*ctx, &c);
	if (rc)
		return NULL;
	if (a->seg)
		gw_coll_set_segment(c, a->seg);
	return c;
}

static void close_coll(struct gw_coll *c, struct gw_ctx *ctx, struct gw_store *st)
{
	gw_coll_destroy(c);
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
}

/* ---- allreduce: SUM and AVG, every codec ------------------------------------ */

static int body_allreduce(int rank, int size, const char *dir, void *arg)
{
	const struct coll_arg *a = arg;
	struct gw_store *st;
	struct gw_ctx *ctx;
	struct gw_coll *c = open_coll(a, rank, size, dir, &st, &ctx);

	if (!c)
		return 10;
	for (int z = 0; z < a->nsizes; z++) {
		uint64_t n = a->sizes[z];
		float *y = tu_alloc(n * 4 + 4);
		double *exact = tu_alloc(n * 8 + 8), *mag = tu_alloc(n * 8 + 8);

		ct_exact_sum(exact, mag, n, size, 0);
		for (int op = GW_COLL_SUM; op <= GW_COLL_AVG; op++) {
			double scale = op == GW_COLL_AVG ? 1.0 / size : 1.0, err;
			int rc;

			tu_fill(y, n, ct_seed(rank, n, 0));
			rc = gw_coll_allreduce(c, y, n, op, GW_CTX_LOSSY);
			if (rc) {
				fprintf(stderr, "rank %d n=%llu: %s\n", rank, (unsigned long long)n,
					gw_strerror(rc));
				return 11;
			}
			for (uint64_t i = 0; i < n; i++)
				if (!isfinite(y[i]))
					return 12;
			if (a->bound == 0) { /* exact codec: float rounding only */
				for (uint64_t i = 0; i < n; i++) {
					if (fabs(y[i] - exact[i] * scale) >
					    1e-5 * mag[i] * scale + 1e-30) {
						fprintf(stderr,
							"rank %d n=%llu op %d: y[%llu]"
							" = %g, want %g\n",
							rank, (unsigned long long)n, op,
							(unsigned long long)i, y[i],
							exact[i] * scale);
						return 13;
					}
				}
			} else if ((err = ct_rel_l2(y, exact, n, scale)) > a->bound) {
				fprintf(stderr, "rank %d codec %s n=%llu op %d: rel err %g > %g\n",
					rank, a->codec, (unsigned long long)n, op, err, a->bound);
				return 14;
			}
			if (ct_record(a->dir, "ar", rank, y, n * 4))
				return 15;
		}
		/* Without GW_CTX_LOSSY every codec is exact. */
		tu_fill(y, n, ct_seed(rank, n, 0));
		if (gw_coll_allreduce(c, y, n, GW_COLL_SUM, 0))
			return 16;
		for (uint64_t i = 0; i < n; i++)
			if (!(fabs(y[i] - exact[i]) <= 1e-5 * mag[i] + 1e-30))
				return 17;
		if (ct_record(a->dir, "ar", rank, y, n * 4))
			return 18;
		free(y), free(exact), free(mag);
	}
	/* Every hop of a lossy allreduce is compressed, the allgather's too
	 * (payloads forwarded): the wire ratio is the codec's, not half of it. */
	if (a->wire && size > 2) {
		struct gw_conn_stats s0, s1;
		uint64_t n = 65537;
		float *y = tu_alloc(n * 4);
		double ratio;

		tu_fill(y, n, ct_seed(rank, n, 1));
		gw_ctx_stats(ctx, (rank + 1) % size, &s0);
		if (gw_coll_allreduce(c, y, n, GW_COLL_SUM, GW_CTX_LOSSY))
			return 19;
		gw_ctx_stats(ctx, (rank + 1) % size, &s1);
		ratio = (double)(s1.raw_sent - s0.raw_sent) / (double)(s1.wire_sent - s0.wire_sent);
		free(y);
		if (ratio < a->wire) {
			fprintf(stderr, "rank %d codec %s: wire ratio %.2f < %.2f\n", rank,
				a->codec, ratio, a->wire);
			return 20;
		}
	}
	close_coll(c, ctx, st);
	return 0;
}

static void run(int size, int limit_s, tp_body body, struct coll_arg *a)
{
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(size, limit_s, body, a, codes), 0);
	for (int r = 0; r < size; r++) {
		if (r == a->kill_rank)
			continue;
		if (codes[r])
			printf("\n  %s, %d ranks: rank %d exited %d\n", a->codec ? a->codec : "-",
			       size, r, codes[r]);
		CU_ASSERT_EQUAL(codes[r], 0);
	}
}

static void allreduce_codec(const char *codec, double bound, double wire)
{
	/* Whole chunks (1, 2 ranks) and segments that do not divide the
	 * chunks (2 to 5 ranks). 4001 values on 2 ranks make chunks longer
	 * than half a segment and at most one, which an exact ring of two
	 * sends in two halves (coll/ring.c). */
	static const struct {
		int size;
		uint64_t seg;
	} shapes[] = { { 1, 0 }, { 2, 0 }, { 2, 8188 }, { 3, 8188 }, { 4, 8188 }, { 5, 8188 } };

	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		int size = shapes[i].size;
		struct coll_arg a = { .codec = codec,
				      .bound = bound,
				      .wire = wire,
				      .kill_rank = -1,
				      .seg = shapes[i].seg,
				      .sizes = { 0, 1, 7, 1000, 4001, 65537 },
				      .nsizes = 6 };

		strcpy(a.dir, "/tmp/gw-coll-XXXXXX");
		CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(a.dir));
		run(size, 60, body_allreduce, &a);
		ct_check_identical(a.dir, "ar", size);
		rmdir(a.dir);
	}
}

static void test_allreduce_none(void)
{
	allreduce_codec("none", 0, 0);
}
static void test_allreduce_fp16(void)
{
	allreduce_codec("fp16", 1e-2, 1.9);
}
static void test_allreduce_int8(void)
{
	allreduce_codec("int8", 5e-2, 3.5);
}
/* Top-k keeps a tenth per hop: the result is finite and identical; how close
 * it gets over steps is the error-feedback test's business. */
static void test_allreduce_topk(void)
{
	allreduce_codec("topk:ratio=0.1", 1e9, 0);
}

/* ---- allgather, broadcast, barrier: exact ------------------------------------ */

static int body_exact(int rank, int size, const char *dir, void *arg)
{
	const struct coll_arg *a = arg;
	static const size_t lens[] = { 1, 13, 4099, 100003 };
	struct gw_store *st;
	struct gw_ctx *ctx;
	struct gw_coll *c = open_coll(a, rank, size, dir, &st, &ctx);
	char path[128];
	int rc;

	if (!c)
		return 10;
	for (size_t z = 0; z < sizeof(lens) / sizeof(lens[0]); z++) {
		size_t len = lens[z];
		uint8_t *mine = tu_alloc(len), *all = tu_alloc(len * (size_t)size);

		tp_pattern(mine, len, ct_seed(rank, len, 1));
		rc = gw_coll_allgather(c, mine, all, len);
		if (rc)
			return 20;
		for (int r = 0; r < size; r++)
			if (tp_mismatch(all + (size_t)r * len, len, ct_seed(r, len, 1)))
				return 21;
		/* In place: our block is already where it belongs. */
		memset(all, 0, len * (size_t)size);
		memcpy(all + (size_t)rank * len, mine, len);
		rc = gw_coll_allgather(c, all + (size_t)rank * len, all, len);
		if (rc)
			return 22;
		for (int r = 0; r < size; r++)
			if (tp_mismatch(all + (size_t)r * len, len, ct_seed(r, len, 1)))
				return 23;
		for (int root = 0; root < size; root++) {
			if (rank == root)
				tp_pattern(mine, len, ct_seed(root, len, 2));
			else
				memset(mine, 0, len);
			rc = gw_coll_broadcast(c, root, mine, len);
			if (rc)
				return 24;
			if (tp_mismatch(mine, len, ct_seed(root, len, 2)))
				return 25;
		}
		free(mine), free(all);
	}
	/* A broadcast longer than its window of pieces (exact.c): 9 pieces of
	 * 4 MiB and a short one, the slots reused, from the first and the last rank. */
	{
		size_t len = 9 * ((size_t)4 << 20) + 12345;
		uint8_t *mine = tu_alloc(len);

		for (int root = 0; root<size; root += size> 1 ? size - 1 : 1) {
			if (rank == root)
				tp_pattern(mine, len, ct_seed(root, len, 3));
			else
				memset(mine, 0, len);
			if (gw_coll_broadcast(c, root, mine, len))
				return 26;
			if (tp_mismatch(mine, len, ct_seed(root, len, 3)))
				return 27;
		}
		free(mine);
	}
	/* Barrier: whoever leaves it finds that everyone arrived. */
	for (int round = 0; round < 3; round++) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/arrived-%d-%d", a->dir, round, rank);
		f = fopen(path, "w");
		if (!f)
			return 30;
		fclose(f);
		if (rank == size - 1)
			usleep(200000); /* the last one is late */
		rc = gw_coll_barrier(c);
		if (rc)
			return 31;
		for (int r = 0; r < size; r++) {
			snprintf(path, sizeof(path), "%s/arrived-%d-%d", a->dir, round, r);
			if (access(path, F_OK))
				return 32;
		}
	}
	close_coll(c, ctx, st);
	return 0;
}

static void test_exact(void)
{
	for (int size = 1; size <= 5; size++) {
		struct coll_arg a = { .codec = "int8", .kill_rank = -1 };
		char path[128];

		strcpy(a.dir, "/tmp/gw-coll-XXXXXX");
		CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(a.dir));
		run(size, 60, body_exact, &a);
		for (int round = 0; round < 3; round++) {
			for (int r = 0; r < size; r++) {
				snprintf(path, sizeof(path), "%s/arrived-%d-%d", a.dir, round, r);
				unlink(path);
			}
		}
		CU_ASSERT_EQUAL(rmdir(a.dir), 0);
	}
}

/* ---- error feedback: the running average converges ---------------------------- */

#define EF_N 10000
#define EF_STEPS 30

/* Tensors a (told apart by length) and b (by id, same length) interleaved:
 * each one's running average must converge to its own exact sum, which fails
 * if their residuals mix. */
static int body_feedback(int rank, int size, const char *dir, void *arg)
{
	const struct coll_arg *a = arg;
	struct gw_store *st;
	struct gw_ctx *ctx;
	struct gw_coll *c = open_coll(a, rank, size, dir, &st, &ctx);
	float *y = tu_alloc(EF_N * 4);
	double *exact[2], *mag = tu_alloc(EF_N * 8), *avg[2];
	double e1[2] = { 0, 0 }, e30[2] = { 0, 0 };

	if (!c)
		return 10;
	for (int k = 0; k < 2; k++) {
		exact[k] = tu_alloc(EF_N * 8);
		avg[k] = tu_alloc(EF_N * 8);
		ct_exact_sum(exact[k], mag, EF_N, size, k * 5);
	}
	for (int s = 1; s <= EF_STEPS; s++) {
		for (int k = 0; k < 2; k++) {
			double e = 0, t = 0;

			tu_fill(y, EF_N, ct_seed(rank, EF_N, k * 5)); /* the same gradient */
			if (k == 0 ? gw_coll_allreduce(c, y, EF_N, GW_COLL_SUM, GW_CTX_LOSSY)
				   : gw_coll_allreduce_id(c, 7, y, EF_N, GW_COLL_SUM, GW_CTX_LOSSY))
				return 11;
			for (int i = 0; i < EF_N; i++) {
				avg[k][i] += (y[i] - avg[k][i]) / s;
				e += (avg[k][i] - exact[k][i]) * (avg[k][i] - exact[k][i]);
				t += exact[k][i] * exact[k][i];
			}
			if (s == 1)
				e1[k] = sqrt(e / t);
			e30[k] = sqrt(e / t);
		}
	}
	if (rank == 0)
		printf("\n  topk:ratio=0.1, %d ranks: rel err %.3f, %.3f after 1 step, "
		       "%.4f, %.4f averaged over %d ",
		       size, e1[0], e1[1], e30[0], e30[1], EF_STEPS);
	for (int k = 0; k < 2; k++)
		if (!(e1[k] > 0.05) || !(e30[k] < e1[k] / 3))
			return 12;
	free(y), free(mag);
	for (int k = 0; k < 2; k++)
		free(exact[k]), free(avg[k]);
	close_coll(c, ctx, st);
	return 0;
}

static void test_feedback(void)
{
	struct coll_arg a = { .codec = "topk:ratio=0.1", .kill_rank = -1 };

	run(3, 60, body_feedback, &a);
}

/* ---- PowerSGD: the linear form ------------------------------------------------ */

static int body_lowrank(int rank, int size, const char *dir, void *arg)
{
	const struct coll_arg *a = arg;
	enum { ROWS = 200, COLS = 200, N = ROWS * COLS, STEPS = 12 };
	struct gw_store *st;
	struct gw_ctx *ctx;
	struct gw_coll *c = open_coll(a, rank, size, dir, &st, &ctx);
	float *y = tu_alloc(N * 4), *x = tu_alloc(N * 4), *keep = tu_alloc(N * 4);
	double *sum = tu_alloc(N * 8), *mag = tu_alloc(N * 8);
	double *run_out = tu_alloc(N * 8), *run_in = tu_alloc(N * 8);
	struct gw_conn_stats s0, s1;
	char path[160];
	double err;

	if (!c)
		return 10;
	/* 1. Exact rank 4: x_r = A_r B^T, so the sum is (sum A_r) B^T. */
	memset(sum, 0, N * 8);
	for (int r = 0; r < size; r++) {
		tu_low_rank(x, ROWS, COLS, 4, 100 + (uint64_t)r, 99);
		for (uint64_t i = 0; i < N; i++)
			sum[i] += x[i];
	}
	tu_low_rank(y, ROWS, COLS, 4, 100 + (uint64_t)rank, 99);
	if (gw_coll_allreduce_id(c, 1, y, N, GW_COLL_SUM, GW_CTX_LOSSY))
		return 11;
	err = ct_rel_l2(y, sum, N, 1.0);
	if (rank == 0)
		printf("\n  exact rank 4 at rank 4, %d ranks: relative error %.2e", size, err);
	if (err > 1e-5 || ct_record(a->dir, "lr", rank, y, N * 4))
		return 12;

	/* 2. Full-rank gradients, several steps: replicas identical, the wire
	 * carries the factors only. A random matrix has no good rank-4
	 * approximation, so each step's error is near 1; error feedback makes
	 * the running sum of results follow the running sum of inputs. */
	gw_ctx_stats(ctx, (rank + 1) % size, &s0);
	memset(run_out, 0, N * 8);
	memset(run_in, 0, N * 8);
	for (int step = 0; step < STEPS; step++) {
		ct_exact_sum(sum, mag, N, size, step);
		tu_fill(y, N, ct_seed(rank, N, step));
		if (gw_coll_allreduce_id(c, 2, y, N, GW_COLL_AVG, GW_CTX_LOSSY))
			return 13;
		err = ct_rel_l2(y, sum, N, 1.0 / size);
		for (uint64_t i = 0; i < N; i++) {
			if (!isfinite(y[i]))
				return 14;
			run_out[i] += y[i];
			run_in[i] += sum[i] / size;
		}
		if (rank == 0)
			printf("%s%.3f",
			       step ? " " : "\n  random data, AVG, relative error by step: ", err);
		if (err > 1.5 || ct_record(a->dir, "lr", rank, y, N * 4))
			return 15;
	}
	{
		double e = 0, t = 0;

		for (uint64_t i = 0; i < N; i++) {
			e += (run_out[i] - run_in[i]) * (run_out[i] - run_in[i]);
			t += run_in[i] * run_in[i];
		}
		if (rank == 0)
			printf("; running sum after %d steps: %.3f", STEPS, sqrt(e / t));
		if (sqrt(e / t) > 0.95)
			return 27;
	}
	gw_ctx_stats(ctx, (rank + 1) % size, &s1);
	{
		/* 2 (size - 1) / size of (rows + cols) * 4 + 1 floats per step
		 * enter the next rank's link, plus frame headers. */
		double per_step = (double)(s1.wire_sent - s0.wire_sent) / STEPS;

		if (rank == 0)
			printf("\n  wire bytes per step to the next rank: %.0f "
			       "(tensor %d bytes: ratio %.1f)",
			       per_step, N * 4, N * 4.0 / per_step);
		if (per_step > 2.0 * (ROWS + COLS) * 4 * 4 + 2048)
			return 16;
	}

	/* 3. Checkpoint: save residuals (own entries: residual and Q), run a
	 * step, restore, run it again: the same bits. */
	snprintf(path, sizeof(path), "%s/rs-%d", a->dir, rank);
	if (gw_ctx_residuals_save(ctx, path))
		return 17;
	tu_fill(y, N, ct_seed(rank, N, 100));
	if (gw_coll_allreduce_id(c, 2, y, N, GW_COLL_SUM, GW_CTX_LOSSY))
		return 18;
	memcpy(keep, y, N * 4);
	if (gw_ctx_residuals_load(ctx, path))
		return 19;
	unlink(path);
	tu_fill(y, N, ct_seed(rank, N, 100));
	if (gw_coll_allreduce_id(c, 2, y, N, GW_COLL_SUM, GW_CTX_LOSSY))
		return 20;
	if (memcmp(keep, y, N * 4))
		return 21;

	/* 4. Too small to save the factor (7 values): exact. */
	tu_fill(y, 7, ct_seed(rank, 7, 0));
	ct_exact_sum(sum, mag, 7, size, 0);
	if (gw_coll_allreduce(c, y, 7, GW_COLL_SUM, GW_CTX_LOSSY))
		return 22;
	for (int i = 0; i < 7; i++)
		if (fabs(y[i] - sum[i]) > 1e-5 * mag[i])
			return 23;
	if (ct_record(a->dir, "lr", rank, y, 7 * 4))
		return 24;

	/* 5. A NaN on one rank: that step is exact on every rank (NaN shows). */
	tu_fill(y, N, ct_seed(rank, N, 7));
	if (rank == size - 1)
		y[5] = NAN;
	if (gw_coll_allreduce_id(c, 2, y, N, GW_COLL_SUM, GW_CTX_LOSSY))
		return 25;
	if (!isnan(y[5]) || !isfinite(y[6]))
		return 26;
	free(x), free(y), free(keep), free(sum), free(mag), free(run_out), free(run_in);
	close_coll(c, ctx, st);
	return 0;
}

static void test_lowrank(void)
{
	for (int size = 2; size <= 4; size += 2) {
		struct coll_arg a = { .codec = "powersgd:rank=4", .kill_rank = -1 };

		strcpy(a.dir, "/tmp/gw-coll-XXXXXX");
		CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(a.dir));
		run(size, 120, body_lowrank, &a);
		ct_check_identical(a.dir, "lr", size);
		rmdir(a.dir);
	}
}

/* ---- a rank killed mid-collective -------------------------------------------- */

/*
 * Rank kill_rank dies kill_ms into its kill_call-th allreduce of 16 MiB,
 * with segments in flight. The rank that sends to it enters that call
 * 2 * kill_ms late, so the victim cannot finish before it dies however
 * fast the link is (over net a 16 MiB int8 call can end before kill_ms,
 * and the victim then died in the next call). The others must fail in that
 * very call, within the timeout; the ranks next to it name it in their error (stderr goes to
 * "<dir>/err-<rank>" for the parent to read); later calls fail fast.
 */
static int body_kill(int rank, int size, const char *dir, void *arg)
{
	const struct coll_arg *a = arg;
	struct gw_store *st;
	struct gw_ctx *ctx;
	struct gw_coll *c;
	uint64_t n = UINT64_C(1) << 22;
	float *y = tu_alloc(n * 4);
	struct timespec t0, t1;
	char path[128];
	pthread_t th;
	int rc = 0, call, prev_of_victim = (a->kill_rank + size - 1) % size;
	struct timespec late = { 0, 2L * a->kill_ms * 1000000L };

	snprintf(path, sizeof(path), "%s/err-%d", a->dir, rank);
	if (!freopen(path, "w", stderr))
		return 9;
	setvbuf(stderr, NULL, _IONBF, 0);
	c = open_coll(a, rank, size, dir, &st, &ctx);
	if (!c)
		return 10;
	for (call = 0; call < 4; call++) {
		tu_fill(y, n, ct_seed(rank, n, call));
		if (call == a->kill_call)
			clock_gettime(CLOCK_MONOTONIC, &t0);
		if (rank == a->kill_rank && call == a->kill_call &&
		    pthread_create(&th, NULL, ct_killer, (void *)&a->kill_ms))
			return 11;
		if (rank == prev_of_victim && call == a->kill_call)
			nanosleep(&late, NULL);
		rc = gw_coll_allreduce(c, y, n, GW_COLL_SUM, GW_CTX_LOSSY);
		if (rc)
			break;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rank == a->kill_rank)
		return 12; /* the call outlived the killer */
	if (!rc || call != a->kill_call)
		return 20; /* the death went unnoticed, or was noticed early */
	/* Later calls fail fast with the same error. */
	if (gw_coll_allreduce(c, y, n, GW_COLL_SUM, 0) != rc || gw_coll_barrier(c) != rc)
		return 21;
	/* Under a timeout of a minute, only the dead peer's closed connection
	 * (transport/live.c) ends the call this soon (docs/reliability.md). */
	if ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 > 2000) {
		fprintf(stderr, "rank %d: failed after more than 2 s\n", rank);
		return 22;
	}
	free(y);
	close_coll(c, ctx, st);
	return 0;
}

static void test_killed(void)
{
	struct coll_arg a = { .codec = "int8",
			      .kill_rank = 1,
			      .kill_call = 2,
			      .kill_ms = 5,
			      .timeout_ms = 60000,
			      .seg = 256 << 10 };
	char path[128], text[4096];
	int named = 0;

	strcpy(a.dir, "/tmp/gw-kill-XXXXXX");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(a.dir));
	run(4, 60, body_kill, &a);
	for (int r = 0; r < 4; r++) {
		snprintf(path, sizeof(path), "%s/err-%d", a.dir, r);
		ct_take_file(path, text, sizeof(text));
		/* Rank 2 exchanges with the dead rank 1 (receives from it in a
		 * ring, sends to it too in a direct exchange): it names it. */
		if (r == 2)
			CU_ASSERT_PTR_NOT_NULL(strstr(text, "rank 1"));
		named += r != 1 && strstr(text, "rank 1") != NULL;
	}
	CU_ASSERT(named >= 1);
	rmdir(a.dir);
}

/* ---- ranks that disagree on an allreduce ------------------------------------ */

struct disagree {
	const char *what;
	int odd;	     /* the rank that calls differently */
	uint32_t id, odd_id; /* tensor ids of the first mismatched call */
	uint64_t n, odd_n;
	int op, odd_op;
	unsigned flags, odd_flags;
	const char *want; /* in gw_coll_error() on every rank */
};

static const struct disagree *disagree_case;

/*
 * One good lossy allreduce (call #0), then one where rank `odd` passes
 * another tensor, length, op or flag: every rank - neighbours of the odd one
 * or not - must fail that call within a second (the timeout is 8 s) with
 * the same message, and every later call with the same error.
 */
static int body_disagree(int rank, int size, const char *dir, void *arg)
{
	const struct coll_arg *a = arg;
	const struct disagree *d = disagree_case;
	bool odd = rank == d->odd;
	uint64_t n = odd ? d->odd_n : d->n;
	float *y = tu_alloc(4 * (d->n > d->odd_n ? d->n : d->odd_n) + 4);
	struct gw_store *st;
	struct gw_ctx *ctx;
	struct gw_coll *c = open_coll(a, rank, size, dir, &st, &ctx);
	int64_t t0;
	int rc;

	if (!c)
		return 10;
	tu_fill(y, d->n, ct_seed(rank, d->n, 0));
	if (gw_coll_allreduce_id(c, d->id, y, d->n, GW_COLL_SUM, GW_CTX_LOSSY))
		return 11;
	t0 = gw_now_ms();
	rc = gw_coll_allreduce_id(c, odd ? d->odd_id : d->id, y, n, odd ? d->odd_op : d->op,
				  odd ? d->odd_flags : d->flags);
	if (rc != -EINVAL) {
		fprintf(stderr, "rank %d, %s: %s\n", rank, d->what, gw_strerror(rc));
		return 12;
	}
	if (gw_now_ms() - t0 > 1000)
		return 13;
	if (!gw_coll_error(c) || !strstr(gw_coll_error(c), d->want)) {
		fprintf(stderr, "rank %d, %s: '%s', want '%s'\n", rank, d->what,
			gw_coll_error(c) ? gw_coll_error(c) : "(none)", d->want);
		return 14;
	}
	if (gw_coll_barrier(c) != -EINVAL)
		return 15;
	free(y);
	close_coll(c, ctx, st);
	return 0;
}

static void test_disagree(void)
{
	static const struct disagree cases[] = {
		{ "length", 2, 7, 7, 1000, 2000, 0, 0, GW_CTX_LOSSY, GW_CTX_LOSSY,
		  "allreduce #1 of tensor id 7: rank 0 passes 1000 values, rank 2 passes 2000" },
		{ "order of ids", 1, 7, 8, 1000, 1000, 0, 0, GW_CTX_LOSSY, GW_CTX_LOSSY,
		  "allreduce #1: rank 0 reduces tensor id 7 (1000 values), rank 1 "
		  "tensor id 8 (1000 values): the ranks call allreduce on different "
		  "tensors or in different orders" },
		{ "op", 1, 7, 7, 1000, 1000, GW_COLL_SUM, GW_COLL_AVG, GW_CTX_LOSSY, GW_CTX_LOSSY,
		  "allreduce #1 of tensor id 7: rank 0 asks for sum, rank 1 for avg" },
		{ "lossy flag", 2, 7, 7, 1000, 1000, 0, 0, GW_CTX_LOSSY, 0,
		  "allreduce #1 of tensor id 7: rank 0 allows lossy compression "
		  "(GRADWIRE_LOSSY), rank 2 does not" },
		{ "odd rank 0", 0, 7, 7, 1000, 999, 0, 0, GW_CTX_LOSSY, GW_CTX_LOSSY,
		  "allreduce #1 of tensor id 7: rank 0 passes 999 values, rank 1 passes 1000" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		/* 4 ranks: rank 0 is no neighbour of rank 2 in the ring. */
		struct coll_arg a = { .codec = "int8", .kill_rank = -1 };

		disagree_case = &cases[i];
		run(4, 30, body_disagree, &a);
		/* 2 ranks (the odd one must be one of them). */
		if (cases[i].odd < 2)
			run(2, 30, body_disagree, &a);
	}
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "allreduce none, 1..5 ranks, 0..65537 values", test_allreduce_none },
		{ "allreduce fp16", test_allreduce_fp16 },
		{ "allreduce int8", test_allreduce_int8 },
		{ "allreduce topk", test_allreduce_topk },
		{ "allgather, broadcast, barrier exact", test_exact },
		{ "error feedback across calls", test_feedback },
		{ "allreduce powersgd: linear form, 2 and 4 ranks", test_lowrank },
		{ "rank killed mid-collective", test_killed },
		{ "ranks that disagree on an allreduce fail at once", test_disagree },
		CU_TEST_INFO_NULL,
	};
	tp_pin_loopback();
	return tu_run("plugin", tests);
}
