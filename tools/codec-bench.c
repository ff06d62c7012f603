/* SPDX-License-Identifier: MIT */
/*
 * codec-bench.c - gradwire-codec-bench: throughput and error of the codecs.
 *
 * For every (codec spec, n) it measures, in one process and interleaved
 * (memcpy, encode, decode, memcpy, encode, decode, ...) so that machine noise
 * hits all three alike:
 *   encode GB/s  = 4n input bytes / median time of gw_payload_encode()
 *   decode GB/s  = 4n input bytes / median time of parse + ops->decode()
 *   memcpy GB/s  = 4n bytes / median time of memcpy() of the same bytes
 * plus the compression ratio 4n / payload bytes (header included) and the
 * relative L2 error ||x - decode(encode(x))|| / ||x|| in double.
 *
 * The input is the seed benchmark's: SplitMix64 seeded 0x5EED000000000001 ^ n,
 * u = (next >> 40) * 2^-24, x = (u1 + u2 + u3 + u4 - 2) * 1.7320508, float32
 * throughout (the same recipe as tests/tutil.c, reimplemented so the installed
 * tool does not depend on the test helpers).
 * With --low-rank K it is a rows x cols matrix (cols = ceil(sqrt(n))) of exact
 * rank K plus that data / 10 as noise, to show what low-rank codecs keep.
 *
 * Decoding goes through the selected implementation (--impl, --generic), not
 * the registry's choice, so the decoder is timed as parse + c.ops->decode +
 * the non-finite record, which is exactly what gw_payload_decode() does. The
 * check pass also decodes with gw_payload_decode() and requires the same bits:
 * all implementations of a codec must agree.
 *
 * A codec that returns -ENOSYS (not implemented in this build) is reported as
 * skipped, not as a failure. Any other error, or a decode that fails, is fatal.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "gradwire/codec.h"
#include "../common/rng.h"

#define MIN_RUNS 5
#define MAX_LIST 64

static const char *const default_specs[] = {
	"none",
	"fp16",
	"bf16",
	"int8",
	"int8:rounding=stochastic",
	"onebit",
	"topk:ratio=0.01",
	"randomk:ratio=0.01",
	"powersgd:rank=1",
	"powersgd:rank=4",
	"powersgd:rank=16",
};

struct opts {
	const char *specs[MAX_LIST];
	size_t nspecs;
	uint64_t ns[MAX_LIST];
	size_t nns;
	const char *impl;
	bool generic, ef, json, raw;
	int runs;
	unsigned low_rank; /* 0: the seed's data; K: a rank-K matrix + noise */
};

struct result {
	double enc_gbps, dec_gbps, mem_gbps, ratio, rel_l2;
};

/* Buffers of one n, allocated once and reused by every codec. */
struct bufs {
	uint64_t n;
	float *x, *y, *y2, *res, *dst;
	uint8_t *out;
	size_t out_cap;
	void *state, *scratch;
	size_t state_cap, scratch_cap;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gradwire-codec-bench [options]\n"
		"  -n N            elements (repeatable): 1048576, 2^20, 1M, 16M, 4K (binary "
		"units)\n"
		"                  default: 2^20 and 2^24\n"
		"  -c, --codec SPEC  codec spec (repeatable), e.g. topk:ratio=0.01\n"
		"                  default: none fp16 bf16 int8 int8:rounding=stochastic onebit\n"
		"                           topk:ratio=0.01 randomk:ratio=0.01\n"
		"                           powersgd:rank=1 powersgd:rank=4 powersgd:rank=16\n"
		"                  (powersgd views 2^24 values as 4096 x 4096, 2^20 as 1024 x "
		"1024)\n"
		"  --impl NAME     force one implementation (e.g. int8-generic) for its codec;\n"
		"                  without -c only that codec is measured\n"
		"  --generic       force the generic (reference) implementation of every codec\n"
		"  --ef            encode with error feedback (a residual buffer, updated in "
		"place)\n"
		"  --raw           time the codec section alone (ops->encode/decode), no header\n"
		"  -r RUNS         timed runs per measurement, median reported (default 7, >= %d)\n"
		"  --json          one JSON object per line instead of the table\n"
		"  --low-rank K    input: a rows x cols matrix (cols = ceil(sqrt(n))) of exact\n"
		"                  rank K plus the seed's data / 10 as noise\n"
		"  -h, --help      this text\n",
		MIN_RUNS);
}

