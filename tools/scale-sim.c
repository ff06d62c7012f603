/* SPDX-License-Identifier: MIT */
/*
 * scale-sim.c - gradwire-scale-sim: a model of one lossy allreduce on N ranks,
 * N up to thousands, with the real codecs in one process and no transport.
 *
 * It answers what a 2-core machine cannot measure with real ranks: how one
 * call's error and the bytes each rank sends grow with the number of ranks,
 * for the two ways of compressing an allreduce:
 *
 *   ring    the ring's reduce-scatter re-encodes the running partial sum at
 *           every hop: chunk k starts at rank k, each hop decodes, adds its
 *           own values and encodes again, so a value is compressed N-1 times
 *           on its way to its owner (rank k-1), which encodes the sum once
 *           more for the allgather (forwarded byte for byte);
 *   direct  scatter-reduce-allgather (CGX): every rank encodes its part of
 *           chunk k once and sends it to the owner, which sums the N
 *           contributions in float32 (its own exactly) and encodes the sum
 *           once for every rank. Two compressions per value, whatever N.
 *
 * Both use the allreduce's chunk rule (chunk k starts at k*q + min(k, rem))
 * and, for --calls C > 1, error feedback per stream (sender, slot) with the
 * codec's state kept across calls, as the transport keeps them per peer.
 * Every rank holds the owner's decoded bits (replicas are identical by
 * construction), so one output tensor stands for all of them.
 *
 * Data: rank r's tensor in call c is N(0, 1)-like (the sum of four uniforms,
 * as codec-bench's), generated from a counter (seed, c, r, index), so no
 * rank's tensor is ever stored whole and N = 1024 fits in memory.
 *
 * Output per (codec, N): one call's relative L2 error against the exact sum
 * (computed in double) for each algorithm, its ratio to the 2-rank error,
 * the error of the mean over C calls (error feedback at work), and the
 * payload bytes each rank sends per call (codec sections plus the
 * 24-byte payload header; frame headers and MACs are left out). What the
 * model does not include: time, the network, and PowerSGD, whose allreduce
 * sums its factors exactly (its linear form) and so does not re-encode.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gradwire/codec.h"
#include "../common/rng.h"

#define MAX_CODECS 16
#define MAX_RANKS 65536u

static const char *const default_specs[] = {
	"fp16", "bf16", "int8", "onebit", "randomk:ratio=0.01", "topk:ratio=0.01",
};

enum algo { RING, DIRECT, NALGO };
static const char *const algo_name[NALGO] = { "ring", "direct" };

struct opts {
	const char *specs[MAX_CODECS];
	int nspecs;
	uint64_t n;
	uint32_t min_ranks, max_ranks, ef_max_ranks;
	uint32_t calls;
	uint64_t seed;
	bool json;
};

/* One (codec, N, algorithm) run: buffers sized for the largest chunk. */
struct sim {
	struct gw_codec c;
	uint32_t N;
	uint64_t n, q, rem, m;
	uint64_t seed;
	float *acc, *tmp;
	uint8_t *pay;
	size_t cap;
	void *scratch;
	/* Error feedback (calls > 1): a residual and a state per stream.
	 * One call: a zero residual in, the new one discarded (the transport
	 * always encodes with error feedback, which e.g. randomk's scaling
	 * depends on). */
	float *res, *zres, *rtmp;
	uint8_t *state;
	size_t state_sz;
	uint64_t bytes; /* payload bytes sent by all ranks in this call */
};

struct result {
	double err1;  /* one call, zero residuals */
	double errm;  /* mean of `calls` calls */
	double bytes; /* per rank and call */
};

/* SplitMix64's next value after state z (stateless). */
static uint64_t mix(uint64_t z)
{
	return gw_splitmix64(&z);
}

