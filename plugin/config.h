/* SPDX-License-Identifier: MIT */
/*
 * config.h - every GRADWIRE_* variable, declared once (config.c) and parsed
 * strictly. plugin/ is the only place that reads the environment.
 */
#ifndef GW_CONFIG_H
#define GW_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "conn.h"

/** struct gw_config - the parsed configuration. Strings point into the
 * environment or to the table's defaults; they stay valid while it does. */
struct gw_config {
	const char *provider;
	const char *provider_local; /* GRADWIRE_PROVIDER_LOCAL, or NULL */
	const char *iface;
	const char *job;
	const char *host_id; /* GRADWIRE_HOST_ID, or NULL */
	int algo;	     /* enum gw_coll_algo */
	long timeout_ms;
	const char *codec;
	const char *codec_local;
	bool codec_fallback;
	uint64_t min_compress_bytes;
	uint64_t segment_bytes; /* allreduce pipeline segment */
	int mac;		/* enum gw_mac_mode */
	const char *mac_key_file;
	const char *mac_algs;
	bool force_mr;
	bool one_conn; /* GRADWIRE_ONE_CONNECTION */
	bool stats;
	int log;	     /* enum gw_log_level */
	bool gloo_compress;  /* rejected by the Gloo device (plugin/gloo) */
	const char *src[32]; /* per parameter: "default" or "environment" */
};

/** struct gw_param_info - one row of the table, for docs and tests. */
struct gw_param_info {
	const char *name;
	const char *type; /* "string", "integer", "boolean", "size", "one of: ..." */
	const char *def;  /* NULL: unset */
	const char *help;
};

/**
 * gw_config_load() - parse the environment (envp: NULL-terminated "K=V"
 * strings; NULL means the process environment) into cfg.
 * An invalid value, or an unknown GRADWIRE_* name, is -EINVAL with a message
 * naming the variable in err; nothing falls back to a default silently.
 */
int gw_config_load(struct gw_config *cfg, char *const *envp, char *err, size_t errlen);

/** gw_config_log() - one line per variable with its value and source. */
void gw_config_log(const struct gw_config *cfg, int rank);

/** gw_config_host_id() - this rank's host id: of GRADWIRE_HOST_ID when set,
 * else of the host name (never 0; transport/conn.h). */
uint64_t gw_config_host_id(const struct gw_config *cfg);

/** gw_config_ctx() - the connection settings cfg describes. */
void gw_config_ctx(const struct gw_config *cfg, struct gw_ctx_cfg *out);

size_t gw_config_count(void);
const struct gw_param_info *gw_config_param(size_t i);

#endif
