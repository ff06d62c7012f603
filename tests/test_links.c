/* SPDX-License-Identifier: MIT */
/*
 * test_links.c - a provider per link (transport/fabric.c): peers on the
 * same host over the local provider (shm), peers on other hosts over the
 * network provider (tp_net_provider() on lo), in one context.
 *
 * 4 forked ranks emulate 2 hosts by host id (ranks 0, 1 on one, 2, 3 on the
 * other). Each checks, from its per-peer statistics, that this host's peer
 * runs over shm and the others over the network provider; that an exact
 * allreduce of integer values gives the exact sum; that a lossy one (int8
 * across hosts only, none inside) gives bit-identical replicas within a
 * bound; and, with GRADWIRE_MAC=required, that every connection of both
 * kinds authenticates its frames. Once the context is up, no shm region
 * of the rank is named in /dev/shm any more (a killed rank leaves none),
 * and the regions of ranks killed before are removed by the next shm link
 * unless a live rank holds them.
 * A waiter with nothing to do sleeps on both links' wait fds instead of
 * spinning. A named local provider that libfabric does not offer fails
 * context creation with an error that names it, and ranks of one host
 * that chose different local providers fail at once with an error that
 * names the peer and both. Skips (77) without shm.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "tutil.h"
#include "tp_harness.h"
#include "fi_load.h"
#include "coll_util.h"
#include "conn.h"
#include "coll.h"

#define N 70001 /* above min_compress_bytes, not a multiple of anything */

struct links_arg {
	const char *provider;	    /* NULL: tp_net_provider(); "": the default list */
	const char *provider_local; /* NULL: local_auto (shm where offered) */
	bool main_only;		    /* no local provider: the main one for every peer */
	bool mac;		    /* GRADWIRE_MAC=required, key in dir */
	bool one_host;		    /* every rank on one host, not host_of() */
	char dir[64];		    /* the parent's folder: hashes, key */
};

static int host_of(int rank)
{
	return rank / 2;
}

static int open_ctx(const struct links_arg *a, int rank, int size, const char *dir,
		    struct gw_store **st, struct gw_ctx **ctx, char *err, size_t errlen)
{
	const char *prov = !a->provider ? tp_net_provider() : *a->provider ? a->provider : NULL;
	struct tp_env env = {
		.provider = prov, .iface = "lo", .log_level = GW_LOG_ERROR, .timeout_ms = 15000
	};
	struct gw_ctx_cfg cfg = { .tp = tp_cfg(&env) };
	char key[128];
	int rc;

	cfg.tp.provider_local = a->provider_local;
	cfg.tp.local_auto = !a->provider_local && !a->main_only;
	cfg.codec = "int8";
	cfg.codec_local = "none";
	cfg.min_compress_bytes = 64;
	cfg.host_id = 1000 + (uint64_t)(a->one_host ? 0 : host_of(rank));
	if (a->mac) {
		snprintf(key, sizeof(key), "%s/key", a->dir);
		cfg.mac_mode = GW_MAC_REQUIRED;
		cfg.mac_key_file = key;
	}
	*ctx = NULL;
	rc = gw_store_file_create(dir, st);
	if (!rc)
		rc = gw_ctx_create(&cfg, rank, size, *st, ctx, err, errlen);
	return rc;
}

/* Waits keep yielding exactly when the host's here ranks outnumber its
 * CPUs (gw_tp_crowded()). */
static int check_crowded(struct gw_ctx *ctx, int rank, long here)
{
	bool want = here > sysconf(_SC_NPROCESSORS_ONLN);

	if (gw_tp_crowded(gw_ctx_tp(ctx)) != want) {
		fprintf(stderr, "rank %d: %ld ranks on %ld CPUs, crowded %d\n", rank, here,
			sysconf(_SC_NPROCESSORS_ONLN), gw_tp_crowded(gw_ctx_tp(ctx)));
		return 1;
	}
	return 0;
}

