/* SPDX-License-Identifier: MIT */
/*
 * init.c - a context configured from the environment: load and check every
 * GRADWIRE_* variable, log them (GRADWIRE_LOG=info), connect, and arrange
 * for statistics at finalize (GRADWIRE_STATS=1).
 */
#include <stdio.h>
#include "config.h"
#include "init.h"

int gw_ctx_create_config(const struct gw_config *cfg, int rank, int size, struct gw_store *st,
			 struct gw_ctx **out, char *err, size_t errlen)
{
	struct gw_ctx_cfg cc;
	int rc;

	gw_config_log(cfg, rank);
	gw_config_ctx(cfg, &cc);
	rc = gw_ctx_create(&cc, rank, size, st, out, err, errlen);
	if (!rc && cfg->stats)
		gw_ctx_stats_at_exit(*out, stderr);
	return rc;
}

int gw_ctx_create_env(int rank, int size, struct gw_store *st, struct gw_ctx **out, char *err,
		      size_t errlen)
{
	struct gw_config cfg;
	int rc = gw_config_load(&cfg, NULL, err, errlen);

	if (rc) {
		gw_log(GW_LOG_ERROR, GW_LOG_ERROR, rank, "%s", err);
		return rc;
	}
	return gw_ctx_create_config(&cfg, rank, size, st, out, err, errlen);
}

/* The host's store behind the transport's struct gw_store_ops. */
static int host_set(void *s, const char *key, const void *val, size_t len)
{
	const struct gradwire_store *h = s;

	return h->set(h->arg, key, val, len);
}

static ssize_t host_get(void *s, const char *key, void *buf, size_t cap, int timeout_ms)
{
	const struct gradwire_store *h = s;

	return h->get(h->arg, key, buf, cap, timeout_ms);
}

static void host_destroy(void *s)
{
	(void)s; /* owned by the host */
}

static const struct gw_store_ops host_store_ops = {
	.set = host_set,
	.get = host_get,
	.destroy = host_destroy,
};

void gw_store_host(struct gw_store *st, const struct gradwire_store *h)
{
	st->ops = &host_store_ops;
	st->s = (void *)(uintptr_t)h;
}
