/* SPDX-License-Identifier: MIT */
/* init.h - contexts configured from GRADWIRE_* variables (init.c). */
#ifndef GW_INIT_H
#define GW_INIT_H

#include "conn.h"

/**
 * gw_ctx_create_env() - gw_ctx_create() with the settings of the
 * environment. An invalid GRADWIRE_* variable is -EINVAL naming it in err.
 */
int gw_ctx_create_env(int rank, int size, struct gw_store *st,
		      struct gw_ctx **out, char *err, size_t errlen);

#endif
