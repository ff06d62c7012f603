/* SPDX-License-Identifier: MIT */
/*
 * grow.h - gw_grow(), a heap block that only grows, and gw_alloc_lines()
 * (grow.c).
 */
#ifndef GW_GROW_H
#define GW_GROW_H

#include <stddef.h>

/* gw_grow() - make the heap block *p (*cap bytes) hold at least bytes,
 * keeping its contents (realloc). Return: 0 or -ENOMEM (*p unchanged). */
int gw_grow(void **p, size_t *cap, size_t bytes);

/* gw_alloc_lines() - a heap block of at least bytes, in whole 64-byte cache
 * lines and aligned to one (SIMD code streams into it); free() it.
 * Return: the block, or NULL. */
void *gw_alloc_lines(size_t bytes);

#endif