/* Every peer's link and connection as expected. */
static int check_links(struct gw_ctx *ctx, const struct links_arg *a, int rank, int size)
{
	char want_desc[64];

	snprintf(want_desc, sizeof(want_desc), "%s+shm", tp_net_provider());
	if (strcmp(gw_ctx_provider(ctx), want_desc)) {
		fprintf(stderr, "rank %d: context over %s, want %s\n", rank, gw_ctx_provider(ctx),
			want_desc);
		return 1;
	}
	if (gw_tp_links(gw_ctx_tp(ctx)) != 2) {
		fprintf(stderr, "rank %d: %d links\n", rank, gw_tp_links(gw_ctx_tp(ctx)));
		return 1;
	}
	if (check_crowded(ctx, rank, 2))
		return 1;
	for (int p = 0; p < size; p++) {
		bool local = host_of(p) == host_of(rank);
		struct gw_conn_stats s;

		if (p == rank)
			continue;
		if (gw_ctx_stats(ctx, p, &s))
			return 1;
		if (strcmp(s.provider, local ? "shm" : tp_net_provider()) ||
		    strncmp(s.codec, local ? "none" : "int8", 4) ||
		    (a->mac && !strcmp(s.mac_name, "none")) ||
		    (!a->mac && strcmp(s.mac_name, "none"))) {
			fprintf(stderr, "rank %d: peer %d (%s) over %s, codec %s, mac %s\n", rank,
				p, local ? "this host" : "other host", s.provider, s.codec,
				s.mac_name);
			return 1;
		}
	}
	return 0;
}

static int body(int rank, int size, const char *dir, void *arg)
{
	const struct links_arg *a = arg;
	struct gw_store *st = NULL;
	struct gw_ctx *ctx = NULL;
	struct gw_coll *c = NULL;
	float *y = tu_alloc(N * 4);
	double *exact = tu_alloc(N * 8), *mag = tu_alloc(N * 8);
	char err[512];
	int rc = 0, ret = 0;

	if (open_ctx(a, rank, size, dir, &st, &ctx, err, sizeof(err))) {
		fprintf(stderr, "rank %d: open: %s\n", rank, err);
		ret = 10;
		goto out;
	}
	if (check_links(ctx, a, rank, size)) {
		ret = 11;
		goto out;
	}
	/* This host's peer has mapped this rank's shm region in the
	 * handshake, so its name is gone (a rank killed now leaves nothing in
	 * /dev/shm), and the calls below still go over shm. */
	if (tp_named_regions(getpid())) {
		fprintf(stderr, "rank %d: %d shm regions still named in /dev/shm\n", rank,
			tp_named_regions(getpid()));
		ret = 13;
		goto out;
	}
	if (gw_coll_create(ctx, &c)) {
		ret = 12;
		goto out;
	}
	/* Exact: small integers, whose sum no order of addition rounds. */
	for (uint64_t i = 0; i < N; i++)
		y[i] = (float)((i * 7 + (uint64_t)rank * 13) % 101) - 50.0f;
	rc = gw_coll_allreduce(c, y, N, GW_COLL_SUM, 0);
	if (rc) {
		fprintf(stderr, "rank %d: exact allreduce: %s\n", rank, gw_strerror(rc));
		ret = 20;
		goto out;
	}
	for (uint64_t i = 0; i < N; i++) {
		float want = 0;

		for (int r = 0; r < size; r++)
			want += (float)((i * 7 + (uint64_t)r * 13) % 101) - 50.0f;
		if (y[i] != want) {
			fprintf(stderr, "rank %d: y[%llu] = %g, want %g\n", rank,
				(unsigned long long)i, y[i], want);
			ret = 21;
			goto out;
		}
	}
	ct_record(a->dir, "exact", rank, y, N * 4);
	/* Lossy across hosts only: bounded error, identical replicas. */
	tu_fill(y, N, ct_seed(rank, N, 0));
	ct_exact_sum(exact, mag, N, size, 0);
	rc = gw_coll_allreduce(c, y, N, GW_COLL_SUM, GW_CTX_LOSSY);
	if (rc) {
		fprintf(stderr, "rank %d: lossy allreduce: %s\n", rank, gw_strerror(rc));
		ret = 22;
		goto out;
	}
	if (ct_rel_l2(y, exact, N, 1.0) > 0.05) {
		fprintf(stderr, "rank %d: lossy allreduce: rel err %.3e\n", rank,
			ct_rel_l2(y, exact, N, 1.0));
		ret = 23;
		goto out;
	}
	ct_record(a->dir, "lossy", rank, y, N * 4);
	/* Frames went on both kinds of link, and int8 shrank only the ones
	 * across hosts (as a whole: some hops there carry small exact ones). */
	{
		uint64_t raw[2] = { 0, 0 }, wire[2] = { 0, 0 };

		for (int p = 0; p < size; p++) {
			struct gw_conn_stats s;
			int k = host_of(p) == host_of(rank);

			if (p == rank || gw_ctx_stats(ctx, p, &s))
				continue;
			raw[k] += s.raw_sent;
			wire[k] += s.wire_sent;
			if (s.mac_failures || s.rejected)
				ret = 24;
		}
		if (ret || !raw[0] || !raw[1] || wire[1] < raw[1] || wire[0] >= raw[0] / 4 * 3) {
			fprintf(stderr,
				"rank %d: across hosts %llu raw %llu wire, inside %llu raw %llu "
				"wire\n",
				rank, (unsigned long long)raw[0], (unsigned long long)wire[0],
				(unsigned long long)raw[1], (unsigned long long)wire[1]);
			ret = 24;
		}
	}
out:
	gw_coll_destroy(c);
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	free(y), free(exact), free(mag);
	return ret;
}

