/* SPDX-License-Identifier: MIT */
/*
 * perf.c - gradwire-perf: allreduce bandwidth, compression and error, in the
 * spirit of nccl-tests' all_reduce_perf.
 *
 *   gradwire-perf -n 4 -b 1M -e 64M -f 4 --codec int8 [--check] [--json]
 *
 * Local mode forks -n ranks that meet through a file store in a fresh
 * temporary folder (removed afterwards), over tcp;ofi_rxm on lo unless told
 * otherwise. Joined mode: when RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_
 * RANK/SIZE (mpirun) or SLURM_PROCID/SLURM_NTASKS (srun) are set, this
 * process is that rank of that job and meets the others either through MPI
 * (built with MPI, started by mpirun, no --store: perf_mpi.c) or through a
 * file store in --store DIR, a folder every rank reaches. There each job gets
 * a subfolder "job-<id>" (--job, else the launcher's TORCHELASTIC_RUN_ID,
 * SLURM_JOB_ID.SLURM_STEP_ID or PMIX_NAMESPACE), which rank 0 removes after
 * a final barrier; with no job id known DIR itself is the store (it must hold
 * no keys of an earlier run) and rank 0 removes this job's keys from it.
 * Only rank 0 prints progress; the others print errors only.
 *
 * Settings come from GRADWIRE_* (plugin/config.c); --provider, --iface,
 * --codec and --min-compress override them. --hosts H makes the local ranks
 * emulate H hosts (GRADWIRE_HOST_ID), so the hierarchical allreduce runs
 * (GRADWIRE_ALGO); the header line and the JSON say which algorithm ran.
 *
 * Each rank's data is deterministic (SplitMix64 of rank and size), so rank 0
 * computes the exact sum in double and reports the relative L2 error of the
 * result; every rank hashes its result and the hashes are compared (bit-
 * identical replicas). One row per size: bytes, median time over iterations
 * (each iteration's time is the slowest rank's), algbw = bytes / time,
 * busbw = 2 (n - 1) / n algbw, wire_ratio = the tensor bytes an exact ring
 * moves (2 (n - 1) x bytes per call, the connections' raw bytes for a ring
 * codec) / wire bytes sent: PowerSGD's linear form sends only its factors,
 * exactly, so its connections' own raw/wire would say ~1. The
 * error and hash come from one allreduce after the residuals were reset, so
 * error feedback from earlier calls does not blur them.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "coll.h"
#include "config.h"
#ifdef GW_HAVE_MPI
#include "perf_mpi.h"
#endif

/* What rank 0 removes from a launched job's store folder at the end. */
enum store_clean {
	CLEAN_NONE,
	CLEAN_DIR,  /* the job's own subfolder, whole */
	CLEAN_KEYS, /* DIR itself: only the files of this job's keys */
};

struct opts {
	int ranks;
	uint64_t minb, maxb, factor;
	int warmup, iters;
	const char *codec, *provider, *iface, *store, *job;
	enum store_clean clean;
	int64_t min_compress; /* -1: GRADWIRE_MIN_COMPRESS_BYTES */
	int64_t segment;      /* -1: GRADWIRE_SEGMENT_BYTES */
	int timeout_s;
	int hosts; /* local mode: emulate this many hosts (GRADWIRE_HOST_ID), or 0 */
	bool check, json;
	bool rs;    /* --op reduce_scatter: time gw_coll_reduce_scatter() instead */
	bool trace; /* --trace: one line per timed call (rank 0) */
};

/* --trace: what each rank says after one timed call (an exact allgather,
 * outside the timing). */
struct trace_info {
	double s;      /* this rank's time in the call */
	uint64_t hash; /* of its result (0 for a reduce-scatter) */
	char now[24];  /* the codec its link to the next rank carries now */
};

struct rank_info {
	uint64_t hash, raw, wire;
	int64_t extra;	/* peak resident bytes beyond rss0 (the buffers included) */
	uint64_t state; /* error feedback and codec state held */
	double slope;	/* resident bytes per call over the last 3/4 */
	char now[24];	/* GRADWIRE_CODEC=auto: the codec the link to the next
			 * rank carries now, and how often this rank's links switched */
	uint64_t switches;
};

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

