/* SPDX-License-Identifier: MIT */
/* tp_harness.c - see tp_harness.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "fi_load.h"
#include "tp_harness.h"
#include "../common/rng.h"

const char *tp_net_provider(void)
{
	const char *p = getenv("GW_TEST_PROVIDER");

	return p && *p ? p : gw_fi_tcp_provider();
}

struct gw_tp_cfg tp_cfg(const struct tp_env *env)
{
	struct gw_tp_cfg cfg = {
		.provider = env->provider,
		.iface = env->iface,
		.job = "test",
		.timeout_ms = env->timeout_ms > 0 ? env->timeout_ms : 10000,
		.force_mr = env->force_mr,
		.log_level = env->log_level,
		.spin_us = env->spin_us,
		.one_conn = env->one_conn,
	};
	return cfg;
}

int tp_check_loopback(const struct gw_tp *tp, const struct tp_env *env)
{
	const char *a = gw_tp_addr_str(tp);

	if (!env->iface)
		return 0;
	if (!strncmp(a, "127.", 4) || !strncmp(a, "[::1]", 5))
		return 0;
	fprintf(stderr, "rank %d: address %s is not loopback\n", gw_tp_rank(tp), a);
	return -EADDRNOTAVAIL;
}

struct gw_tp *tp_open(const struct tp_env *env, int rank, int size, const char *dir,
		      struct gw_store **st, int *err)
{
	struct gw_tp_cfg cfg = tp_cfg(env);
	struct gw_tp *tp = NULL;
	int ret;

	*st = NULL;
	ret = gw_store_file_create(dir, st);
	if (ret)
		goto out;
	ret = gw_tp_create(&cfg, rank, size, *st, &tp, NULL, 0);
	if (ret)
		goto out_store;
	ret = tp_check_loopback(tp, env);
	if (ret)
		goto out_tp;
	*err = 0;
	return tp;

out_tp:
	gw_tp_destroy(tp);
out_store:
	gw_store_destroy(*st);
	*st = NULL;
out:
	fprintf(stderr, "rank %d: opening %s%s%s: %s\n", rank, env->provider,
		env->iface ? " on " : "", env->iface ? env->iface : "", gw_strerror(ret));
	*err = ret;
	return NULL;
}

void tp_close(struct gw_tp *tp, struct gw_store *st)
{
	gw_tp_destroy(tp);
	gw_store_destroy(st);
}

int tp_barrier(struct gw_store *st, int rank, int size, const char *name, int timeout_ms)
{
	char key[128], v = 1;
	int ret;

	snprintf(key, sizeof(key), "barrier/%s/%d", name, rank);
	ret = gw_store_set(st, key, &v, 1);
	for (int r = 0; r < size && !ret; r++) {
		ssize_t got;

		snprintf(key, sizeof(key), "barrier/%s/%d", name, r);
		got = gw_store_get(st, key, &v, 1, timeout_ms);
		ret = got < 0 ? (int)got : 0;
	}
	return ret;
}

void tp_pattern(void *buf, size_t len, uint64_t seed)
{
	unsigned char *p = buf;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t w = gw_splitmix64_mix(seed * GW_SPLITMIX64_GAMMA + i);

		memcpy(p + i, &w, 8);
	}
	for (; i < len; i++)
		p[i] = (unsigned char)gw_splitmix64_mix(seed + i);
}

size_t tp_mismatch(const void *buf, size_t len, uint64_t seed)
{
	const unsigned char *p = buf;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t w = gw_splitmix64_mix(seed * GW_SPLITMIX64_GAMMA + i);

		if (memcmp(p + i, &w, 8))
			return i + 1;
	}
	for (; i < len; i++)
		if (p[i] != (unsigned char)gw_splitmix64_mix(seed + i))
			return i + 1;
	return 0;
}