/* Rank r's values [off, off + len) in call `call`. */
static void fill(float *x, uint64_t seed, uint32_t call, uint32_t r, uint64_t off, uint64_t len)
{
	uint64_t key = mix(seed ^ ((uint64_t)call << 40) ^ ((uint64_t)r << 20));

	for (uint64_t i = 0; i < len; i++) {
		uint64_t h = mix(key + off + i);
		double u = (double)(h & 0xffff) + (double)((h >> 16) & 0xffff) +
			   (double)((h >> 32) & 0xffff) + (double)(h >> 48);
		x[i] = (float)((u / 65536.0 - 2.0) * 1.7320508075688772);
	}
}

static uint64_t chunk_off(const struct sim *s, uint32_t k)
{
	return k * s->q + (k < s->rem ? k : s->rem);
}

static uint64_t chunk_len(const struct sim *s, uint32_t k)
{
	return s->q + (k < s->rem);
}

/* Encode x (+ the residual of stream `st`) into s->pay: section bytes. */
static ssize_t encode(struct sim *s, uint64_t st, const float *x, uint64_t m)
{
	float *res = s->res ? s->res + st * s->m : s->zres;
	float *res_out = s->res ? res : s->rtmp;
	void *state = s->state ? s->state + st * s->state_sz : s->scratch;
	struct gw_enc_info info;
	ssize_t len;

	if (!s->state && s->state_sz)
		memset(state, 0, s->state_sz); /* one call: a fresh stream */
	len = s->c.ops->encode(&s->c, state, (uint8_t *)s->scratch + s->state_sz, x, res, res_out,
			       m, s->pay, s->cap, &info);
	if (len < 0)
		fprintf(stderr, "gradwire-scale-sim: encode: %s\n", strerror((int)-len));
	return len;
}

/* Chunk k of one call, owner k - 1 (the ring's), into out[off..]. */
static int run_chunk(struct sim *s, enum algo a, uint32_t call, uint32_t k, float *out)
{
	const struct gw_codec_ops *ops = s->c.ops;
	uint32_t N = s->N, owner = (k + N - 1) % N;
	uint64_t off = chunk_off(s, k), m = chunk_len(s, k), st = (uint64_t)k * N;
	ssize_t len;

	if (!m)
		return 0;
	if (a == RING) {
		/* Hop h: rank k+h-1 encodes its partial sum, rank k+h adds it. */
		fill(s->acc, s->seed, call, k, off, m);
		for (uint32_t h = 1; h < N; h++) {
			if ((len = encode(s, st + h - 1, s->acc, m)) < 0)
				return (int)len;
			s->bytes += (uint64_t)len + GW_PAYLOAD_HDR;
			fill(s->acc, s->seed, call, (k + h) % N, off, m);
			if (ops->decode_add(s->pay, (size_t)len, m, s->acc))
				return -EBADMSG;
		}
	} else {
		/* Every other rank encodes its part once; the owner sums. */
		fill(s->acc, s->seed, call, owner, off, m);
		for (uint32_t i = 1; i < N; i++) {
			fill(s->tmp, s->seed, call, (owner + i) % N, off, m);
			if ((len = encode(s, st + i - 1, s->tmp, m)) < 0)
				return (int)len;
			s->bytes += (uint64_t)len + GW_PAYLOAD_HDR;
			if (ops->decode_add(s->pay, (size_t)len, m, s->acc))
				return -EBADMSG;
		}
	}
	/* The owner encodes the sum once; N - 1 sends carry it to every rank. */
	if ((len = encode(s, st + N - 1, s->acc, m)) < 0)
		return (int)len;
	s->bytes += (uint64_t)(N - 1) * ((uint64_t)len + GW_PAYLOAD_HDR);
	return ops->decode(s->pay, (size_t)len, m, out + off) ? -EBADMSG : 0;
}

static double rel_err(const float *y, const double *exact, uint64_t n)
{
	double num = 0, den = 0;

	for (uint64_t i = 0; i < n; i++) {
		double d = (double)y[i] - exact[i];
		num += d * d;
		den += exact[i] * exact[i];
	}
	return den > 0 ? sqrt(num / den) : 0;
}