/* ---- input --------------------------------------------------------------- */

/*
 * --low-rank K: a gradient-shaped matrix of rows x cols (cols = ceil(sqrt(n)),
 * PowerSGD's default view) of exact rank K, plus the seed's data at 1/10 as
 * noise: x = A B^T / sqrt(K) + 0.1 seed, A and B from the same recipe.
 */
static void fill_low_rank(float *x, uint64_t n, unsigned k)
{
	uint64_t cols = (uint64_t)sqrt((double)n), rows;
	float *a, *b;

	while (cols * cols < n)
		cols++;
	rows = n / cols + (n % cols != 0);
	a = malloc(rows * k * sizeof(float));
	b = malloc(cols * k * sizeof(float));
	if (!a || !b) {
		fprintf(stderr, "gradwire-codec-bench: out of memory\n");
		exit(1);
	}
	gw_fill_seed(a, rows * k);
	gw_fill_seed(b, cols * k);
	gw_fill_seed(x, n);
	for (uint64_t i = 0; i < rows; i++)
		for (uint64_t j = 0; j < cols && i * cols + j < n; j++) {
			float t = 0;

			for (unsigned l = 0; l < k; l++)
				t += a[i * k + l] * b[j * k + l];
			x[i * cols + j] = t / sqrtf((float)k) + 0.1f * x[i * cols + j];
		}
	free(a);
	free(b);
}

/* ---- options ------------------------------------------------------------- */

