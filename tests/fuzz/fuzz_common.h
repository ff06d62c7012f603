/* SPDX-License-Identifier: MIT */
/*
 * fuzz_common.h - helpers shared by the fuzz targets (header-only, static).
 *
 * A target reports a bug by abort()ing after printing what it saw, so that
 * libFuzzer saves the input and the replay driver fails the meson test.
 * Canaries are NaN bit patterns no decoder produces by arithmetic, compared
 * as bits (memcmp), never as floats.
 */
#ifndef GW_FUZZ_COMMON_H
#define GW_FUZZ_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The key fuzz_frame opens frames with (gw-mkcorpus seals its seeds with it). */
#define FUZZ_FRAME_KEY "fuzzing key for fuzz_frame 32 B"

#define FUZZ_CANARY_A 0x7fa5c0deu /* signalling NaN: never a result */
#define FUZZ_CANARY_B 0xffb17e57u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                                      \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz check failed: %s (%s:%d): ", #cond, __FILE__,        \
				__LINE__);                                                         \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/* n floats (at least one byte, so malloc(0) never muddles the checks). */
static inline float *fuzz_alloc(uint64_t n)
{
	float *p = malloc(n ? (size_t)n * sizeof(float) : 1);

	if (!p)
		abort();
	return p;
}

/* Fill with a 32-bit pattern: one store, then doubling memcpy (few calls,
 * so the instrumented build stays fast on 2^16-element buffers). */
static inline void fuzz_fill(float *y, uint64_t n, uint32_t bits)
{
	uint64_t done = 1;

	if (!n)
		return;
	memcpy(y, &bits, 4);
	while (done < n) {
		uint64_t k = done < n - done ? done : n - done;

		memcpy(y + done, y, (size_t)k * 4);
		done += k;
	}
}

/* Bits of a float (a 4-byte memcpy is a plain load). */
static inline uint32_t fuzz_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

#define FUZZ_CHUNK 4096

/* Index of the first element whose bits differ from bits, or n. Compares
 * whole chunks with memcmp against a reference chunk, element-wise only in
 * a chunk that differs. */
static inline uint64_t fuzz_first_not(const float *y, uint64_t n, uint32_t bits)
{
	static float ref[FUZZ_CHUNK];
	static uint32_t ref_bits;
	static int ref_ok;

	if (!ref_ok || ref_bits != bits) {
		fuzz_fill(ref, FUZZ_CHUNK, bits);
		ref_bits = bits;
		ref_ok = 1;
	}
	for (uint64_t i = 0; i < n; i += FUZZ_CHUNK) {
		uint64_t k = n - i < FUZZ_CHUNK ? n - i : FUZZ_CHUNK;

		if (!memcmp(y + i, ref, (size_t)k * 4))
			continue;
		for (uint64_t j = i; j < i + k; j++)
			if (fuzz_bits(y[j]) != bits)
				return j;
	}
	return n;
}

/* Index of the first element where a and b differ in bits, or n. */
static inline uint64_t fuzz_first_diff(const float *a, const float *b, uint64_t n)
{
	if (!n || !memcmp(a, b, (size_t)n * 4))
		return n;
	for (uint64_t i = 0; i < n; i++)
		if (fuzz_bits(a[i]) != fuzz_bits(b[i]))
			return i;
	return n;
}

static inline int fuzz_isnan_bits(uint32_t u)
{
	return (u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu);
}

/*
 * decode_add into an accumulator of -0.0 must give decode's bits: -0 + v == v
 * exactly for every v but NaN (whose payload the addition may quiet). Sparse
 * codecs add nothing where they send nothing: there the accumulator keeps
 * its -0.0 while decode writes +0.0, which is the same value.
 * Return the first index that breaks this, or n.
 */
static inline uint64_t fuzz_add_mismatch(const float *dec, const float *acc, uint64_t n)
{
	if (fuzz_first_diff(dec, acc, n) == n)
		return n;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t a = fuzz_bits(dec[i]), b = fuzz_bits(acc[i]);

		if (a == b)
			continue;
		if (fuzz_isnan_bits(a) && fuzz_isnan_bits(b))
			continue;
		if (a == 0 && b == 0x80000000u) /* untouched -0.0 vs +0.0 */
			continue;
		return i;
	}
	return n;
}

#endif
