/* SPDX-License-Identifier: MIT */
/*
 * test_config.c - the GRADWIRE_* table: defaults, strict parsing, unknown
 * names, and docs/configuration.md kept in step with the code.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tutil.h"
#include "coll.h"
#include "config.h"

static int load(struct gw_config *c, const char *a, const char *b, char *err)
{
	char *env[3] = { (char *)a, (char *)b, NULL };

	if (!a)
		env[0] = NULL;
	return gw_config_load(c, env, err, 512);
}

static void test_defaults(void)
{
	struct gw_config c;
	struct gw_ctx_cfg x;
	char err[512];

	CU_ASSERT_EQUAL_FATAL(load(&c, NULL, NULL, err), 0);
	CU_ASSERT_PTR_NULL(c.provider);
	CU_ASSERT_STRING_EQUAL(c.codec, "none");
	CU_ASSERT_EQUAL(c.timeout_ms, 30000);
	CU_ASSERT_EQUAL(c.min_compress_bytes, 65536);
	CU_ASSERT_EQUAL(c.mac, GW_MAC_OFF);
	CU_ASSERT_TRUE(c.codec_fallback);
	CU_ASSERT_EQUAL(c.log, GW_LOG_WARN);
	CU_ASSERT_STRING_EQUAL(c.src[0], "default");
	gw_config_ctx(&c, &x);
	CU_ASSERT_EQUAL(x.tp.timeout_ms, 30000);
	CU_ASSERT_STRING_EQUAL(x.tp.job, "gw");
}

static void test_values(void)
{
	struct gw_config c;
	char err[512];

	CU_ASSERT_EQUAL(load(&c,
			     "GRADWIRE_CODEC=topk:ratio=0.05,int8:bucket=64,"
			     "rounding=stochastic,none",
			     "GRADWIRE_MAC=required", err),
			0);
	CU_ASSERT_STRING_EQUAL(c.codec, "topk:ratio=0.05,int8:bucket=64,rounding=stochastic,none");
	CU_ASSERT_EQUAL(c.mac, GW_MAC_REQUIRED);
	for (size_t i = 0; i < gw_config_count(); i++)
		if (!strcmp(gw_config_param(i)->name, "GRADWIRE_MAC"))
			CU_ASSERT_STRING_EQUAL(c.src[i], "environment");
	CU_ASSERT_EQUAL(load(&c, "GRADWIRE_MIN_COMPRESS_BYTES=4K", "GRADWIRE_STATS=yes", err), 0);
	CU_ASSERT_EQUAL(c.min_compress_bytes, 4096);
	CU_ASSERT_TRUE(c.stats);
	CU_ASSERT_EQUAL(load(&c, "GRADWIRE_PROVIDER=tcp;ofi_rxm", "GRADWIRE_LOG=debug", err), 0);
	CU_ASSERT_STRING_EQUAL(c.provider, "tcp;ofi_rxm");
	{
		/* Unset: shm where offered (local_auto); named: that one. */
		struct gw_ctx_cfg x;
		struct gw_config d;

		CU_ASSERT_PTR_NULL(c.provider_local);
		gw_config_ctx(&c, &x);
		CU_ASSERT_TRUE(x.tp.local_auto);
		CU_ASSERT_PTR_NULL(x.tp.provider_local);
		CU_ASSERT_EQUAL(load(&d, "GRADWIRE_PROVIDER_LOCAL=shm", NULL, err), 0);
		gw_config_ctx(&d, &x);
		CU_ASSERT_FALSE(x.tp.local_auto);
		CU_ASSERT_STRING_EQUAL(x.tp.provider_local, "shm");
	}
	CU_ASSERT_EQUAL(c.log, GW_LOG_DEBUG);
	CU_ASSERT_EQUAL(load(&c, "GRADWIRE_MAC_ALGS=hmac-sha256", "OTHER=1", err), 0);
}

/* GRADWIRE_HOST_ID names the host: the same name, the same id; unset, the
 * host name's. GRADWIRE_ALGO reaches the collectives and is agreed. */
static void test_host_algo(void)
{
	struct gw_config c;
	struct gw_ctx_cfg x, y;
	char err[512], name[400] = "";
	bool agreed = false;

	CU_ASSERT_EQUAL_FATAL(load(&c, NULL, NULL, err), 0);
	CU_ASSERT_PTR_NULL(c.host_id);
	CU_ASSERT_EQUAL(c.algo, GW_COLL_ALGO_AUTO);
	gw_config_ctx(&c, &x);
	gethostname(name, 256);
	{
		/* "<host name>/<boot id>": two machines of one name differ. */
		FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
		char boot[64] = "";

		if (f && fgets(boot, sizeof(boot), f)) {
			boot[strcspn(boot, "\n")] = 0;
			snprintf(name + strlen(name), sizeof(name) - strlen(name), "/%s", boot);
		}
		if (f)
			fclose(f);
	}
	CU_ASSERT_EQUAL(x.host_id, gw_ctx_host_id_of(name));
	CU_ASSERT_EQUAL(gw_config_host_id(&c), x.host_id);
	CU_ASSERT_EQUAL_FATAL(load(&c, "GRADWIRE_HOST_ID=rack1-node7", "GRADWIRE_ALGO=hier", err),
			      0);
	CU_ASSERT_EQUAL(c.algo, GW_COLL_ALGO_HIER);
	gw_config_ctx(&c, &x);
	CU_ASSERT_EQUAL(x.host_id, gw_ctx_host_id_of("rack1-node7"));
	CU_ASSERT_EQUAL(gw_config_host_id(&c), x.host_id); /* the Gloo device's */
	CU_ASSERT_NOT_EQUAL(x.host_id, 0);
	for (unsigned i = 0; i < x.nagree && i < GW_HS_MAX_AGREE; i++)
		if (!strcmp(x.agree[i].name, "GRADWIRE_ALGO"))
			agreed = x.agree[i].value == GW_COLL_ALGO_HIER;
	CU_ASSERT_TRUE(agreed);
	CU_ASSERT_EQUAL_FATAL(load(&c, "GRADWIRE_HOST_ID=rack1-node8", "GRADWIRE_ALGO=ring", err),
			      0);
	CU_ASSERT_EQUAL(c.algo, GW_COLL_ALGO_RING);
	gw_config_ctx(&c, &y);
	CU_ASSERT_NOT_EQUAL(y.host_id, x.host_id);
}

