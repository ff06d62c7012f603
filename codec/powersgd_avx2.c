/* SPDX-License-Identifier: MIT */
/*
 * powersgd_avx2.c - PowerSGD with its matrix kernels built for AVX2
 * (powersgd_kern.h): the same C as powersgd-generic, more lanes per
 * instruction, the same bits.
 */
#include "powersgd_kern.h"

static bool probe(void)
{
	return gw_cpu_avx2();
}

GW_PSGD_OPS(gw_powersgd_avx2, gw_psgd_kernels_avx2, "powersgd-avx2", 150, probe)
