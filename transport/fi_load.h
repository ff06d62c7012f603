/* SPDX-License-Identifier: MIT */
/*
 * fi_load.h - libfabric is loaded on first use by fi_load.c, which keeps the
 * host's signal dispositions as they were (see there).
 */
#ifndef GW_FI_LOAD_H
#define GW_FI_LOAD_H

#include <stdint.h>

/**
 * gw_fi_restored_signals() - load libfabric if it is not yet, and return how
 * many signal dispositions loading it changed (and fi_load.c put back).
 */
int gw_fi_restored_signals(void);

/**
 * gw_fi_info_held() - how many fi_info lists gradwire got from libfabric
 * (fi_getinfo, fi_dupinfo, fi_allocinfo) and has not freed. Zero once every
 * context is destroyed. Tests check it because LeakSanitizer cannot: it
 * ignores allocations under fi_dupinfo (tests/lsan.supp says why).
 */
int gw_fi_info_held(void);

/**
 * gw_fi_version() - the loaded libfabric's version (FI_VERSION(major,
 * minor)), loading it if it is not yet; 0 when it cannot be loaded.
 */
uint32_t gw_fi_version(void);

/**
 * gw_fi_tcp_provider() - the name the loaded libfabric gives its native TCP
 * provider: "net" before 1.18, "tcp" from 1.18 on.
 */
const char *gw_fi_tcp_provider(void);

#endif
