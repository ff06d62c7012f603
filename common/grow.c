/* SPDX-License-Identifier: MIT */
/* grow.c - gw_grow() (grow.h): scratch and request arrays that only grow;
 * gw_alloc_lines(). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include "grow.h"

int gw_grow(void **p, size_t *cap, size_t bytes)
{
	void *n;

	if (*cap >= bytes)
		return 0;
	n = realloc(*p, bytes);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = bytes;
	return 0;
}

void *gw_alloc_lines(size_t bytes)
{
	if (bytes > SIZE_MAX - 63)
		return NULL;
	return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}
