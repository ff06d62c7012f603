/* SPDX-License-Identifier: MIT */
/*
 * test_revoke.c - a failure on one rank reaches every rank (#38, point 1).
 *
 * Three forked ranks over loopback, with a MAC and a 30 s timeout, so that
 * nothing below can pass by waiting for the timeout:
 *  - the caller revokes (as the Python hooks do when they raise): rank 1
 *    revokes while ranks 0 and 2 wait in an allreduce it never joins; they
 *    fail within 1 s of the revoke, their error names rank 1 and its reason,
 *    their later calls fail at once, and rank 1's own calls fail with
 *    -ECONNABORTED saying that it revoked;
 *  - a MAC failure: rank 2 sends rank 1 a forged frame where its allreduce
 *    expects rank 2's message; rank 1 fails with -EKEYREJECTED, revokes by
 *    itself, and ranks 0 and 2 fail within 1 s of that, naming rank 1 and
 *    the rejected frame.
 *  - the fd budget: a rank whose soft limit of open files is below what its
 *    context may need gets it raised to the hard limit, with a log line.
 * A dead peer and a bad count are covered elsewhere (test_coll: every rank
 * fails within 1 s in both).
 * Times cross processes as CLOCK_MONOTONIC milliseconds in files of the
 * run's folder (one host, one clock).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "tutil.h"
#include "tp_harness.h"
#include "coll_impl.h"

#define SIZE 3
#define TIMEOUT_MS 30000
#define REACH_MS 1000 /* the promise: every rank fails within this */
#define N 4096

struct rank_env {
	struct gw_store *st;
	struct gw_ctx *ctx;
	struct gw_coll *c;
};

static int open_rank(int rank, const char *dir, struct rank_env *e)
{
	struct tp_env env = { .provider = tp_net_provider(),
			      .iface = "lo",
			      .log_level = GW_LOG_ERROR,
			      .timeout_ms = TIMEOUT_MS };
	struct gw_ctx_cfg cfg = { .tp = tp_cfg(&env) };
	char key[128], err[512] = "store";
	int fd, rc;

	/* Every rank writes the same key: no order needed between them. */
	snprintf(key, sizeof(key), "%s/key-%d", dir, rank);
	fd = open(key, O_WRONLY | O_CREAT | O_TRUNC, 0600); /* only its owner may read it */
	if (fd < 0 || write(fd, "the key of the revoke test\n", 27) != 27 || close(fd))
		return -EIO;
	cfg.codec = "int8";
	cfg.min_compress_bytes = 64;
	cfg.mac_mode = GW_MAC_REQUIRED;
	cfg.mac_key_file = key;
	*e = (struct rank_env){ 0 };
	rc = gw_store_file_create(dir, &e->st);
	if (!rc)
		rc = gw_ctx_create(&cfg, rank, SIZE, e->st, &e->ctx, err, sizeof(err));
	if (!rc && tp_check_loopback(gw_ctx_tp(e->ctx), &env))
		rc = -EADDRNOTAVAIL;
	if (!rc)
		rc = gw_coll_create(e->ctx, &e->c);
	if (rc)
		fprintf(stderr, "rank %d: open: %s (%s)\n", rank, err, gw_strerror(rc));
	return rc;
}

static void close_rank(struct rank_env *e)
{
	gw_coll_destroy(e->c);
	gw_ctx_destroy(e->ctx);
	gw_store_destroy(e->st);
}

/* Write, then read back, a time in "<dir>/<name>". */
static void put_ms(const char *dir, const char *name, int64_t ms)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (f) {
		fprintf(f, "%lld\n", (long long)ms);
		fclose(f);
	}
}

