/* SPDX-License-Identifier: MIT */
/*
 * test_faults.c - faults on the link between two ranks, and a stalled rank.
 *
 *  - a faulty link: 1% loss, 20 ms +- 5 ms delay and 10% reordered, both
 *    ways, between network namespaces gwR1 and gwR2 (10.77.78.1/.2), made
 *    in user space by netem_tun (this kernel has no sch_netem): allreduces
 *    of every codec complete, every replica is identical, and the bits equal
 *    those of the same calls over the clean veth link (the ring is
 *    deterministic, so a fault may cost time, never a different result);
 *  - a cut link (`ip link set down` in the middle of allreduces): both
 *    ranks fail within GRADWIRE_TIMEOUT_MS (+ slack), each naming the other;
 *    once the link is up again a new context on the same ranks works and
 *    the residuals saved before the cut load back bit for bit;
 *  - SIGSTOP (over loopback, no root needed): a rank stopped for less than
 *    the timeout costs only time (same bits); stopped past it, its peer
 *    fails within the timeout naming it.
 *
 * The namespace tests need root, ip and /dev/net/tun: without them they say
 * why, and with GW_TEST_ONLY=link (meson's "faults link") the program exits
 * TU_SKIP (77). Each rank is a forked child
 * whose stderr goes to <dir>/err-<rank>; the parent plays the operator.
 * Tensors are small so the whole file runs in seconds.
 */
#include <fcntl.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "tutil.h"
#include "tp_harness.h"
#include "conn.h"
#include "coll.h"

#define TIMEOUT_MS 2000
#define SLACK_MS 1500

static const char *const codecs[] = {
	"none", "fp16", "int8", "topk:ratio=0.01", "powersgd:rank=4",
};
#define NCODECS (sizeof(codecs) / sizeof(codecs[0]))

struct run {
	char dir[64]; /* store, logs, markers */
	bool netns;   /* ranks in gwR1/gwR2, else loopback */
	const char *codec;
	int timeout_ms;
	bool once; /* body_stall: the first phase only (a reference) */
};

static int64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- markers: tiny files in the run's folder ------------------------------- */

static void mark(const struct run *r, const char *name, int64_t v)
{
	char path[128], tmp[140];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", r->dir, name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "%lld\n", (long long)v);
	fclose(f);
	rename(tmp, path);
}

/* The marker's value, waiting up to wait_ms for it; -1 if absent. */
static int64_t marker(const struct run *r, const char *name, int wait_ms)
{
	char path[128];
	int64_t end = now_ms() + wait_ms;
	long long v;

	snprintf(path, sizeof(path), "%s/%s", r->dir, name);
	do {
		FILE *f = fopen(path, "r");

		if (f) {
			int ok = fscanf(f, "%lld", &v) == 1;

			fclose(f);
			if (ok)
				return v;
		}
		usleep(5000);
	} while (now_ms() < end);
	return -1;
}

static bool log_has(const struct run *r, int rank, const char *what)
{
	char path[128], text[16384];
	size_t len;
	FILE *f;

	snprintf(path, sizeof(path), "%s/err-%d", r->dir, rank);
	f = fopen(path, "r");
	if (!f)
		return false;
	len = fread(text, 1, sizeof(text) - 1, f);
	text[len] = '\0';
	fclose(f);
	if (!strstr(text, what))
		printf("\n  rank %d's log lacks \"%s\":\n%s\n", rank, what, text);
	return strstr(text, what) != NULL;
}

/* ---- namespaces -------------------------------------------------------------- */

static int sh(const char *cmd)
{
	char quiet[512];

	snprintf(quiet, sizeof(quiet), "%s >/dev/null 2>&1", cmd);
	return system(quiet);
}

static void ns_down(void)
{
	sh("ip netns del gwR1");
	sh("ip netns del gwR2");
}

