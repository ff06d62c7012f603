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

#define FUZZ_CANARY_A 0x7fa5c0deu	/* signalling NaN: never a result */
#define FUZZ_CANARY_B 0xffb17e57u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)						\
	do {								\
		if (!(cond)) {						\
			fprintf(stderr, "fuzz check failed: %s (%s:%d): ",	\
				#cond, __FILE__, __LINE__);		\
			fprintf(stderr, __VA_ARGS__);			\
			fputc('\n', stderr);				\
			abort();					\
		}							\
	} while (0)

/* n floats (at least one byte, so malloc(0) never muddles the checks). */
static inline float *fuzz_alloc(uint64_t n)
{
	float *p = malloc(n ? (size_t)n * sizeof(float) : 1);

	if (!p)
		abort();
	return p;
}

static inline void fuzz_fill(float *y, uint64_t n, uint32_t bits)
{
	for (uint64_t i = 0; i < n; i++)
		memcpy(&y[i], &bits, 4);
}

/* Index of the first element whose bits differ from bits, or n. */
static inline uint64_t fuzz_first_not(const float *y, uint64_t n, uint32_t bits)
{
	for (uint64_t i = 0; i < n; i++)
		if (memcmp(&y[i], &bits, 4))
			return i;
	return n;
}

static inline uint32_t fuzz_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static inline int fuzz_isnan_bits(uint32_t u)
{
	return (u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu);
}

/*
 * decode_add into an accumulator of -0.0 must give decode's bits: -0 + v == v
 * exactly for every v but NaN (whose payload the addition may quiet).
 * Return the first index that breaks this, or n.
 */
static inline uint64_t fuzz_add_mismatch(const float *dec, const float *acc, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		uint32_t a = fuzz_bits(dec[i]), b = fuzz_bits(acc[i]);

		if (a == b)
			continue;
		if (fuzz_isnan_bits(a) && fuzz_isnan_bits(b))
			continue;
		return i;
	}
	return n;
}

#endif
