/* SPDX-License-Identifier: MIT */
/*
 * perf_opts.c - gradwire-perf's command line: the usage text, sizes with
 * K/M/G suffixes, bounded numbers, the defaults, and the checks that sizes
 * and counts make sense. Nothing here runs a rank.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "perf.h"

void perf_usage(FILE *f)
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

int perf_parse_int(const char *s, int lo, int hi, int *out)
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

int perf_opts_parse(int argc, char **argv, struct opts *o)
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
	int ch, bad = 0;
	uint64_t v;

	*o = (struct opts){ .ranks = 2,
			    .minb = 1 << 20,
			    .maxb = 64 << 20,
			    .factor = 2,
			    .warmup = 2,
			    .iters = 10,
			    .min_compress = -1,
			    .segment = -1,
			    .timeout_s = 600 };

	while ((ch = getopt_long(argc, argv, "n:b:e:f:w:i:h", lo, NULL)) != -1) {
		switch (ch) {
		case 'n':
			bad |= perf_parse_int(optarg, 1, 256, &o->ranks);
			break;
		case 'b':
			bad |= parse_size(optarg, &o->minb);
			break;
		case 'e':
			bad |= parse_size(optarg, &o->maxb);
			break;
		case 'f':
			bad |= parse_size(optarg, &o->factor);
			break;
		case 'w':
			bad |= perf_parse_int(optarg, 0, 1000, &o->warmup);
			break;
		case 'i':
			bad |= perf_parse_int(optarg, 1, 100000, &o->iters);
			break;
		case 'c':
			o->codec = optarg;
			break;
		case 'P':
			o->provider = optarg;
			break;
		case 'I':
			o->iface = optarg;
			break;
		case 'm':
			bad |= parse_size(optarg, &v);
			o->min_compress = (int64_t)v;
			break;
		case 'S':
			bad |= parse_size(optarg, &v);
			o->segment = (int64_t)v;
			break;
		case 's':
			o->store = optarg;
			break;
		case 'J':
			o->job = optarg;
			break;
		case 't':
			bad |= perf_parse_int(optarg, 1, 86400, &o->timeout_s);
			break;
		case 'H':
			bad |= perf_parse_int(optarg, 1, 256, &o->hosts);
			break;
		case 'C':
			o->check = true;
			break;
		case 'j':
			o->json = true;
			break;
		case 'O':
			o->rs = !strcmp(optarg, "reduce_scatter");
			bad |= !o->rs && strcmp(optarg, "allreduce");
			break;
		case 'T':
			o->trace = true;
			break;
		case 'h':
			perf_usage(stdout);
			return 0;
		default:
			perf_usage(stderr);
			return 2;
		}
	}
	if (bad || optind != argc || o->factor < 2 || o->minb < 4 || o->maxb < o->minb ||
	    o->hosts > o->ranks || o->maxb > (UINT64_C(1) << 34)) {
		fprintf(stderr, "gradwire-perf: invalid arguments (sizes: 4 <= -b <= -e"
				" <= 16G, -f >= 2)\n");
		perf_usage(stderr);
		return 2;
	}
	return -1;
}