/* Both ends of the pair report carrier (state UP), within 5 s. */
static int wait_up(void)
{
	for (int64_t end = now_ms() + 5000; now_ms() < end; usleep(20000))
		if (!sh("ip -n gwR1 -o link show gwR1v | grep -q 'state UP'") &&
		    !sh("ip -n gwR2 -o link show gwR2v | grep -q 'state UP'"))
			return 0;
	return -1;
}

/* Two namespaces joined by a veth pair; 0, or why not in why. */
static int ns_up(char *why, size_t len)
{
	static const char *const cmds[] = {
		"ip netns add gwR1",
		"ip netns add gwR2",
		"ip link add gwR1v netns gwR1 type veth peer name gwR2v netns gwR2",
		"ip -n gwR1 addr add 10.77.78.1/24 dev gwR1v",
		"ip -n gwR2 addr add 10.77.78.2/24 dev gwR2v",
		"ip -n gwR1 link set lo up",
		"ip -n gwR2 link set lo up",
		"ip -n gwR1 link set gwR1v up",
		"ip -n gwR2 link set gwR2v up",
	};

	if (geteuid() != 0) {
		snprintf(why, len, "needs root (network namespaces, TUN devices)");
		return -1;
	}
	if (sh("command -v ip")) {
		snprintf(why, len, "needs ip (iproute2)");
		return -1;
	}
	ns_down();
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (sh(cmds[i])) {
			snprintf(why, len, "'%s' failed", cmds[i]);
			ns_down();
			return -1;
		}
	if (wait_up()) {
		snprintf(why, len, "the veth pair gwR1v/gwR2v never came up");
		ns_down();
		return -1;
	}
	return 0;
}

/*
 * The faulty link. This kernel (and tc) has no sch_netem and no action that
 * drops at random, so the veth pair gives way to netem_tun
 * (tests/netem_tun.c, GW_NETEM_TUN): two TUN devices with the same names
 * and addresses, joined in user space with 1% loss, 20 +- 5 ms of delay and
 * 10% reordered, both ways, from a fixed seed. One helper behaves the same
 * on every kernel. netem_down() puts the veth pair back.
 */
static pid_t netem_pid;
static int netem_in = -1, netem_out = -1;

/* Stop the helper; the packets it dropped (-1: it said nothing). */
static long long netem_down(void)
{
	char why[128], said[160] = "";
	long long fwd = -1, drop = -1, reord = -1;
	struct pollfd pf = { .fd = netem_out, .events = POLLIN };

	if (netem_pid > 0) {
		close(netem_in); /* the helper leaves and says what it did */
		for (size_t got = 0; got < sizeof(said) - 1 && poll(&pf, 1, 3000) == 1;) {
			ssize_t n = read(netem_out, said + got, sizeof(said) - 1 - got);

			if (n <= 0)
				break;
			got += (size_t)n;
			said[got] = '\0';
		}
		if (sscanf(said, "forwarded %lld dropped %lld reordered %lld", &fwd, &drop,
			   &reord) == 3)
			printf("\n  netem_tun: %lld packets forwarded, %lld dropped, %lld "
			       "reordered",
			       fwd, drop, reord);
		kill(netem_pid, SIGTERM);
		waitpid(netem_pid, NULL, 0);
		close(netem_out);
	}
	netem_pid = 0;
	netem_in = netem_out = -1;
	ns_down();
	if (ns_up(why, sizeof(why)))
		printf("\n  the veth pair is not back: %s", why);
	return reord > 0 ? drop : -1; /* faults both kinds, or nothing to count */
}