static void expect_bad(const char *kv, const char *needle)
{
	struct gw_config c;
	char err[512] = "";

	CU_ASSERT_EQUAL(load(&c, kv, NULL, err), -EINVAL);
	if (!strstr(err, needle))
		printf("\n  %s: '%s' lacks '%s'\n", kv, err, needle);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
}

static void test_strict(void)
{
	expect_bad("GRADWIRE_TIMEOUT_MS=0", "GRADWIRE_TIMEOUT_MS='0'");
	expect_bad("GRADWIRE_TIMEOUT_MS=10s", "in [1, 86400000]");
	expect_bad("GRADWIRE_TIMEOUT_MS=", "GRADWIRE_TIMEOUT_MS");
	expect_bad("GRADWIRE_CODEC=zstd", "unknown codec 'zstd'");
	expect_bad("GRADWIRE_CODEC=topk:ratio=7", "ratio");
	expect_bad("GRADWIRE_CODEC_LOCAL=fp16,", "GRADWIRE_CODEC_LOCAL");
	expect_bad("GRADWIRE_CODEC_FALLBACK=maybe", "boolean");
	expect_bad("GRADWIRE_MAC=on", "one of: off, optional, required");
	expect_bad("GRADWIRE_MAC_ALGS=md5", "GRADWIRE_MAC_ALGS");
	expect_bad("GRADWIRE_MAC_ALGS=gmac-aes256,", "GRADWIRE_MAC_ALGS");
	expect_bad("GRADWIRE_MIN_COMPRESS_BYTES=-1", "K, M or G");
	expect_bad("GRADWIRE_MIN_COMPRESS_BYTES=1T", "size");
	expect_bad("GRADWIRE_LOG=verbose", "error, warn, info, debug");
	expect_bad("GRADWIRE_PROVIDER=", "GRADWIRE_PROVIDER");
	expect_bad("GRADWIRE_PROVIDER_LOCAL=", "GRADWIRE_PROVIDER_LOCAL");
	expect_bad("GRADWIRE_HOST_ID=", "GRADWIRE_HOST_ID");
	expect_bad("GRADWIRE_ALGO=tree", "one of: auto, ring, hier");
	expect_bad("GRADWIRE_CODECS=fp16", "did you mean GRADWIRE_CODEC?");
	expect_bad("GRADWIRE_NONSENSE_VARIABLE=1", "unknown variable GRADWIRE_NONSENSE_VARIABLE");
}

/* Every row of docs/configuration.md's table is a row of the code's, with
 * the same type and default, and the other way round. */
static void test_docs(void)
{
	const char *dir = getenv("GW_DOCS");
	char path[512], line[2048];
	size_t found = 0;
	FILE *f;

	if (!dir)
		tu_skip("GW_DOCS is not set (meson test sets it)");
	snprintf(path, sizeof(path), "%s/configuration.md", dir);
	f = fopen(path, "r");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	while (fgets(line, sizeof(line), f)) {
		char name[64], type[64], def[128];
		const struct gw_param_info *p = NULL;

		if (sscanf(line, "| `%63[A-Z_]` | %63[^|]| %127[^|]|", name, type, def) != 3)
			continue;
		type[strcspn(type, "|")] = '\0';
		while (strlen(type) && type[strlen(type) - 1] == ' ')
			type[strlen(type) - 1] = '\0';
		while (strlen(def) && def[strlen(def) - 1] == ' ')
			def[strlen(def) - 1] = '\0';
		for (size_t i = 0; i < gw_config_count(); i++)
			if (!strcmp(gw_config_param(i)->name, name))
				p = gw_config_param(i);
		if (!p) {
			printf("\n  docs name %s, which the code does not know\n", name);
			CU_FAIL("a documented variable the code does not have");
			continue;
		}
		found++;
		CU_ASSERT_STRING_EQUAL(type, p->type);
		if (p->def) {
			char want[130];

			snprintf(want, sizeof(want), "`%s`", p->def);
			CU_ASSERT_STRING_EQUAL(def, want);
		} else {
			CU_ASSERT_STRING_EQUAL(def, "unset");
		}
	}
	fclose(f);
	if (found != gw_config_count())
		printf("\n  docs list %zu variables, the code %zu\n", found, gw_config_count());
	CU_ASSERT_EQUAL(found, gw_config_count());
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "defaults", test_defaults },
		{ "values and sources", test_values },
		{ "GRADWIRE_HOST_ID and GRADWIRE_ALGO", test_host_algo },
		{ "strict: bad values and unknown names", test_strict },
		{ "docs/configuration.md matches the table", test_docs },
		CU_TEST_INFO_NULL,
	};
	return tu_run("config", tests);
}
