/* SPDX-License-Identifier: MIT */
/*
 * tp-bench.h - what gradwire-tp-bench's driver (tp-bench.c) calls in its
 * reference runner (tp-bench-fi.c). Private to the tool.
 */
#ifndef GW_TP_BENCH_H
#define GW_TP_BENCH_H

#include <stddef.h>

/*
 * Enter a new network namespace and bring its lo up. Refuses (returns < 0)
 * unless lo is then the only interface.
 */
int bench_netns_enter(void);

/*
 * One fi_pingpong pair (provider, -S size, -I iters, port), server and
 * client in a fresh network namespace that holds only lo; GB/s (its
 * MB/sec / 1000), or < 0.
 */
double bench_fi_pingpong(const char *provider, size_t size, int iters, int port);

#endif