static void run(struct links_arg *a)
{
	int codes[TP_MAX_RANKS];

	strcpy(a->dir, "/tmp/gw-links-XXXXXX");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(a->dir));
	if (a->mac) {
		char path[128];
		FILE *f;

		snprintf(path, sizeof(path), "%s/key", a->dir);
		f = fopen(path, "w");
		CU_ASSERT_PTR_NOT_NULL_FATAL(f);
		fputs("a key of the links test, 32 bytes+", f);
		fclose(f);
		chmod(path, 0600);
	}
	CU_ASSERT_EQUAL_FATAL(tp_run(4, 90, body, a, codes), 0);
	for (int r = 0; r < 4; r++) {
		if (codes[r])
			printf("\n  rank %d exited %d\n", r, codes[r]);
		CU_ASSERT_EQUAL(codes[r], 0);
	}
	if (!codes[0] && !codes[1] && !codes[2] && !codes[3]) {
		ct_check_identical(a->dir, "exact", 4);
		ct_check_identical(a->dir, "lossy", 4);
	}
	if (a->mac) {
		char path[128];

		snprintf(path, sizeof(path), "%s/key", a->dir);
		unlink(path);
	}
	rmdir(a->dir);
}

static void test_two_hosts(void)
{
	struct links_arg a = { 0 };

	run(&a);
}

static void test_two_hosts_named(void)
{
	struct links_arg a = { .provider_local = "shm" };

	run(&a);
}

static void test_mac(void)
{
	struct links_arg a = { .mac = true };

	run(&a);
}

/* ---- an idle waiter sleeps on both CQs ----------------------------------- */

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Rank 0 enters a barrier a second before the others: it must sleep (in
 * poll() on both links' wait fds), not spin, and still see them arrive. */
static int body_idle(int rank, int size, const char *dir, void *arg)
{
	const struct links_arg *a = arg;
	struct gw_store *st = NULL;
	struct gw_ctx *ctx = NULL;
	struct gw_coll *c = NULL;
	char err[512];
	int ret = 0;

	if (open_ctx(a, rank, size, dir, &st, &ctx, err, sizeof(err)) || gw_coll_create(ctx, &c)) {
		fprintf(stderr, "rank %d: open: %s\n", rank, err);
		ret = 10;
	} else if (gw_coll_barrier(c)) {
		ret = 11;
	} else if (rank == 0) {
		int64_t t0 = gw_now_ms();
		double c0 = cpu_s(), used, wall;

		if (gw_coll_barrier(c))
			ret = 12;
		used = cpu_s() - c0;
		wall = (double)(gw_now_ms() - t0) / 1e3;
		if (!ret && (wall < 0.8 || used > 0.3 * wall)) {
			fprintf(stderr, "rank 0: waited %.3f s using %.3f s of CPU\n", wall, used);
			ret = 13;
		}
	} else {
		struct timespec d = { 1, 0 };

		nanosleep(&d, NULL);
		if (gw_coll_barrier(c))
			ret = 12;
	}
	gw_coll_destroy(c);
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	return ret;
}

/* n ranks of body in a fresh folder (a->dir); each must exit 0. */
static void run_plain(int n, tp_body body, struct links_arg *a)
{
	int codes[TP_MAX_RANKS];

	strcpy(a->dir, "/tmp/gw-links-XXXXXX");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(a->dir));
	CU_ASSERT_EQUAL_FATAL(tp_run(n, 60, body, a, codes), 0);
	for (int r = 0; r < n; r++) {
		if (codes[r])
			printf("\n  rank %d exited %d\n", r, codes[r]);
		CU_ASSERT_EQUAL(codes[r], 0);
	}
	rmdir(a->dir);
}

