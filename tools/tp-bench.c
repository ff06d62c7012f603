/* SPDX-License-Identifier: MIT */
/*
 * tp-bench.c - gradwire-tp-bench: point-to-point throughput of the
 * transport and of the connection layer over loopback, side by side with
 * libfabric's fi_pingpong.
 *
 * Two forked ranks on "lo" (tcp;ofi_rxm by default, or shm):
 *   stream   - rank 0 sends R messages of S bytes to rank 1 with W in
 *              flight; rank 1 acknowledges the last one. GB/s = R*S / time.
 *   pingpong - one message of S bytes each way per iteration, like
 *              fi_pingpong; GB/s = 2*I*S / time (fi_pingpong's "MB/sec").
 * Each figure is the median of several repetitions.
 *
 * Variants (-V, repeatable; default "raw"):
 *   raw                      the transport alone (gw_tp_isend/irecv) on the
 *                            caller's (registered) buffers;
 *   ctx[/codec=SPEC][/mac=ALG]  the connection layer (gw_ctx_isend/irecv):
 *                            S/4 float32 values per message, encoded into
 *                            a frame (codec `none` by default, MAC off),
 *                            opened and decoded on receipt. A lossy codec is
 *                            sent with GW_CTX_LOSSY; GB/s then counts tensor
 *                            bytes (S), and the wire ratio is printed. With
 *                            mac=gmac-aes256 or hmac-sha256 the MAC is
 *                            required, under a 0600 key file made for the run.
 * With -c N, each of N rounds runs every variant and then fi_pingpong
 * (A B A B: loopback TCP speed drifts for tens of seconds, so only pairs and
 * medians compare); -R N runs the rounds without fi_pingpong. The medians
 * and their ratios (to fi_pingpong and to the first variant) are printed.
 *
 * Network rule: everything is pinned to lo (FI_TCP_IFACE, -d lo, domain
 * "lo" in the hints, endpoint addresses checked). fi_pingpong's server
 * listens on every interface, so it only ever runs inside a private network
 * namespace (unshare(CLONE_NEWNET), lo up, no other interface; needs root or
 * CAP_SYS_ADMIN): it is refused otherwise. -N puts the whole run in such a
 * namespace.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "conn.h"
#include "tp-bench.h"
#include "tp_harness.h"

#define MAX_VARIANTS 8
#define MAX_ROUNDS 20

struct variant {
	bool ctx;
	const char *codec; /* ctx: codec spec ("none") */
	const char *mac;   /* ctx: MAC algorithm, or NULL for off */
	char label[128];
};

struct opts {
	size_t size;
	int msgs, window, reps, pairs, iters;
	bool pingpong, compare;
	struct tp_env env;
	struct variant v[MAX_VARIANTS];
	int nv;
	const struct variant *cur; /* the variant bench_once() runs */
	char keyfile[64];	   /* "" when no variant uses a MAC */
};

/* What rank 0 reports for one variant run. */
struct result {
	double gbs;  /* median GB/s of tensor bytes, < 0 on failure */
	double wire; /* raw bytes / wire bytes (ctx), 0 for raw */
	char codec[GW_HS_SPEC_MAX + 1], mac[16];
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

/* ---- raw transport ---------------------------------------------------------- */

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
			int ret =
				rank == 0
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
		printf("GBPS %.4f WIRE 0 CODEC - MAC -\n", median(v, o->reps));
	code = tp_barrier(st, rank, size, "bench-end", o->env.timeout_ms) ? 1 : 0;
out:
	gw_tp_mr_dereg(tp, mr);
	if (tp)
		tp_close(tp, st);
	free(buf);
	free(v);
	return code;
}

/* ---- connection layer -------------------------------------------------------- */

/* Gradient-like values (a sum of uniforms, about normal), reproducible. */
static void fill_grad(float *x, size_t n, uint64_t seed)
{
	uint64_t s = seed * UINT64_C(0x9E3779B97F4A7C15) + 1;

	for (size_t i = 0; i < n; i++) {
		float u = 0;

		for (int k = 0; k < 4; k++) {
			s = s * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
			u += (float)(s >> 40) * (1.0f / 16777216.0f);
		}
		x[i] = (u - 2.0f) * 1e-3f;
	}
}

