/* SPDX-License-Identifier: MIT */
/*
 * test_plugin.c - the exported table gradwire_plugin_v1 as a host sees it:
 * dlopen() the built libgradwire.so (path in GW_LIB), dlsym() the table,
 * check size and version, then run three forked ranks over loopback
 * (tcp;ofi_rxm on lo) through the table only: init, context_create_file and
 * context_create with a host store of this file, allreduce exact and lossy
 * (int8) against a double-precision sum, bit-identical replicas (allgather
 * of hashes), broadcast, send/recv of tensors and bytes, barrier, stats,
 * residual checkpoints, context_destroy, finalize. Also: an invalid or
 * unknown GRADWIRE_* variable makes init fail naming it.
 *
 * This program is linked with -ldl and without the gradwire library, so
 * every call it makes goes through the table.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "gradwire/plugin.h"
#include "tp_fork.h"
#include "tutil.h"

#define RANKS 3
#define N 100003 /* odd: ring chunks of unequal length */

static const struct gradwire_plugin_v1 *gw;

static void load_table(void)
{
	const char *lib = getenv("GW_LIB");
	void *h;

	if (gw)
		return;
	if (!lib)
		tu_skip("GW_LIB (the path of libgradwire.so) is not set");
	h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		printf("dlopen %s: %s\n", lib, dlerror());
		return;
	}
	gw = dlsym(h, "gradwire_plugin_v1");
	if (!gw)
		printf("dlsym: %s\n", dlerror());
}

static void test_table(void)
{
	load_table();
	CU_ASSERT_PTR_NOT_NULL_FATAL(gw);
	CU_ASSERT(gw->size >= sizeof(struct gradwire_plugin_v1));
	CU_ASSERT_EQUAL(gw->version, GRADWIRE_PLUGIN_VERSION);
	/* Every member after size and version is a function pointer, set. */
	for (size_t off = offsetof(struct gradwire_plugin_v1, init); off < sizeof(*gw);
	     off += sizeof(void (*)(void))) {
		void (*fn)(void);

		memcpy(&fn, (const char *)gw + off, sizeof(fn));
		CU_ASSERT_PTR_NOT_NULL(fn);
	}
	CU_ASSERT_PTR_NOT_NULL(gw->strerror(-EINVAL));
	CU_ASSERT_PTR_NOT_NULL(gw->strerror(-ETIMEDOUT));
}

static void expect_init_fails(const char *name, const char *value)
{
	char err[256] = "";

	setenv(name, value, 1);
	CU_ASSERT_EQUAL(gw->init(err, sizeof(err)), -EINVAL);
	if (!strstr(err, name))
		printf("\n  init error for %s=%s does not name it: \"%s\"\n", name, value, err);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, name));
	unsetenv(name);
}