static void *zalloc(size_t bytes)
{
	void *p = calloc(1, bytes ? bytes : 1);

	if (!p)
		fprintf(stderr, "gradwire-scale-sim: out of memory (%zu bytes)\n", bytes);
	return p;
}

static void sim_fini(struct sim *s)
{
	free(s->acc);
	free(s->tmp);
	free(s->pay);
	free(s->scratch);
	free(s->res);
	free(s->zres);
	free(s->rtmp);
	free(s->state);
}

/* Buffers for N ranks; streams (residual + state) only when ef. */
static int sim_init(struct sim *s, const struct gw_codec *c, const struct opts *o, uint32_t N,
		    bool ef)
{
	uint64_t streams = (uint64_t)N * N;

	memset(s, 0, sizeof(*s));
	s->c = *c;
	s->N = N;
	s->n = o->n;
	s->q = o->n / N;
	s->rem = o->n % N;
	s->m = s->q + (s->rem > 0);
	s->seed = o->seed;
	s->cap = c->ops->bound(c, s->m);
	s->state_sz = gw_codec_state_size(c, s->m);
	s->acc = zalloc(s->m * sizeof(float));
	s->tmp = zalloc(s->m * sizeof(float));
	s->pay = zalloc(s->cap);
	s->zres = zalloc(s->m * sizeof(float));
	s->rtmp = zalloc(s->m * sizeof(float));
	/* Scratch, preceded by one state for the one-call case. */
	s->scratch = zalloc(s->state_sz + gw_codec_scratch_size(c, s->m));
	if (ef) {
		s->res = zalloc(streams * s->m * sizeof(float));
		s->state = zalloc(streams * s->state_sz);
	}
	if (!s->acc || !s->tmp || !s->pay || !s->zres || !s->rtmp || !s->scratch ||
	    (ef && (!s->res || !s->state))) {
		sim_fini(s);
		return -ENOMEM;
	}
	return 0;
}

/* The exact sum of call `call`, in double. */
static void exact_sum(double *exact, float *tmp, const struct opts *o, uint32_t N, uint32_t call)
{
	uint64_t step = 1 << 16;

	memset(exact, 0, o->n * sizeof(double));
	for (uint32_t r = 0; r < N; r++)
		for (uint64_t off = 0; off < o->n; off += step) {
			uint64_t len = o->n - off < step ? o->n - off : step;

			fill(tmp, o->seed, call, r, off, len);
			for (uint64_t i = 0; i < len; i++)
				exact[off + i] += tmp[i];
		}
}

/*
 * One codec at N ranks: both algorithms, one call from zero residuals and,
 * when ef, `calls` calls with error feedback whose means are compared.
 */
static int run_point(const struct gw_codec *c, const struct opts *o, uint32_t N,
		     struct result res[NALGO])
{
	bool ef = o->calls > 1 && N <= o->ef_max_ranks;
	uint32_t calls = ef ? o->calls : 1;
	double *exact = zalloc(o->n * sizeof(double)), *mexact = zalloc(o->n * sizeof(double));
	double *mout = zalloc(o->n * sizeof(double));
	float *out = zalloc(o->n * sizeof(float)), *tmp = zalloc((1 << 16) * sizeof(float));
	int rc = -ENOMEM;

