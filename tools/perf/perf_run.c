/* SPDX-License-Identifier: MIT */
/*
 * perf_run.c - one gradwire-perf rank's run: the context and collectives
 * from GRADWIRE_* and the options, then per size the warmup, one checked
 * call from zero residuals (its error and hash), the timed calls, and the
 * exact allgather that brings every rank's figures to rank 0, which sums
 * them into a row (perf_out.c prints it).
 *
 * Each rank's data is deterministic (SplitMix64 of rank and size), so rank
 * 0 computes the exact sum in double. Times, memory and CPU are taken
 * around the collective only; the trace, the memory samples and the
 * gathers are outside the timing.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "config.h"
#include "perf.h"
#include "../../common/rng.h"

/* Least-squares slope of y[from..n) against the call index. */
static double slope_of(const double *y, int from, int n)
{
	double sx = 0, sy = 0, sxx = 0, sxy = 0, k = n - from;

	if (k < 2)
		return 0;
	for (int i = from; i < n; i++) {
		sx += i;
		sy += y[i];
		sxx += (double)i * i;
		sxy += (double)i * y[i];
	}
	return (k * sxy - sx * sy) / (k * sxx - sx * sx);
}

/* A field of /proc/self/status ("VmRSS", "VmHWM") in bytes, or -1. */
static int64_t proc_status(const char *key)
{
	char line[256];
	size_t kl = strlen(key);
	long long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && line[kl] == ':') {
			kb = atoll(line + kl + 1);
			break;
		}
	fclose(f);
	return kb < 0 ? -1 : (int64_t)kb * 1024;
}

/* Start a new peak (VmHWM) at the current resident size. */
static void peak_reset(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");

	if (f) {
		fputs("5", f);
		fclose(f);
	}
}

static int64_t rss0; /* resident bytes once the context and buffers are */

