/* SPDX-License-Identifier: MIT */
/*
 * perf_out.c - what gradwire-perf's rank 0 prints: the header lines, one
 * row per size (a table, or a JSON object per line with --json), auto's
 * links now and the --trace lines. Only stdout; the numbers come summed
 * from perf_run.c (struct perf_row) and are printed as they are.
 */
#include <stdio.h>
#include <string.h>
#include "perf.h"

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

void perf_out_header(const struct opts *o, int size, int nhosts, const char *algo,
		     const char *codec, const char *links, const char *iface, uint64_t min_compress)
{
	printf("# gradwire-perf: %d rank%s on %d host%s, %s %s, codec %s, provider "
	       "%s, iface %s, min_compress %llu B, warmup %d, iters %d\n",
	       size, size == 1 ? "" : "s", nhosts, nhosts == 1 ? "" : "s",
	       o->rs ? "reduce-scatter" : "allreduce", algo, codec, links, iface,
	       (unsigned long long)min_compress, o->warmup, o->iters);
	printf("# %10s %11s %11s %10s %10s %10s %10s %9s %8s %9s  %s\n", "bytes", "time_us",
	       "cpu_us", "algbw_GB/s", "busbw_GB/s", "wire_ratio", "rel_err", "identical",
	       "overhead", "state_MiB", "codec");
	fflush(stdout);
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

void perf_out_trace_line(const struct trace_info *all, int size, int i)
{
	bool same = true;
	double slowest = 0;

	for (int r = 0; r < size; r++) {
		same &= all[r].hash == all[0].hash;
		slowest = all[r].s > slowest ? all[r].s : slowest;
	}
	printf("# trace: call %d %.1f ms, links", i, slowest * 1e3);
	for (int r = 0; r < size; r++)
		printf(" %d>%d %s", r, (r + 1) % size, all[r].now);
	printf(", identical %s\n", same ? "yes" : "NO");
	fflush(stdout);
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

void perf_out_row(const struct opts *o, const struct perf_row *row, const char *codec,
		  const char *algo, int size, const struct rank_info *all,
		  const struct trace_info *log)
{
	uint64_t bytes = row->bytes, raw = row->raw, wire = row->wire;

	if (o->json) {
		printf("{\"bytes\": %llu, \"time_us\": %.1f, \"cpu_us\": %.1f, "
		       "\"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"wire_ratio\": %.3f, "
		       "\"rel_err\": %.3e, \"wire_bytes_per_rank\": %.0f, "
		       "\"identical\": %s, \"overhead_ratio\": %.3f, "
		       "\"codec_state_bytes\": %llu, \"rss_slope_bytes_per_call\": %.1f, "
		       "\"codec\": ",
		       (unsigned long long)bytes, row->med * 1e6, row->med_cpu * 1e6, row->algbw,
		       row->busbw, wire ? (double)raw / (double)wire : 1.0, row->err,
		       (double)wire / size / o->iters, row->identical ? "true" : "false",
		       row->overhead, (unsigned long long)row->state, row->slope);
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
		       (unsigned long long)bytes, row->med * 1e6, row->med_cpu * 1e6, row->algbw,
		       row->busbw, wire ? (double)raw / (double)wire : 1.0, row->err,
		       row->identical ? "yes" : "NO", row->overhead, (double)row->state / (1 << 20),
		       codec, row->bad ? "  <- WRONG" : "");
		if (strncmp(codec, "auto", 4) == 0)
			print_links(all, size, false);
	}
	fflush(stdout);
}
