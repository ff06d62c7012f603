/* SPDX-License-Identifier: MIT */
/*
 * tp-bench.c - gradwire-tp-bench: point-to-point throughput of the
 * transport over loopback, side by side with libfabric's fi_pingpong.
 *
 * Two forked ranks on "lo" (tcp;ofi_rxm by default, or shm):
 *   stream   - rank 0 sends R messages of S bytes to rank 1 with W in
 *              flight; rank 1 acknowledges the last one. GB/s = R*S / time.
 *   pingpong - one message of S bytes each way per iteration, like
 *              fi_pingpong; GB/s = 2*I*S / time (fi_pingpong's "MB/sec").
 * Each figure is the median of several repetitions. With -c, fi_pingpong
 * runs in the same session, alternating A B A B (loopback TCP speed drifts
 * for tens of seconds, so only pairs and medians compare), and the ratio of
 * medians is printed.
 *
 * Network rule: everything is pinned to lo (FI_TCP_IFACE, -d lo, domain
 * "lo" in the hints); fi_pingpong's client targets 127.0.0.1 only.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "tp_harness.h"

struct opts {
	size_t size;
	int msgs, window, reps, pairs, iters;
	bool pingpong, compare;
	struct tp_env env;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One repetition of the streaming test; rank 0 returns GB/s. */
static double stream_once(struct gw_tp *tp, const struct opts *o, char *buf, uint32_t rep)
{
	struct gw_tp_req *req = calloc((size_t)o->window, sizeof(*req));
	int rank = gw_tp_rank(tp), done = 0, posted = 0;
	char ack = 1;
	double t0 = now_s(), gbs = -1;

	if (!req)
		return -1;
	while (done < o->msgs) {
		while (posted < o->msgs && posted - done < o->window) {
			struct gw_tp_req *r = &req[posted % o->window];
			char *b = buf + (size_t)(posted % o->window) * o->size;
			int ret = rank == 0
				      ? gw_tp_isend(tp, 1, rep, (uint32_t)posted, b, o->size, r)
				      : gw_tp_irecv(tp, 0, rep, (uint32_t)posted, b, o->size, r);

			if (ret)
				goto out;
			posted++;
		}
		if (gw_tp_wait(tp, &req[done % o->window], o->env.timeout_ms) != (ssize_t)o->size)
			goto out;
		done++;
	}
	/* The receiver's acknowledgement closes the clock. */
	if (rank == 0) {
		if (gw_tp_recv(tp, 1, GW_TP_SLOT_MAX, rep, &ack, 1) != 1)
			goto out;
		gbs = (double)o->msgs * (double)o->size / (now_s() - t0) / 1e9;
	} else if (gw_tp_send(tp, 0, GW_TP_SLOT_MAX, rep, &ack, 1) == 1) {
		gbs = 0;
	}
out:
	for (int i = done; i < posted; i++)
		gw_tp_wait(tp, &req[i % o->window], 1);
	free(req);
	return gbs;
}

static double pingpong_once(struct gw_tp *tp, const struct opts *o, char *buf, uint32_t rep)
{
	int rank = gw_tp_rank(tp), peer = 1 - rank;
	double t0 = now_s();

	for (int i = 0; i < o->iters; i++) {
		ssize_t a, b;

		if (rank == 0) {
			a = gw_tp_send(tp, peer, rep, (uint32_t)i, buf, o->size);
			b = gw_tp_recv(tp, peer, rep, (uint32_t)i, buf, o->size);
		} else {
			a = gw_tp_recv(tp, peer, rep, (uint32_t)i, buf, o->size);
			b = gw_tp_send(tp, peer, rep, (uint32_t)i, buf, o->size);
		}
		if (a != (ssize_t)o->size || b != (ssize_t)o->size)
			return -1;
	}
	return 2.0 * o->iters * (double)o->size / (now_s() - t0) / 1e9;
}