/*
 * One streaming repetition through the connection layer: message i goes on
 * slot i % window (one send and one receive per slot may be in flight), the
 * acknowledgement is a byte message on slot window.
 */
static double ctx_stream_once(struct gw_ctx *ctx, const struct opts *o, float *x, float *y,
			      unsigned flags)
{
	struct gw_ctx_req *req = calloc((size_t)o->window, sizeof(*req));
	int rank = gw_ctx_rank(ctx), done = 0, posted = 0, rc;
	uint64_t n = o->size / sizeof(float);
	uint32_t ack_slot = (uint32_t)o->window;
	struct gw_ctx_req ar;
	char ack = 1;
	double t0 = now_s(), gbs = -1;

	if (!req)
		return -1;
	while (done < o->msgs) {
		while (posted < o->msgs && posted - done < o->window) {
			uint32_t slot = (uint32_t)(posted % o->window);

			rc = rank == 0 ? gw_ctx_isend(ctx, 1, slot, x + slot * n, n, flags,
						      &req[slot])
				       : gw_ctx_irecv(ctx, 0, slot, y + slot * n, n, 0, &req[slot]);
			if (rc)
				goto out;
			posted++;
		}
		if (gw_ctx_wait(ctx, &req[done % o->window]))
			goto out;
		done++;
	}
	if (rank == 0) {
		if (gw_ctx_irecv_bytes(ctx, 1, ack_slot, &ack, 1, &ar) || gw_ctx_wait(ctx, &ar))
			goto out;
		gbs = (double)o->msgs * (double)o->size / (now_s() - t0) / 1e9;
	} else if (!gw_ctx_isend_bytes(ctx, 0, ack_slot, &ack, 1, &ar) && !gw_ctx_wait(ctx, &ar)) {
		gbs = 0;
	}
out:
	/* After a failure the rank exits; gw_ctx_destroy() drops what is posted. */
	free(req);
	return gbs;
}

/* Ping-pong through the connection layer, shaped like pingpong_once(). */
static double ctx_pingpong_once(struct gw_ctx *ctx, const struct opts *o, float *x, float *y,
				unsigned flags)
{
	int rank = gw_ctx_rank(ctx), peer = 1 - rank;
	uint64_t n = o->size / sizeof(float);
	struct gw_ctx_req r;
	double t0 = now_s();

	for (int i = 0; i < o->iters; i++) {
		if (rank == 0) {
			if (gw_ctx_isend(ctx, peer, 0, x, n, flags, &r) || gw_ctx_wait(ctx, &r) ||
			    gw_ctx_irecv(ctx, peer, 0, y, n, 0, &r) || gw_ctx_wait(ctx, &r))
				return -1;
		} else {
			if (gw_ctx_irecv(ctx, peer, 0, y, n, 0, &r) || gw_ctx_wait(ctx, &r) ||
			    gw_ctx_isend(ctx, peer, 0, y, n, flags, &r) || gw_ctx_wait(ctx, &r))
				return -1;
		}
	}
	return 2.0 * o->iters * (double)o->size / (now_s() - t0) / 1e9;
}

