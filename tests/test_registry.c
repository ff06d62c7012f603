/* SPDX-License-Identifier: MIT */
/*
 * test_registry.c - the codec table and the spec parser.
 */
#include <stdio.h>
#include <string.h>
#include "tutil.h"
#include "codec_impl.h"

static void test_table_valid(void)
{
	const struct gw_codec_ops *tab[64];
	size_t n = gw_codec_count();
	char err[128];

	CU_ASSERT_FATAL(n > 0 && n <= 64);
	for (size_t i = 0; i < n; i++)
		tab[i] = gw_codec_at(i);
	CU_ASSERT_EQUAL(gw_codec_table_check(tab, n, err, sizeof(err)), 0);
	CU_ASSERT_PTR_NULL(gw_codec_at(n));
}

static void test_table_rejects(void)
{
	struct gw_codec_ops dup_impl = gw_none_generic, clash = gw_none_generic;
	struct gw_codec_ops incomplete = gw_none_generic, small = gw_none_generic;
	const struct gw_codec_ops *tab[2] = { &gw_none_generic, NULL };
	char err[128];

	CU_ASSERT_EQUAL(gw_codec_table_check(tab, 2, err, sizeof(err)), -EINVAL);

	tab[1] = &dup_impl; /* same impl name twice */
	CU_ASSERT_EQUAL(gw_codec_table_check(tab, 2, err, sizeof(err)), -EEXIST);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "none-generic"));

	clash.impl = "other"; /* same id under another name */
	clash.name = "other";
	tab[1] = &clash;
	CU_ASSERT_EQUAL(gw_codec_table_check(tab, 2, err, sizeof(err)), -EEXIST);

	clash.id = GW_CODEC_TOPK; /* same name under another id */
	clash.name = "none";
	CU_ASSERT_EQUAL(gw_codec_table_check(tab, 2, err, sizeof(err)), -EEXIST);

	incomplete.impl = "none-x";
	incomplete.decode_add = NULL;
	tab[1] = &incomplete;
	CU_ASSERT_EQUAL(gw_codec_table_check(tab, 2, err, sizeof(err)), -EINVAL);

	small.impl = "none-y";
	small.size = sizeof(small) - 8; /* built against an older ABI */
	tab[1] = &small;
	CU_ASSERT_EQUAL(gw_codec_table_check(tab, 2, err, sizeof(err)), -EINVAL);
}

static void test_find(void)
{
	static const char *const names[] = { "none", "topk", "randomk", "fp16",
					     "bf16", "int8", "onebit" };
	static const unsigned ids[] = { GW_CODEC_NONE,	GW_CODEC_TOPK, GW_CODEC_RANDOMK,
					GW_CODEC_FP16,	GW_CODEC_BF16, GW_CODEC_INT8,
					GW_CODEC_ONEBIT };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const struct gw_codec_ops *o = gw_codec_find(names[i]);

		CU_ASSERT_PTR_NOT_NULL_FATAL(o);
		CU_ASSERT_STRING_EQUAL(o->name, names[i]);
		CU_ASSERT_EQUAL(o->id, ids[i]);
		CU_ASSERT_PTR_EQUAL(gw_codec_find_id(ids[i]), o);
		/* The chosen one is the best usable implementation. */
		for (size_t j = 0; j < gw_codec_count(); j++) {
			const struct gw_codec_ops *p = gw_codec_at(j);

			if (p->id == o->id && (!p->cpu_ok || p->cpu_ok()))
				CU_ASSERT(p->priority <= o->priority);
		}
		CU_ASSERT_STRING_EQUAL(gw_codec_generic(o)->name, names[i]);
		CU_ASSERT_PTR_NOT_NULL(strstr(gw_codec_generic(o)->impl, "generic"));
	}
	CU_ASSERT_PTR_NULL(gw_codec_find("zstd"));
	CU_ASSERT_PTR_NULL(gw_codec_find(NULL));
	CU_ASSERT_PTR_NULL(gw_codec_find_id(200));
	CU_ASSERT_PTR_NULL(gw_codec_find_id(100000));
	CU_ASSERT_PTR_EQUAL(gw_codec_find_impl("none-generic"), &gw_none_generic);
	CU_ASSERT_PTR_NULL(gw_codec_find_impl("none-avx9"));
}

static void expect_ok(const char *spec, struct gw_codec *c)
{
	char err[256] = "";
	int rc = gw_codec_parse(spec, c, err, sizeof(err));

	if (rc)
		printf("\n  parse '%s' failed: %s\n", spec, err);
	CU_ASSERT_EQUAL(rc, 0);
}

static void expect_err(const char *spec, const char *needle)
{
	struct gw_codec c;
	char err[256] = "";

	CU_ASSERT_EQUAL(gw_codec_parse(spec, &c, err, sizeof(err)), -EINVAL);
	if (!strstr(err, needle))
		printf("\n  '%s': message '%s' lacks '%s'\n", spec, err, needle);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
}