static int netem_up(char *why, size_t len)
{
	static const char *const cmds[] = {
		"ip -n gwR1 addr add 10.77.78.1 peer 10.77.78.2 dev gwR1v",
		"ip -n gwR2 addr add 10.77.78.2 peer 10.77.78.1 dev gwR2v",
		"ip -n gwR1 link set gwR1v up",
		"ip -n gwR2 link set gwR2v up",
	};
	const char *tool = getenv("GW_NETEM_TUN");
	int in[2], out[2];
	char ready[8] = ""; /* exactly "ready\n": nothing more is written before the end */
	struct pollfd pf;

	if (!tool || access(tool, X_OK)) {
		snprintf(why, len,
			 "GW_NETEM_TUN (the netem_tun helper) is not set or not executable");
		return -1;
	}
	if (pipe(in) || pipe(out)) {
		snprintf(why, len, "pipe: %s", strerror(errno));
		return -1;
	}
	sh("ip -n gwR1 link del gwR1v"); /* both ends of the veth pair */
	fflush(stdout);
	netem_pid = fork();
	if (netem_pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]); /* or stdin never ends */
		close(out[0]);
		execl(tool, tool, "gwR1", "gwR1v", "gwR2", "gwR2v", "1", "20", "5", "10",
		      "0x9e3779b97f4a7c15", "240", (char *)NULL);
		_exit(3);
	}
	close(in[0]);
	close(out[1]);
	netem_in = in[1];
	pf = (struct pollfd){ .fd = out[0], .events = POLLIN };
	netem_out = out[0];
	if (netem_pid < 0 || poll(&pf, 1, 5000) != 1 || read(out[0], ready, 6) != 6 ||
	    memcmp(ready, "ready\n", 6)) {
		snprintf(why, len, "%s did not start (see its message above)", tool);
		netem_down();
		return -1;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (sh(cmds[i])) {
			snprintf(why, len, "'%s' failed", cmds[i]);
			netem_down();
			return -1;
		}
	return 0;
}

/* ---- a rank ------------------------------------------------------------------ */

static char iface[16];

static int enter(const struct run *r, int rank)
{
	char path[64];
	int fd;

	if (!r->netns) {
		snprintf(iface, sizeof(iface), "lo");
		setenv("FI_TCP_IFACE", "lo", 1);
		return 0;
	}
	snprintf(path, sizeof(path), "/run/netns/gwR%d", rank + 1);
	fd = open(path, O_RDONLY);
	if (fd < 0 || setns(fd, CLONE_NEWNET))
		return -1;
	close(fd);
	snprintf(iface, sizeof(iface), "gwR%dv", rank + 1);
	setenv("FI_TCP_IFACE", iface, 1);
	return 0;
}

static struct gw_coll *open_coll(const struct run *r, int rank, const char *job,
				 struct gw_store **st, struct gw_ctx **ctx)
{
	/* The default network provider (net): Debian's libfabric 1.17 ofi_rxm
	 * can die of SIGSEGV in fi_close() of the endpoint after a cut link
	 * (rxm_handle_comp_error() given a tcp error completion without a
	 * context; docs/reliability.md). */
	struct tp_env env = { .provider = tp_net_provider(),
			      .iface = iface,
			      .log_level = GW_LOG_ERROR,
			      .timeout_ms = r->timeout_ms };
	struct gw_ctx_cfg cfg = { .tp = tp_cfg(&env) };
	struct gw_coll *c = NULL;
	char err[512];
	int rc;

	cfg.tp.job = job;
	cfg.codec = r->codec;
	cfg.min_compress_bytes = 4096;
	cfg.host_id = (uint64_t)(rank + 1) * 1000; /* two hosts */
	rc = gw_store_file_create(r->dir, st);
	if (!rc)
		rc = gw_ctx_create(&cfg, rank, 2, *st, ctx, err, sizeof(err));
	else
		snprintf(err, sizeof(err), "store");
	if (!rc)
		rc = gw_coll_create(*ctx, &c);
	if (rc) {
		fprintf(stderr, "rank %d: open: %s (%s)\n", rank, err, gw_strerror(rc));
		return NULL;
	}
	return c;
}

static void close_coll(struct gw_coll *c, struct gw_ctx *ctx, struct gw_store *st)
{
	gw_coll_destroy(c);
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
}

static void data(float *x, uint64_t n, int rank, int step)
{
	tu_fill(x, n, (uint64_t)rank * 7919 + (uint64_t)step * 104729 + n);
}

