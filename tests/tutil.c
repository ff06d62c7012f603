/* SPDX-License-Identifier: MIT */
/* tutil.c - see tutil.h. */
#include <CUnit/Basic.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tutil.h"
#include "../common/rng.h"

int tu_run(const char *suite, CU_TestInfo *tests)
{
	CU_SuiteInfo suites[] = {
		{ (char *)suite, NULL, NULL, NULL, NULL, tests },
		CU_SUITE_INFO_NULL,
	};
	const char *only = getenv("GW_TEST_ONLY");
	unsigned fails;

	if (only) { /* run only the tests whose name holds GW_TEST_ONLY */
		CU_TestInfo *w = tests;

		for (CU_TestInfo *t = tests; t->pName; t++)
			if (strstr(t->pName, only))
				*w++ = *t;
		*w = (CU_TestInfo)CU_TEST_INFO_NULL;
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	if (CU_register_suites(suites) != CUE_SUCCESS)
		return 2;
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
	CU_cleanup_registry();
	return fails ? 1 : 0;
}

void tu_skip(const char *why)
{
	printf("SKIP: %s\n", why);
	fflush(stdout);
	exit(TU_SKIP);
}

void tu_fill(float *x, uint64_t n, uint64_t seed)
{
	uint64_t s = seed;

	gw_fill_normal(x, n, &s);
}

void tu_fill_seed(float *x, uint64_t n)
{
	gw_fill_seed(x, n);
}

void tu_fill_hard(float *x, uint64_t n, uint64_t seed, int nonfinite)
{
	uint64_t s = seed;

	tu_fill(x, n, seed);
	for (uint64_t i = 0; i < n; i++) {
		switch (gw_splitmix64(&s) % 16) {
		case 0:
			x[i] = 0.0f;
			break;
		case 1:
			x[i] = -0.0f;
			break;
		case 2:
			x[i] = 1.0f;
			break; /* ties */
		case 3:
			x[i] = -1.0f;
			break;
		case 4:
			x[i] = 1e-40f;
			break; /* subnormal */
		case 5:
			x[i] = (float)(gw_splitmix64(&s) % 1000) * 1e3f;
			break;
		default:
			break;
		}
	}
	if (nonfinite && n) {
		x[n / 3] = NAN;
		x[n / 2] = INFINITY;
		x[n - 1] = -INFINITY;
	}
}

void *tu_alloc(size_t bytes)
{
	void *p = NULL;

	if (posix_memalign(&p, 64, bytes ? (bytes + 63) / 64 * 64 : 64))
		abort();
	memset(p, 0, bytes ? bytes : 1);
	return p;
}

void tu_low_rank(float *x, uint64_t rows, uint64_t cols, unsigned r, uint64_t seed_a,
		 uint64_t seed_b)
{
	float *a = tu_alloc(rows * r * 4), *b = tu_alloc(cols * r * 4);

	tu_fill(a, rows * r, seed_a);
	tu_fill(b, cols * r, seed_b);
	for (uint64_t i = 0; i < rows; i++)
		for (uint64_t j = 0; j < cols; j++) {
			double t = 0;

			for (unsigned k = 0; k < r; k++)
				t += (double)a[i * r + k] * b[j * r + k];
			x[i * cols + j] = (float)t;
		}
	free(a);
	free(b);
}

int tu_capture_begin(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int saved = fd < 0 ? -1 : dup(STDERR_FILENO);

	if (saved >= 0 && dup2(fd, STDERR_FILENO) < 0) {
		close(saved);
		saved = -1;
	}
	if (fd >= 0)
		close(fd);
	return saved;
}

long tu_capture_end(int saved, const char *path, char *buf, size_t cap)
{
	FILE *f;
	size_t n = 0;

	buf[0] = '\0';
	if (saved < 0)
		return -1;
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, cap - 1, f);
	buf[n] = '\0';
	fclose(f);
	unlink(path);
	fputs(buf, stderr);
	return (long)n;
}
