/* SPDX-License-Identifier: MIT */
/*
 * tp-bench-fi.c - gradwire-tp-bench's reference: libfabric's fi_pingpong,
 * server and client, run inside a private network namespace that holds
 * only lo (fi_pingpong's server listens on every interface, so it never
 * runs outside one), and its MB/sec read from the client's last line.
 */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tp-bench.h"

/*
 * Enter a new network namespace and bring its lo up. Refuses (returns < 0)
 * unless lo is then the only interface.
 */
int bench_netns_enter(void)
{
	struct if_nameindex *ifs;
	struct ifreq ifr;
	int fd, bad = 0;

	if (unshare(CLONE_NEWNET)) {
		fprintf(stderr, "unshare(CLONE_NEWNET): %s (needs root or CAP_SYS_ADMIN)\n",
			strerror(errno));
		return -1;
	}
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP;
		bad = ioctl(fd, SIOCSIFFLAGS, &ifr);
	} else {
		bad = 1;
	}
	close(fd);
	if (bad) {
		fprintf(stderr, "bringing lo up in the new namespace failed\n");
		return -1;
	}
	ifs = if_nameindex();
	for (struct if_nameindex *i = ifs; i && i->if_name; i++)
		if (strcmp(i->if_name, "lo"))
			bad = 1;
	if_freenameindex(ifs);
	if (bad || !ifs) {
		fprintf(stderr, "the new network namespace has interfaces besides lo\n");
		return -1;
	}
	return 0;
}

/* Run cmd (argv) with stdout into a pipe; fills out; returns exit status. */
static int run_capture(char *const argv[], char *out, size_t cap, int limit_s)
{
	int fd[2], status = -1;
	size_t got = 0;
	pid_t pid;

	if (pipe(fd))
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		dup2(fd[1], STDOUT_FILENO);
		close(fd[0]);
		close(fd[1]);
		alarm((unsigned)limit_s);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(fd[1]);
	for (;;) {
		ssize_t r = read(fd[0], out + got, cap - 1 - got);

		if (r <= 0 || got + (size_t)r >= cap - 1) {
			if (r > 0)
				got += (size_t)r;
			break;
		}
		got += (size_t)r;
	}
	out[got] = '\0';
	close(fd[0]);
	waitpid(pid, &status, 0);
	return status;
}

/* One fi_pingpong run on 127.0.0.1 (call inside the namespace); MB/s or < 0. */
static double fi_pingpong_run(const char *provider, size_t bytes, int count, int port)
{
	char size[32], iters[32], portstr[16], out[8192];
	char *srv[] = {
		"fi_pingpong", "-p", (char *)provider, "-e", "rdm", "-d", "lo", "-I", iters, "-S",
		size,	       "-B", portstr,	       NULL
	};
	char *cli[] = { "fi_pingpong", "-p",	    (char *)provider,
			"-e",	       "rdm",	    "-d",
			"lo",	       "-I",	    iters,
			"-S",	       size,	    "-P",
			portstr,       "127.0.0.1", NULL };
	double mbs = -1;
	int status;
	pid_t pid;

	snprintf(size, sizeof(size), "%zu", bytes);
	snprintf(iters, sizeof(iters), "%d", count);
	snprintf(portstr, sizeof(portstr), "%d", port);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, STDOUT_FILENO);
		alarm(60);
		execvp(srv[0], srv);
		_exit(127);
	}
	usleep(300 * 1000);
	status = run_capture(cli, out, sizeof(out), 60);
	if (status == 0) {
		/* Last data line: bytes #sent #ack total time MB/sec ... */
		char *line = NULL;

		for (char *p = strtok(out, "\n"); p; p = strtok(NULL, "\n"))
			if (p[0] >= '0' && p[0] <= '9')
				line = p;
		if (line) {
			char b[32], s[32], a[32], t[32], tm[32];
			double v;

			if (sscanf(line, "%31s %31s %31s %31s %31s %lf", b, s, a, t, tm, &v) == 6)
				mbs = v;
		}
	}
	kill(pid, SIGTERM);
	waitpid(pid, &status, 0);
	return mbs;
}

double bench_fi_pingpong(const char *provider, size_t size, int iters, int port)
{
	double mbs = -1;
	int fd[2], status;
	pid_t pid;

	fflush(stdout);
	if (pipe(fd))
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		close(fd[0]);
		alarm(150);
		if (!bench_netns_enter())
			mbs = fi_pingpong_run(provider, size, iters, port);
		if (write(fd[1], &mbs, sizeof(mbs)) != sizeof(mbs))
			_exit(1);
		_exit(0);
	}
	close(fd[1]);
	if (read(fd[0], &mbs, sizeof(mbs)) != sizeof(mbs))
		mbs = -1;
	close(fd[0]);
	waitpid(pid, &status, 0);
	return mbs < 0 ? -1 : mbs / 1000.0;
}