static int ctx_body(int rank, int size, const char *dir, void *arg)
{
	const struct opts *o = arg;
	const struct variant *v = o->cur;
	size_t n = o->size / sizeof(float), nbuf = (size_t)(o->pingpong ? 1 : o->window);
	struct gw_ctx_cfg cfg = {
		.tp = tp_cfg(&o->env),
		.codec = v->codec,
		.mac_mode = v->mac ? GW_MAC_REQUIRED : GW_MAC_OFF,
		.mac_key_file = v->mac ? o->keyfile : NULL,
		.mac_algs = v->mac,
		.min_compress_bytes = 0,
	};
	unsigned flags = strcmp(v->codec, "none") ? GW_CTX_LOSSY : 0;
	float *x = NULL, *y = NULL;
	double *g = calloc((size_t)o->reps, sizeof(double));
	struct gw_store *st = NULL;
	struct gw_ctx *ctx = NULL;
	struct gw_conn_stats s;
	char err[256];
	int rc, code = 1;

	if (!g || posix_memalign((void **)&x, 64, nbuf * n * sizeof(float)) ||
	    posix_memalign((void **)&y, 64, nbuf * n * sizeof(float)))
		goto out;
	fill_grad(x, nbuf * n, (uint64_t)rank + 1);
	memset(y, 0, nbuf * n * sizeof(float));
	rc = gw_store_file_create(dir, &st);
	if (!rc)
		rc = gw_ctx_create(&cfg, rank, size, st, &ctx, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "rank %d: gw_ctx_create: %s (%s)\n", rank, gw_strerror(rc), err);
		goto out;
	}
	if (tp_check_loopback(gw_ctx_tp(ctx), &o->env))
		goto out;
	for (int r = -1; r < o->reps; r++) { /* r = -1: warm-up */
		double t = o->pingpong ? ctx_pingpong_once(ctx, o, x, y, flags)
				       : ctx_stream_once(ctx, o, x, y, flags);

		if (t < 0) {
			fprintf(stderr, "rank %d: repetition %d failed\n", rank, r);
			goto out;
		}
		if (r >= 0)
			g[r] = t;
	}
	if (rank == 0 && !gw_ctx_stats(ctx, 1, &s))
		printf("GBPS %.4f WIRE %.4f CODEC %s MAC %s\n", median(g, o->reps),
		       s.wire_sent ? (double)s.raw_sent / (double)s.wire_sent : 0.0, s.codec,
		       gw_mac_alg_name(s.mac));
	code = tp_barrier(st, rank, size, "bench-end", o->env.timeout_ms) ? 1 : 0;
out:
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	free(x);
	free(y);
	free(g);
	return code;
}

/* ---- driver ------------------------------------------------------------------- */

static struct result bench_once(struct opts *o, const struct variant *v)
{
	struct result res = { .gbs = -1 };
	int codes[2];
	int fd[2], saved;
	char out[512] = "";
	ssize_t n;

	/* Rank 0 prints its median on stdout: catch it through a pipe. */
	o->cur = v;
	fflush(stdout);
	if (pipe(fd))
		return res;
	saved = dup(STDOUT_FILENO);
	dup2(fd[1], STDOUT_FILENO);
	close(fd[1]);
	if (tp_run(2, 120, v->ctx ? ctx_body : bench_body, o, codes) || codes[0] || codes[1])
		fprintf(stderr, "bench ranks exited %d %d\n", codes[0], codes[1]);
	fflush(stdout);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	n = read(fd[0], out, sizeof(out) - 1);
	close(fd[0]);
	if (n > 0) {
		out[n] = '\0';
		char *p = strstr(out, "GBPS ");

		if (p && sscanf(p, "GBPS %lf WIRE %lf CODEC %127s MAC %15s", &res.gbs, &res.wire,
				res.codec, res.mac) != 4)
			res.gbs = -1;
	}
	return res;
}

/* "raw" or "ctx[/codec=SPEC][/mac=ALG]" (SPEC may hold ':', '=' and ','). */
static int parse_variant(char *spec, struct variant *v)
{
	char *save = NULL, *t = strtok_r(spec, "/", &save);

	memset(v, 0, sizeof(*v));
	if (!t || (strcmp(t, "raw") && strcmp(t, "ctx")))
		return -1;
	v->ctx = !strcmp(t, "ctx");
	v->codec = "none";
	while ((t = strtok_r(NULL, "/", &save))) {
		if (!v->ctx)
			return -1;
		if (!strncmp(t, "codec=", 6) && t[6])
			v->codec = t + 6;
		else if (!strncmp(t, "mac=", 4) && t[4])
			v->mac = t + 4;
		else
			return -1;
	}
	if (!v->ctx)
		snprintf(v->label, sizeof(v->label), "raw");
	else
		snprintf(v->label, sizeof(v->label), "ctx %s%s%s", v->codec, v->mac ? " " : "",
			 v->mac ? v->mac : "");
	return 0;
}