/* "1048576", "2^20", "1M", "16M", "4K", "1G" (binary units); 0 on error. */
static uint64_t parse_n(const char *s)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return 0;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return 0;
	if (end[0] == '^') {
		unsigned long long e;

		if (v != 2 || end[1] < '0' || end[1] > '9')
			return 0;
		e = strtoull(end + 1, &end, 10);
		if (*end || e > 40)
			return 0;
		return UINT64_C(1) << e;
	}
	if (*end && !end[1]) {
		int sh = *end == 'K' || *end == 'k'   ? 10
			 : *end == 'M' || *end == 'm' ? 20
			 : *end == 'G' || *end == 'g' ? 30
						      : -1;

		if (sh < 0 || v > (GW_MAX_ELEMS >> sh))
			return 0;
		return (uint64_t)v << sh;
	}
	if (*end || v > GW_MAX_ELEMS)
		return 0;
	return v;
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lopts[] = {
		{ "codec", required_argument, NULL, 'c' },
		{ "impl", required_argument, NULL, 'I' },
		{ "generic", no_argument, NULL, 'G' },
		{ "ef", no_argument, NULL, 'E' },
		{ "raw", no_argument, NULL, 'R' },
		{ "json", no_argument, NULL, 'J' },
		{ "low-rank", required_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	memset(o, 0, sizeof(*o));
	o->runs = 7;
	while ((ch = getopt_long(argc, argv, "n:c:r:h", lopts, NULL)) != -1) {
		switch (ch) {
		case 'n':
			if (o->nns == MAX_LIST || !(o->ns[o->nns] = parse_n(optarg))) {
				fprintf(stderr,
					"gradwire-codec-bench: -n %s: expected a "
					"count >= 1 such as 1048576, 2^20 or 16M\n",
					optarg);
				exit(2);
			}
			o->nns++;
			break;
		case 'c':
			if (o->nspecs == MAX_LIST) {
				fprintf(stderr, "gradwire-codec-bench: too many -c\n");
				exit(2);
			}
			o->specs[o->nspecs++] = optarg;
			break;
		case 'r': {
			char *end;
			long r = strtol(optarg, &end, 10);

			if (*end || r < MIN_RUNS || r > 10000) {
				fprintf(stderr,
					"gradwire-codec-bench: -r %s: expected %d..10000 runs\n",
					optarg, MIN_RUNS);
				exit(2);
			}
			o->runs = (int)r;
			break;
		}
		case 'I':
			o->impl = optarg;
			break;
		case 'G':
			o->generic = true;
			break;
		case 'E':
			o->ef = true;
			break;
		case 'R':
			o->raw = true;
			break;
		case 'J':
			o->json = true;
			break;
		case 'L': {
			char *end;
			long k = strtol(optarg, &end, 10);

			if (*end || k < 1 || k > 256) {
				fprintf(stderr,
					"gradwire-codec-bench: --low-rank %s: expected 1..256\n",
					optarg);
				exit(2);
			}
			o->low_rank = (unsigned)k;
			break;
		}
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			exit(2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "gradwire-codec-bench: unexpected argument '%s'\n", argv[optind]);
		exit(2);
	}
	if (o->impl && o->generic) {
		fprintf(stderr, "gradwire-codec-bench: --impl and --generic exclude each other\n");
		exit(2);
	}
	if (!o->nns) {
		o->ns[o->nns++] = UINT64_C(1) << 20;
		o->ns[o->nns++] = UINT64_C(1) << 24;
	}
}

/* ---- helpers ------------------------------------------------------------- */

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Keep the compiler from dropping stores nobody reads. */
static void clobber(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static void *xalloc(size_t bytes)
{
	void *p = NULL;

	bytes = bytes ? (bytes + 63) / 64 * 64 : 64;
	if (posix_memalign(&p, 64, bytes)) {
		fprintf(stderr, "gradwire-codec-bench: out of memory (%zu bytes)\n", bytes);
		exit(1);
	}
	memset(p, 0, bytes); /* touch every page before timing */
	return p;
}

static void cpu_name(char *buf, size_t len)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];

	snprintf(buf, len, "unknown CPU");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *c = strchr(line, ':');

		if (strncmp(line, "model name", 10) || !c)
			continue;
		c++;
		while (*c == ' ' || *c == '\t')
			c++;
		c[strcspn(c, "\n")] = '\0';
		snprintf(buf, len, "%s", c);
		break;
	}
	fclose(f);
}

/* Configure spec with the implementation the options select; exit 2 on error. */
static void setup_codec(const struct opts *o, const char *spec, struct gw_codec *c)
{
	char err[256] = "";

	if (gw_codec_parse(spec, c, err, sizeof(err))) {
		fprintf(stderr, "gradwire-codec-bench: %s\n", err);
		exit(2);
	}
	if (o->generic) {
		c->ops = gw_codec_generic(c->ops);
	} else if (o->impl) {
		const struct gw_codec_ops *ops = gw_codec_find_impl(o->impl);

		/* Checked in main(); a codec of another name keeps its best impl. */
		if (!strcmp(ops->name, c->ops->name))
			c->ops = ops;
	}
}

static void grow(void **p, size_t *cap, size_t need)
{
	if (need <= *cap && *p)
		return;
	free(*p);
	*p = xalloc(need);
	*cap = need;
}

/* parse + the selected implementation's decode + the non-finite record. */
static int decode_with(const struct gw_codec *c, const uint8_t *buf, size_t len, float *y,
		       uint64_t n)
{
	struct gw_payload p;
	int rc = gw_payload_parse(buf, len, &p);

	if (rc)
		return rc;
	if (p.n != n || p.id != c->ops->id)
		return -EBADMSG;
	rc = c->ops->decode(p.section, p.section_len, n, y);
	if (rc)
		return rc;
	if (p.flags & GW_PF_NONFINITE) {
		uint32_t b = p.nonfinite_bits;

		memcpy(&y[p.nonfinite_index], &b, 4);
	}
	return 0;
}