static void test_idle(void)
{
	struct links_arg a = { 0 };

	run_plain(4, body_idle, &a);
}

/* ---- more ranks than CPUs on one host -------------------------------------- */

/* CPUs + 1 ranks (at most 4) of one host: crowded when they outnumber
 * the CPUs, whatever the machine; an exact allreduce over shm still gives
 * the exact sum. */
static int body_crowded(int rank, int size, const char *dir, void *arg)
{
	const struct links_arg *a = arg;
	struct gw_store *st = NULL;
	struct gw_ctx *ctx = NULL;
	struct gw_coll *c = NULL;
	float y[1000];
	char err[512];
	int ret = 0;

	for (int i = 0; i < 1000; i++)
		y[i] = (float)(rank + i);
	if (open_ctx(a, rank, size, dir, &st, &ctx, err, sizeof(err)) || gw_coll_create(ctx, &c)) {
		fprintf(stderr, "rank %d: open: %s\n", rank, err);
		ret = 10;
	} else if (check_crowded(ctx, rank, size)) {
		ret = 11;
	} else if (gw_coll_allreduce(c, y, 1000, GW_COLL_SUM, 0)) {
		ret = 12;
	} else {
		for (int i = 0; i < 1000 && !ret; i++)
			if (y[i] != (float)(size * (size - 1) / 2 + size * i)) {
				fprintf(stderr, "rank %d: y[%d] = %g\n", rank, i, (double)y[i]);
				ret = 13;
			}
	}
	gw_coll_destroy(c);
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	return ret;
}

static void test_crowded(void)
{
	struct links_arg a = { .one_host = true };
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	run_plain(cpus + 1 <= 4 ? (int)cpus + 1 : 4, body_crowded, &a);
}

/* ---- a named local provider that is not there ------------------------------ */

static int body_missing(int rank, int size, const char *dir, void *arg)
{
	const struct links_arg *a = arg;
	struct gw_store *st = NULL;
	struct gw_ctx *ctx = NULL;
	char err[512] = "";
	int rc = open_ctx(a, rank, size, dir, &st, &ctx, err, sizeof(err));
	int ret = 0;

	if (rc != -ENOENT || !strstr(err, "GRADWIRE_PROVIDER_LOCAL=nosuchprovider") ||
	    !strstr(err, "not available")) {
		fprintf(stderr, "rank %d: create gave %d (%s): %s\n", rank, rc, gw_strerror(rc),
			err);
		ret = 1;
	}
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	return ret;
}

static void test_missing(void)
{
	struct links_arg a = { .provider_local = "nosuchprovider" };

	/* Ranks 0, 1 share a host (they need it), 2 is alone on its own (it
	 * does not, and refuses the name all the same). */
	run_plain(3, body_missing, &a);
}

/* ---- ranks that chose different providers for one pair ------------------- */

/* Rank 1 keeps its host's peers on the network provider, rank 0 takes shm:
 * both fail at once (not at the store's 15 s timeout), naming the peer and
 * both providers. */
static int body_mismatch(int rank, int size, const char *dir, void *arg)
{
	struct links_arg a = *(const struct links_arg *)arg;
	struct gw_store *st = NULL;
	struct gw_ctx *ctx = NULL;
	char err[512] = "", peer[32];
	int64_t t0 = gw_now_ms();
	int rc, ret = 0;

	a.provider_local = rank == 1 ? tp_net_provider() : NULL;
	rc = open_ctx(&a, rank, size, dir, &st, &ctx, err, sizeof(err));
	snprintf(peer, sizeof(peer), "rank %d ", 1 - rank);
	if (rc != -EPROTO || !strstr(err, peer) || !strstr(err, "'shm'") ||
	    !strstr(err, tp_net_provider()) || !strstr(err, "GRADWIRE_PROVIDER_LOCAL") ||
	    gw_now_ms() - t0 > 5000) {
		fprintf(stderr, "rank %d: create gave %d (%s) after %lld ms: %s\n", rank, rc,
			gw_strerror(rc), (long long)(gw_now_ms() - t0), err);
		ret = 1;
	}
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	return ret;
}

