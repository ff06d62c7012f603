/* SPDX-License-Identifier: MIT */
/*
 * test_epoch.c - membership epochs (gw_ctx_reform()), four processes:
 *
 *   epoch 0: P0 P1 P2           P0 leaves after a call;
 *   epoch 1: P1 P2 P3 (joiner)  links P1-P2 kept, renumbered 0 and 1; a
 *                               frame P2 sealed in epoch 0 is refused;
 *   epoch 2: P1 P2 P3 + a ghost that never comes: fails on every member;
 *   epoch 3: P3 P1 P2           from the failed epoch's shape: every link
 *                               kept (born in epoch 0 or 1), re-ordered.
 *
 * Each formed epoch runs an exact allreduce (the sum of its members' data,
 * bit for bit) and a lossy one; the MAC off, then required, then over shm.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tutil.h"
#include "tp_fork.h"
#include "tp_harness.h"
#include "coll.h"
#include "conn.h"
#include "fi_load.h"
#include "frame.h"

#define N 1000
#define STALE_SLOT 9

struct epoch_arg {
	char key[96]; /* "" : MAC off */
	bool shm;     /* every link over shm (the main provider otherwise) */
};

static struct gw_ctx_cfg cfg_of(const struct epoch_arg *a, const char *job, int timeout_ms)
{
	struct tp_env env = { .provider = a->shm ? "shm" : tp_net_provider(),
			      .iface = a->shm ? NULL : "lo",
			      .log_level = GW_LOG_ERROR,
			      .timeout_ms = timeout_ms };
	struct gw_ctx_cfg c = { .tp = tp_cfg(&env) };

	c.tp.job = job;
	c.codec = "int8";
	c.min_compress_bytes = 64;
	c.mac_mode = a->key[0] ? GW_MAC_REQUIRED : GW_MAC_OFF;
	c.mac_key_file = a->key[0] ? a->key : NULL;
	return c;
}

/* An exact allreduce of the members' data (process p holds (p + 1) * (i + 1))
 * and a lossy one. procs[r]: the process of new rank r. 0, or a code. */
static int calls(struct gw_ctx *ctx, const int *procs, int code)
{
	float *x = tu_alloc(N * 4);
	struct gw_coll *c = NULL;
	int me = procs[gw_ctx_rank(ctx)], rc;

	for (int i = 0; i < N; i++)
		x[i] = (float)((me + 1) * (i + 1));
	rc = gw_coll_create(ctx, &c);
	if (!rc)
		rc = gw_coll_allreduce(c, x, N, GW_COLL_SUM, 0);
	for (int i = 0; i < N && !rc; i++) {
		float want = 0;

		for (int r = 0; r < gw_ctx_size(ctx); r++)
			want += (float)((procs[r] + 1) * (i + 1));
		if (x[i] != want) {
			fprintf(stderr, "process %d, epoch %u: value %d is %g, not %g\n", me,
				gw_ctx_epoch(ctx), i, x[i], want);
			rc = -EBADMSG;
		}
	}
	if (!rc)
		rc = gw_coll_allreduce(c, x, N, GW_COLL_SUM, GW_CTX_LOSSY);
	if (rc)
		fprintf(stderr, "process %d, epoch %u: calls: %s\n", me, gw_ctx_epoch(ctx),
			gw_strerror(rc));
	gw_coll_destroy(c);
	free(x);
	return rc ? code : 0;
}

static int reform(struct gw_ctx **ctx, const struct epoch_arg *a, struct gw_store *st,
		  uint32_t epoch, int rank, int size, const int *old, int timeout_ms)
{
	char job[16], err[512];
	struct gw_ctx_cfg cfg;
	int rc;

	snprintf(job, sizeof(job), "e%u", epoch);
	cfg = cfg_of(a, job, timeout_ms);
	rc = gw_ctx_reform(ctx, &cfg, epoch, rank, size, old, st, err, sizeof(err));
	if (rc && timeout_ms > 2000)
		fprintf(stderr, "rank %d, epoch %u: reform: %s (%s)\n", rank, epoch, err,
			gw_strerror(rc));
	return rc;
}

/* P2, new rank 1 in epoch 1, sends P1 (new rank 0) what it sealed for it
 * in epoch 0; P1 must refuse it, naming the epoch, and go on. */
static int stale(struct gw_ctx *ctx, const uint8_t *frame, ssize_t flen)
{
	struct gw_ctx_req r;
	uint8_t buf[16];
	int rc;

	if (gw_ctx_rank(ctx) == 1)
		return gw_tp_send(gw_ctx_tp(ctx), 0, STALE_SLOT, 0, frame, (size_t)flen) == flen
			       ? 0
			       : 40;
	rc = gw_ctx_irecv_bytes(ctx, 1, STALE_SLOT, buf, 5, &r);
	if (!rc)
		rc = gw_ctx_wait(ctx, &r);
	if (rc != -ESTALE) {
		fprintf(stderr, "a frame of epoch 0 in epoch 1: %s, not refused\n",
			gw_strerror(rc));
		return 41;
	}
	return 0;
}

