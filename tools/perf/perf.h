/* SPDX-License-Identifier: MIT */
/*
 * perf.h - what the parts of gradwire-perf share: its options, what each
 * rank reports after a size, and the functions one part calls in another.
 * Private to gradwire-perf (tools/perf/):
 *   perf.c      main: local mode (forked ranks) or a launcher's rank, and
 *               the store folder it meets in
 *   perf_opts.c the command line: usage, sizes and numbers, defaults
 *   perf_run.c  one rank's run: the context, the timed calls, the check
 *   perf_out.c  what rank 0 prints: the header, a row per size, the trace
 *   perf_mpi.c  the rendezvous through MPI (built with option mpi)
 */
#ifndef GW_PERF_H
#define GW_PERF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "coll.h"
#include "conn.h"

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

/* One size's row, as rank 0 summed it from every rank's rank_info and
 * times. */
struct perf_row {
	uint64_t bytes;
	double med, med_cpu; /* the slowest rank's time, the busiest rank's CPU */
	double algbw, busbw;
	uint64_t raw;  /* what an exact ring sends, all ranks and calls */
	uint64_t wire; /* what was sent, all ranks and calls */
	double err;    /* rank 0's relative L2 error */
	bool identical, bad;
	double overhead; /* the largest extra resident bytes / bytes */
	uint64_t state;	 /* the largest codec state held */
	double slope;	 /* the steepest resident-bytes slope */
};

/* perf_opts.c */
void perf_usage(FILE *f);
/* Parse a decimal int in [lo, hi]. Return: 0 or -EINVAL. */
int perf_parse_int(const char *s, int lo, int hi, int *out);
/* Fill o from the command line. Return: -1 to run, else the exit code
 * (0 after --help, 2 for invalid arguments; usage printed). */
int perf_opts_parse(int argc, char **argv, struct opts *o);

/* perf.c */
double perf_now_s(void);
/* Remove a store folder and the files in it. */
void perf_remove_dir(const char *dir);
/* Remove the files of job's keys from a file store's folder. */
void perf_remove_keys(const char *dir, const char *job);

/* perf_run.c */
/* One rank's whole run, over st (NULL: a file store in dir). Return: the
 * process exit code. */
int perf_rank_main(const struct opts *o, int rank, int size, const char *dir, struct gw_store *st);

/* perf_out.c */
/* Rank 0's header lines (not with --json). */
void perf_out_header(const struct opts *o, int size, int nhosts, const char *algo,
		     const char *codec, const char *links, const char *iface,
		     uint64_t min_compress);
/* --trace without --json: the line of timed call i, from every rank's
 * trace_info (all, size entries). */
void perf_out_trace_line(const struct trace_info *all, int size, int i);
/* One size's row (a JSON object with --json), with the links of auto and
 * the --json trace (log: iters x size entries). */
void perf_out_row(const struct opts *o, const struct perf_row *row, const char *codec,
		  const char *algo, int size, const struct rank_info *all,
		  const struct trace_info *log);

#endif