static int64_t get_ms(const char *dir, const char *name)
{
	char path[256];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%lld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/*
 * A rank that waits in an allreduce that cannot finish: it must fail
 * within REACH_MS of the time the failing rank wrote in "<dir>/failed",
 * with an error that names rank 1 and holds want; a later call fails at
 * once. Return: 0, or the exit code that says what went wrong.
 */
static int wait_to_fail(struct rank_env *e, int rank, const char *dir, float *x, const char *want)
{
	int64_t t0 = gw_now_ms(), t1, failed;
	const char *msg;
	int rc = gw_coll_allreduce(e->c, x, N, GW_COLL_SUM, GW_CTX_LOSSY);

	t1 = gw_now_ms();
	failed = get_ms(dir, "failed");
	msg = gw_coll_error(e->c);
	fprintf(stderr, "rank %d: %s after %lld ms (%lld ms after rank 1 failed): %s\n", rank,
		gw_strerror(rc), (long long)(t1 - t0), (long long)(t1 - failed),
		msg ? msg : "(no error text)");
	if (rc != -ECONNRESET)
		return 20;
	if (failed < 0 || t1 - failed > REACH_MS)
		return 21;
	if (!msg || !strstr(msg, "rank 1 revoked the context") || !strstr(msg, want))
		return 22;
	t0 = gw_now_ms();
	if (gw_coll_allreduce(e->c, x, N, GW_COLL_SUM, 0) != -ECONNRESET || gw_now_ms() - t0 > 100)
		return 23;
	return 0;
}

static int body_revoke(int rank, int size, const char *dir, void *arg)
{
	struct rank_env e;
	float *x = tu_alloc(N * sizeof(float));
	const char *why = "the hook raised ValueError: injected";
	int rc = 0;

	(void)size;
	(void)arg;
	if (open_rank(rank, dir, &e))
		return 10;
	tu_fill(x, N, (uint64_t)rank + 1);
	if (gw_coll_allreduce(e.c, x, N, GW_COLL_SUM, GW_CTX_LOSSY)) /* the links work */
		return 11;
	if (rank == 1) {
		const char *msg;

		usleep(300 * 1000); /* the others are waiting by now */
		put_ms(dir, "failed", gw_now_ms());
		gw_tp_revoke(gw_ctx_tp(e.ctx), why);
		gw_tp_revoke(gw_ctx_tp(e.ctx), "a second revoke changes nothing");
		rc = gw_coll_allreduce(e.c, x, N, GW_COLL_SUM, GW_CTX_LOSSY);
		msg = gw_coll_error(e.c);
		if (rc != -ECONNABORTED || !msg || !strstr(msg, "this rank revoked") ||
		    !strstr(msg, why)) {
			fprintf(stderr, "rank 1: %s: %s\n", gw_strerror(rc), msg ? msg : "-");
			rc = 30;
		} else {
			rc = 0;
		}
	} else {
		rc = wait_to_fail(&e, rank, dir, x, why);
	}
	close_rank(&e);
	free(x);
	return rc;
}

static int body_mac(int rank, int size, const char *dir, void *arg)
{
	struct rank_env e;
	float *x = tu_alloc(N * sizeof(float));
	uint8_t junk[64];
	int rc = 0;

	(void)size;
	(void)arg;
	if (open_rank(rank, dir, &e))
		return 10;
	tu_fill(x, N, (uint64_t)rank + 1);
	if (rank == 1) {
		rc = gw_coll_allreduce(e.c, x, N, GW_COLL_SUM, GW_CTX_LOSSY);
		put_ms(dir, "failed", gw_now_ms());
		fprintf(stderr, "rank 1: %s: %s\n", gw_strerror(rc),
			gw_coll_error(e.c) ? gw_coll_error(e.c) : "-");
		rc = rc == -EKEYREJECTED ? 0 : 30;
	} else {
		if (rank == 2) {
			/* Rank 1's second round of the call check (distance 2)
			 * receives from rank 2: a forged frame takes its place. */
			memset(junk, 0xA5, sizeof(junk));
			if (gw_tp_send(gw_ctx_tp(e.ctx), 1, slot_of(ID_CALL, 1), 0, junk,
				       sizeof(junk)) < 0)
				return 12;
		}
		rc = wait_to_fail(&e, rank, dir, x, "authentication failed");
	}
	close_rank(&e);
	free(x);
	return rc;
}

/* Each rank starts with a soft limit of FDS_SOFT open files, below the
 * budget of SIZE ranks (live.c: 2 per peer and 64 more); after the context
 * is up the soft limit is the hard one. */
#define FDS_SOFT 48
static int body_fds(int rank, int size, const char *dir, void *arg)
{
	struct rlimit rl;
	struct rank_env e;
	rlim_t hard;

	(void)size;
	(void)arg;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return 10;
	hard = rl.rlim_max;
	if (hard <= FDS_SOFT)
		return 0; /* nothing to raise: the parent says so */
	rl.rlim_cur = FDS_SOFT;
	if (setrlimit(RLIMIT_NOFILE, &rl) || open_rank(rank, dir, &e))
		return 11;
	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur != hard) {
		fprintf(stderr, "rank %d: soft limit %llu, hard %llu\n", rank,
			(unsigned long long)rl.rlim_cur, (unsigned long long)hard);
		return 12;
	}
	close_rank(&e);
	return 0;
}

static void run(tp_body body)
{
	int codes[SIZE];

	CU_ASSERT_EQUAL_FATAL(tp_run(SIZE, 60, body, NULL, codes), 0);
	for (int r = 0; r < SIZE; r++) {
		if (codes[r])
			printf("rank %d exited %d\n", r, codes[r]);
		CU_ASSERT_EQUAL(codes[r], 0);
	}
}

static void test_revoke(void)
{
	run(body_revoke);
}

static void test_mac(void)
{
	run(body_mac);
}

static void test_fds(void)
{
	struct rlimit rl;

	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_max <= FDS_SOFT) {
		printf("hard limit of open files %llu: nothing to raise\n",
		       (unsigned long long)rl.rlim_max);
		return;
	}
	run(body_fds);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "the caller revokes: every rank fails within 1 s, naming it", test_revoke },
		{ "a MAC failure on one rank: every rank fails within 1 s", test_mac },
		{ "a short soft limit of open files is raised to the hard one", test_fds },
		CU_TEST_INFO_NULL,
	};

	tp_pin_loopback();
	return tu_run("revoke", tests);
}