static int body(int proc, int nproc, const char *dir, void *arg)
{
	const struct epoch_arg *a = arg;
	static const int e0[] = { 0, 1, 2 }, e1[] = { 1, 2, 3 }, e3[] = { 3, 1, 2 };
	static const int old1[] = { 1, 2, -1 }, old2[] = { 0, 1, 2, -1 }, old3[] = { 2, 0, 1 };
	struct gw_ctx_cfg cfg = cfg_of(a, "e0", 8000);
	struct gw_ctx *ctx = NULL;
	struct gw_store *st = NULL;
	struct gw_conn_stats s;
	uint8_t frame[256];
	ssize_t flen = 0;
	char err[512];
	int rc, bad[3] = { 0, 1, 0 };

	(void)nproc;
	if (gw_store_file_create(dir, &st))
		return 10;
	if (proc < 3) { /* epoch 0 */
		rc = gw_ctx_create(&cfg, proc, 3, st, &ctx, err, sizeof(err));
		if (rc) {
			fprintf(stderr, "process %d: create: %s\n", proc, err);
			return 11;
		}
		if ((rc = calls(ctx, e0, 12)))
			return rc;
		if (proc == 2)
			flen = gw_ctx_seal(ctx, 1, GW_FRAME_BYTES, 0, STALE_SLOT, 0, "stale", 5,
					   frame, sizeof(frame));
		if (proc == 2 && flen <= 0)
			return 13;
		if (proc == 0) { /* it leaves */
			gw_ctx_destroy(ctx);
			gw_store_destroy(st);
			return 0;
		}
		/* Wrong calls change nothing. */
		if (reform(&ctx, a, st, 0, proc - 1, 3, old1, 100) != -EINVAL ||
		    reform(&ctx, a, st, 1, proc - 1, 3, (int[]){ 1, 1, -1 }, 100) != -EINVAL ||
		    reform(&ctx, a, st, 1, proc - 1, 3, bad, 100) != -EINVAL ||
		    gw_ctx_epoch(ctx) != 0 || gw_ctx_rank(ctx) != proc)
			return 14;
	}
	/* epoch 1: P1 P2 P3 */
	if (reform(&ctx, a, st, 1, proc - 1, 3, old1, 8000))
		return 20;
	if (proc != 3 && (gw_ctx_stats(ctx, 2 - proc, &s) || !s.frames_sent ||
			  strcmp(gw_ctx_codec(ctx, 2 - proc)->ops->name, "int8"))) {
		fprintf(stderr, "process %d: the link to process %d was not kept\n", proc,
			3 - proc);
		return 21;
	}
	if (proc != 3 && (rc = stale(ctx, frame, flen)))
		return rc;
	if ((rc = calls(ctx, e1, 22)))
		return rc;
	/* epoch 2: a ghost as rank 3 never comes */
	if (!reform(&ctx, a, st, 2, proc - 1, 4, old2, 1500))
		return 30;
	/* epoch 3: P3 P1 P2, from epoch 2's shape */
	if (reform(&ctx, a, st, 3, proc == 3 ? 0 : proc, 3, old3, 8000))
		return 31;
	for (int p = 0; p < 3; p++)
		if (p != gw_ctx_rank(ctx) && (gw_ctx_stats(ctx, p, &s) || !s.frames_sent)) {
			fprintf(stderr, "process %d: epoch 3 did not keep its link to rank %d\n",
				proc, p);
			return 32;
		}
	if ((rc = calls(ctx, e3, 33)))
		return rc;
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	if (gw_fi_info_held()) { /* every epoch's transport let its lists go */
		fprintf(stderr, "process %d: %d fi_info lists held\n", proc, gw_fi_info_held());
		return 34;
	}
	return 0;
}

static void run(struct epoch_arg *a)
{
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(4, 120, body, a, codes), 0);
	for (int p = 0; p < 4; p++) {
		if (codes[p])
			fprintf(stderr, "process %d: exit %d\n", p, codes[p]);
		CU_ASSERT_EQUAL(codes[p], 0);
	}
}

static void test_plain(void)
{
	struct epoch_arg a = { "", false };

	run(&a);
}

/* Over shm, whose regions lose their names once a context is connected:
 * kept links over each epoch's new regions. */
static void test_shm(void)
{
	struct epoch_arg a = { "", true };

	run(&a);
}

static void test_mac(void)
{
	char dir[] = "/tmp/gw-epoch-XXXXXX";
	struct epoch_arg a;
	FILE *f;

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(a.key, sizeof(a.key), "%s/key", dir);
	f = fopen(a.key, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs("the key of the epoch test, long enough\n", f);
	fclose(f);
	chmod(a.key, 0600);
	run(&a);
	unlink(a.key);
	rmdir(dir);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "leave, join, a failed epoch, re-order; old frames refused: MAC off",
		  test_plain },
		{ "the same with the MAC required (keys per epoch)", test_mac },
		{ "the same over shm", test_shm },
		CU_TEST_INFO_NULL,
	};

	tp_pin_loopback();
	return tu_run("epoch", tests);
}