static void test_parse(void)
{
	struct gw_codec c;
	char buf[128];

	expect_ok("topk", &c);
	CU_ASSERT_EQUAL(c.ops->id, GW_CODEC_TOPK);
	CU_ASSERT_DOUBLE_EQUAL(c.p.ratio, 0.01, 0);
	expect_ok("topk:ratio=0.25", &c);
	CU_ASSERT_DOUBLE_EQUAL(c.p.ratio, 0.25, 0);
	expect_ok("topk:ratio=1", &c);
	expect_ok("int8", &c);
	CU_ASSERT_EQUAL(c.p.bucket, 512);
	CU_ASSERT_EQUAL(c.p.rounding, GW_ROUND_NEAREST);
	expect_ok("int8:bucket=128,rounding=stochastic", &c);
	CU_ASSERT_EQUAL(c.p.bucket, 128);
	CU_ASSERT_EQUAL(c.p.rounding, GW_ROUND_STOCHASTIC);
	CU_ASSERT_EQUAL(gw_codec_format(&c, buf, sizeof(buf)),
			(ssize_t)strlen("int8:bucket=128,rounding=stochastic,seed=0"));
	CU_ASSERT_STRING_EQUAL(buf, "int8:bucket=128,rounding=stochastic,seed=0");
	CU_ASSERT_EQUAL(gw_codec_format(&c, buf, 10), -ENOSPC);
	expect_ok("randomk:ratio=0.5,seed=0x1234", &c);
	CU_ASSERT_EQUAL(c.p.seed, 0x1234);
	expect_ok("fp16", &c);
	expect_ok("onebit:bucket=64", &c);
	CU_ASSERT_EQUAL(c.p.bucket, 64);

	expect_err("", "no codec name");
	expect_err("zstd", "unknown codec 'zstd'");
	expect_err("zstd", "topk");	       /* lists the known ones */
	expect_err("topk:ratio=0", "ratio=0"); /* open lower bound */
	expect_err("topk:ratio=1.5", "(0, 1]");
	expect_err("topk:ratio=-0.1", "ratio");
	expect_err("topk:ratio=nan", "ratio");
	expect_err("topk:ratio=0.1x", "ratio");
	expect_err("topk:ratio=", "ratio");
	expect_err("topk:rate=0.1", "unknown key 'rate'");
	expect_err("topk:ratio=0.1,ratio=0.2", "given twice");
	expect_err("topk:ratio", "KEY=VALUE");
	expect_err("topk:", "KEY=VALUE");
	expect_err("topk:ratio=0.1,", "KEY=VALUE");
	expect_err("fp16:bucket=4", "it takes none");
	expect_err("int8:bucket=0", "bucket");
	expect_err("int8:bucket=-5", "bucket");
	expect_err("int8:bucket=99999999999999999999", "bucket");
	expect_err("int8:rounding=up", "nearest stochastic");
}

static void test_list(void)
{
	struct gw_codec c[4];
	char err[256];

	CU_ASSERT_EQUAL(gw_codec_list_parse("topk:ratio=0.05,int8:bucket=256,"
					    "rounding=stochastic,none",
					    c, 4, err, sizeof(err)),
			3);
	CU_ASSERT_EQUAL(c[0].ops->id, GW_CODEC_TOPK);
	CU_ASSERT_DOUBLE_EQUAL(c[0].p.ratio, 0.05, 0);
	CU_ASSERT_EQUAL(c[1].ops->id, GW_CODEC_INT8);
	CU_ASSERT_EQUAL(c[1].p.bucket, 256);
	CU_ASSERT_EQUAL(c[1].p.rounding, GW_ROUND_STOCHASTIC);
	CU_ASSERT_EQUAL(c[2].ops->id, GW_CODEC_NONE);
	CU_ASSERT_EQUAL(gw_codec_list_parse("fp16", c, 4, err, sizeof(err)), 1);
	CU_ASSERT_EQUAL(gw_codec_list_parse("", c, 4, err, sizeof(err)), -EINVAL);
	CU_ASSERT_EQUAL(gw_codec_list_parse("fp16,", c, 4, err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "ends with a comma"));
	CU_ASSERT_EQUAL(gw_codec_list_parse("fp16,bf16,fp16", c, 4, err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "twice"));
	CU_ASSERT_EQUAL(gw_codec_list_parse("none,fp16,bf16,int8,topk", c, 4, err, sizeof(err)),
			-EINVAL);
	CU_ASSERT_EQUAL(gw_codec_list_parse("fp16,zstd", c, 4, err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown codec 'zstd'"));
	CU_ASSERT_EQUAL(gw_codec_list_parse("topk:ratio=2,none", c, 4, err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "ratio"));
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "table is valid", test_table_valid },
		{ "table check rejects bad entries", test_table_rejects },
		{ "find by name, id, impl", test_find },
		{ "spec parser", test_parse },
		{ "preference lists", test_list },
		CU_TEST_INFO_NULL,
	};
	return tu_run("registry", tests);
}
