/* SPDX-License-Identifier: MIT */
/*
 * tutil.h - shared helpers of the CUnit test programs.
 *
 * tu_run() registers one suite per program (named after the module it
 * tests), runs it in CUnit's basic mode and turns failures into exit 1.
 * GW_TEST_ONLY=substring keeps only the tests whose name holds it.
 * tu_skip() exits TU_SKIP (meson's "skipped") after saying why, so a test
 * that cannot run here never passes silently.
 */
#ifndef GW_TUTIL_H
#define GW_TUTIL_H

#include <CUnit/CUnit.h>
#include <stdint.h>
#include <stddef.h>

/* The exit status meson counts as "skipped". */
#define TU_SKIP 77

int tu_run(const char *suite, CU_TestInfo *tests);
_Noreturn void tu_skip(const char *why);

/* The seed benchmark's input: SplitMix64 seeded 0x5EED000000000001 ^ n,
 * u = (next >> 40) * 2^-24, x = (u1 + u2 + u3 + u4 - 2) * 1.7320508. */
void tu_fill_seed(float *x, uint64_t n);
/* Deterministic N(0,1)-like data from any seed (same recipe). */
void tu_fill(float *x, uint64_t n, uint64_t seed);
/* Awkward data: zeros (both signs), ties, subnormals, huge values, and
 * (if nonfinite) a NaN and infinities at fixed places. */
void tu_fill_hard(float *x, uint64_t n, uint64_t seed, int nonfinite);
/* x (rows x cols) = A B^T, A (rows x r) and B (cols x r) tu_fill()ed from
 * seed_a and seed_b, summed in double: a matrix of exact rank r. */
void tu_low_rank(float *x, uint64_t rows, uint64_t cols, unsigned r, uint64_t seed_a,
		 uint64_t seed_b);
/* 64-byte aligned zeroed allocation that aborts on failure; free() it. */
void *tu_alloc(size_t bytes);

/* Send this process's stderr (where gw_log() writes) to the file path until
 * tu_capture_end(); returns the saved stderr descriptor, or -1. */
int tu_capture_begin(const char *path);
/* Restore stderr (saved by tu_capture_begin()), read back at most cap - 1
 * bytes of path into buf (NUL-terminated), echo them to stderr so a failing
 * test still shows them, and remove path. Return: bytes read, or -1. */
long tu_capture_end(int saved, const char *path, char *buf, size_t cap);

#endif