/* A few lossy allreduces; the hash of all their results in *h. */
static int steps(struct gw_coll *c, int rank, uint64_t n, int nsteps, int first, uint64_t *h)
{
	float *y = tu_alloc(n * 4);
	int rc = 0;

	for (int s = first; s < first + nsteps && !rc; s++) {
		data(y, n, rank, s);
		rc = gw_coll_allreduce_id(c, 1, y, n, GW_COLL_SUM, GW_CTX_LOSSY);
		for (uint64_t i = 0; !rc && i < n; i++)
			if (!isfinite(y[i]))
				rc = -EDOM;
		*h = *h * 31 + tp_hash(y, n * 4);
	}
	free(y);
	return rc;
}

/* Fork both ranks running body; return their exit codes in code[]. */
typedef int (*rank_fn)(const struct run *r, int rank);

static void fork_ranks(const struct run *r, rank_fn body, pid_t *pid)
{
	fflush(stdout);
	for (int k = 0; k < 2; k++) {
		pid[k] = fork();
		if (pid[k] == 0) {
			char path[128];

			snprintf(path, sizeof(path), "%s/err-%d", r->dir, k);
			if (!freopen(path, "w", stderr))
				_exit(9);
			setvbuf(stderr, NULL, _IONBF, 0);
			alarm(60);
			tp_trace_crashes();
			_exit(enter(r, k) ? 8 : body(r, k));
		}
	}
}

static void reap(const pid_t *pid, int *code, int wait_s)
{
	int64_t end = now_ms() + wait_s * 1000;

	for (int k = 0; k < 2; k++) {
		int st;

		code[k] = -1;
		while (now_ms() < end && waitpid(pid[k], &st, WNOHANG) == 0)
			usleep(10000);
		if (now_ms() >= end) {
			kill(pid[k], SIGKILL);
			waitpid(pid[k], &st, 0);
		}
		code[k] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		tp_forget_regions(pid[k]);
	}
}

static void new_run(struct run *r, bool netns, const char *codec, int timeout_ms)
{
	memset(r, 0, sizeof(*r));
	strcpy(r->dir, "/tmp/gw-fault-XXXXXX");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(r->dir));
	r->netns = netns;
	r->codec = codec;
	r->timeout_ms = timeout_ms;
}

static void end_run(struct run *r)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", r->dir);
	if (system(cmd))
		printf("\n  could not remove %s\n", r->dir);
}

/* ---- netem: every codec, same bits as over the clean link -------------------- */

static int body_codecs(const struct run *r, int rank)
{
	struct gw_store *st;
	struct gw_ctx *ctx;
	struct gw_coll *c = open_coll(r, rank, "gw", &st, &ctx);
	uint64_t h = 0;
	int rc;

	if (!c)
		return 10;
	rc = steps(c, rank, 60000, 3, 0, &h); /* 240 KB, lossy, 3 calls */
	if (rc) {
		fprintf(stderr, "rank %d %s: %s\n", rank, r->codec, gw_strerror(rc));
		return 11;
	}
	mark(r, rank ? "hash-1" : "hash-0", (int64_t)(h >> 1));
	close_coll(c, ctx, st);
	return 0;
}

static bool have_ns;
static char ns_why[128];