static void usage(FILE *f)
{
	fprintf(f, "usage: gradwire-perf [-n ranks] [-b minbytes] [-e maxbytes] [-f factor]\n"
		   "         [--codec SPEC] [--provider P] [--iface I] [--min-compress BYTES]\n"
		   "         [--segment BYTES]\n"
		   "         [-w warmup] [-i iters] [--check] [--json] [--store DIR]\n"
		   "         [--job ID] [--timeout-s S] [--hosts H]\n"
		   "         [--op allreduce|reduce_scatter] [--trace]\n"
		   "  sizes take K, M, G (powers of 1024). Under torchrun, mpirun or srun\n"
		   "  (RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK/SIZE, SLURM_PROCID/NTASKS)\n"
		   "  every process joins the job through a file store in --store DIR\n"
		   "  (a folder all ranks reach; the job uses DIR/job-ID, ID from --job or\n"
		   "  the launcher, removed at the end), or under mpirun without --store\n"
		   "  through MPI when built with it (meson -Dmpi=enabled).\n"
		   "  --hosts H (local mode): the ranks emulate H hosts, rank r on host\n"
		   "  r * H / n (GRADWIRE_HOST_ID), e.g. for the hierarchical allreduce.\n"
		   "  --op reduce_scatter times the reduce-scatter (rank r keeps shard r;\n"
		   "  rel_err is rank 0's shard's, and there are no replicas to compare).\n"
		   "  --trace: rank 0 prints one line per timed call (--json: a \"trace\"\n"
		   "  array in the size's row): its index, the slowest rank's time in ms,\n"
		   "  the codec each rank's link to the next carries now (GRADWIRE_CODEC=\n"
		   "  auto), and whether every replica is bit-identical after it (a small\n"
		   "  exact allgather and a hash per call, both outside the timing).\n");
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return -EINVAL;
	switch (*end) {
	case 'K':
	case 'k':
		v <<= 10;
		end++;
		break;
	case 'M':
	case 'm':
		v <<= 20;
		end++;
		break;
	case 'G':
	case 'g':
		v <<= 30;
		end++;
		break;
	default:
		break;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

static double clock_s(clockid_t id)
{
	struct timespec t;

	clock_gettime(id, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double now_s(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

/* This process's CPU time, every thread (libfabric's included). */
static double cpu_s(void)
{
	return clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Rank r's data for n values: roughly N(0,1) (sum of four uniforms). */
static void fill(float *x, uint64_t n, int r)
{
	uint64_t s = 0x9E7F000000000000ull ^ ((uint64_t)r << 40) ^ n;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t z = splitmix(&s);
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

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		if ((unsigned char)*s >= 0x20)
			putchar(*s);
	}
	putchar('"');
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

/* The links' codecs now, one entry per rank (its link to the next). */
static void print_links(const struct rank_info *all, int size, bool json)
{
	printf(json ? ", \"links\": [" : "# links now:");
	for (int r = 0; r < size; r++) {
		if (json) {
			printf("%s{\"from\": %d, \"to\": %d, \"codec\": ", r ? ", " : "", r,
			       (r + 1) % size);
			json_str(all[r].now);
			printf(", \"switches\": %llu}", (unsigned long long)all[r].switches);
		} else {
			printf(" %d>%d %s (%llu switches)", r, (r + 1) % size, all[r].now,
			       (unsigned long long)all[r].switches);
		}
	}
	printf(json ? "]" : "\n");
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
	bool same = true;
	double slowest = 0;
	int rc;

	me.hash = o->rs ? 0 : hash_of(buf, n * sizeof(float));
	auto_stats(ctx, &ri);
	memcpy(me.now, ri.now, sizeof(me.now));
	rc = gw_coll_allgather(c, &me, all, sizeof(me));
	if (rc || gw_ctx_rank(ctx) != 0 || o->json)
		return rc;
	for (int r = 0; r < size; r++) {
		same &= all[r].hash == all[0].hash;
		slowest = all[r].s > slowest ? all[r].s : slowest;
	}
	printf("# trace: call %d %.1f ms, links", i, slowest * 1e3);
	for (int r = 0; r < size; r++)
		printf(" %d>%d %s", r, (r + 1) % size, all[r].now);
	printf(", identical %s\n", same ? "yes" : "NO");
	fflush(stdout);
	return 0;
}

/* The --json "trace" array of one size's calls, from log. */
static void print_trace(const struct trace_info *log, int iters, int size)
{
	printf(", \"trace\": [");
	for (int i = 0; i < iters; i++) {
		const struct trace_info *all = log + (size_t)i * (size_t)size;
		bool same = true;
		double slowest = 0;

		for (int r = 0; r < size; r++) {
			same &= all[r].hash == all[0].hash;
			slowest = all[r].s > slowest ? all[r].s : slowest;
		}
		printf("%s{\"call\": %d, \"ms\": %.3f, \"links\": [", i ? ", " : "", i,
		       slowest * 1e3);
		for (int r = 0; r < size; r++) {
			printf("%s", r ? ", " : "");
			json_str(all[r].now);
		}
		printf("], \"identical\": %s}", same ? "true" : "false");
	}
	printf("]");
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
	double err = 0, t, cpu, med, med_cpu, algbw, busbw, overhead;
	int64_t extra = INT64_MIN;
	uint64_t state = 0;
	double slope = 0;
	bool identical = true;

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
		t = now_s();
		cpu = cpu_s();
		rc = collective(c, o, buf, n);
		if (rc)
			return rc;
		times[i] = now_s() - t;
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
		identical &= all[r].hash == all[0].hash;
		wire += all[r].wire;
		if (all[r].extra > extra)
			extra = all[r].extra;
		if (all[r].state > state)
			state = all[r].state;
		if (fabs(all[r].slope) > fabs(slope))
			slope = all[r].slope;
	}
	overhead = bytes ? (double)extra / (double)bytes : 0;
	/* What an exact ring sends (all ranks): 2 (size - 1) tensors for an
	 * allreduce, size - 1 for a reduce-scatter. */
	raw = (uint64_t)o->iters * (o->rs ? 1 : 2) * (uint64_t)(size - 1) * bytes;
	/* The slowest rank's time, and the busiest rank's CPU. */
	med = median_of_max(all_times, size, o->iters, 2 * (size_t)o->iters, 0, times);
	med_cpu = median_of_max(all_times, size, o->iters, 2 * (size_t)o->iters, (size_t)o->iters,
				times);
	algbw = med > 0 ? (double)bytes / med / 1e9 : 0;
	busbw = algbw * (o->rs ? 1.0 : 2.0) * (size - 1) / size;
	bad = o->check && (!identical || !(err <= bound_of(codec)));
	if (o->json) {
		printf("{\"bytes\": %llu, \"time_us\": %.1f, \"cpu_us\": %.1f, "
		       "\"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"wire_ratio\": %.3f, "
		       "\"rel_err\": %.3e, \"wire_bytes_per_rank\": %.0f, "
		       "\"identical\": %s, \"overhead_ratio\": %.3f, "
		       "\"codec_state_bytes\": %llu, \"rss_slope_bytes_per_call\": %.1f, "
		       "\"codec\": ",
		       (unsigned long long)bytes, med * 1e6, med_cpu * 1e6, algbw, busbw,
		       wire ? (double)raw / (double)wire : 1.0, err, (double)wire / size / o->iters,
		       identical ? "true" : "false", overhead, (unsigned long long)state, slope);
		json_str(codec);
		printf(", \"op\": \"%s\"", o->rs ? "reduce_scatter" : "allreduce");
		printf(", \"algo\": ");
		json_str(algo);
		printf(", \"ranks\": %d, \"overhead_ratio_ranks\": [", size);
		for (int r = 0; r < size; r++)
			printf("%s%.3f", r ? ", " : "",
			       bytes ? (double)all[r].extra / (double)bytes : 0.0);
		printf("]");
		if (strncmp(codec, "auto", 4) == 0)
			print_links(all, size, true);
		if (o->trace)
			print_trace(log, o->iters, size);
		printf("}\n");
	} else {
		printf("%12llu %11.1f %11.1f %10.3f %10.3f %10.3f %10.2e %9s %8.3f %9.1f  %s%s\n",
		       (unsigned long long)bytes, med * 1e6, med_cpu * 1e6, algbw, busbw,
		       wire ? (double)raw / (double)wire : 1.0, err, identical ? "yes" : "NO",
		       overhead, (double)state / (1 << 20), codec, bad ? "  <- WRONG" : "");
		if (strncmp(codec, "auto", 4) == 0)
			print_links(all, size, false);
	}
	fflush(stdout);
	fprintf(stderr, "gradwire-perf: %llu bytes done\n", (unsigned long long)bytes);
verdict:
	/* Everyone exits alike. */
	rc = gw_coll_broadcast(c, 0, &bad, sizeof(bad));
	return rc ? rc : bad;
}

/* The providers of this rank's links: "net", or "shm inside the host, net
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

static void remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[4096];

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

/* Remove the files of the keys under job's prefix ("<job>/...") from a file
 * store's folder: the store escapes every byte outside [A-Za-z0-9_-] as %XX
 * (transport/store.c), so they are the names that start with the escaped
 * "<job>/". Other files are left alone. */
static void remove_keys(const char *dir, const char *job)
{
	static const char hex[] = "0123456789ABCDEF";
	char prefix[256], path[4096];
	size_t n = 0, pl;
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	for (const unsigned char *k = (const unsigned char *)job; *k && n + 4 < sizeof(prefix);
	     k++) {
		if ((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') ||
		    (*k >= '0' && *k <= '9') || *k == '_' || *k == '-') {
			prefix[n++] = (char)*k;
		} else {
			prefix[n++] = '%';
			prefix[n++] = hex[*k >> 4];
			prefix[n++] = hex[*k & 15];
		}
	}
	snprintf(prefix + n, sizeof(prefix) - n, "%%2F");
	pl = strlen(prefix);
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, pl))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
}

/* One rank's whole run, over st (NULL: a file store in dir). Return: the
 * process exit code. */
static int rank_main(const struct opts *o, int rank, int size, const char *dir, struct gw_store *st)
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
		printf("# gradwire-perf: %d rank%s on %d host%s, %s %s, codec %s, provider "
		       "%s, iface %s, min_compress %llu B, warmup %d, iters %d\n",
		       size, size == 1 ? "" : "s", nhosts, nhosts == 1 ? "" : "s",
		       o->rs ? "reduce-scatter" : "allreduce", algo, codec, links, iface,
		       (unsigned long long)cc.min_compress_bytes, o->warmup, o->iters);
		printf("# %10s %11s %11s %10s %10s %10s %10s %9s %8s %9s  %s\n", "bytes", "time_us",
		       "cpu_us", "algbw_GB/s", "busbw_GB/s", "wire_ratio", "rel_err", "identical",
		       "overhead", "state_MiB", "codec");
		fflush(stdout);
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
			remove_dir(dir);
		else if (!rc && rank == 0)
			remove_keys(dir, cfg.job ? cfg.job : "gw");
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

/* Fork o->ranks ranks over a fresh file store; every child dies by alarm()
 * rather than hang, and the parent kills the ones left at its deadline. */
static int run_local(const struct opts *o)
{
	char dir[] = "/tmp/gradwire-perf-XXXXXX";
	pid_t pid[256];
	int code[256], left = o->ranks, worst = 0;
	double deadline = now_s() + o->timeout_s + 10;

	if (!mkdtemp(dir)) {
		perror("gradwire-perf: mkdtemp");
		return 3;
	}
	fflush(NULL);
	for (int r = 0; r < o->ranks; r++) {
		pid[r] = fork();
		if (pid[r] < 0) {
			perror("gradwire-perf: fork");
			for (int k = 0; k < r; k++)
				kill(pid[k], SIGKILL);
			left = r;
			worst = 3;
			break;
		}
		if (pid[r] == 0) {
			char host[32];

			if (o->hosts) { /* rank r on host r * hosts / ranks */
				snprintf(host, sizeof(host), "gradwire-perf-%d",
					 r * o->hosts / o->ranks);
				setenv("GRADWIRE_HOST_ID", host, 1);
			}
			alarm((unsigned)o->timeout_s);
			_exit(rank_main(o, r, o->ranks, dir, NULL));
		}
		code[r] = -1;
	}
	while (left > 0) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);

		if (p > 0) {
			for (int r = 0; r < o->ranks; r++)
				if (pid[r] == p)
					code[r] = WIFEXITED(st) ? WEXITSTATUS(st)
								: 128 + WTERMSIG(st);
			left--;
			continue;
		}
		if (p < 0)
			break;
		if (now_s() > deadline) {
			for (int r = 0; r < o->ranks; r++)
				if (code[r] == -1)
					kill(pid[r], SIGKILL);
			deadline = now_s() + 5;
		}
		usleep(10000);
	}
	for (int r = 0; r < o->ranks && !worst; r++) {
		if (code[r] != 0) {
			fprintf(stderr, "gradwire-perf: rank %d exited %d\n", r, code[r]);
			worst = code[r] == 1 ? 1 : code[r] < 0 ? 5 : code[r];
		}
	}
	remove_dir(dir);
	return worst;
}

#ifdef GW_HAVE_MPI
#define MPI_BUILT 1
#define mpi_launched gw_perf_mpi_launched
#else
#define MPI_BUILT 0
#define mpi_launched() false
#endif

/* Rank and size from the launcher, if there is one. */
static bool launcher(int *rank, int *size)
{
	static const char *const vars[][2] = {
		{ "RANK", "WORLD_SIZE" },
		{ "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
		{ "SLURM_PROCID", "SLURM_NTASKS" },
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *r = getenv(vars[i][0]), *s = getenv(vars[i][1]);

		if (r && s && !parse_int(s, 1, 1 << 15, size) && !parse_int(r, 0, *size - 1, rank))
			return true;
	}
	return false;
}

/* The job's id: --job, else the launcher's (torchrun, Slurm, PMIx/Open MPI),
 * made a folder name ([A-Za-z0-9._-], others '_'). false: none known. */
static bool job_id(const struct opts *o, char *out, size_t len)
{
	const char *id = o->job, *step = NULL;
	size_t n = 0;

	if (!id)
		id = getenv("TORCHELASTIC_RUN_ID");
	if (!id && (id = getenv("SLURM_JOB_ID")))
		step = getenv("SLURM_STEP_ID");
	if (!id)
		id = getenv("PMIX_NAMESPACE");
	if (!id)
		id = getenv("OMPI_MCA_ess_base_jobid");
	if (!id || !*id)
		return false;
	n = (size_t)snprintf(out, len, "job-%s%s%s", id, step ? "." : "", step ? step : "");
	for (char *p = out + 4; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' || *p == '-'))
			*p = '_';
	return n < len;
}

/* The store folder of a launched rank: DIR/job-<id> (made here, every rank
 * alike), or DIR itself when no job id is known (rank 0 says so). Sets
 * o->clean. Return: 0 or the exit code. */
static int store_dir(struct opts *o, int rank, char *out, size_t len)
{
	char id[200];

	if (!job_id(o, id, sizeof(id))) {
		if (rank == 0)
			fprintf(stderr,
				"gradwire-perf: no job id from the launcher (TORCHELASTIC_RUN_ID, "
				"SLURM_JOB_ID, PMIX_NAMESPACE) nor --job: the store is %s itself, "
				"which must hold no keys of an earlier run; give --job ID (the "
				"same on every rank) for a subfolder of this job's own\n",
				o->store);
		snprintf(out, len, "%s", o->store);
		o->clean = CLEAN_KEYS;
		return 0;
	}
	if ((size_t)snprintf(out, len, "%s/%s", o->store, id) >= len) {
		fprintf(stderr, "gradwire-perf: --store %s: path too long\n", o->store);
		return 2;
	}
	if (mkdir(out, 0700) && errno != EEXIST) {
		fprintf(stderr, "gradwire-perf: rank %d: mkdir %s: %s\n", rank, out,
			strerror(errno));
		return 3;
	}
	o->clean = CLEAN_DIR;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "codec", required_argument, NULL, 'c' },
		{ "provider", required_argument, NULL, 'P' },
		{ "iface", required_argument, NULL, 'I' },
		{ "min-compress", required_argument, NULL, 'm' },
		{ "segment", required_argument, NULL, 'S' },
		{ "store", required_argument, NULL, 's' },
		{ "job", required_argument, NULL, 'J' },
		{ "timeout-s", required_argument, NULL, 't' },
		{ "hosts", required_argument, NULL, 'H' },
		{ "check", no_argument, NULL, 'C' },
		{ "json", no_argument, NULL, 'j' },
		{ "op", required_argument, NULL, 'O' },
		{ "trace", no_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *prov;
	struct opts o = { .ranks = 2,
			  .minb = 1 << 20,
			  .maxb = 64 << 20,
			  .factor = 2,
			  .warmup = 2,
			  .iters = 10,
			  .min_compress = -1,
			  .segment = -1,
			  .timeout_s = 600 };
	int ch, rank, size, bad = 0;
	uint64_t v;
	char dir[4096];

	while ((ch = getopt_long(argc, argv, "n:b:e:f:w:i:h", lo, NULL)) != -1) {
		switch (ch) {
		case 'n':
			bad |= parse_int(optarg, 1, 256, &o.ranks);
			break;
		case 'b':
			bad |= parse_size(optarg, &o.minb);
			break;
		case 'e':
			bad |= parse_size(optarg, &o.maxb);
			break;
		case 'f':
			bad |= parse_size(optarg, &o.factor);
			break;
		case 'w':
			bad |= parse_int(optarg, 0, 1000, &o.warmup);
			break;
		case 'i':
			bad |= parse_int(optarg, 1, 100000, &o.iters);
			break;
		case 'c':
			o.codec = optarg;
			break;
		case 'P':
			o.provider = optarg;
			break;
		case 'I':
			o.iface = optarg;
			break;
		case 'm':
			bad |= parse_size(optarg, &v);
			o.min_compress = (int64_t)v;
			break;
		case 'S':
			bad |= parse_size(optarg, &v);
			o.segment = (int64_t)v;
			break;
		case 's':
			o.store = optarg;
			break;
		case 'J':
			o.job = optarg;
			break;
		case 't':
			bad |= parse_int(optarg, 1, 86400, &o.timeout_s);
			break;
		case 'H':
			bad |= parse_int(optarg, 1, 256, &o.hosts);
			break;
		case 'C':
			o.check = true;
			break;
		case 'j':
			o.json = true;
			break;
		case 'O':
			o.rs = !strcmp(optarg, "reduce_scatter");
			bad |= !o.rs && strcmp(optarg, "allreduce");
			break;
		case 'T':
			o.trace = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (bad || optind != argc || o.factor < 2 || o.minb < 4 || o.maxb < o.minb ||
	    o.hosts > o.ranks || o.maxb > (UINT64_C(1) << 34)) {
		fprintf(stderr, "gradwire-perf: invalid arguments (sizes: 4 <= -b <= -e"
				" <= 16G, -f >= 2)\n");
		usage(stderr);
		return 2;
	}
	if (o.hosts && (launcher(&rank, &size) || (MPI_BUILT && mpi_launched()))) {
		fprintf(stderr, "gradwire-perf: --hosts is for local mode; under a "
				"launcher set GRADWIRE_HOST_ID where needed\n");
		return 2;
	}
#ifdef GW_HAVE_MPI
	if (!o.store && gw_perf_mpi_launched()) {
		struct gw_store *st = NULL;
		int rc = gw_perf_mpi_init(&rank, &size);

		if (rc) {
			fprintf(stderr, "gradwire-perf: MPI_Init failed (--store DIR meets "
					"through a folder instead)\n");
			return 3;
		}
		rc = gw_perf_mpi_store_create(&st);
		if (rc)
			fprintf(stderr, "gradwire-perf: rank %d: the MPI store: %s\n", rank,
				gw_strerror(rc));
		else
			rc = rank_main(&o, rank, size, NULL, st);
		gw_perf_mpi_finalize();
		return rc < 0 ? 3 : rc;
	}
#endif
	if (launcher(&rank, &size)) {
		if (!o.store) {
			fprintf(stderr,
				"gradwire-perf: rank %d of %d from the launcher: "
				"--store DIR (a folder all ranks reach) is required%s\n",
				rank, size,
				MPI_BUILT ? ""
					  : " (under mpirun, a gradwire-perf built with MPI "
					    "needs none: meson -Dmpi=enabled)");
			return 2;
		}
		bad = store_dir(&o, rank, dir, sizeof(dir));
		return bad ? bad : rank_main(&o, rank, size, dir, NULL);
	}
	/* Local: one host, so loopback unless told otherwise. */
	if (!o.provider && !getenv("GRADWIRE_PROVIDER"))
		o.provider = "net";
	prov = o.provider ? o.provider : getenv("GRADWIRE_PROVIDER");
	if (!o.iface && !getenv("GRADWIRE_IFACE") &&
	    (strstr(prov, "tcp") || !strcmp(prov, "net"))) {
		o.iface = "lo";
		setenv("FI_TCP_IFACE", "lo", 0);
		setenv("FI_NET_IFACE", "lo", 0);
	}
	return run_local(&o);
}
