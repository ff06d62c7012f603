/* SPDX-License-Identifier: MIT */
/*
 * fi_load.h - libfabric is loaded on first use by fi_load.c, which keeps the
 * host's signal dispositions as they were (see there).
 */
#ifndef GW_FI_LOAD_H
#define GW_FI_LOAD_H

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

#endif