static void test_mismatch(void)
{
	struct links_arg a = { 0 };

	run_plain(2, body_mismatch, &a);
}

/* ---- the TCP provider's name, from the loaded libfabric -------------------- */

/* Unset, the main provider is the loaded libfabric's native TCP provider:
 * "net" before 1.18, "tcp" after, whatever headers gradwire was built with.
 * From 1.18 on, asking for "net" fails at once, naming what exists. */
static int body_tcp_name(int rank, int size, const char *dir, void *arg)
{
	struct links_arg a = *(const struct links_arg *)arg;
	uint32_t v = gw_fi_version();
	bool old = FI_MAJOR(v) == 1 && FI_MINOR(v) < 18;
	const char *want = old ? "net" : "tcp";
	struct gw_store *st = NULL;
	struct gw_ctx *ctx = NULL;
	struct gw_conn_stats s = { 0 };
	char err[512] = "", sub[256];
	int rc, ret = 0;

	a.provider = "";
	rc = open_ctx(&a, rank, size, dir, &st, &ctx, err, sizeof(err));
	if (!rc)
		rc = gw_ctx_stats(ctx, 1 - rank, &s);
	if (rc || strcmp(gw_fi_tcp_provider(), want) || strcmp(s.provider, want)) {
		fprintf(stderr,
			"rank %d: libfabric %u.%u: create/stats %d, named %s, link %s: %s\n", rank,
			FI_MAJOR(v), FI_MINOR(v), rc, gw_fi_tcp_provider(), s.provider, err);
		ret = 1;
	}
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	if (old || ret)
		return ret;
	a.provider = "net";
	snprintf(sub, sizeof(sub), "%s/net", dir);
	mkdir(sub, 0700);
	rc = open_ctx(&a, rank, size, sub, &st, &ctx, err, sizeof(err));
	if (!rc || !strstr(err, "(net on lo)") || !strstr(err, "offers: ") || !strstr(err, "tcp") ||
	    !strstr(err, "renamed net to tcp")) {
		fprintf(stderr, "rank %d: GRADWIRE_PROVIDER=net gave %d: %s\n", rank, rc, err);
		ret = 1;
	}
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	return ret;
}

static void test_tcp_name(void)
{
	struct links_arg a = { .main_only = true };

	run_plain(2, body_tcp_name, &a);
}

/* ---- a region left behind under this pid's name ----------------------- */

/* A killed rank leaves its shm region in /dev/shm, named after its pid by
 * libfabric's default ("<pid>:<uid>:<index>"); a new process with that pid
 * came round and failed to open shm (EBUSY). Each rank plants such regions
 * under its own pid before it opens, then runs a barrier over shm. */
static int body_stale(int rank, int size, const char *dir, void *arg)
{
	const struct links_arg *a = arg;
	struct gw_store *st = NULL;
	struct gw_ctx *ctx = NULL;
	struct gw_coll *c = NULL;
	char err[512] = "", path[4][96];
	int ret = 0;

	for (int i = 0; i < 4; i++) {
		int fd;

		snprintf(path[i], sizeof(path[i]), "/dev/shm/%ld:%ld:%d", (long)getpid(),
			 (long)getuid(), i);
		fd = open(path[i], O_RDWR | O_CREAT | O_EXCL, 0600);
		if (fd < 0 || ftruncate(fd, 1 << 16)) {
			fprintf(stderr, "rank %d: planting %s: %s\n", rank, path[i],
				strerror(errno));
			ret = 9;
		}
		if (fd >= 0)
			close(fd);
	}
	if (!ret && (open_ctx(a, rank, size, dir, &st, &ctx, err, sizeof(err)) ||
		     gw_coll_create(ctx, &c))) {
		fprintf(stderr, "rank %d: open beside a stale region: %s\n", rank, err);
		ret = 10;
	} else if (!ret && gw_coll_barrier(c)) {
		ret = 11;
	}
	gw_coll_destroy(c);
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	for (int i = 0; i < 4; i++)
		unlink(path[i]);
	return ret;
}