	if (!exact || !mexact || !mout || !out || !tmp)
		goto out_free;
	for (int a = 0; a < NALGO; a++) {
		struct sim s;

		if ((rc = sim_init(&s, c, o, N, ef)))
			goto out_free;
		memset(mexact, 0, o->n * sizeof(double));
		memset(mout, 0, o->n * sizeof(double));
		for (uint32_t call = 0; call < calls; call++) {
			s.bytes = 0;
			exact_sum(exact, tmp, o, N, call);
			for (uint32_t k = 0; k < N && !rc; k++)
				rc = run_chunk(&s, (enum algo)a, call, k, out);
			if (rc)
				break;
			if (call == 0) {
				res[a].err1 = rel_err(out, exact, o->n);
				res[a].bytes = (double)s.bytes / N;
			}
			for (uint64_t i = 0; i < o->n; i++) {
				mexact[i] += exact[i];
				mout[i] += out[i];
			}
		}
		sim_fini(&s);
		if (rc)
			goto out_free;
		if (ef) {
			for (uint64_t i = 0; i < o->n; i++)
				out[i] = (float)(mout[i] / calls);
			for (uint64_t i = 0; i < o->n; i++)
				mexact[i] /= calls;
			res[a].errm = rel_err(out, mexact, o->n);
		} else {
			res[a].errm = NAN;
		}
	}
out_free:
	free(exact);
	free(mexact);
	free(mout);
	free(out);
	free(tmp);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gradwire-scale-sim [options]\n"
		"  -c, --codec SPEC     a codec to model (repeatable; default fp16, bf16, int8,\n"
		"                       onebit, randomk:ratio=0.01, topk:ratio=0.01)\n"
		"  -n, --values N       values per tensor (default 262144)\n"
		"      --min-ranks N    smallest rank count (default 2)\n"
		"  -N, --max-ranks N    largest rank count, doubling from the smallest (default "
		"1024)\n"
		"      --calls C        also run C calls with error feedback and report the\n"
		"                       error of their mean (default 30; 1: one call only)\n"
		"      --ef-max-ranks N error feedback only up to N ranks (default 64: it holds\n"
		"                       a residual per stream, about N x values floats)\n"
		"      --seed S         data seed (default 1)\n"
		"      --json           one JSON object per line instead of the table\n");
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *v)
{
	char *end;
	unsigned long long x;

	errno = 0;
	x = strtoull(s, &end, 0);
	if (errno || end == s || *end || *s == '-' || x < lo || x > hi)
		return -EINVAL;
	*v = x;
	return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "codec", required_argument, 0, 'c' },
		{ "values", required_argument, 0, 'n' },
		{ "max-ranks", required_argument, 0, 'N' },
		{ "min-ranks", required_argument, 0, 1 },
		{ "calls", required_argument, 0, 2 },
		{ "ef-max-ranks", required_argument, 0, 3 },
		{ "seed", required_argument, 0, 4 },
		{ "json", no_argument, 0, 5 },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	uint64_t v;
	int ch;

	*o = (struct opts){ .n = 262144,
			    .min_ranks = 2,
			    .max_ranks = 1024,
			    .ef_max_ranks = 64,
			    .calls = 30,
			    .seed = 1 };
	while ((ch = getopt_long(argc, argv, "c:n:N:h", lo, NULL)) != -1) {
		int rc = 0;

		switch (ch) {
		case 'c':
			if (o->nspecs == MAX_CODECS)
				rc = -EINVAL;
			else
				o->specs[o->nspecs++] = optarg;
			break;
		case 'n':
			rc = parse_u64(optarg, 1, UINT64_C(1) << 30, &o->n);
			break;
		case 'N':
		case 1:
		case 3:
			if (!(rc = parse_u64(optarg, 1, MAX_RANKS, &v)))
				*(ch == 'N' ? &o->max_ranks
				  : ch == 1 ? &o->min_ranks
					    : &o->ef_max_ranks) = (uint32_t)v;
			break;
		case 2:
			if (!(rc = parse_u64(optarg, 1, 10000, &v)))
				o->calls = (uint32_t)v;
			break;
		case 4:
			rc = parse_u64(optarg, 0, UINT64_MAX, &o->seed);
			break;
		case 5:
			o->json = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
		if (rc) {
			fprintf(stderr, "gradwire-scale-sim: bad value for option: %s\n", optarg);
			return rc;
		}
	}
	if (optind < argc || o->min_ranks > o->max_ranks) {
		usage(stderr);
		return -EINVAL;
	}
	if (!o->nspecs)
		for (size_t i = 0; i < sizeof(default_specs) / sizeof(*default_specs); i++)
			o->specs[o->nspecs++] = default_specs[i];
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	char err[256];

	if (parse_opts(argc, argv, &o))
		return 2;
	if (!o.json)
		printf("# gradwire-scale-sim: a model (real codecs, one process, no transport), "
		       "%llu values, N(0,1) data per rank\n"
		       "# err1: one call's relative L2 error from zero residuals (x: ÷ its 2-rank "
		       "value); errm: the error of the mean of %u calls with error feedback "
		       "(up to %u ranks); KiB: payload bytes sent per rank and call\n",
		       (unsigned long long)o.n, o.calls, o.ef_max_ranks);
	for (int i = 0; i < o.nspecs; i++) {
		struct gw_codec c;
		double base[NALGO] = { 0, 0 };

		if (gw_codec_parse(o.specs[i], &c, err, sizeof(err))) {
			fprintf(stderr, "gradwire-scale-sim: %s\n", err);
			return 2;
		}
		if (c.ops->id == GW_CODEC_POWERSGD || !c.ops->lossy) {
			fprintf(stderr, "gradwire-scale-sim: %s: not modelled (%s)\n", o.specs[i],
				c.ops->lossy ? "PowerSGD's allreduce sums its factors exactly"
					     : "an exact codec has no error to grow");
			return 2;
		}
		if (!o.json)
			printf("\n%-20s %6s %11s %7s %11s %7s %11s %11s %11s %11s\n", o.specs[i],
			       "ranks", "ring err1", "x", "direct err1", "x", "ring errm",
			       "direct errm", "ring KiB", "direct KiB");
		for (uint64_t N = o.min_ranks; N <= o.max_ranks; N *= 2) {
			struct result r[NALGO];
			int rc = run_point(&c, &o, (uint32_t)N, r);

			if (rc) {
				fprintf(stderr, "gradwire-scale-sim: %s at %llu ranks: %s\n",
					o.specs[i], (unsigned long long)N, strerror(-rc));
				return 1;
			}
			for (int a = 0; a < NALGO; a++)
				if (N == o.min_ranks)
					base[a] = r[a].err1;
			if (o.json) {
				for (int a = 0; a < NALGO; a++) {
					char errm[32] = "null";

					if (!isnan(r[a].errm))
						snprintf(errm, sizeof(errm), "%.6g", r[a].errm);
					printf("{\"codec\":\"%s\",\"algo\":\"%s\",\"ranks\":%llu,"
					       "\"values\":%llu,\"err1\":%.6g,\"err1_ratio\":%.4f,"
					       "\"errm\":%s,\"calls\":%u,\"bytes_per_rank\":%.0f}"
					       "\n",
					       o.specs[i], algo_name[a], (unsigned long long)N,
					       (unsigned long long)o.n, r[a].err1,
					       r[a].err1 / base[a], errm, o.calls, r[a].bytes);
				}
			} else {
				char em[NALGO][16];

				for (int a = 0; a < NALGO; a++)
					snprintf(em[a], sizeof(em[a]),
						 isnan(r[a].errm) ? "-" : "%.4g", r[a].errm);
				printf("%-20s %6llu %11.4g %6.2fx %11.4g %6.2fx %11s %11s %11.1f "
				       "%11.1f\n",
				       "", (unsigned long long)N, r[RING].err1,
				       r[RING].err1 / base[RING], r[DIRECT].err1,
				       r[DIRECT].err1 / base[DIRECT], em[RING], em[DIRECT],
				       r[RING].bytes / 1024, r[DIRECT].bytes / 1024);
			}
			fflush(stdout);
		}
	}
	return 0;
}