static ssize_t encode_once(const struct opts *o, const struct gw_codec *c, struct bufs *b)
{
	float *res = o->ef ? b->res : NULL;

	if (o->raw) {
		struct gw_enc_info info = { 0 };

		return c->ops->encode(c, b->state, b->scratch, b->x, res, res, b->n, b->out,
				      b->out_cap, &info);
	}
	return gw_payload_encode(c, b->state, b->scratch, b->x, res, res, b->n, b->out, b->out_cap);
}

static int decode_once(const struct opts *o, const struct gw_codec *c, struct bufs *b, size_t len)
{
	if (o->raw)
		return c->ops->decode(b->out, len, b->n, b->y);
	return decode_with(c, b->out, len, b->y, b->n);
}

/*
 * One (codec, n): check pass (ratio, error, agreement), then the timed runs.
 * Return: 0, 1 when the codec is not implemented here (skipped); exits on errors.
 */
static int bench_one(const struct opts *o, const char *spec, const struct gw_codec *c,
		     struct bufs *b, struct result *r)
{
	uint64_t n = b->n;
	size_t bytes = (size_t)n * 4;
	double *t = xalloc(sizeof(double) * 3 * (size_t)o->runs);
	double *tm = t, *te = t + o->runs, *td = t + 2 * o->runs;
	double num = 0, den = 0;
	ssize_t len;
	int rc;

	grow((void **)&b->out, &b->out_cap, gw_payload_bound(c, n));
	grow(&b->state, &b->state_cap, gw_codec_state_size(c, n));
	grow(&b->scratch, &b->scratch_cap, gw_codec_scratch_size(c, n));
	memset(b->state, 0, b->state_cap); /* once per stream, per the ABI */
	if (b->res)
		memset(b->res, 0, bytes);

	/* Check pass: the first encode of a stream (residual zero, y = x). */
	len = gw_payload_encode(c, b->state, b->scratch, b->x, o->ef ? b->res : NULL,
				o->ef ? b->res : NULL, n, b->out, b->out_cap);
	if (len == -ENOSYS) {
		fprintf(stderr,
			"gradwire-codec-bench: %s (%s): skipped, encode not "
			"implemented in this build\n",
			spec, c->ops->impl);
		free(t);
		return 1;
	}
	if (len < 0) {
		fprintf(stderr, "gradwire-codec-bench: %s (%s) n=%llu: encode failed: %s\n", spec,
			c->ops->impl, (unsigned long long)n, gw_strerror((int)len));
		exit(1);
	}
	r->ratio = (double)bytes / (double)len;
	rc = decode_with(c, b->out, (size_t)len, b->y, n);
	if (rc == -ENOSYS) {
		fprintf(stderr,
			"gradwire-codec-bench: %s (%s): skipped, decode not "
			"implemented in this build\n",
			spec, c->ops->impl);
		free(t);
		return 1;
	}
	if (rc) {
		fprintf(stderr,
			"gradwire-codec-bench: %s (%s) n=%llu: decode of its own "
			"payload failed: %s\n",
			spec, c->ops->impl, (unsigned long long)n, gw_strerror(rc));
		exit(1);
	}
	rc = gw_payload_decode(b->out, (size_t)len, b->y2, n);
	if (rc || memcmp(b->y, b->y2, bytes)) {
		fprintf(stderr,
			"gradwire-codec-bench: %s n=%llu: decode by %s and by "
			"gw_payload_decode() (%s) disagree: %s\n",
			spec, (unsigned long long)n, c->ops->impl,
			gw_codec_find_id(c->ops->id)->impl,
			rc ? gw_strerror(rc) : "different values");
		exit(1);
	}
	for (uint64_t i = 0; i < n; i++) {
		double d = (double)b->x[i] - (double)b->y[i];

		num += d * d;
		den += (double)b->x[i] * (double)b->x[i];
	}
	r->rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);

	/* Timed: a fresh stream, one warm-up, then memcpy/encode/decode rounds. */
	memset(b->state, 0, b->state_cap);
	if (b->res)
		memset(b->res, 0, bytes);
	for (int run = -1; run < o->runs; run++) {
		double t0, t1, t2, t3;

		t0 = now();
		memcpy(b->dst, b->x, bytes);
		clobber(b->dst);
		t1 = now();
		len = encode_once(o, c, b);
		clobber(b->out);
		t2 = now();
		rc = len < 0 ? (int)len : decode_once(o, c, b, (size_t)len);
		clobber(b->y);
		t3 = now();
		if (rc) {
			fprintf(stderr,
				"gradwire-codec-bench: %s (%s) n=%llu: timed %s failed: %s\n", spec,
				c->ops->impl, (unsigned long long)n, len < 0 ? "encode" : "decode",
				gw_strerror(rc));
			exit(1);
		}
		if (run < 0)
			continue;
		tm[run] = t1 - t0;
		te[run] = t2 - t1;
		td[run] = t3 - t2;
	}
	r->mem_gbps = (double)bytes / median(tm, o->runs) * 1e-9;
	r->enc_gbps = (double)bytes / median(te, o->runs) * 1e-9;
	r->dec_gbps = (double)bytes / median(td, o->runs) * 1e-9;
	free(t);
	return 0;
}

