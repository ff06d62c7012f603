/* SPDX-License-Identifier: MIT */
/* grow.c - gw_grow() (grow.h): scratch and request arrays that only grow. */
#include <errno.h>
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
