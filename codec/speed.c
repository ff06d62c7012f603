/* SPDX-License-Identifier: MIT */
/*
 * speed.c - gw_codec_speed(): what one codec costs on this host.
 *
 * GRADWIRE_CODEC=auto predicts each allowed codec's time on a link from its
 * CPU cost and its wire bytes; this file measures both on a sample, with the
 * codec bench's method (tools/codec-bench.c) in small:
 *  - data: the seed benchmark's SplitMix64 recipe (tests/tutil.c's
 *    tu_fill_seed()), so the figures compare with gradwire-codec-bench's;
 *  - encode as the sender does (transport/ctx_send.c): gw_payload_encode()
 *    with the stream's codec state, scratch and a residual read from one
 *    buffer and written to another (the transport's res.buf -> staged);
 *  - decode as the receiver does (transport/ctx_recv.c):
 *    gw_payload_decode_add() into an accumulator, i.e. parse + the
 *    registry's best decoder for the payload's wire id;
 *  - one untimed warm-up round, then RUNS rounds of encode and decode-add
 *    interleaved, so that machine noise hits both alike; the median of each,
 *    on CLOCK_MONOTONIC.
 *
 * Every buffer is allocated and its pages touched before the first timing,
 * and freed before return. Nothing is cached: the caller keeps the result.
 */
#include <stdlib.h>
#include <time.h>
#include "codec_impl.h"

#define RUNS 5
#define DEFAULT_N (UINT64_C(256) << 10)

/* The buffers of one measurement; NULL until allocated. */
struct bench {
	uint64_t n;
	float *x, *res, *res_out, *acc;
	uint8_t *out;
	size_t cap;
	void *state, *scratch;
};

/* A zeroed block in whole 64-byte lines (SIMD code streams into it), every
 * page touched now rather than inside a timing; NULL when out of memory. */
static void *alloc_touched(size_t bytes)
{
	void *p = NULL;

	bytes = bytes ? (bytes + 63) / 64 * 64 : 64;
	if (posix_memalign(&p, 64, bytes))
		return NULL;
	memset(p, 0, bytes);
	return p;
}

static void bench_free(struct bench *b)
{
	free(b->x);
	free(b->res);
	free(b->res_out);
	free(b->acc);
	free(b->out);
	free(b->state);
	free(b->scratch);
}

/* Allocate b's buffers for c and n (state and residuals zeroed: a fresh
 * stream) and fill the input. Return: 0 or -ENOMEM; bench_free() b either way. */
static int bench_alloc(struct bench *b, const struct gw_codec *c, uint64_t n)
{
	size_t bytes = (size_t)n * sizeof(float);

	memset(b, 0, sizeof(*b));
	b->n = n;
	b->cap = gw_payload_bound(c, n);
	b->x = alloc_touched(bytes);
	b->res = alloc_touched(bytes);
	b->res_out = alloc_touched(bytes);
	b->acc = alloc_touched(bytes);
	b->out = alloc_touched(b->cap);
	b->state = alloc_touched(gw_codec_state_size(c, n));
	b->scratch = alloc_touched(gw_codec_scratch_size(c, n));
	if (!b->x || !b->res || !b->res_out || !b->acc || !b->out || !b->state || !b->scratch)
		return -ENOMEM;
	gw_fill_seed(b->x, n);
	return 0;
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Keep the compiler from dropping stores nobody reads afterwards. */
static void clobber(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * One round: encode x with the residual into a payload (the new residual
 * becomes the next round's), then decode-add that payload into acc.
 * Return: the payload's length, or the codec's error.
 */
static ssize_t bench_round(const struct gw_codec *c, struct bench *b, double *enc_ns,
			   double *dec_ns)
{
	double t0, t1, t2;
	ssize_t len;
	float *swap;
	int rc;

	t0 = now_ns();
	len = gw_payload_encode(c, b->state, b->scratch, b->x, b->res, b->res_out, b->n, b->out,
				b->cap);
	clobber(b->out);
	t1 = now_ns();
	if (len < 0)
		return len;
	rc = gw_payload_decode_add(b->out, (size_t)len, b->acc, b->n);
	clobber(b->acc);
	t2 = now_ns();
	if (rc)
		return rc;
	swap = b->res;
	b->res = b->res_out;
	b->res_out = swap;
	*enc_ns = t1 - t0;
	*dec_ns = t2 - t1;
	return len;
}

int gw_codec_speed(const struct gw_codec *c, uint64_t n, struct gw_codec_speed *out)
{
	double te[RUNS], td[RUNS];
	struct bench b = { 0 };
	ssize_t len = 0;
	int rc;

	if (!n)
		n = DEFAULT_N;
	/* An implementation this CPU cannot run would die of SIGILL. */
	if (!c || !c->ops || !out || n > GW_MAX_ELEMS || n > SIZE_MAX / sizeof(float) ||
	    (c->ops->cpu_ok && !c->ops->cpu_ok()))
		return -EINVAL;
	rc = bench_alloc(&b, c, n);
	if (rc)
		goto free_bench;
	for (int run = -1; run < RUNS; run++) {
		double e = 0, d = 0;

		len = bench_round(c, &b, &e, &d);
		if (len < 0) {
			rc = (int)len;
			goto free_bench;
		}
		if (run < 0)
			continue; /* warm-up: caches, page tables, the codec's first step */
		te[run] = e;
		td[run] = d;
	}
	out->enc_ns = median(te, RUNS) / (double)n;
	out->dec_ns = median(td, RUNS) / (double)n;
	out->bpv = (double)len / (double)n;
free_bench:
	bench_free(&b);
	return rc;
}