static void test_netem(void)
{
	int64_t clean[NCODECS], t0;
	char why[160];
	int code[2];
	pid_t pid[2];

	if (!have_ns) {
		printf("\n  SKIP: %s\n", ns_why);
		return;
	}
	for (int pass = 0; pass < 2; pass++) {
		if (pass) {
			if (netem_up(why, sizeof(why))) {
				printf("\n  faulty link: %s", why);
				CU_FAIL_FATAL("the faulty link could not be made");
			}
			printf("\n  link: 1%% loss, 20 +- 5 ms, 10%% reordered (netem_tun)");
		}
		for (size_t i = 0; i < NCODECS; i++) {
			struct run r;
			int64_t h0, h1;

			new_run(&r, true, codecs[i], 10000);
			t0 = now_ms();
			fork_ranks(&r, body_codecs, pid);
			reap(pid, code, 45);
			CU_ASSERT_EQUAL(code[0], 0);
			CU_ASSERT_EQUAL(code[1], 0);
			if (code[0] || code[1]) {
				printf("\n  %s, %s link: exit codes %d %d", codecs[i],
				       pass ? "shaped" : "clean", code[0], code[1]);
				log_has(&r, 0, "(show the log)");
				log_has(&r, 1, "(show the log)");
			}
			h0 = marker(&r, "hash-0", 0);
			h1 = marker(&r, "hash-1", 0);
			CU_ASSERT(h0 >= 0 && h0 == h1); /* identical replicas */
			if (pass == 0)
				clean[i] = h0;
			else /* the faults changed nothing but time */
				CU_ASSERT_EQUAL(h0, clean[i]);
			if (pass && (code[0] || code[1] || h0 != clean[i]))
				printf("\n  netem %s: codes %d %d, hash %s\n", codecs[i], code[0],
				       code[1], h0 == clean[i] ? "same" : "DIFFERS");
			if (pass)
				printf("\n  netem %s: %lld ms", codecs[i],
				       (long long)(now_ms() - t0));
			end_run(&r);
		}
	}
	/* The faults did happen: packets were lost and reordered. */
	CU_ASSERT(netem_down() > 0);
}

/* ---- a cut link ---------------------------------------------------------------- */

/* 16 MiB per call: a ring's whole window of segments is in flight at the cut,
 * and withdrawing it must still fit in the timeout (one drain, not one each). */
#define CUT_N (1 << 22)

static int body_cut(const struct run *r, int rank)
{
	struct gw_store *st;
	struct gw_ctx *ctx;
	struct gw_coll *c = open_coll(r, rank, "gw", &st, &ctx);
	char saved[128], again[128];
	uint64_t h = 0;
	int64_t cut, t;
	int rc;

	if (!c)
		return 10;
	snprintf(saved, sizeof(saved), "%s/res-%d", r->dir, rank);
	snprintf(again, sizeof(again), "%s/res2-%d", r->dir, rank);
	if (steps(c, rank, CUT_N, 3, 0, &h) || gw_ctx_residuals_save(ctx, saved))
		return 11;
	mark(r, rank ? "saved-1" : "saved-0", 1);
	/* Allreduces until the cut fails one. */
	for (int s = 3; s < 100000; s++) {
		rc = steps(c, rank, CUT_N, 1, s, &h);
		if (rc)
			break;
	}
	t = now_ms();
	cut = marker(r, "cut", 0);
	if (rc != -ETIMEDOUT && rc != -ECONNRESET && rc != -EIO)
		fprintf(stderr, "rank %d: the cut gave %s\n", rank, gw_strerror(rc));
	if (cut < 0)
		return 12; /* it failed before the cut */
	fprintf(stderr, "rank %d: failed %lld ms after the cut: %s\n", rank, (long long)(t - cut),
		gw_strerror(rc));
	mark(r, rank ? "after-1" : "after-0", t - cut);
	if (t - cut > r->timeout_ms + SLACK_MS)
		return 13;
	close_coll(c, ctx, st);
	mark(r, rank ? "failed-1" : "failed-0", 1);

	/* The link is back: a new context, the saved residuals, and a call. */
	if (marker(r, "up", 20000) < 0)
		return 14;
	c = open_coll(r, rank, "gw-again", &st, &ctx);
	if (!c)
		return 15;
	if (gw_ctx_residuals_load(ctx, saved) || gw_ctx_residuals_save(ctx, again))
		return 16;
	h = 0;
	if (steps(c, rank, CUT_N, 2, 3, &h))
		return 17;
	mark(r, rank ? "hash-1" : "hash-0", (int64_t)(h >> 1));
	close_coll(c, ctx, st);
	return 0;
}