/* A key file only its owner can read, for variants with a MAC. */
static int make_keyfile(struct opts *o)
{
	char dir[] = "/tmp/gw-tpb-XXXXXX", key[65];
	unsigned char rnd[32];
	int fd, rfd;

	if (!mkdtemp(dir))
		return -1;
	snprintf(o->keyfile, sizeof(o->keyfile), "%s/key", dir);
	rfd = open("/dev/urandom", O_RDONLY);
	if (rfd < 0 || read(rfd, rnd, sizeof(rnd)) != (ssize_t)sizeof(rnd)) {
		if (rfd >= 0)
			close(rfd);
		return -1;
	}
	close(rfd);
	for (int i = 0; i < 32; i++)
		snprintf(key + 2 * i, 3, "%02x", rnd[i]);
	fd = open(o->keyfile, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0)
		return -1;
	if (write(fd, key, 64) != 64) {
		close(fd);
		return -1;
	}
	return close(fd);
}

static void remove_keyfile(struct opts *o)
{
	char *slash;

	if (!o->keyfile[0])
		return;
	unlink(o->keyfile);
	slash = strrchr(o->keyfile, '/');
	if (slash) {
		*slash = '\0';
		rmdir(o->keyfile);
	}
	o->keyfile[0] = '\0';
}

