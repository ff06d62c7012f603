/* SPDX-License-Identifier: MIT */
/*
 * tp_harness.h - multi-process runs of the transport over loopback, for the
 * transport tests and gradwire-tp-bench.
 *
 * tp_run() forks `size` ranks that share a fresh file-store folder
 * (mkdtemp, removed afterwards). Each child arms alarm() so it dies rather
 * than hang, runs its body and exits with the body's return value; the
 * parent reaps every child by a deadline and SIGKILLs stragglers. A child
 * killed by signal s reports 128 + s; in a sanitizer build, a child whose
 * body succeeded but leaked memory reports TP_LEAKED.
 *
 * Network rule: only loopback. tp_pin_loopback() sets FI_TCP_IFACE and
 * FI_SOCKETS_IFACE to "lo" for every child, tp_cfg() asks for the "lo"
 * domain (the transport refuses to fall back to another), and
 * tp_check_loopback() rejects an endpoint address outside 127.0.0.0/8 / ::1.
 */
#ifndef GW_TP_HARNESS_H
#define GW_TP_HARNESS_H

#include <stdbool.h>
#include "transport.h"
#include "tp_fork.h"

/*
 * The network provider the tests run on: $GW_TEST_PROVIDER, else the loaded
 * libfabric's native TCP provider (gw_fi_tcp_provider(): "net" before 1.18,
 * "tcp" after), the default gradwire picks without InfiniBand. meson runs
 * the transport suites once more with GW_TEST_PROVIDER="tcp;ofi_rxm".
 */
const char *tp_net_provider(void);

struct tp_env {
	const char *provider;
	const char *iface; /* "lo", or NULL for providers without one (shm) */
	bool force_mr;
	int log_level;
	int timeout_ms;
	int spin_us;
	bool one_conn; /* gw_tp_cfg.one_conn */
};

struct gw_tp_cfg tp_cfg(const struct tp_env *env);
/* Store + context for one rank; prints why and returns NULL on failure
 * (err gets the transport's error). */
struct gw_tp *tp_open(const struct tp_env *env, int rank, int size, const char *dir,
		      struct gw_store **st, int *err);
void tp_close(struct gw_tp *tp, struct gw_store *st);
/* 0 when tp's address is loopback (or the provider has no IP address). */
int tp_check_loopback(const struct gw_tp *tp, const struct tp_env *env);
/* Everyone reaches name before anyone leaves it (through the store). */
int tp_barrier(struct gw_store *st, int rank, int size, const char *name, int timeout_ms);
/* Deterministic bytes of message (src, tag) and their check. */
void tp_pattern(void *buf, size_t len, uint64_t seed);
size_t tp_mismatch(const void *buf, size_t len, uint64_t seed);

#endif