static bool same_file(const char *a, const char *b)
{
	FILE *f = fopen(a, "rb"), *g = fopen(b, "rb");
	bool same = f && g;
	int x, y;

	while (same) {
		x = fgetc(f);
		y = fgetc(g);
		same = x == y;
		if (x == EOF)
			break;
	}
	if (f)
		fclose(f);
	if (g)
		fclose(g);
	return same;
}

static void test_cut(void)
{
	struct run r;
	char a[128], b[128];
	int code[2];
	pid_t pid[2];

	if (!have_ns) {
		printf("\n  SKIP: %s\n", ns_why);
		return;
	}
	new_run(&r, true, "int8", TIMEOUT_MS);
	fork_ranks(&r, body_cut, pid);
	CU_ASSERT(marker(&r, "saved-0", 20000) >= 0 && marker(&r, "saved-1", 20000) >= 0);
	usleep(200000); /* in the middle of the allreduces */
	mark(&r, "cut", now_ms());
	CU_ASSERT_EQUAL(sh("ip -n gwR1 link set gwR1v down"), 0);
	CU_ASSERT(marker(&r, "failed-0", TIMEOUT_MS + 5000) >= 0);
	CU_ASSERT(marker(&r, "failed-1", TIMEOUT_MS + 5000) >= 0);
	CU_ASSERT_EQUAL(sh("ip -n gwR1 link set gwR1v up"), 0);
	CU_ASSERT_EQUAL(wait_up(), 0);
	mark(&r, "up", 1);
	reap(pid, code, 40);
	printf("\n  cut: the ranks failed %lld and %lld ms after it (timeout %d ms)",
	       (long long)marker(&r, "after-0", 0), (long long)marker(&r, "after-1", 0),
	       TIMEOUT_MS);
	CU_ASSERT_EQUAL(code[0], 0);
	CU_ASSERT_EQUAL(code[1], 0);
	if (code[0] || code[1]) {
		printf("\n  cut: rank exit codes %d %d", code[0], code[1]);
		log_has(&r, 0, "(show the log)");
		log_has(&r, 1, "(show the log)");
	}
	/* Each names the other. */
	CU_ASSERT(log_has(&r, 0, "rank 1"));
	CU_ASSERT(log_has(&r, 1, "rank 0"));
	/* The residuals load back bit for bit; the new context agrees. */
	for (int k = 0; k < 2; k++) {
		snprintf(a, sizeof(a), "%s/res-%d", r.dir, k);
		snprintf(b, sizeof(b), "%s/res2-%d", r.dir, k);
		CU_ASSERT(same_file(a, b));
	}
	CU_ASSERT(marker(&r, "hash-0", 0) >= 0 &&
		  marker(&r, "hash-0", 0) == marker(&r, "hash-1", 0));
	end_run(&r);
}

/* ---- SIGSTOP ------------------------------------------------------------------- */

static int body_stall(const struct run *r, int rank)
{
	struct gw_store *st;
	struct gw_ctx *ctx;
	struct gw_coll *c = open_coll(r, rank, "gw", &st, &ctx);
	uint64_t h = 0;
	int64_t stop, t;
	int rc;

	if (!c)
		return 10;
	mark(r, rank ? "ready-1" : "ready-0", getpid());
	/* Phase 1: 40 calls across a stop shorter than the timeout. */
	rc = steps(c, rank, 1 << 18, 40, 0, &h);
	if (rc) {
		fprintf(stderr, "rank %d: a short stop failed a call: %s\n", rank, gw_strerror(rc));
		return 11;
	}
	mark(r, rank ? "hash-1" : "hash-0", (int64_t)(h >> 1));
	if (r->once) {
		close_coll(c, ctx, st);
		return 0;
	}
	if (marker(r, "short-done", 20000) < 0)
		return 12;
	/* Phase 2: calls until the long stop fails one. */
	mark(r, rank ? "phase2-1" : "phase2-0", 1);
	for (int s = 40; s < 100000 && !rc; s++)
		rc = steps(c, rank, 1 << 18, 1, s, &h);
	t = now_ms();
	stop = marker(r, "long-stop", 0);
	fprintf(stderr, "rank %d: %s %lld ms after the stop\n", rank, gw_strerror(rc),
		(long long)(t - stop));
	if (rank == 0)
		mark(r, "gave-up", t);
	if (rank == 0 && (stop < 0 || t - stop > r->timeout_ms + SLACK_MS))
		return 13;
	close_coll(c, ctx, st);
	return 0;
}

