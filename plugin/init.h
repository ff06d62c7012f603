/* SPDX-License-Identifier: MIT */
/* init.h - contexts configured from GRADWIRE_* variables (init.c). */
#ifndef GW_INIT_H
#define GW_INIT_H

#include "conn.h"
#include "gradwire/plugin.h"

struct gw_config;

/**
 * gw_store_host() - st as a view of the host's store h (the plugin table's
 * struct gradwire_store), which must outlive every use of st.
 */
void gw_store_host(struct gw_store *st, const struct gradwire_store *h);

/**
 * gw_ctx_create_env() - gw_ctx_create() with the settings of the
 * environment. An invalid GRADWIRE_* variable is -EINVAL naming it in err.
 */
int gw_ctx_create_env(int rank, int size, struct gw_store *st, struct gw_ctx **out, char *err,
		      size_t errlen);

/**
 * gw_ctx_create_config() - gw_ctx_create() with the settings of cfg (loaded
 * by gw_config_load()): logs them, and arranges statistics at destroy when
 * cfg->stats is set.
 */
int gw_ctx_create_config(const struct gw_config *cfg, int rank, int size, struct gw_store *st,
			 struct gw_ctx **out, char *err, size_t errlen);

#endif