static void usage(void)
{
	fprintf(stderr,
		"usage: gradwire-tp-bench [-s bytes] [-n msgs] [-w window] [-r reps] [-P]\n"
		"                         [-c rounds | -R rounds] [-I iters] [-p provider] [-m]\n"
		"                         [-y spin_us] [-N] [-V variant]... [--ctx]\n"
		"  -P  ping-pong instead of streaming (like fi_pingpong)\n"
		"  -c  rounds of every variant, then fi_pingpong (A B A B); medians, ratios\n"
		"  -R  rounds of every variant, without fi_pingpong\n"
		"  -m  force memory registration\n"
		"  -N  run everything in a private network namespace (only lo; root)\n"
		"  -V  raw | ctx[/codec=SPEC][/mac=gmac-aes256|hmac-sha256] (repeatable;\n"
		"      default raw). ctx: the connection layer, S/4 float32 values per\n"
		"      message, codec none and MAC off unless given; a lossy codec is\n"
		"      sent with GW_CTX_LOSSY and its wire ratio is printed\n"
		"  --ctx  the same as -V ctx\n"
		"fi_pingpong always runs in a private network namespace (needs root).\n");
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "ctx", no_argument, NULL, 'X' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = {
		.size = 4 << 20,
		.msgs = 64,
		.window = 8,
		.reps = 5,
		.pairs = 0,
		.iters = 50,
		.env = { .provider = "tcp;ofi_rxm",
			 .iface = "lo",
			 .log_level = GW_LOG_WARN,
			 .timeout_ms = 30000 },
	};
	bool netns = false, any_mac = false;
	int c, rounds = 0;

	while ((c = getopt_long(argc, argv, "s:n:w:r:Pc:R:I:p:my:NV:h", lopts, NULL)) != -1) {
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
		case 'R':
			o.pairs = atoi(optarg);
			o.compare = false;
			rounds = 1;
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
		case 'N':
			netns = true;
			break;
		case 'V':
		case 'X':
			if (o.nv == MAX_VARIANTS ||
			    parse_variant(c == 'X' ? (char[]){ "ctx" } : optarg, &o.v[o.nv])) {
				fprintf(stderr, "bad variant (or more than %d)\n", MAX_VARIANTS);
				usage();
				return 2;
			}
			any_mac |= o.v[o.nv].mac != NULL;
			o.nv++;
			break;
		default:
			usage();
			return c == 'h' ? 0 : 2;
		}
	}
	if (!o.nv)
		parse_variant((char[]){ "raw" }, &o.v[o.nv++]);
	if (!o.size || o.msgs < 1 || o.window < 1 || o.reps < 1 || o.iters < 1 || o.pairs < 0 ||
	    o.pairs > MAX_ROUNDS || (rounds && o.pairs < 1)) {
		usage();
		return 2;
	}
	for (int i = 0; i < o.nv; i++) {
		if (o.v[i].ctx && (o.size % sizeof(float) || o.window >= (int)GW_TP_SLOT_MAX)) {
			fprintf(stderr, "ctx: the size must be a multiple of 4 bytes "
					"and the window below 2^28 - 1\n");
			return 2;
		}
	}
	if (!strcmp(o.env.provider, "shm"))
		o.env.iface = NULL;
	tp_pin_loopback();
	if (netns && bench_netns_enter())
		return 1;
	if (any_mac && make_keyfile(&o)) {
		fprintf(stderr, "cannot create the MAC key file\n");
		remove_keyfile(&o);
		return 1;
	}
	printf("gradwire-tp-bench: %s, %zu-byte messages, %s%s\n", o.env.provider, o.size,
	       o.pingpong ? "ping-pong" : "streaming", netns ? ", private network namespace" : "");
	if (!o.pairs) {
		/* One run of each variant, ratios to the first. */
		double base = -1;

		for (int i = 0; i < o.nv; i++) {
			struct result r = bench_once(&o, &o.v[i]);

			if (r.gbs < 0) {
				remove_keyfile(&o);
				return 1;
			}
			if (i == 0)
				base = r.gbs;
			printf("gradwire %s %s: %.3f GB/s (median of %d), x%.2f of %s",
			       o.v[i].label, o.pingpong ? "ping-pong" : "stream", r.gbs, o.reps,
			       r.gbs / base, o.v[0].label);
			if (o.v[i].ctx)
				printf(", codec %s mac %s, raw/wire x%.2f", r.codec, r.mac, r.wire);
			printf("\n");
		}
		remove_keyfile(&o);
		return 0;
	}
	/* Rounds: every variant, then fi_pingpong (with -c), pairs times. */
	double a[MAX_VARIANTS][MAX_ROUNDS], b[MAX_ROUNDS], wire[MAX_VARIANTS] = { 0 };
	int port = 40000 + (int)(getpid() % 20000);

	for (int i = 0; i < o.pairs; i++) {
		printf("round %d:", i);
		for (int k = 0; k < o.nv; k++) {
			struct result r = bench_once(&o, &o.v[k]);

			a[k][i] = r.gbs;
			wire[k] = r.wire;
			printf(" %s %.3f,", o.v[k].label, r.gbs);
			fflush(stdout);
			if (r.gbs < 0) {
				printf("\n");
				remove_keyfile(&o);
				return 1;
			}
		}
		if (o.compare) {
			b[i] = bench_fi_pingpong(o.env.provider, o.size, o.iters, port + i);
			printf(" fi_pingpong %.3f", b[i]);
		}
		printf(" GB/s\n");
		fflush(stdout);
		if (o.compare && b[i] < 0) {
			remove_keyfile(&o);
			return 1;
		}
	}
	remove_keyfile(&o);
	double mb = o.compare ? median(b, o.pairs) : 0, m0 = median(a[0], o.pairs);

	printf("medians of %d rounds (%s):\n", o.pairs, o.pingpong ? "ping-pong" : "stream");
	for (int k = 0; k < o.nv; k++) {
		double m = k ? median(a[k], o.pairs) : m0;

		printf("  gradwire %-32s %7.3f GB/s  x%.2f of %s", o.v[k].label, m, m / m0,
		       o.v[0].label);
		if (o.compare)
			printf("  x%.2f of fi_pingpong", m / mb);
		if (o.v[k].ctx)
			printf("  raw/wire x%.2f", wire[k]);
		printf("\n");
	}
	if (o.compare) {
		printf("  fi_pingpong %-29s %7.3f GB/s\n", o.env.provider, mb);
		/* The line the original -c printed (first variant vs fi_pingpong). */
		printf("median: gradwire %s %.3f GB/s, fi_pingpong %.3f GB/s, ratio %.2f\n",
		       o.pingpong ? "ping-pong" : "stream", m0, mb, m0 / mb);
	}
	return 0;
}
