/* SPDX-License-Identifier: MIT */
/* tp_harness.c - see tp_harness.h. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "tp_harness.h"

/* LeakSanitizer's interface; NULL unless the build links a sanitizer. */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));


void tp_pin_loopback(void)
{
	setenv("FI_TCP_IFACE", "lo", 1);
	setenv("FI_SOCKETS_IFACE", "lo", 1);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[512];

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

int tp_run(int size, int limit_s, tp_body body, void *arg, int *codes)
{
	char dir[] = "/tmp/gw-tp-XXXXXX";
	pid_t pid[TP_MAX_RANKS];
	int64_t deadline;
	int left = size;

	if (size < 1 || size > TP_MAX_RANKS || limit_s < 1)
		return -EINVAL;
	if (!mkdtemp(dir))
		return -errno;
	fflush(stdout);
	fflush(stderr);
	for (int r = 0; r < size; r++) {
		codes[r] = -1;
		pid[r] = fork();
		if (pid[r] < 0) {
			int err = -errno;

			for (int k = 0; k < r; k++)
				kill(pid[k], SIGKILL);
			for (int k = 0; k < r; k++)
				waitpid(pid[k], NULL, 0);
			rm_dir(dir);
			return err;
		}
		if (pid[r] == 0) {
			int code;

			alarm((unsigned)limit_s);
			code = body(r, size, dir, arg);
			fflush(stdout);
			/* _exit() skips LeakSanitizer's check at exit: run it here
			 * (sanitizer builds only) so a rank that leaks fails. */
			if (__lsan_do_recoverable_leak_check && !code &&
			    __lsan_do_recoverable_leak_check())
				code = TP_LEAKED;
			_exit(code);
		}
	}
	deadline = now_ms() + (int64_t)limit_s * 1000 + 2000;
	while (left > 0) {
		int status;
		pid_t p = waitpid(-1, &status, WNOHANG);

		if (p > 0) {
			for (int r = 0; r < size; r++) {
				if (pid[r] != p)
					continue;
				codes[r] = WIFEXITED(status) ? WEXITSTATUS(status)
							     : 128 + WTERMSIG(status);
				pid[r] = 0;
				left--;
			}
			continue;
		}
		if (now_ms() > deadline) {
			for (int r = 0; r < size; r++) {
				if (pid[r] > 0) {
					fprintf(stderr,
						"harness: rank %d "
						"overran %d s, killed\n",
						r, limit_s);
					kill(pid[r], SIGKILL);
				}
			}
			deadline = now_ms() + 5000;
		}
		struct timespec ts = {0, 5 * 1000 * 1000};

		nanosleep(&ts, NULL);
	}
	rm_dir(dir);
	return 0;
}

struct gw_tp_cfg tp_cfg(const struct tp_env *env)
{
	struct gw_tp_cfg cfg = {
	    .provider = env->provider,
	    .iface = env->iface,
	    .job = "test",
	    .timeout_ms = env->timeout_ms > 0 ? env->timeout_ms : 10000,
	    .force_mr = env->force_mr,
	    .log_level = env->log_level,
	    .spin_us = env->spin_us,
	};
	return cfg;
}

int tp_check_loopback(const struct gw_tp *tp, const struct tp_env *env)
{
	const char *a = gw_tp_addr_str(tp);

	if (!env->iface)
		return 0;
	if (!strncmp(a, "127.", 4) || !strncmp(a, "[::1]", 5))
		return 0;
	fprintf(stderr, "rank %d: address %s is not loopback\n", gw_tp_rank(tp), a);
	return -EADDRNOTAVAIL;
}

struct gw_tp *tp_open(const struct tp_env *env, int rank, int size, const char *dir,
		      struct gw_store **st, int *err)
{
	struct gw_tp_cfg cfg = tp_cfg(env);
	struct gw_tp *tp = NULL;
	int ret;

	*st = NULL;
	ret = gw_store_file_create(dir, st);
	if (ret)
		goto out;
	ret = gw_tp_create(&cfg, rank, size, *st, &tp);
	if (ret)
		goto out_store;
	ret = tp_check_loopback(tp, env);
	if (ret)
		goto out_tp;
	*err = 0;
	return tp;

out_tp:
	gw_tp_destroy(tp);
out_store:
	gw_store_destroy(*st);
	*st = NULL;
out:
	fprintf(stderr, "rank %d: opening %s%s%s: %s\n", rank, env->provider,
		env->iface ? " on " : "", env->iface ? env->iface : "", gw_strerror(ret));
	*err = ret;
	return NULL;
}

void tp_close(struct gw_tp *tp, struct gw_store *st)
{
	gw_tp_destroy(tp);
	gw_store_destroy(st);
}

int tp_barrier(struct gw_store *st, int rank, int size, const char *name, int timeout_ms)
{
	char key[128], v = 1;
	int ret;

	snprintf(key, sizeof(key), "barrier/%s/%d", name, rank);
	ret = gw_store_set(st, key, &v, 1);
	for (int r = 0; r < size && !ret; r++) {
		ssize_t got;

		snprintf(key, sizeof(key), "barrier/%s/%d", name, r);
		got = gw_store_get(st, key, &v, 1, timeout_ms);
		ret = got < 0 ? (int)got : 0;
	}
	return ret;
}

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

void tp_pattern(void *buf, size_t len, uint64_t seed)
{
	unsigned char *p = buf;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t w = mix(seed * UINT64_C(0x9E3779B97F4A7C15) + i);

		memcpy(p + i, &w, 8);
	}
	for (; i < len; i++)
		p[i] = (unsigned char)mix(seed + i);
}

size_t tp_mismatch(const void *buf, size_t len, uint64_t seed)
{
	const unsigned char *p = buf;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t w = mix(seed * UINT64_C(0x9E3779B97F4A7C15) + i);

		if (memcmp(p + i, &w, 8))
			return i + 1;
	}
	for (; i < len; i++)
		if (p[i] != (unsigned char)mix(seed + i))
			return i + 1;
	return 0;
}