static void test_init_errors(void)
{
	struct gradwire_context *c = (void *)1;
	char err[256] = "";

	load_table();
	CU_ASSERT_PTR_NOT_NULL_FATAL(gw);
	expect_init_fails("GRADWIRE_TIMEOUT_MS", "soon");
	expect_init_fails("GRADWIRE_MAC", "sometimes");
	expect_init_fails("GRADWIRE_CODEC", "int9");
	expect_init_fails("GRADWIRE_CODECS", "int8"); /* unknown name: a typo */
	/* No context before a successful init. */
	CU_ASSERT_EQUAL(gw->context_create_file(0, 1, "/tmp", &c, err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "init"));
	/* Bad arguments are refused before anything connects. */
	CU_ASSERT_EQUAL(gw->init(err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(gw->context_create_file(2, 2, "/tmp", &c, err, sizeof(err)), -EINVAL);
	CU_ASSERT_EQUAL(gw->context_create(0, 1, NULL, &c, err, sizeof(err)), -EINVAL);
	CU_ASSERT_EQUAL(gw->finalize(), 0);
}

/* ---- a host store: one file per key in the harness folder --------------- */

static void key_path(const char *dir, const char *key, char *path, size_t cap)
{
	size_t o = (size_t)snprintf(path, cap, "%s/host-", dir);

	for (; *key && o + 4 < cap; key++) {
		unsigned char ch = (unsigned char)*key;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9'))
			path[o++] = (char)ch;
		else
			o += (size_t)snprintf(path + o, cap - o, "%%%02X", ch);
	}
	path[o] = '\0';
}

static int host_set(void *arg, const char *key, const void *val, size_t len)
{
	char path[512], tmp[600];
	FILE *f;

	key_path(arg, key, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
	f = fopen(tmp, "wb");
	if (!f)
		return -errno;
	if (fwrite(val, 1, len, f) != len) {
		fclose(f);
		return -EIO;
	}
	if (fclose(f) || rename(tmp, path))
		return -errno;
	return 0;
}

static ssize_t host_get(void *arg, const char *key, void *buf, size_t cap, int timeout_ms)
{
	struct timespec ts = { 0, 2 * 1000 * 1000 };
	char path[512];

	key_path(arg, key, path, sizeof(path));
	for (int waited = 0;; waited += 2) {
		FILE *f = fopen(path, "rb");

		if (f) {
			size_t len = fread(buf, 1, cap, f);
			int more = fgetc(f) != EOF;

			fclose(f);
			return more ? -ENOSPC : (ssize_t)len;
		}
		if (waited >= timeout_ms)
			return -ETIMEDOUT;
		nanosleep(&ts, NULL);
	}
}

/* ---- three ranks through the table -------------------------------------- */

static uint64_t seed_of(int rank, int step)
{
	return (uint64_t)rank * 7919 + (uint64_t)step * 104729 + 1;
}

#define FAIL(code, ...)                                                                            \
	do {                                                                                       \
		fprintf(stderr, "rank %d: ", rank);                                                \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fputc('\n', stderr);                                                               \
		rc = (code);                                                                       \
		goto out;                                                                          \
	} while (0)

/*
 * Allreduce of every rank's tu_fill(seed_of(r, step)) data. Exact (flags 0):
 * within 1e-5 of the sum in double. Lossy (int8): each of the ring's three
 * lossy hops errs by at most half a quantisation step, a step being at most
 * max|partial sum| / 127; the bound allows size steps per element.
 */
/* The default list's network provider: libfabric's native TCP provider,
 * "net" before libfabric 1.18 and "tcp" after (chosen at run time). */
static int tcp_native(const char *prov)
{
	return !strcmp(prov, "net") || !strcmp(prov, "tcp");
}

static int check_allreduce(struct gradwire_context *c, int rank, int size, int step, unsigned flags,
			   int id)
{
	float *y = tu_alloc(N * 4), *x = tu_alloc(N * 4);
	double *exact = tu_alloc(N * 8), *mag = tu_alloc(N * 8), maxmag = 0;
	uint64_t h, *all = tu_alloc(sizeof(uint64_t) * RANKS);
	int rc;

	for (int r = 0; r < size; r++) {
		tu_fill(x, N, seed_of(r, step));
		for (int i = 0; i < N; i++) {
			exact[i] += x[i];
			mag[i] += fabs(x[i]);
		}
	}
	for (int i = 0; i < N; i++)
		maxmag = mag[i] > maxmag ? mag[i] : maxmag;
	tu_fill(y, N, seed_of(rank, step));
	rc = id < 0 ? gw->allreduce(c, y, N, GRADWIRE_SUM, flags)
		    : gw->allreduce_id(c, (uint32_t)id, y, N, GRADWIRE_SUM, flags);
	if (rc)
		FAIL(20, "allreduce (id %d): %s", id, gw->strerror(rc));
	for (int i = 0; i < N; i++) {
		double bound = flags ? size * maxmag / 127 : 1e-5 * mag[i] + 1e-30;

		if (!(fabs(y[i] - exact[i]) <= bound))
			FAIL(21, "allreduce flags %u: y[%d] = %.9g, sum %.9g", flags, i, y[i],
			     exact[i]);
	}
	/* Every replica holds the same bits. */
	h = tp_hash(y, N * 4);
	rc = gw->allgather(c, &h, all, sizeof(h));
	if (rc)
		FAIL(22, "allgather: %s", gw->strerror(rc));
	for (int r = 0; r < size; r++)
		if (all[r] != h)
			FAIL(23, "rank %d's result differs from mine", r);
out:
	free(y), free(x), free(exact), free(mag), free(all);
	return rc;
}

struct run_arg {
	int host_store; /* context_create with this file's store */
};

static int body(int rank, int size, const char *dir, void *varg)
{
	const struct run_arg *a = varg;
	struct gradwire_store store = {
		.size = sizeof(store),
		.set = host_set,
		.get = host_get,
		.arg = (void *)dir,
	};
	struct gradwire_context *c = NULL;
	struct gradwire_stats st;
	char err[512] = "", path[512];
	float v[16], w[16];
	const uint64_t counts[3] = { 0, 10, 6 };
	uint8_t bytes[100];
	int rc, next = (rank + 1) % size, prev = (rank + size - 1) % size;

	/* The network provider between these local ranks too (not shm). */
	unsetenv("GRADWIRE_PROVIDER");
	setenv("GRADWIRE_PROVIDER_LOCAL", "main", 1);
	setenv("GRADWIRE_IFACE", "lo", 1);
	setenv("GRADWIRE_CODEC", "int8", 1);
	setenv("GRADWIRE_MIN_COMPRESS_BYTES", "4096", 1);
	setenv("GRADWIRE_TIMEOUT_MS", "20000", 1);
	rc = gw->init(err, sizeof(err));
	if (rc)
		FAIL(10, "init: %s (%s)", err, gw->strerror(rc));
	if (a->host_store)
		rc = gw->context_create(rank, size, &store, &c, err, sizeof(err));
	else
		rc = gw->context_create_file(rank, size, dir, &c, err, sizeof(err));
	if (rc)
		FAIL(11, "context_create: %s (%s)", err, gw->strerror(rc));

	/* Lossy first: the stats then show the codec compressed. */
	rc = check_allreduce(c, rank, size, 1, GRADWIRE_LOSSY, -1);
	if (rc)
		goto out;
	/* Ring: this rank sends to next and receives from prev. Three of the
	 * four hops a chunk makes are int8 (about a quarter of the bytes). */
	rc = gw->stats(c, next, &st);
	if (rc)
		FAIL(30, "stats: %s", gw->strerror(rc));
	if (strncmp(st.codec, "int8", 4) || !st.frames_sent ||
	    !(st.wire_sent < st.raw_sent / 4 * 3) || strcmp(st.mac, "none") ||
	    !tcp_native(st.provider))
		FAIL(31,
		     "stats to %d: codec %s, mac %s, provider '%s', %llu frames, wire %llu of raw "
		     "%llu",
		     next, st.codec, st.mac, st.provider, (unsigned long long)st.frames_sent,
		     (unsigned long long)st.wire_sent, (unsigned long long)st.raw_sent);
	rc = gw->stats(c, prev, &st);
	if (rc || !st.frames_recv || st.mac_failures || st.rejected)
		FAIL(32, "stats from %d: %llu frames, %d", prev, (unsigned long long)st.frames_recv,
		     rc);
	if (gw->stats(c, rank, &st) != -EINVAL)
		FAIL(33, "stats of itself");
	rc = check_allreduce(c, rank, size, 2, 0, -1);
	if (rc)
		goto out;
	/* The same length under its own id: its own slots and residuals. */
	rc = check_allreduce(c, rank, size, 3, GRADWIRE_LOSSY, 5);
	if (rc)
		goto out;

	/* AVG is the sum over size, the same on every rank. */
	for (int i = 0; i < 16; i++)
		v[i] = (float)(rank + 1) * (float)i;
	rc = gw->allreduce(c, v, 16, GRADWIRE_AVG, 0);
	for (int i = 0; !rc && i < 16; i++)
		if (v[i] != (float)i * 2.0f) /* (1 + 2 + 3) / 3 */
			FAIL(40, "avg: v[%d] = %g", i, v[i]);

	/* The allreduce's halves: this rank's shard of the sum (16 values on
	 * 3 ranks: shards of 6, 5, 5 from 0, 6, 11), then every shard to
	 * every rank. The rest of v is the caller's until the allgather. */
	for (int i = 0; i < 16; i++)
		v[i] = (float)(rank + 1) * (float)i;
	rc = rc ? rc : gw->reduce_scatter(c, 9, v, 16, GRADWIRE_SUM, 0);
	if (rc)
		FAIL(46, "reduce_scatter: %s", gw->strerror(rc));
	for (int i = 5 * rank + (rank > 0); i < 5 * rank + (rank > 0) + 5 + (rank == 0); i++)
		if (v[i] != (float)i * 6.0f) /* 1 + 2 + 3 */
			FAIL(47, "reduce_scatter: v[%d] = %g", i, v[i]);
	rc = gw->allgather_f32(c, 9, v, 16, 0);
	if (rc)
		FAIL(48, "allgather_f32: %s", gw->strerror(rc));
	for (int i = 0; i < 16; i++)
		if (v[i] != (float)i * 6.0f)
			FAIL(49, "allgather_f32: v[%d] = %g", i, v[i]);
	/* The same with the shards as counts per rank: 0, 10, 6 values. */
	for (int i = 0; i < 16; i++)
		v[i] = (float)(rank + 1) * (float)i;
	rc = gw->reduce_scatter_counts(c, 10, v, 16, counts, GRADWIRE_SUM, 0);
	if (rc)
		FAIL(51, "reduce_scatter_counts: %s", gw->strerror(rc));
	for (int i = rank == 2 ? 10 : 0; i < (rank == 1 ? 10 : rank == 2 ? 16 : 0); i++)
		if (v[i] != (float)i * 6.0f)
			FAIL(52, "reduce_scatter_counts: v[%d] = %g", i, v[i]);
	rc = gw->allgather_f32_counts(c, 10, v, 16, counts, 0);
	if (rc)
		FAIL(53, "allgather_f32_counts: %s", gw->strerror(rc));
	for (int i = 0; i < 16; i++)
		if (v[i] != (float)i * 6.0f)
			FAIL(54, "allgather_f32_counts: v[%d] = %g", i, v[i]);

	/* Broadcast from rank 1. */
	for (int i = 0; i < 100; i++)
		bytes[i] = rank == 1 ? (uint8_t)(i * 7 + 3) : 0;
	rc = rc ? rc : gw->broadcast(c, 1, bytes, sizeof(bytes));
	if (rc)
		FAIL(41, "broadcast: %s", gw->strerror(rc));
	for (int i = 0; i < 100; i++)
		if (bytes[i] != (uint8_t)(i * 7 + 3))
			FAIL(42, "broadcast: byte %d", i);

	/* Point to point around the ring: a tensor (exact), then bytes. */
	for (int i = 0; i < 16; i++)
		v[i] = (float)rank + (float)i / 16;
	rc = gw->send(c, next, 5, v, 16, 0);
	if (!rc)
		rc = gw->recv(c, prev, 5, w, 16, 0);
	if (rc)
		FAIL(43, "send/recv: %s", gw->strerror(rc));
	for (int i = 0; i < 16; i++)
		if (w[i] != (float)prev + (float)i / 16)
			FAIL(44, "recv: w[%d] = %g", i, w[i]);
	memset(bytes, rank, sizeof(bytes));
	rc = gw->send_bytes(c, next, 6, bytes, sizeof(bytes));
	if (!rc)
		rc = gw->recv_bytes(c, prev, 6, bytes, sizeof(bytes));
	if (rc)
		FAIL(45, "send/recv bytes: %s", gw->strerror(rc));
	if (bytes[0] != prev || bytes[99] != bytes[0])
		FAIL(46, "recv_bytes: %d", bytes[0]);
	if (gw->send(c, next, GRADWIRE_SLOT_MAX, v, 16, 0) != -EINVAL ||
	    gw->send(c, rank, 5, v, 16, 0) != -EINVAL)
		FAIL(47, "send accepted a collective's slot or itself");

	/* The queue: context_reform() refused while it is open (its thread
	 * runs on the context's collectives), the context untouched; 8
	 * allreduces submitted at once, run in order by the library's thread,
	 * each with the synchronous call's exact result; a ticket never issued;
	 * after cancel, submits are refused. */
	{
		struct gradwire_queue *q = NULL;
		static float qv[8][4096];
		uint64_t t[8], bad;
		int same[RANKS] = { 0, 1, 2 };

		rc = gw->queue_create(c, &q);
		if (!rc && (gw->context_reform(&c, 1, rank, size, same, &store, err, sizeof(err)) !=
				    -EBUSY ||
			    !strstr(err, "queue_destroy")))
			FAIL(59, "context_reform with a queue open: \"%s\"", err);
		for (int k = 0; !rc && k < 8; k++) {
			for (int i = 0; i < 4096; i++)
				qv[k][i] = (float)(rank + 1) * (float)(k * 4096 + i);
			rc = gw->queue_submit(q, 100 + (uint32_t)k, qv[k], 4096, GRADWIRE_SUM, 0,
					      &t[k]);
		}
		for (int k = 7; !rc && k >= 0; k--) /* any order of waits */
			rc = gw->queue_wait(q, t[k], 20000);
		if (rc)
			FAIL(60, "queue: %s", gw->strerror(rc));
		for (int k = 0; k < 8; k++)
			for (int i = 0; i < 4096; i++) /* (1 + 2 + 3) * x, exact */
				if (qv[k][i] != 6.0f * (float)(k * 4096 + i) ||
				    t[k] != (uint64_t)k + 1)
					FAIL(61, "queue: ticket %llu, value %d of %d: %g",
					     (unsigned long long)t[k], i, k, qv[k][i]);
		if (gw->queue_wait(q, 9, 0) != -ENOENT || gw->queue_wait(q, 0, 0) != -ENOENT ||
		    gw->queue_submit(q, 1, NULL, 4, GRADWIRE_SUM, 0, &bad) != -EINVAL)
			FAIL(62, "queue: a ticket never issued, or a NULL buffer");
		gw->queue_cancel(q);
		if (gw->queue_submit(q, 1, qv[0], 4, GRADWIRE_SUM, 0, &bad) != -ECANCELED)
			FAIL(63, "queue: a submit after cancel");
		gw->queue_destroy(q);
		gw->queue_destroy(NULL);
		if (gw->error(c))
			FAIL(64, "error() says %s with nothing failed", gw->error(c));
	}

	/* Residual checkpoint: save, reset, load. */
	snprintf(path, sizeof(path), "%s/res-%d", dir, rank);
	rc = gw->residuals_save(c, path);
	if (!rc) {
		gw->residuals_reset(c);
		rc = gw->residuals_load(c, path);
	}
	if (rc)
		FAIL(48, "residuals: %s", gw->strerror(rc));

	rc = gw->barrier(c);
	if (rc)
		FAIL(49, "barrier: %s", gw->strerror(rc));
	if (gw->finalize() != -EBUSY)
		FAIL(50, "finalize with an open context");
out:
	gw->context_destroy(c);
	if (gw->finalize() && !rc) {
		fprintf(stderr, "rank %d: finalize\n", rank);
		rc = 51;
	}
	return rc;
}

static void run(int host_store)
{
	struct run_arg a = { host_store };
	int codes[RANKS];

	load_table();
	CU_ASSERT_PTR_NOT_NULL_FATAL(gw);
	tp_pin_loopback();
	CU_ASSERT_EQUAL_FATAL(tp_run(RANKS, 120, body, &a, codes), 0);
	for (int r = 0; r < RANKS; r++) {
		if (codes[r])
			printf("\n  rank %d exited %d\n", r, codes[r]);
		CU_ASSERT_EQUAL(codes[r], 0);
	}
}

static void test_ranks_file_store(void)
{
	run(0);
}
static void test_ranks_host_store(void)
{
	run(1);
}

/*
 * Two ranks queue tensor id 3 with different lengths (what a DDP hook
 * does): both tickets fail at once with -EINVAL, and error() names the
 * tensor, both ranks and both lengths on each rank.
 */
static int body_lengths(int rank, int size, const char *dir, void *varg)
{
	static const char want[] =
		"allreduce #0 of tensor id 3: rank 0 passes 1000 values, rank 1 passes 2000";
	struct gradwire_context *c = NULL;
	struct gradwire_queue *q = NULL;
	static float v[2000];
	char err[512] = "";
	uint64_t t = 0;
	struct timespec t0, t1;
	int rc;

	(void)varg;
	unsetenv("GRADWIRE_PROVIDER");
	setenv("GRADWIRE_PROVIDER_LOCAL", "main", 1);
	setenv("GRADWIRE_IFACE", "lo", 1);
	setenv("GRADWIRE_TIMEOUT_MS", "20000", 1);
	rc = gw->init(err, sizeof(err));
	if (!rc)
		rc = gw->context_create_file(rank, size, dir, &c, err, sizeof(err));
	if (rc)
		FAIL(10, "init or context_create: %s (%s)", err, gw->strerror(rc));
	rc = gw->queue_create(c, &q);
	if (rc)
		FAIL(11, "queue_create: %s", gw->strerror(rc));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = gw->queue_submit(q, 3, v, rank ? 2000 : 1000, GRADWIRE_SUM, 0, &t);
	if (!rc)
		rc = gw->queue_wait(q, t, 20000);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc != -EINVAL)
		FAIL(12, "queue_wait: %s, want -EINVAL", gw->strerror(rc));
	if ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 > 2000)
		FAIL(13, "the mismatch took over 2 s to surface");
	if (!gw->error(c) || strcmp(gw->error(c), want))
		FAIL(14, "error() says '%s', want '%s'", gw->error(c) ? gw->error(c) : "(NULL)",
		     want);
	rc = gw->allreduce_id(c, 3, v, 1000, GRADWIRE_SUM, 0);
	if (rc != -EINVAL)
		FAIL(15, "a later call: %s, want -EINVAL", gw->strerror(rc));
	rc = 0;
out:
	gw->queue_destroy(q);
	gw->context_destroy(c);
	gw->finalize();
	return rc;
}

static void test_lengths(void)
{
	int codes[2];

	load_table();
	CU_ASSERT_PTR_NOT_NULL_FATAL(gw);
	tp_pin_loopback();
	CU_ASSERT_EQUAL_FATAL(tp_run(2, 60, body_lengths, NULL, codes), 0);
	CU_ASSERT_EQUAL(codes[0], 0);
	CU_ASSERT_EQUAL(codes[1], 0);
}

int main(void)
{
	CU_TestInfo tests[] = {
		{ "table", test_table },
		{ "init errors", test_init_errors },
		{ "3 ranks, file store", test_ranks_file_store },
		{ "3 ranks, host store", test_ranks_host_store },
		{ "ranks that pass different lengths: both fail at once, naming both",
		  test_lengths },
		CU_TEST_INFO_NULL,
	};

	return tu_run("plugin", tests);
}