/* Rank body: warm up, run the repetitions, rank 0 prints "GBPS <median>". */
static int bench_body(int rank, int size, const char *dir, void *arg)
{
	const struct opts *o = arg;
	size_t bytes = o->size * (size_t)(o->pingpong ? 1 : o->window);
	char *buf = malloc(bytes ? bytes : 1);
	double *v = calloc((size_t)o->reps, sizeof(double));
	struct gw_tp_mr *mr = NULL;
	struct gw_store *st;
	int err, code = 1;
	struct gw_tp *tp = tp_open(&o->env, rank, size, dir, &st, &err);

	if (!tp || !buf || !v)
		goto out;
	memset(buf, rank + 1, bytes);
	if (gw_tp_mr_reg(tp, buf, bytes, &mr))
		goto out;
	for (int r = -1; r < o->reps; r++) { /* r = -1: warm-up */
		double g = o->pingpong ? pingpong_once(tp, o, buf, (uint32_t)(r + 1))
				       : stream_once(tp, o, buf, (uint32_t)(r + 1));

		if (g < 0) {
			fprintf(stderr, "rank %d: repetition %d failed\n", rank, r);
			goto out;
		}
		if (r >= 0)
			v[r] = g;
	}
	if (rank == 0)
		printf("GBPS %.4f\n", median(v, o->reps));
	code = tp_barrier(st, rank, size, "bench-end", o->env.timeout_ms) ? 1 : 0;
out:
	gw_tp_mr_dereg(tp, mr);
	if (tp)
		tp_close(tp, st);
	free(buf);
	free(v);
	return code;
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

/* One fi_pingpong pair on 127.0.0.1; GB/s (its MB/sec / 1000), or < 0. */
static double fi_pingpong_once(const struct opts *o, int port)
{
	char size[32], iters[32], portstr[16], out[8192];
	char *srv[] = {"fi_pingpong", "-p",  (char *)o->env.provider,
		       "-e",	      "rdm", "-d",
		       "lo",	      "-I",  iters,
		       "-S",	      size,  "-B",
		       portstr,	      NULL};
	char *cli[] = {"fi_pingpong", "-p",	   (char *)o->env.provider,
		       "-e",	      "rdm",	   "-d",
		       "lo",	      "-I",	   iters,
		       "-S",	      size,	   "-P",
		       portstr,	      "127.0.0.1", NULL};
	double mbs = -1;
	int status;
	pid_t pid;

	snprintf(size, sizeof(size), "%zu", o->size);
	snprintf(iters, sizeof(iters), "%d", o->iters);
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
	return mbs < 0 ? -1 : mbs / 1000.0;
}

static double bench_once(struct opts *o)
{
	int codes[2];
	int fd[2], saved;
	char out[256] = "";
	ssize_t n;
	double g = -1;

	/* Rank 0 prints its median on stdout: catch it through a pipe. */
	fflush(stdout);
	if (pipe(fd))
		return -1;
	saved = dup(STDOUT_FILENO);
	dup2(fd[1], STDOUT_FILENO);
	close(fd[1]);
	if (tp_run(2, 120, bench_body, o, codes) || codes[0] || codes[1])
		fprintf(stderr, "bench ranks exited %d %d\n", codes[0], codes[1]);
	fflush(stdout);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	n = read(fd[0], out, sizeof(out) - 1);
	close(fd[0]);
	if (n > 0) {
		out[n] = '\0';
		char *p = strstr(out, "GBPS ");

		if (p)
			g = atof(p + 5);
	}
	return g;
}

static void usage(void)
{
	fprintf(stderr, "usage: gradwire-tp-bench [-s bytes] [-n msgs] [-w window] "
			"[-r reps] [-P] [-c pairs] [-I iters] [-p provider] [-m] "
			"[-y spin_us]\n"
			"  -P  ping-pong instead of streaming (like fi_pingpong)\n"
			"  -c  compare with fi_pingpong in A B A B pairs\n"
			"  -m  force memory registration\n");
}

int main(int argc, char **argv)
{
	struct opts o = {
	    .size = 4 << 20,
	    .msgs = 64,
	    .window = 8,
	    .reps = 5,
	    .pairs = 0,
	    .iters = 50,
	    .env = {"tcp;ofi_rxm", "lo", false, GW_LOG_WARN, 30000, 0},
	};
	int c;

	while ((c = getopt(argc, argv, "s:n:w:r:Pc:I:p:my:h")) != -1) {
		switch (c) {
		case 's':
			o.size = strtoull(optarg, NULL, 0);
			break;
		case 'n':
			o.msgs = atoi(optarg);
			break;
		case 'w':
			o.window = atoi(optarg);
			break;
		case 'r':
			o.reps = atoi(optarg);
			break;
		case 'P':
			o.pingpong = true;
			break;
		case 'c':
			o.pairs = atoi(optarg);
			o.compare = true;
			break;
		case 'I':
			o.iters = atoi(optarg);
			break;
		case 'p':
			o.env.provider = optarg;
			break;
		case 'm':
			o.env.force_mr = true;
			break;
		case 'y':
			o.env.spin_us = atoi(optarg);
			break;
		default:
			usage();
			return c == 'h' ? 0 : 2;
		}
	}
	if (!o.size || o.msgs < 1 || o.window < 1 || o.reps < 1 || o.iters < 1 || o.pairs < 0 ||
	    o.pairs > 20) {
		usage();
		return 2;
	}
	if (!strcmp(o.env.provider, "shm"))
		o.env.iface = NULL;
	tp_pin_loopback();
	printf("gradwire-tp-bench: %s, %zu-byte messages, %s\n", o.env.provider, o.size,
	       o.pingpong ? "ping-pong" : "streaming");
	if (!o.compare) {
		double g = bench_once(&o);

		if (g < 0)
			return 1;
		printf("gradwire %s: %.3f GB/s (median of %d)\n",
		       o.pingpong ? "ping-pong" : "stream", g, o.reps);
		return 0;
	}
	/* A B A B: gradwire, then fi_pingpong, pairs times. */
	double a[20], b[20];
	int port = 40000 + (int)(getpid() % 20000);

	for (int i = 0; i < o.pairs; i++) {
		a[i] = bench_once(&o);
		b[i] = fi_pingpong_once(&o, port + i);
		printf("pair %d: gradwire %.3f GB/s, fi_pingpong %.3f GB/s\n", i, a[i], b[i]);
		fflush(stdout);
		if (a[i] < 0 || b[i] < 0)
			return 1;
	}
	double ma = median(a, o.pairs), mb = median(b, o.pairs);

	printf("median: gradwire %s %.3f GB/s, fi_pingpong %.3f GB/s, "
	       "ratio %.2f\n",
	       o.pingpong ? "ping-pong" : "stream", ma, mb, ma / mb);
	return 0;
}