static double clock_s(clockid_t id)
{
	struct timespec t;

	clock_gettime(id, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

double perf_now_s(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

/* This process's CPU time, every thread (libfabric's included). */
static double cpu_s(void)
{
	return clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

/* Rank r's data for n values: roughly N(0,1) (sum of four uniforms). */
static void fill(float *x, uint64_t n, int r)
{
	uint64_t s = 0x9E7F000000000000ull ^ ((uint64_t)r << 40) ^ n;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t z = gw_splitmix64(&s);
		float u = 0;

		for (int k = 0; k < 4; k++)
			u += (float)((z >> (16 * k)) & 0xFFFF) * (1.0f / 65536.0f);
		x[i] = (u - 2.0f) * 1.7320508f;
	}
}

static uint64_t hash_of(const void *p, size_t len)
{
	const uint8_t *b = p;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* Relative L2 error of y[off..off + cnt) against the exact sum of every
 * rank's data. */
static double rel_err(const float *y, uint64_t n, int size, uint64_t off, uint64_t cnt)
{
	double *exact = calloc(n, sizeof(double)), e = 0, t = 0;
	float *x = malloc(n * sizeof(float));

	if (!exact || !x) {
		free(exact), free(x);
		return NAN;
	}
	for (int r = 0; r < size; r++) {
		fill(x, n, r);
		for (uint64_t i = 0; i < n; i++)
			exact[i] += x[i];
	}
	for (uint64_t i = off; i < off + cnt; i++) {
		double d = (double)y[i] - exact[i];

		e += d * d;
		t += exact[i] * exact[i];
	}
	free(exact), free(x);
	return t > 0 ? sqrt(e / t) : sqrt(e);
}

/* The largest error --check accepts for a codec (by name). Sparse and 1-bit
 * codecs send a fraction of the tensor per call: only a finite result that
 * is no farther from the sum than zero is (plus slack) is required. */
static double bound_of(const char *codec)
{
	if (!strncmp(codec, "auto", 4)) /* the loosest of its set */
		return strstr(codec, "topk") || strstr(codec, "randomk") ||
				       strstr(codec, "onebit") || strstr(codec, "powersgd")
			       ? 1.5
			       : 5e-2;
	if (!strncmp(codec, "none", 4))
		return 1e-5;
	if (!strncmp(codec, "fp16", 4))
		return 1e-2;
	if (!strncmp(codec, "bf16", 4))
		return 2e-2;
	if (!strncmp(codec, "int8", 4))
		return 5e-2;
	return 1.5;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median over the calls of the largest value any rank had in that call.
 * all holds stride values per rank, the calls' from off on; v (iters
 * values) is scratch. */
static double median_of_max(const double *all, int size, int iters, size_t stride, size_t off,
			    double *v)
{
	for (int i = 0; i < iters; i++) {
		v[i] = 0;
		for (int r = 0; r < size; r++)
			if (all[(size_t)r * stride + off + i] > v[i])
				v[i] = all[(size_t)r * stride + off + i];
	}
	qsort(v, (size_t)iters, sizeof(double), cmp_double);
	return iters % 2 ? v[iters / 2] : (v[iters / 2 - 1] + v[iters / 2]) / 2;
}

static void sum_stats(struct gw_ctx *ctx, uint64_t *raw, uint64_t *wire)
{
	struct gw_conn_stats s;

	*raw = *wire = 0;
	for (int p = 0; p < gw_ctx_size(ctx); p++) {
		if (p == gw_ctx_rank(ctx) || gw_ctx_stats(ctx, p, &s))
			continue;
		*raw += s.raw_sent;
		*wire += s.wire_sent;
	}
}

/* auto's state of this rank's links into me (the statistics). */
static void auto_stats(struct gw_ctx *ctx, struct rank_info *me)
{
	int size = gw_ctx_size(ctx), rank = gw_ctx_rank(ctx);
	struct gw_conn_stats s;

	me->switches = 0;
	snprintf(me->now, sizeof(me->now), "-");
	for (int p = 0; p < size; p++) {
		if (p == rank || gw_ctx_stats(ctx, p, &s))
			continue;
		me->switches += s.switches;
		if (p == (rank + 1) % size && s.codec_now[0])
			snprintf(me->now, sizeof(me->now), "%.23s", s.codec_now);
	}
}

/* --trace, after timed call i of t seconds: every rank's codec now and
 * result hash, gathered exactly (outside the timing). Rank 0 prints the
 * line now, or with --json keeps it in log (iters x size entries) for the
 * row. Return: 0 or -errno. */
static int trace_call(struct gw_coll *c, const struct opts *o, int i, double t, const float *buf,
		      uint64_t n, struct trace_info *log)
{
	struct gw_ctx *ctx = gw_coll_ctx(c);
	int size = gw_ctx_size(ctx);
	struct trace_info me = { .s = t }, *all = log + (size_t)i * (size_t)size;
	struct rank_info ri;
	int rc;

	me.hash = o->rs ? 0 : hash_of(buf, n * sizeof(float));
	auto_stats(ctx, &ri);
	memcpy(me.now, ri.now, sizeof(me.now));
	rc = gw_coll_allgather(c, &me, all, sizeof(me));
	if (rc || gw_ctx_rank(ctx) != 0 || o->json)
		return rc;
	perf_out_trace_line(all, size, i);
	return 0;
}

/* The collective timed: the allreduce, or with --op reduce_scatter the
 * reduce-scatter (rank r's shard: the allreduce's chunk r). */
static int collective(struct gw_coll *c, const struct opts *o, float *buf, uint64_t n)
{
	return o->rs ? gw_coll_reduce_scatter(c, buf, n, GW_COLL_SUM, GW_CTX_LOSSY)
		     : gw_coll_allreduce(c, buf, n, GW_COLL_SUM, GW_CTX_LOSSY);
}

/* One size: returns 0, 1 when --check found the result wrong, or -errno. */
static int run_size(struct gw_coll *c, const struct opts *o, const char *codec, const char *algo,
		    uint64_t bytes, float *x, float *buf, double *times, double *all_times,
		    struct rank_info *all, struct trace_info *log)
{
	double *rss = all_times; /* free until the allgather below */
	struct gw_ctx *ctx = gw_coll_ctx(c);
	int rank = gw_ctx_rank(ctx), size = gw_ctx_size(ctx), rc, bad = 0;
	uint64_t n = bytes / sizeof(float), raw0, wire0, raw = 0, wire = 0;
	struct rank_info me;
	struct perf_row row = { .bytes = bytes, .identical = true };
	double err = 0, t, cpu;
	int64_t extra = INT64_MIN;

	fill(x, n, rank);
	memcpy(buf, x, n * sizeof(float));
	peak_reset();
	for (int i = 0; i < o->warmup; i++) {
		memcpy(buf, x, n * sizeof(float));
		rc = collective(c, o, buf, n);
		if (rc)
			return rc;
	}
	/* The checked call: from zero residuals, so it shows the codec alone. */
	gw_ctx_residuals_reset(ctx);
	memcpy(buf, x, n * sizeof(float));
	rc = collective(c, o, buf, n);
	if (rc)
		return rc;
	/* A reduce-scatter leaves each rank its own shard: no replicas. */
	me.hash = o->rs ? 0 : hash_of(buf, n * sizeof(float));
	/* Peak memory: over the calls, not rank 0's reference sum below. */
	me.extra = proc_status("VmHWM");
	if (rank == 0) /* rank 0's shard: chunk 0, n / size values and one */
		err = rel_err(buf, n, size, 0, o->rs ? n / size + (n % size != 0) : n);
	peak_reset();
	sum_stats(ctx, &raw0, &wire0);
	for (int i = 0; i < o->iters; i++) {
		memcpy(buf, x, n * sizeof(float));
		rc = gw_coll_barrier(c);
		if (rc)
			return rc;
		t = perf_now_s();
		cpu = cpu_s();
		rc = collective(c, o, buf, n);
		if (rc)
			return rc;
		times[i] = perf_now_s() - t;
		times[o->iters + i] = cpu_s() - cpu;
		rss[i] = (double)proc_status("VmRSS"); /* outside the timing */
		if (o->trace) {
			rc = trace_call(c, o, i, times[i], buf, n, log);
			if (rc)
				return rc;
		}
	}
	me.slope = slope_of(rss, o->iters / 4, o->iters);
	if (proc_status("VmHWM") > me.extra)
		me.extra = proc_status("VmHWM");
	/* Beyond what the context held before any call, and the caller's two
	 * buffers (the data x and the tensor buf, in rss0). */
	me.extra -= rss0;
	me.state = gw_ctx_residual_bytes(ctx);
	sum_stats(ctx, &me.raw, &me.wire);
	me.raw -= raw0;
	me.wire -= wire0;
	auto_stats(ctx, &me);
	rc = gw_coll_allgather(c, &me, all, sizeof(me));
	if (!rc)
		rc = gw_coll_allgather(c, times, all_times, 2 * (size_t)o->iters * sizeof(double));
	if (rc)
		return rc;
	if (rank != 0)
		goto verdict;
	for (int r = 0; r < size; r++) {
		row.identical &= all[r].hash == all[0].hash;
		wire += all[r].wire;
		if (all[r].extra > extra)
			extra = all[r].extra;
		if (all[r].state > row.state)
			row.state = all[r].state;
		if (fabs(all[r].slope) > fabs(row.slope))
			row.slope = all[r].slope;
	}
	row.overhead = bytes ? (double)extra / (double)bytes : 0;
	/* What an exact ring sends (all ranks): 2 (size - 1) tensors for an
	 * allreduce, size - 1 for a reduce-scatter. */
	raw = (uint64_t)o->iters * (o->rs ? 1 : 2) * (uint64_t)(size - 1) * bytes;
	/* The slowest rank's time, and the busiest rank's CPU. */
	row.med = median_of_max(all_times, size, o->iters, 2 * (size_t)o->iters, 0, times);
	row.med_cpu = median_of_max(all_times, size, o->iters, 2 * (size_t)o->iters,
				    (size_t)o->iters, times);
	row.algbw = row.med > 0 ? (double)bytes / row.med / 1e9 : 0;
	row.busbw = row.algbw * (o->rs ? 1.0 : 2.0) * (size - 1) / size;
	row.raw = raw;
	row.wire = wire;
	row.err = err;
	bad = o->check && (!row.identical || !(err <= bound_of(codec)));
	row.bad = bad;
	perf_out_row(o, &row, codec, algo, size, all, log);
	fprintf(stderr, "gradwire-perf: %llu bytes done\n", (unsigned long long)bytes);
verdict:
	/* Everyone exits alike. */
	rc = gw_coll_broadcast(c, 0, &bad, sizeof(bad));
	return rc ? rc : bad;
}

/* The providers of this rank's links: "tcp", or "shm inside the host, tcp
 * across hosts" when its peers on its host use another one. */
static void links_of(const struct gw_ctx *ctx, char *out, size_t len)
{
	char in[sizeof(((struct gw_conn_stats *)0)->provider)] = "", across[sizeof(in)] = "";
	int me = gw_ctx_rank(ctx);
	struct gw_conn_stats s;

	for (int r = 0; r < gw_ctx_size(ctx); r++) {
		bool local = gw_ctx_host_id(ctx, r) == gw_ctx_host_id(ctx, me);
		char *p = local ? in : across;

		if (r != me && !*p && !gw_ctx_stats(ctx, r, &s))
			snprintf(p, sizeof(in), "%s", s.provider);
	}
	if (*in && *across && strcmp(in, across))
		snprintf(out, len, "%s inside the host, %s across hosts", in, across);
	else
		snprintf(out, len, "%s", *in ? in : *across ? across : gw_ctx_provider(ctx));
}

int perf_rank_main(const struct opts *o, int rank, int size, const char *dir, struct gw_store *st)
{
	struct gw_config cfg;
	struct gw_ctx_cfg cc;
	struct gw_ctx *ctx = NULL;
	struct gw_coll *c = NULL;
	struct gw_conn_stats s;
	char err[512], codec[GW_HS_SPEC_MAX + 1], algo[64], links[96];
	const char *a;
	int nhosts = 1, per_host = 1;
	float *x = NULL, *buf = NULL;
	double *times = NULL, *all_times = NULL;
	struct rank_info *all = NULL;
	struct trace_info *log = NULL;
	int rc, bad = 0;

	rc = gw_config_load(&cfg, NULL, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "gradwire-perf: %s\n", err);
		return 2;
	}
	gw_config_ctx(&cfg, &cc);
	if (o->provider)
		cc.tp.provider = o->provider;
	if (o->iface)
		cc.tp.iface = o->iface;
	if (o->codec)
		cc.codec = cc.codec_local = o->codec;
	if (o->min_compress >= 0)
		cc.min_compress_bytes = (uint64_t)o->min_compress;
	if (o->segment >= 0)
		cfg.segment_bytes = (uint64_t)o->segment;
	gw_ctx_cfg_agree(&cc, "GRADWIRE_MIN_COMPRESS_BYTES", cc.min_compress_bytes);
	gw_ctx_cfg_agree(&cc, "GRADWIRE_SEGMENT_BYTES", cfg.segment_bytes);
	rc = st ? 0 : gw_store_file_create(dir, &st);
	if (rc) {
		fprintf(stderr, "gradwire-perf: store %s: %s\n", dir, gw_strerror(rc));
		return 3;
	}
	rc = gw_ctx_create(&cc, rank, size, st, &ctx, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "gradwire-perf: rank %d: %s (%s)\n", rank, err, gw_strerror(rc));
		goto out;
	}
	if (cfg.stats) /* GRADWIRE_STATS=1: counters at exit (scripts/soak) */
		gw_ctx_stats_at_exit(ctx, stderr);
	rc = gw_coll_create(ctx, &c);
	if (rc)
		goto out;
	gw_coll_set_segment(c, cfg.segment_bytes);
	gw_coll_set_algo(c, (enum gw_coll_algo)cfg.algo);
	a = gw_coll_algo(c, &nhosts, &per_host);
	if (!a) {
		rc = -ENOMEM;
		goto out;
	}
	snprintf(algo, sizeof(algo), "%s", a);
	/* What was negotiated with the next rank (all the same here). */
	snprintf(codec, sizeof(codec), "%s", cc.codec ? cc.codec : "none");
	if (size > 1 && !gw_ctx_stats(ctx, (rank + 1) % size, &s))
		snprintf(codec, sizeof(codec), "%s", s.codec);
	x = malloc(o->maxb + 4);
	buf = malloc(o->maxb + 4);
	times = calloc(2 * (size_t)o->iters, sizeof(double)); /* wall, then CPU */
	all_times = calloc(2 * (size_t)o->iters * (size_t)size, sizeof(double));
	all = calloc((size_t)size, sizeof(*all));
	log = calloc(o->trace ? (size_t)o->iters * (size_t)size : 1, sizeof(*log));
	if (!x || !buf || !times || !all_times || !all || !log) {
		rc = -ENOMEM;
		goto out;
	}
	/* The baseline holds the two buffers whole: malloc may hand out pages
	 * this process touched and freed while it set up, which are resident
	 * already (rss0 taken before touching them read up to 2 x bytes low).
	 * Not zeroes: malloc and memset 0 may become a calloc that touches
	 * nothing. */
	memset(x, 0x5a, o->maxb + 4);
	memset(buf, 0x5a, o->maxb + 4);
	rss0 = proc_status("VmRSS");
	if (rank == 0 && !o->json) {
		const char *iface = cc.tp.iface ? cc.tp.iface : "(default)";

		links_of(ctx, links, sizeof(links));
		if (!strcmp(links, "shm")) /* no network link */
			iface = "unused (shm)";
		perf_out_header(o, size, nhosts, algo, codec, links, iface, cc.min_compress_bytes);
	}
	for (uint64_t b = o->minb; b <= o->maxb; b *= o->factor) {
		rc = run_size(c, o, codec, algo, b, x, buf, times, all_times, all, log);
		if (rc < 0)
			break;
		bad |= rc;
		rc = 0;
		if (b > o->maxb / o->factor)
			break;
	}
	/* Every rank is done with the store: rank 0 removes the job's part. */
	if (!rc && o->clean != CLEAN_NONE) {
		rc = gw_coll_barrier(c);
		if (!rc && rank == 0 && o->clean == CLEAN_DIR)
			perf_remove_dir(dir);
		else if (!rc && rank == 0)
			perf_remove_keys(dir, cfg.job ? cfg.job : "gw");
	}
out:
	if (rc < 0)
		fprintf(stderr, "gradwire-perf: rank %d: %s\n", rank, gw_strerror(rc));
	free(x), free(buf), free(times), free(all_times), free(all), free(log);
	gw_coll_destroy(c);
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	return rc < 0 ? 4 : bad ? 1 : 0;
}
