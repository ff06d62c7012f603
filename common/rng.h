/* SPDX-License-Identifier: MIT */
/*
 * rng.h - gradwire's one SplitMix64 (Steele, Lea and Flood; Vigna's
 * constants) and the deterministic data built on it, which codec/, tools/
 * and tests/ share: the seed benchmark's input, the tests' gradients, the
 * fuzz corpora. Not for anything secret (keys and nonces come from
 * OpenSSL or getrandom()).
 *
 * Header-only, so that what links no gradwire library (the plugin test,
 * which loads libgradwire.so) uses it too.
 *
 * Invariant: every byte these functions produce is part of a contract
 * (golden vectors, the committed fuzz corpora, codec speeds measured on
 * the seed benchmark's input): a change here changes them all.
 */
#ifndef GW_RNG_H
#define GW_RNG_H

#include <stdint.h>

/* SplitMix64's increment (2^64 / the golden ratio). */
#define GW_SPLITMIX64_GAMMA UINT64_C(0x9E3779B97F4A7C15)

/* SplitMix64's output function: a bijective mix of one 64-bit word. */
static inline uint64_t gw_splitmix64_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* One step of SplitMix64: advance the state *s, return the next value. */
static inline uint64_t gw_splitmix64(uint64_t *s)
{
	return gw_splitmix64_mix(*s += GW_SPLITMIX64_GAMMA);
}

/**
 * gw_fill_normal() - x[0..n) roughly N(0,1), drawn from the SplitMix64
 * state *s (advanced by 4n steps): x = (u1 + u2 + u3 + u4 - 2) * 1.7320508
 * with u = (next >> 40) * 2^-24, summed in float in that order (the build
 * contracts no multiply-add, -ffp-contract=off, so every build gives the
 * same bytes).
 */
static inline void gw_fill_normal(float *x, uint64_t n, uint64_t *s)
{
	for (uint64_t i = 0; i < n; i++) {
		float u = 0;

		for (int j = 0; j < 4; j++)
			u += (float)(gw_splitmix64(s) >> 40) * 0x1p-24f;
		x[i] = (u - 2.0f) * 1.7320508f;
	}
}

/**
 * gw_fill_seed() - the seed benchmark's data for n values:
 * gw_fill_normal() from the state 0x5EED000000000001 ^ n. The host's codec
 * speeds (codec/speed.c), gradwire-codec-bench and the tests use these
 * bytes.
 */
static inline void gw_fill_seed(float *x, uint64_t n)
{
	uint64_t s = UINT64_C(0x5EED000000000001) ^ n;

	gw_fill_normal(x, n, &s);
}

#endif
