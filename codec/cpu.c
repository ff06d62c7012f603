/* SPDX-License-Identifier: MIT */
/*
 * cpu.c - run-time CPU feature probes for the SIMD codec variants.
 *
 * __builtin_cpu_supports() reads CPUID and checks that the OS saves the
 * wider registers (XGETBV), so a variant is only chosen where it can run.
 * No environment variable overrides them; gw_codec_generic() and
 * gw_codec_find_impl() name an implementation explicitly.
 */
#include "codec_impl.h"
#if defined(__x86_64__)
#include <cpuid.h>
#endif

int gw_cpu_avx2(void)
{
#if defined(__x86_64__)
	unsigned a, b, c = 0, d;

	/* F16C from CPUID itself: clang's __builtin_cpu_supports lacks it. */
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_F16C))
		return 0;
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2") &&
	       __builtin_cpu_supports("fma");
#else
	return 0;
#endif
}

int gw_cpu_avx512(void)
{
#if defined(__x86_64__)
	return gw_cpu_avx2() && __builtin_cpu_supports("avx512f") &&
	       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
	       __builtin_cpu_supports("avx512dq");
#else
	return 0;
#endif
}
