/* SPDX-License-Identifier: MIT */
/* tp_fork.c - forked ranks (tp_run), see tp_fork.h. No gradwire symbol: the
 * plugin test links it without the library, which it dlopen()s. */
#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "tp_fork.h"

/* LeakSanitizer's interface; NULL unless the build links a sanitizer. */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

void tp_pin_loopback(void)
{
	setenv("FI_TCP_IFACE", "lo", 1);
	setenv("FI_NET_IFACE", "lo", 1);
	setenv("FI_SOCKETS_IFACE", "lo", 1);
}

static void crash_trace(int sig)
{
	static const char head[] = "\n*** crashed; the stack (addr2line -f -e <program> "
				   "<+0x offset> names a frame):\n";
	void *pc[64];
	int n = backtrace(pc, 64);

	if (write(2, head, sizeof(head) - 1) > 0)
		backtrace_symbols_fd(pc, n, 2);
	raise(sig); /* SA_RESETHAND: dies of it, so the exit code says which */
}

void tp_trace_crashes(void)
{
	static const int sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };
	struct sigaction sa = { .sa_handler = crash_trace, .sa_flags = SA_RESETHAND | SA_NODEFER };
	void *warm[1];

	backtrace(warm, 1); /* its first call loads libgcc: not in a handler */
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old;

		/* A sanitizer's own handler reports better: keep it. */
		if (!sigaction(sigs[i], NULL, &old) && old.sa_handler == SIG_DFL)
			sigaction(sigs[i], &sa, NULL);
	}
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

enum file_op { F_COUNT, F_REMOVE, F_AGE };

int tp_age_file(const char *path, int age_s)
{
	struct timespec t[2];

	clock_gettime(CLOCK_REALTIME, &t[0]);
	t[0].tv_sec -= age_s;
	t[1] = t[0];
	return utimensat(AT_FDCWD, path, t, 0);
}

/* The files of dir whose names start with prefix ("": all but . and ..):
 * how many, each first removed (F_REMOVE) or given a modification time
 * age_s seconds ago (F_AGE). */
static int each_file(const char *dir, const char *prefix, enum file_op op, int age_s)
{
	DIR *d = opendir(dir);
	size_t len = strlen(prefix);
	struct dirent *e;
	char path[512];
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    strncmp(e->d_name, prefix, len))
			continue;
		n++;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (op == F_REMOVE)
			unlink(path);
		else if (op == F_AGE)
			tp_age_file(path, age_s);
	}
	closedir(d);
	return n;
}

static void rm_dir(const char *dir)
{
	each_file(dir, "", F_REMOVE, 0);
	rmdir(dir);
}

/* pid's shm regions in /dev/shm ("gw-<pid>-<random>:<uid>:<index>"). */
static int regions(pid_t pid, enum file_op op, int age_s)
{
	char prefix[32];

	snprintf(prefix, sizeof(prefix), "gw-%ld-", (long)pid);
	return each_file("/dev/shm", prefix, op, age_s);
}

void tp_forget_regions(pid_t pid)
{
	regions(pid, F_REMOVE, 0);
}

int tp_named_regions(pid_t pid)
{
	return regions(pid, F_COUNT, 0);
}

int tp_age_regions(pid_t pid, int age_s)
{
	return regions(pid, F_AGE, age_s);
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
			tp_trace_crashes();
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
				tp_forget_regions(p);
				pid[r] = 0;
				left--;
			}
			continue;
		}
		if (now_ms() > deadline) {
			for (int r = 0; r < size; r++) {
				if (pid[r] > 0) {
					fprintf(stderr, "harness: rank %d overran %d s, killed\n",
						r, limit_s);
					kill(pid[r], SIGKILL);
				}
			}
			deadline = now_ms() + 5000;
		}
		struct timespec ts = { 0, 5 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	rm_dir(dir);
	return 0;
}

uint64_t tp_hash(const void *p, size_t len)
{
	const uint8_t *b = p;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}
