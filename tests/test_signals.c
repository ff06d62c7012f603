/* SPDX-License-Identifier: MIT */
/*
 * test_signals.c - loading gradwire leaves the host's signal dispositions
 * as they were (transport/fi_load.c), so a launcher's SIGTERM ends a rank
 * the default way (killed by SIGTERM, shell status 143) and its peers get an
 * error that names it.
 *
 * Like a host, it dlopen()s the built libgradwire.so (GW_LIB) and uses only
 * the exported table. Two ranks over loopback; the parent plays the
 * launcher: once both hold a context, it sends SIGTERM to rank 0 - idle, or
 * in the middle of a 16 MiB allreduce - and requires that rank to be gone,
 * killed by SIGTERM, within a second; rank 1 must see its own call fail
 * (within GRADWIRE_TIMEOUT_MS) with a log line naming rank 0.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "gradwire/plugin.h"
#include "tutil.h"

#define N (UINT64_C(4) << 20) /* 16 MiB of floats */
#define TIMEOUT_MS 3000

static const struct gradwire_plugin_v1 *gw;
static void *lib;

static int64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void on_usr1(int sig)
{
	(void)sig;
}

/* Load the library as a host would; 0 or a reason in err. */
static int load(char *err, size_t len)
{
	const char *path = getenv("GW_LIB");

	if (!path) {
		snprintf(err, len, "GW_LIB (the path of libgradwire.so) is not set");
		return -1;
	}
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	gw = lib ? dlsym(lib, "gradwire_plugin_v1") : NULL;
	if (!gw) {
		snprintf(err, len, "dlopen %s: %s", path, dlerror());
		return -1;
	}
	return 0;
}

/* Signals a host may own: the standard ones and SIGRTMIN..SIGRTMAX (32 and
 * 33 belong to the C library; an ASan runtime also takes some at start). */
static bool host_signal(int sig)
{
	return sig < 32 || (sig >= SIGRTMIN && sig <= SIGRTMAX);
}

/* Every host signal's disposition (handler), to compare later. */
static void snapshot(struct sigaction *act)
{
	for (int s = 1; s < NSIG; s++)
		if (!host_signal(s) || sigaction(s, NULL, &act[s]))
			act[s].sa_handler = SIG_ERR;
}

/* The first host signal whose handler differs from the snapshot, or 0. */
static int changed(const struct sigaction *was)
{
	struct sigaction now;

	for (int s = 1; s < NSIG; s++)
		if (host_signal(s) && was[s].sa_handler != SIG_ERR && !sigaction(s, NULL, &now) &&
		    now.sa_handler != was[s].sa_handler)
			return s;
	return 0;
}

/*
 * A rank. Before loading gradwire it sets SIGUSR1 to a handler of its own
 * and leaves SIGTERM and SIGINT at their defaults; after loading and after
 * creating a context all three must be as it set them. Then rank 0 idles or
 * reduces until it is killed; rank 1 reduces until its call fails.
 */
static int rank_main(int rank, const char *dir, int ready_fd, bool busy)
{
	struct sigaction usr1 = { .sa_handler = on_usr1 }, was[NSIG];
	struct gradwire_context *c;
	char err[512];
	float *x = calloc(N, sizeof(float));
	int rc;

	sigaction(SIGUSR1, &usr1, NULL);
	snapshot(was);
	if (!x || load(err, sizeof(err))) {
		fprintf(stderr, "rank %d: %s\n", rank, x ? err : "no memory");
		return 2;
	}
	if (changed(was)) {
		fprintf(stderr, "rank %d: loading changed %s\n", rank, strsignal(changed(was)));
		return 3;
	}
	if (gw->init(err, sizeof(err)) ||
	    gw->context_create_file(rank, 2, dir, &c, err, sizeof(err))) {
		fprintf(stderr, "rank %d: %s\n", rank, err);
		return 4;
	}
	if (changed(was)) {
		fprintf(stderr, "rank %d: the context changed %s\n", rank, strsignal(changed(was)));
		return 5;
	}
	if (write(ready_fd, "r", 1) != 1)
		return 6;
	if (rank == 0 && !busy)
		for (;;)
			pause();
	for (int call = 0;; call++) {
		for (uint64_t i = 0; i < N; i++)
			x[i] = (float)(i % 7) + (float)call;
		rc = gw->allreduce(c, x, N, GRADWIRE_SUM, 0);
		if (rc) {
			fprintf(stderr, "rank %d: allreduce %d: %s\n", rank, call,
				gw->strerror(rc));
			return rank == 1 ? 0 : 7;
		}
	}
}

/* Wait for pid until deadline_ms; return its status or -1. */
static int reap(pid_t pid, int64_t deadline_ms)
{
	int st;

	while (now_ms() < deadline_ms) {
		pid_t w = waitpid(pid, &st, WNOHANG);

		if (w == pid)
			return st;
		usleep(2000);
	}
	return -1;
}