static void test_stale(void)
{
	struct links_arg a = { 0 };

	run_plain(2, body_stale, &a);
}

/* ---- regions of ranks that are gone ---------------------------------- */

/* A region named like gradwire's, of a pid beyond any pid_max. */
#define GONE(x) "/dev/shm/gw-4999999-00000000000000" x ":0:0"

/* Create path, held (a shared flock) when held, modified age_s seconds
 * ago (only then: a sweep must never see it old and not held); its fd, or
 * -1. */
static int plant(const char *path, bool held, int age_s)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	if (fd >= 0 && ((held && flock(fd, LOCK_SH)) || tp_age_file(path, age_s))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/*
 * A rank killed before its context was up leaves its region named in
 * /dev/shm. Rank 0 plants such regions, then opens a transport over shm:
 * the one nobody holds and older than a minute goes; one held (flock), a
 * fresh one and a name of another form stay. Rank 1 makes rank 0's own
 * region, named and waiting for it, look two hours old before it opens: rank
 * 0 holds its lock, so rank 1's sweep leaves it, and rank 1 can send to it
 * over shm (which maps rank 0's region by its name).
 */
static int body_sweep(int rank, int size, const char *dir, void *arg)
{
	const char *stale = GONE("aa"), *held = GONE("bb"), *fresh = GONE("cc");
	const char *other = "/dev/shm/gw-4999999-zz:0:0";
	struct tp_env env = { .provider = "shm", .log_level = GW_LOG_ERROR, .timeout_ms = 15000 };
	struct gw_store *st = NULL;
	struct gw_tp *tp = NULL;
	struct gw_tp_req r;
	int fd[4] = { -1, -1, -1, -1 }, ret = 0, err;
	char path[96], msg[8] = "";
	long peer = 0;
	FILE *f;

	(void)arg;
	if (rank == 1)
		strcpy(msg, "sweep");
	snprintf(path, sizeof(path), "%s/pid-0", dir);
	if (rank == 0) {
		fd[0] = plant(stale, false, 7200);
		fd[1] = plant(held, true, 7200);
		fd[2] = plant(fresh, false, 0);
		fd[3] = plant(other, false, 7200);
		f = fopen(path, "w");
		if (fd[0] < 0 || fd[1] < 0 || fd[2] < 0 || fd[3] < 0 || !f ||
		    fprintf(f, "%ld\n", (long)getpid()) < 0 || fclose(f)) {
			fprintf(stderr, "rank 0: planting: %s\n", strerror(errno));
			ret = 9;
			goto out;
		}
		close(fd[0]);
		fd[0] = -1;
	} else {
		/* Rank 0's region, named while it waits for this rank. */
		for (int64_t end = gw_now_ms() + 10000; !peer && gw_now_ms() < end;) {
			f = fopen(path, "r");
			if (!f || fscanf(f, "%ld", &peer) != 1 || tp_named_regions((pid_t)peer) < 1)
				peer = 0;
			if (f)
				fclose(f);
			usleep(10000);
		}
		/* Made to look old once made (libfabric sizes the file after
		 * creating it, which sets its time). */
		usleep(300000);
		if (!peer || tp_age_regions((pid_t)peer, 7200) < 1) {
			fprintf(stderr, "rank 1: rank 0's region never showed\n");
			ret = 9;
			goto out;
		}
	}
	tp = tp_open(&env, rank, size, dir, &st, &err);
	if (!tp) {
		ret = 10;
		goto out;
	}
	/* Rank 1 sends: it maps rank 0's region by its name to do so. */
	err = rank ? gw_tp_isend(tp, 0, 1, 0, msg, sizeof(msg), &r)
		   : gw_tp_irecv(tp, 1, 1, 0, msg, sizeof(msg), &r);
	if (err || gw_tp_wait(tp, &r, 15000) != (ssize_t)sizeof(msg) || strcmp(msg, "sweep")) {
		fprintf(stderr, "rank %d: no message over shm\n", rank);
		ret = 11;
	} else if (rank == 0 && (!access(stale, F_OK) || access(held, F_OK) ||
				 access(fresh, F_OK) || access(other, F_OK))) {
		fprintf(stderr, "rank 0: stale %d, held %d, fresh %d, other %d (1: still there)\n",
			!access(stale, F_OK), !access(held, F_OK), !access(fresh, F_OK),
			!access(other, F_OK));
		ret = 12;
	}
out:
	if (tp)
		tp_close(tp, st);
	if (rank == 0) {
		for (int i = 0; i < 4; i++)
			if (fd[i] >= 0)
				close(fd[i]);
		unlink(stale);
		unlink(held);
		unlink(fresh);
		unlink(other);
	}
	return ret;
}

static void test_sweep(void)
{
	struct links_arg a = { 0 };

	run_plain(2, body_sweep, &a);
}

static bool have_shm(void)
{
	struct fi_info *hints = fi_allocinfo(), *list = NULL;
	int ret;

	if (!hints)
		return false;
	hints->caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV;
	hints->ep_attr->type = FI_EP_RDM;
	hints->fabric_attr->prov_name = strdup("shm");
	ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &list);
	fi_freeinfo(hints);
	fi_freeinfo(list);
	return ret == 0;
}

