/* SPDX-License-Identifier: MIT */
/* coll_util.c - see coll_util.h. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "coll_util.h"
#include "tp_harness.h"
#include "tutil.h"

int ct_open(int rank, int size, const char *dir, const char *codec, const char *codec_local,
	    uint64_t host_id, int timeout_ms, struct gw_store **st, struct gw_ctx **ctx)
{
	struct tp_env env = { .provider = tp_net_provider(),
			      .iface = "lo",
			      .log_level = GW_LOG_ERROR,
			      .timeout_ms = timeout_ms ? timeout_ms : 8000 };
	struct gw_ctx_cfg cfg = { .tp = tp_cfg(&env) };
	char err[512] = "store";
	int rc;

	*st = NULL;
	*ctx = NULL;
	cfg.codec = codec;
	cfg.codec_local = codec_local;
	cfg.min_compress_bytes = 64;
	cfg.host_id = host_id;
	rc = gw_store_file_create(dir, st);
	if (!rc)
		rc = gw_ctx_create(&cfg, rank, size, *st, ctx, err, sizeof(err));
	if (!rc && tp_check_loopback(gw_ctx_tp(*ctx), &env))
		rc = -EADDRNOTAVAIL;
	if (rc)
		fprintf(stderr, "rank %d: open: %s (%s)\n", rank, err, gw_strerror(rc));
	return rc;
}

uint64_t ct_seed(int rank, uint64_t n, int step)
{
	return (uint64_t)rank * 7919 + n * 31 + (uint64_t)step * 104729 + 1;
}

void ct_exact_sum(double *exact, double *mag, uint64_t n, int size, int step)
{
	float *x = tu_alloc(n * 4 + 4);

	memset(exact, 0, n * sizeof(double));
	memset(mag, 0, n * sizeof(double));
	for (int r = 0; r < size; r++) {
		tu_fill(x, n, ct_seed(r, n, step));
		for (uint64_t i = 0; i < n; i++) {
			exact[i] += x[i];
			mag[i] += fabs(x[i]);
		}
	}
	free(x);
}

double ct_rel_l2(const float *y, const double *exact, uint64_t n, double scale)
{
	double e = 0, t = 0;

	for (uint64_t i = 0; i < n; i++) {
		double d = y[i] - exact[i] * scale;

		e += d * d;
		t += exact[i] * scale * exact[i] * scale;
	}
	return t > 0 ? sqrt(e / t) : sqrt(e);
}

int ct_record(const char *dir, const char *tag, int rank, const void *p, size_t len)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s-%d", dir, tag, rank);
	f = fopen(path, "a");
	if (!f)
		return -1;
	fprintf(f, "%016llx\n", (unsigned long long)tp_hash(p, len));
	fclose(f);
	return 0;
}

size_t ct_take_file(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t len;

	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	len = fread(buf, 1, cap - 1, f);
	buf[len] = 0;
	fclose(f);
	unlink(path);
	return len;
}

void ct_check_identical(const char *dir, const char *tag, int size)
{
	char path[128], first[4096] = "", buf[4096];

	for (int r = 0; r < size; r++) {
		size_t len;

		snprintf(path, sizeof(path), "%s/%s-%d", dir, tag, r);
		len = ct_take_file(path, buf, sizeof(buf));
		if (r == 0)
			memcpy(first, buf, len + 1);
		else if (strcmp(first, buf))
			printf("\n  %s: rank %d's result differs from rank 0's\n", tag, r);
		CU_ASSERT_STRING_EQUAL(first, buf);
		CU_ASSERT(len > 0);
	}
}

void *ct_killer(void *ms)
{
	struct timespec d = { 0, *(const int *)ms * 1000000L };

	nanosleep(&d, NULL);
	raise(SIGKILL);
	return NULL;
}