static void fmt_n(char *buf, size_t len, uint64_t n)
{
	if (n && !(n & (n - 1)))
		snprintf(buf, len, "2^%d", __builtin_ctzll(n));
	else
		snprintf(buf, len, "%llu", (unsigned long long)n);
}

/* JSON string body: specs and impl names are plain, but escape anyway. */
static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

int main(int argc, char **argv)
{
	struct opts o;
	struct gw_codec codecs[MAX_LIST];
	char cpu[256], line[1024];
	size_t off;
	int skipped = 0, rc;

	parse_opts(argc, argv, &o);
	if (o.impl) {
		const struct gw_codec_ops *ops = gw_codec_find_impl(o.impl);

		if (!ops) {
			fprintf(stderr,
				"gradwire-codec-bench: --impl %s: no such implementation (known:",
				o.impl);
			for (size_t i = 0; i < gw_codec_count(); i++)
				fprintf(stderr, " %s", gw_codec_at(i)->impl);
			fprintf(stderr, ")\n");
			return 2;
		}
		if (ops->cpu_ok && !ops->cpu_ok()) {
			fprintf(stderr, "gradwire-codec-bench: --impl %s: this CPU cannot run it\n",
				o.impl);
			return 2;
		}
		if (!o.nspecs)
			o.specs[o.nspecs++] = ops->name;
	}
	if (!o.nspecs) {
		for (size_t i = 0; i < sizeof(default_specs) / sizeof(default_specs[0]); i++)
			o.specs[o.nspecs++] = default_specs[i];
	}
	for (size_t i = 0; i < o.nspecs; i++)
		setup_codec(&o, o.specs[i], &codecs[i]);
	if (o.impl) {
		bool used = false;

		for (size_t i = 0; i < o.nspecs; i++)
			used |= !strcmp(codecs[i].ops->impl, o.impl);
		if (!used) {
			fprintf(stderr, "gradwire-codec-bench: --impl %s: no -c names its codec\n",
				o.impl);
			return 2;
		}
	}

	cpu_name(cpu, sizeof(cpu));
	if (!o.json) {
		off = (size_t)snprintf(line, sizeof(line), "CPU: %s; impl:", cpu);
		for (size_t i = 0; i < o.nspecs && off < sizeof(line); i++) {
			bool dup = false;

			for (size_t j = 0; j < i; j++)
				dup |= codecs[j].ops == codecs[i].ops;
			if (!dup)
				off += (size_t)snprintf(line + off, sizeof(line) - off, " %s=%s",
							codecs[i].ops->name, codecs[i].ops->impl);
		}
		printf("%s\n", line);
		printf("mode: %s%s, %d runs, median; GB/s = 4n input bytes / time\n",
		       o.raw ? "raw section (ops->encode/decode)"
			     : "payload (gw_payload_encode, parse + decode)",
		       o.ef ? ", error feedback" : "", o.runs);
		if (o.low_rank)
			printf("input: rank-%u matrix + noise / 10 (--low-rank)\n", o.low_rank);
		printf("%-28s %-16s %6s %9s %9s %9s %8s %8s %9s %10s\n", "spec", "impl", "n",
		       "enc GB/s", "dec GB/s", "mcpy GB/s", "enc/mcpy", "dec/mcpy", "ratio",
		       "rel_l2");
		fflush(stdout);
	}

	for (size_t ni = 0; ni < o.nns; ni++) {
		struct bufs b = { .n = o.ns[ni] };
		size_t bytes = (size_t)b.n * 4;
		char nbuf[32];
		/* Long runs say what they are doing, on a terminal only. */
		bool progress = b.n >= (UINT64_C(1) << 22) && isatty(2);

		fmt_n(nbuf, sizeof(nbuf), b.n);
		if (b.n > SIZE_MAX / 4) {
			fprintf(stderr, "gradwire-codec-bench: n=%s is too large\n", nbuf);
			return 2;
		}
		b.x = xalloc(bytes);
		b.y = xalloc(bytes);
		b.y2 = xalloc(bytes);
		b.dst = xalloc(bytes);
		b.res = o.ef ? xalloc(bytes) : NULL;
		if (o.low_rank)
			fill_low_rank(b.x, b.n, o.low_rank);
		else
			gw_fill_seed(b.x, b.n);

		for (size_t i = 0; i < o.nspecs; i++) {
			const struct gw_codec *c = &codecs[i];
			struct result r;

			if (progress)
				fprintf(stderr, "[%s n=%s ...]\r", o.specs[i], nbuf);
			rc = bench_one(&o, o.specs[i], c, &b, &r);
			if (progress)
				fprintf(stderr, "\r%*s\r", 60, "");
			if (rc) {
				skipped++;
				continue;
			}
			if (o.json) {
				printf("{\"codec\":");
				json_str(c->ops->name);
				printf(",\"spec\":");
				json_str(o.specs[i]);
				printf(",\"impl\":");
				json_str(c->ops->impl);
				printf(",\"n\":%llu,\"encode_gbps\":%.4f,"
				       "\"decode_gbps\":%.4f,\"memcpy_gbps\":%.4f,"
				       "\"ratio\":%.4f,\"rel_l2\":%.6e,"
				       "\"encode_vs_memcpy\":%.4f,\"decode_vs_memcpy\":%.4f,"
				       "\"ef\":%s,\"api\":\"%s\",\"runs\":%d}\n",
				       (unsigned long long)b.n, r.enc_gbps, r.dec_gbps, r.mem_gbps,
				       r.ratio, r.rel_l2, r.enc_gbps / r.mem_gbps,
				       r.dec_gbps / r.mem_gbps, o.ef ? "true" : "false",
				       o.raw ? "raw" : "payload", o.runs);
			} else {
				printf("%-28s %-16s %6s %9.2f %9.2f %9.2f %8.2f %8.2f "
				       "%9.2f %10.3e\n",
				       o.specs[i], c->ops->impl, nbuf, r.enc_gbps, r.dec_gbps,
				       r.mem_gbps, r.enc_gbps / r.mem_gbps, r.dec_gbps / r.mem_gbps,
				       r.ratio, r.rel_l2);
			}
			fflush(stdout);
		}
		free(b.x);
		free(b.y);
		free(b.y2);
		free(b.dst);
		free(b.res);
		free(b.out);
		free(b.state);
		free(b.scratch);
	}
	if (skipped)
		fprintf(stderr,
			"gradwire-codec-bench: %d measurement(s) skipped "
			"(codec not implemented in this build)\n",
			skipped);
	return 0;
}