static void test_stall(void)
{
	struct run r;
	int code[2];
	pid_t pid[2];
	int64_t h0, h1, ref;

	/* The bits the 40 calls give without a stop. */
	new_run(&r, false, "int8", 3000);
	r.once = true;
	fork_ranks(&r, body_stall, pid);
	reap(pid, code, 30);
	CU_ASSERT(code[0] == 0 && code[1] == 0);
	ref = marker(&r, "hash-0", 0);
	CU_ASSERT(ref >= 0 && ref == marker(&r, "hash-1", 0));
	end_run(&r);

	/* A stop shorter than the timeout costs time only; a longer one fails
	 * the peer within the timeout, naming the stopped rank. */
	new_run(&r, false, "int8", 3000);
	fork_ranks(&r, body_stall, pid);
	CU_ASSERT_FATAL(marker(&r, "ready-0", 20000) >= 0 && marker(&r, "ready-1", 20000) >= 0);
	usleep(50000);
	kill(pid[1], SIGSTOP);
	usleep(1500000); /* half the timeout */
	kill(pid[1], SIGCONT);
	h0 = marker(&r, "hash-0", 30000);
	h1 = marker(&r, "hash-1", 30000);
	CU_ASSERT(h0 >= 0 && h0 == h1);
	CU_ASSERT_EQUAL(h0, ref); /* same bits as without the stop */
	mark(&r, "short-done", 1);
	CU_ASSERT(marker(&r, "phase2-0", 10000) >= 0 && marker(&r, "phase2-1", 10000) >= 0);
	usleep(100000);
	mark(&r, "long-stop", now_ms());
	kill(pid[1], SIGSTOP);
	/* Rank 0 must give up by itself; then rank 1 resumes into a dead job. */
	for (int64_t end = now_ms() + 3000 + SLACK_MS + 2000;
	     now_ms() < end && marker(&r, "gave-up", 0) < 0;)
		usleep(10000);
	kill(pid[1], SIGCONT);
	reap(pid, code, 20);
	CU_ASSERT_EQUAL(code[0], 0);
	CU_ASSERT(code[1] == 0 || code[1] == 10);
	CU_ASSERT(log_has(&r, 0, "rank 1"));
	if (code[0] || code[1])
		printf("\n  stall: rank exit codes %d %d\n", code[0], code[1]);
	end_run(&r);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "SIGSTOP: inside the timeout costs time; past it, a clear error", test_stall },
		{ "faulty link (1% loss, 20 +- 5 ms, 10% reordered): every codec, same bits",
		  test_netem },
		{ "link cut: errors within the timeout, then a new context", test_cut },
		CU_TEST_INFO_NULL,
	};
	const char *only;
	int rc;

	only = getenv("GW_TEST_ONLY");
	/* The namespaces only when a link test runs (the stall test must not
	 * take gwR1/gwR2 from a soak or another run that uses them). */
	if (only && !strstr("link", only) && !strstr(tests[1].pName, only) &&
	    !strstr(tests[2].pName, only))
		snprintf(ns_why, sizeof(ns_why), "not selected");
	else
		have_ns = !ns_up(ns_why, sizeof(ns_why));
	if (!have_ns && only && !strcmp(only, "link")) {
		printf("SKIP: the link tests %s\n", ns_why);
		return TU_SKIP; /* nothing else was asked for */
	}
	if (!have_ns)
		printf("namespace tests skipped: %s\n", ns_why);
	rc = tu_run("faults", tests);
	if (have_ns)
		ns_down();
	return rc;
}