/* ---- a rank killed: seen over both links ---------------------------------- */

/*
 * 2 hosts of 2; rank 1 dies (SIGKILL) as its third allreduce begins. Its
 * host mate reaches it over shm, the others over the network provider:
 * every survivor's call fails within 2 s, under a 15 s timeout, because
 * the transport sees the dead process's connection close (transport/
 * live.c), on both kinds of link.
 */
static int body_kill(int rank, int size, const char *dir, void *arg)
{
	const struct links_arg *a = arg;
	float *y = tu_alloc(N * sizeof(float));
	struct gw_store *st;
	struct gw_ctx *ctx;
	struct gw_coll *c;
	char err[512];
	int64_t t0 = 0;
	int rc = 0, call;

	if (open_ctx(a, rank, size, dir, &st, &ctx, err, sizeof(err)) || gw_coll_create(ctx, &c)) {
		fprintf(stderr, "rank %d: create: %s\n", rank, err);
		return 10;
	}
	for (call = 0; call < 4; call++) {
		if (rank == 1 && call == 2)
			raise(SIGKILL);
		tu_fill(y, N, (uint64_t)rank * 31 + (uint64_t)call);
		t0 = gw_now_ms();
		rc = gw_coll_allreduce(c, y, N, GW_COLL_SUM, 0);
		if (rc)
			break;
	}
	if (!rc || call != 2) {
		fprintf(stderr, "rank %d: call %d gave %d\n", rank, call, rc);
		return 20;
	}
	if (gw_now_ms() - t0 > 2000) {
		fprintf(stderr, "rank %d: the dead rank was seen after %lld ms\n", rank,
			(long long)(gw_now_ms() - t0));
		return 22;
	}
	gw_coll_destroy(c);
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	free(y);
	return 0;
}

static void test_killed(void)
{
	struct links_arg a = { 0 };
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(4, 60, body_kill, &a, codes), 0);
	for (int r = 0; r < 4; r++)
		CU_ASSERT_EQUAL(codes[r], r == 1 ? 128 + SIGKILL : 0);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "2 hosts of 2: shm inside, network across, exact and int8", test_two_hosts },
		{ "the same with GRADWIRE_PROVIDER_LOCAL=shm", test_two_hosts_named },
		{ "MAC required on both kinds of link", test_mac },
		{ "an idle waiter sleeps on both links", test_idle },
		{ "more ranks than CPUs on a host: waits yield to them", test_crowded },
		{ "an unavailable GRADWIRE_PROVIDER_LOCAL is an error", test_missing },
		{ "the TCP provider's name is the loaded libfabric's", test_tcp_name },
		{ "ranks with different local providers fail at once, naming both", test_mismatch },
		{ "a region left by a killed rank under this pid does not stop shm", test_stale },
		{ "regions of ranks killed before their context was up are removed", test_sweep },
		{ "a killed rank is seen within 2 s over shm and the network", test_killed },
		CU_TEST_INFO_NULL,
	};

	tp_pin_loopback();
	if (!have_shm())
		tu_skip("libfabric offers no shm provider here");
	return tu_run("links", tests);
}