static void scenario(bool busy)
{
	char dir[] = "/tmp/gw-sig-XXXXXX", path[128], text[8192] = "";
	int fds[2], st0, st1;
	pid_t pid[2];
	int64_t t0;
	char c;
	FILE *f;
	size_t len;

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	CU_ASSERT_EQUAL_FATAL(pipe(fds), 0);
	for (int r = 0; r < 2; r++) {
		pid[r] = fork();
		CU_ASSERT_FATAL(pid[r] >= 0);
		if (pid[r] == 0) {
			snprintf(path, sizeof(path), "%s/err-%d", dir, r);
			if (!freopen(path, "w", stderr))
				_exit(9);
			setvbuf(stderr, NULL, _IONBF, 0);
			close(fds[0]);
			alarm(60); /* never outlive the test */
			_exit(rank_main(r, dir, fds[1], busy));
		}
	}
	close(fds[1]);
	/* Both hold a context (a rank that failed closes its end early). */
	CU_ASSERT_EQUAL(read(fds[0], &c, 1), 1);
	CU_ASSERT_EQUAL(read(fds[0], &c, 1), 1);
	close(fds[0]);
	usleep(busy ? 300000 : 100000); /* well inside the allreduces */
	t0 = now_ms();
	kill(pid[0], SIGTERM);
	st0 = reap(pid[0], t0 + 1000);
	if (st0 < 0) {
		printf("\n  rank 0 still alive 1 s after SIGTERM\n");
		kill(pid[0], SIGKILL);
		waitpid(pid[0], &st0, 0);
	} else if (!WIFSIGNALED(st0) || WTERMSIG(st0) != SIGTERM) {
		printf("\n  rank 0 ended with %s %d, not killed by SIGTERM\n",
		       WIFSIGNALED(st0) ? "signal" : "status",
		       WIFSIGNALED(st0) ? WTERMSIG(st0) : WEXITSTATUS(st0));
	}
	CU_ASSERT(WIFSIGNALED(st0) && WTERMSIG(st0) == SIGTERM);
	CU_ASSERT(now_ms() - t0 <= 1000);
	/* Rank 1: its call fails within the timeout, naming rank 0. */
	st1 = reap(pid[1], now_ms() + TIMEOUT_MS + 5000);
	if (st1 < 0) {
		kill(pid[1], SIGKILL);
		waitpid(pid[1], &st1, 0);
	}
	CU_ASSERT(WIFEXITED(st1) && WEXITSTATUS(st1) == 0);
	snprintf(path, sizeof(path), "%s/err-1", dir);
	f = fopen(path, "r");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	len = fread(text, 1, sizeof(text) - 1, f);
	text[len] = '\0';
	fclose(f);
	if (!strstr(text, "rank 0"))
		printf("\n  rank 1's log does not name rank 0:\n%s\n", text);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "rank 0"));
	if (WIFEXITED(st1) && WEXITSTATUS(st1))
		printf("\n  rank 1 exited %d:\n%s\n", WEXITSTATUS(st1), text);
	for (int r = 0; r < 2; r++) {
		snprintf(path, sizeof(path), "%s/err-%d", dir, r);
		unlink(path);
	}
	/* The file store's own files. */
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	if (system(path))
		printf("\n  could not remove %s\n", dir);
}

static void test_idle(void)
{
	scenario(false);
}
static void test_busy(void)
{
	scenario(true);
}

/* A child loads gradwire and opens a context (which loads libfabric) with
 * FI_SHM_DISABLE_CMA set to given (NULL: unset); it exits 0 when the
 * variable then reads want. Run before this process loads gradwire itself,
 * so that each child loads libfabric afresh. */
static int cma_child(const char *given, const char *want)
{
	pid_t pid = fork();
	int status = -1;

	if (pid == 0) {
		struct gradwire_context *c = NULL;
		char err[512], dir[] = "/tmp/gw-sig-XXXXXX", cmd[64];
		const char *now;

		if (given)
			setenv("FI_SHM_DISABLE_CMA", given, 1);
		else
			unsetenv("FI_SHM_DISABLE_CMA");
		if (load(err, sizeof(err)) || !mkdtemp(dir) || gw->init(err, sizeof(err)) ||
		    gw->context_create_file(0, 1, dir, &c, err, sizeof(err)))
			_exit(2);
		now = getenv("FI_SHM_DISABLE_CMA");
		gw->context_destroy(c);
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd))
			_exit(3);
		_exit(now && !strcmp(now, want) ? 0 : 1);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Loading libfabric turns shm's single-copy (CMA) path off unless the host
 * chose (transport/fi_load.c). */
static void test_shm_cma(void)
{
	CU_ASSERT_EQUAL(cma_child(NULL, "1"), 0);
	CU_ASSERT_EQUAL(cma_child("0", "0"), 0);
}

/* In this process: loading gradwire, and opening a context (which loads
 * libfabric and its providers), change no disposition at all. */
static void test_load(void)
{
	struct sigaction before[NSIG];
	struct gradwire_context *c = NULL;
	char err[512], dir[] = "/tmp/gw-sig-XXXXXX", cmd[64];
	int s;

	snapshot(before);
	CU_ASSERT_EQUAL_FATAL(load(err, sizeof(err)), 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	CU_ASSERT_EQUAL(gw->init(err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(gw->context_create_file(0, 1, dir, &c, err, sizeof(err)), 0);
	gw->context_destroy(c);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CU_ASSERT_EQUAL(system(cmd), 0);
	s = changed(before);
	if (s)
		printf("\n  loading gradwire changed the disposition of %s\n", strsignal(s));
	CU_ASSERT_EQUAL(s, 0);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "loading libfabric sets FI_SHM_DISABLE_CMA=1 unless set", test_shm_cma },
		{ "loading leaves every disposition as it was", test_load },
		{ "SIGTERM to an idle rank: default death, peer names it", test_idle },
		{ "SIGTERM mid-allreduce: default death, peer names it", test_busy },
		CU_TEST_INFO_NULL,
	};

	if (!getenv("GW_LIB"))
		tu_skip("GW_LIB (the path of libgradwire.so) is not set");
	setenv("GRADWIRE_PROVIDER", "tcp;ofi_rxm", 1);
	setenv("GRADWIRE_PROVIDER_LOCAL", "tcp;ofi_rxm", 1);
	setenv("GRADWIRE_IFACE", "lo", 1);
	setenv("FI_TCP_IFACE", "lo", 1);
	setenv("GRADWIRE_CODEC", "int8", 1);
	setenv("GRADWIRE_TIMEOUT_MS", "3000", 1);
	return tu_run("signals", tests);
}
