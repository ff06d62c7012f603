/* SPDX-License-Identifier: MIT */
/*
 * coll_util.h - what the collectives' tests share (coll_util.c): each rank's
 * deterministic data, the exact sum every rank can compute from it, the
 * relative error, and the hashes of results that the parent compares to
 * prove the replicas bit-identical.
 */
#ifndef GW_COLL_UTIL_H
#define GW_COLL_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include "conn.h"

/*
 * A context of rank over loopback (tp_net_provider() on lo, checked) meeting
 * the others through a file store in dir: codec (and codec_local, NULL: the
 * same) negotiated, lossy from 64 bytes on (small chunks too), this host id,
 * timeout_ms (0: 8 s). Return: 0, or -errno after a line on stderr.
 */
int ct_open(int rank, int size, const char *dir, const char *codec, const char *codec_local,
	    uint64_t host_id, int timeout_ms, struct gw_store **st, struct gw_ctx **ctx);

/* The seed of rank's data for a tensor of n values at step. */
uint64_t ct_seed(int rank, uint64_t n, int step);
/* exact[i] = the sum over size ranks of their data (ct_seed(r, n, step)), in
 * double; mag[i] the sum of the magnitudes. */
void ct_exact_sum(double *exact, double *mag, uint64_t n, int size, int step);
/* Relative L2 distance of y from exact * scale. */
double ct_rel_l2(const float *y, const double *exact, uint64_t n, double scale);
/* Append the hash of p[0..len) to "<dir>/<tag>-<rank>". Return: 0 or -1. */
int ct_record(const char *dir, const char *tag, int rank, const void *p, size_t len);
/* Read a file that must exist into buf (a string), remove it. */
size_t ct_take_file(const char *path, char *buf, size_t cap);
/* CUnit assertion: every rank's hash file of tag holds the same lines (and
 * some); the files are removed. */
void ct_check_identical(const char *dir, const char *tag, int size);

/* A thread body: SIGKILL this process *(const int *)ms milliseconds after it
 * started (a rank killed inside a collective). */
void *ct_killer(void *ms);

#endif
