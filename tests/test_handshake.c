/* SPDX-License-Identifier: MIT */
/*
 * test_handshake.c - the negotiation matrix, computed from both sides:
 * equal and different lists, parameters, no common codec with and without
 * fallback, local vs remote lists, MAC required vs off, optional, algorithm
 * choice, wrong key, version skew, refusals; and hostile HELLO/FINISHED bytes.
 */
#include <stdio.h>
#include "tutil.h"
#include "handshake.h"

struct side {
	struct gw_hs_hello h;
	uint8_t raw[GW_HS_HELLO_MAX];
	size_t len;
	const uint8_t *psk;
};

static const uint8_t key_a[32] = "the first pre-shared key, 32 b.";
static const uint8_t key_b[32] = "the other pre-shared key, 32 b.";

/* Build a HELLO and parse it back (so `h` is exactly what was sent). */
static void mk(struct side *s, uint32_t rank, const char *list, int mode, const uint8_t *psk,
	       unsigned flags, uint64_t host)
{
	struct gw_hs_hello h = { 0 };
	char err[256];
	int n = gw_codec_list_parse(list, h.codecs, GW_HS_MAX_CODECS, err, sizeof(err));
	ssize_t len;

	CU_ASSERT_FATAL(n > 0);
	h.version = GW_HS_VERSION;
	h.flags = (uint16_t)(flags | (psk ? GW_HS_F_HAS_KEY : 0));
	h.rank = rank;
	h.size = 4;
	h.host_id = host;
	h.mac_mode = (uint8_t)mode;
	h.nalgs = 2;
	h.algs[0] = rank == 0 ? GW_MAC_GMAC_AES256 : GW_MAC_HMAC_SHA256;
	h.algs[1] = rank == 0 ? GW_MAC_HMAC_SHA256 : GW_MAC_GMAC_AES256;
	h.ncodecs = (uint8_t)n;
	for (int i = 0; i < GW_HS_NONCE; i++)
		h.nonce[i] = (uint8_t)(rank * 17 + i);
	len = gw_hs_hello_build(&h, s->raw, sizeof(s->raw));
	CU_ASSERT_FATAL(len > 0);
	s->len = (size_t)len;
	CU_ASSERT_EQUAL_FATAL(gw_hs_hello_parse(s->raw, s->len, &s->h), 0);
	s->psk = psk;
}

/* Decide from both sides; both must agree. Returns the shared rc. */
static int decide(struct side *a, struct side *b, struct gw_hs_result *ra, struct gw_hs_result *rb,
		  char *err, size_t errlen)
{
	char err2[512];
	int rc =
		gw_hs_decide(&a->h, a->raw, a->len, &b->h, b->raw, b->len, a->psk, ra, err, errlen);
	int rc2 = gw_hs_decide(&b->h, b->raw, b->len, &a->h, a->raw, a->len, b->psk, rb, err2,
			       sizeof(err2));

	CU_ASSERT_EQUAL(rc, rc2);
	if (!rc && !rc2) {
		CU_ASSERT_EQUAL(ra->codec.ops->id, rb->codec.ops->id);
		CU_ASSERT_EQUAL(memcmp(&ra->codec.p, &rb->codec.p, sizeof(ra->codec.p)), 0);
		CU_ASSERT_EQUAL(ra->mac, rb->mac);
		CU_ASSERT_EQUAL(memcmp(ra->transcript, rb->transcript, 32), 0);
	}
	return rc;
}

/* Exchange FINISHED both ways; returns what a's check says of b's. */
static int finish(struct gw_hs_result *ra, struct gw_hs_result *rb, char *err, size_t errlen)
{
	uint8_t fa[GW_HS_FINISHED_MAX], fb[GW_HS_FINISHED_MAX];
	ssize_t la = gw_hs_finished_build(ra, 0, NULL, fa, sizeof(fa));
	ssize_t lb = gw_hs_finished_build(rb, 0, NULL, fb, sizeof(fb));
	char e2[256];
	int rc;

	CU_ASSERT_FATAL(la > 0 && lb > 0);
	rc = gw_hs_finished_check(ra, fb, (size_t)lb, err, errlen);
	CU_ASSERT_EQUAL(gw_hs_finished_check(rb, fa, (size_t)la, e2, sizeof(e2)), rc);
	return rc;
}

static void test_codec_choice(void)
{
	struct side a, b;
	struct gw_hs_result ra, rb;
	char err[512];

	mk(&a, 0, "int8,fp16", GW_MAC_OFF, NULL, 0, 1); /* equal lists */
	mk(&b, 1, "int8,fp16", GW_MAC_OFF, NULL, 0, 2);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(ra.codec.ops->id, GW_CODEC_INT8);
	CU_ASSERT_EQUAL(ra.mac, GW_MAC_NONE);
	CU_ASSERT_EQUAL(finish(&ra, &rb, err, sizeof(err)), 0);

	mk(&a, 2, "int8,fp16", GW_MAC_OFF, NULL, 0, 1); /* lower rank decides */
	mk(&b, 1, "fp16,int8", GW_MAC_OFF, NULL, 0, 2);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(ra.codec.ops->id, GW_CODEC_FP16);

	mk(&a, 0, "topk:ratio=0.1,none", GW_MAC_OFF, NULL, 0, 1); /* its parameters */
	mk(&b, 3, "bf16,topk:ratio=0.2", GW_MAC_OFF, NULL, 0, 2);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(ra.codec.ops->id, GW_CODEC_TOPK);
	CU_ASSERT_DOUBLE_EQUAL(rb.codec.p.ratio, 0.1, 0);
	CU_ASSERT_FALSE(ra.fell_back);
}

static void test_no_common_codec(void)
{
	struct side a, b;
	struct gw_hs_result ra, rb;
	char err[512];

	mk(&a, 0, "topk:ratio=0.01,int8", GW_MAC_OFF, NULL, GW_HS_F_FALLBACK, 1);
	mk(&b, 1, "fp16", GW_MAC_OFF, NULL, GW_HS_F_FALLBACK, 2);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(ra.codec.ops->id, GW_CODEC_NONE);
	CU_ASSERT_TRUE(ra.fell_back);
	/* The fallback's warning: the same line on both sides, with both
	 * ranks and both lists as sent. */
	{
		static const char want[] =
			"rank 0 <-> rank 1: no common codec: rank 0 offers "
			"[topk:ratio=0.01 int8:bucket=512,rounding=nearest,seed=0], rank 1 offers "
			"[fp16]; falling back "
			"to none (GRADWIRE_CODEC_FALLBACK=0 makes this an error)";
		char wa[512] = "", wb[512] = "";

		CU_ASSERT_EQUAL(gw_hs_decide(&a.h, a.raw, a.len, &b.h, b.raw, b.len, NULL, &ra, wa,
					     sizeof(wa)),
				0);
		CU_ASSERT_EQUAL(gw_hs_decide(&b.h, b.raw, b.len, &a.h, a.raw, a.len, NULL, &rb, wb,
					     sizeof(wb)),
				0);
		CU_ASSERT_STRING_EQUAL(wa, want);
		CU_ASSERT_STRING_EQUAL(wb, want);
	}

	mk(&b, 1, "fp16", GW_MAC_OFF, NULL, 0, 2); /* b refuses fallback */
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), -ENOPROTOOPT);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "[topk:ratio=0.01 int8:bucket=512"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "[fp16] (fallback off)"));
}

/* auto: the shared set in the lower rank's order; nothing shared, or auto
 * on one side only, fails naming both lists. */
static void test_auto_sets(void)
{
	struct side a, b;
	struct gw_hs_result ra, rb;
	char err[512];

	mk(&a, 0, "int8,fp16,none", GW_MAC_OFF, NULL, GW_HS_F_AUTO, 1);
	mk(&b, 1, "none,bf16,int8", GW_MAC_OFF, NULL, GW_HS_F_AUTO, 2);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), 0);
	CU_ASSERT_TRUE(ra.autoc && rb.autoc);
	CU_ASSERT_EQUAL(ra.nset, 2);
	CU_ASSERT_EQUAL(rb.nset, 2);
	CU_ASSERT_EQUAL(ra.set[0].ops->id, GW_CODEC_INT8);
	CU_ASSERT_EQUAL(ra.set[1].ops->id, GW_CODEC_NONE);
	CU_ASSERT_EQUAL(rb.set[0].ops->id, GW_CODEC_INT8);
	CU_ASSERT_EQUAL(rb.set[1].ops->id, GW_CODEC_NONE);
	CU_ASSERT_EQUAL(ra.codec.ops->id, GW_CODEC_INT8);

	mk(&a, 0, "int8,fp16", GW_MAC_OFF, NULL, GW_HS_F_AUTO | GW_HS_F_FALLBACK, 1);
	mk(&b, 1, "bf16,none", GW_MAC_OFF, NULL, GW_HS_F_AUTO | GW_HS_F_FALLBACK, 2);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), -ENOPROTOOPT);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "rank 0 allows [int8:bucket=512"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, " fp16], rank 1"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "rank 1 allows [bf16 none]"));

	mk(&a, 0, "int8,none", GW_MAC_OFF, NULL, GW_HS_F_AUTO, 1);
	mk(&b, 1, "int8,none", GW_MAC_OFF, NULL, 0, 2);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), -ENOPROTOOPT);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "rank 0 sets GRADWIRE_CODEC=auto"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "rank 1 a fixed list"));

	/* Without auto the set is the one codec chosen. */
	mk(&a, 0, "int8,none", GW_MAC_OFF, NULL, 0, 1);
	mk(&b, 1, "none,int8", GW_MAC_OFF, NULL, 0, 2);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), 0);
	CU_ASSERT_FALSE(ra.autoc);
	CU_ASSERT_EQUAL(ra.nset, 1);
	CU_ASSERT_EQUAL(ra.set[0].ops->id, GW_CODEC_INT8);
}

static void test_local_lists(void)
{
	struct side a, b;
	struct gw_hs_result ra, rb;
	char err[512];

	/* Same host: both sides sent their local list and said so. */
	mk(&a, 0, "none", GW_MAC_OFF, NULL, GW_HS_F_LOCAL, 7);
	mk(&b, 1, "none,topk", GW_MAC_OFF, NULL, GW_HS_F_LOCAL, 7);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(ra.codec.ops->id, GW_CODEC_NONE);
	/* One side thinks they share a host, the other does not. */
	mk(&b, 1, "none,topk", GW_MAC_OFF, NULL, 0, 7);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "share a host"));
	/* Different hosts but LOCAL claimed. */
	mk(&a, 0, "none", GW_MAC_OFF, NULL, GW_HS_F_LOCAL, 7);
	mk(&b, 1, "none", GW_MAC_OFF, NULL, GW_HS_F_LOCAL, 8);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), -EINVAL);
}

static void test_mac_matrix(void)
{
	struct side a, b;
	struct gw_hs_result ra, rb;
	char err[512];

	mk(&a, 0, "fp16", GW_MAC_REQUIRED, key_a, 0, 1); /* required vs off */
	mk(&b, 1, "fp16", GW_MAC_OFF, key_a, 0, 2);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), -EACCES);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "rank 0 has it required"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "rank 1 has it off"));

	mk(&b, 1, "fp16", GW_MAC_OPTIONAL, NULL, 0, 2); /* required vs no key */
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), -EACCES);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "optional (no key)"));

	mk(&b, 1, "fp16", GW_MAC_OPTIONAL, NULL, 0, 2); /* optional, no key: off */
	mk(&a, 0, "fp16", GW_MAC_OPTIONAL, key_a, 0, 1);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(ra.mac, GW_MAC_NONE);

	mk(&b, 1, "fp16", GW_MAC_OPTIONAL, key_a, 0, 2); /* both: on */
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(ra.mac, GW_MAC_GMAC_AES256); /* rank 0's first */
	CU_ASSERT_EQUAL(memcmp(ra.key_send, rb.key_recv, 32), 0);
	CU_ASSERT_EQUAL(memcmp(ra.key_recv, rb.key_send, 32), 0);
	CU_ASSERT_NOT_EQUAL(memcmp(ra.key_send, ra.key_recv, 32), 0);
	CU_ASSERT_EQUAL(finish(&ra, &rb, err, sizeof(err)), 0);

	mk(&b, 1, "fp16", GW_MAC_REQUIRED, key_b, 0, 2); /* wrong key */
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(finish(&ra, &rb, err, sizeof(err)), -EKEYREJECTED);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "different keys"));
}

static void test_version_skew(void)
{
	struct side a, b;
	struct gw_hs_result ra;
	struct gw_hs_hello h;
	char err[512], want[32];

	mk(&a, 0, "fp16", GW_MAC_OFF, NULL, 0, 1);
	mk(&b, 1, "fp16", GW_MAC_OFF, NULL, 0, 2);
	b.raw[4] = GW_HS_VERSION + 1; /* a newer peer */
	CU_ASSERT_EQUAL(gw_hs_hello_parse(b.raw, b.len, &h), -EPROTONOSUPPORT);
	CU_ASSERT_EQUAL(h.version, GW_HS_VERSION + 1);
	CU_ASSERT_EQUAL(h.rank, 1);
	b.h.version = GW_HS_VERSION + 1;
	CU_ASSERT_EQUAL(
		gw_hs_decide(&a.h, a.raw, a.len, &b.h, b.raw, b.len, NULL, &ra, err, sizeof(err)),
		-EPROTONOSUPPORT);
	snprintf(want, sizeof(want), "rank 1 speaks %d", GW_HS_VERSION + 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
}

/* Build a HELLO of rank `rank` that lists agreed values, parsed back. */
static void mk_agree(struct side *s, uint32_t rank, const char *const *names,
		     const uint64_t *values, int n)
{
	struct gw_hs_hello h = { 0 };
	char err[256];
	ssize_t len;

	CU_ASSERT_FATAL(gw_codec_list_parse("fp16", h.codecs, GW_HS_MAX_CODECS, err, sizeof(err)) ==
			1);
	h.ncodecs = 1;
	h.version = GW_HS_VERSION;
	h.rank = rank;
	h.size = 4;
	h.host_id = rank + 1;
	h.nagree = (uint8_t)n;
	for (int i = 0; i < n; i++) {
		snprintf(h.agree[i].name, sizeof(h.agree[i].name), "%s", names[i]);
		h.agree[i].value = values[i];
	}
	len = gw_hs_hello_build(&h, s->raw, sizeof(s->raw));
	CU_ASSERT_FATAL(len > 0);
	s->len = (size_t)len;
	CU_ASSERT_EQUAL_FATAL(gw_hs_hello_parse(s->raw, s->len, &s->h), 0);
	s->psk = NULL;
}

static void test_agreed_values(void)
{
	static const char *const names[] = { "GRADWIRE_MIN_COMPRESS_BYTES",
					     "GRADWIRE_SEGMENT_BYTES" };
	const uint64_t same[] = { 65536, 1 << 20 }, other[] = { 65536, 1 << 16 };
	struct gw_hs_result ra, rb;
	struct side a, b;
	char err[512];

	mk_agree(&a, 0, names, same, 2);
	CU_ASSERT_EQUAL(a.h.nagree, 2);
	CU_ASSERT_STRING_EQUAL(a.h.agree[1].name, "GRADWIRE_SEGMENT_BYTES");
	CU_ASSERT_EQUAL(a.h.agree[1].value, 1 << 20);
	mk_agree(&b, 1, names, same, 2);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), 0);

	/* Different values: both sides name the variable and both values. */
	mk_agree(&b, 1, names, other, 2);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "GRADWIRE_SEGMENT_BYTES differs: rank 0 "
					   "has 1048576, rank 1 has 65536"));
	/* One side does not list a value at all. */
	mk_agree(&b, 1, names, same, 1);
	CU_ASSERT_EQUAL(decide(&a, &b, &ra, &rb, err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "GRADWIRE_SEGMENT_BYTES: rank 0 sets "
					   "1048576, rank 1 does not know it"));

	/* Hostile: a name with a byte outside [A-Z0-9_], a duplicate name,
	 * a count past the maximum, a value cut short. */
	mk_agree(&a, 0, names, same, 2);
	{
		uint8_t raw[GW_HS_HELLO_MAX];
		struct gw_hs_hello h;
		size_t at = a.len - 2 * (1 + 8) - strlen(names[0]) - strlen(names[1]) - 1;

		CU_ASSERT_EQUAL_FATAL(a.raw[at], 2); /* nagree */
		memcpy(raw, a.raw, a.len);
		raw[at + 2] = 'r';
		CU_ASSERT_EQUAL(gw_hs_hello_parse(raw, a.len, &h), -EBADMSG);
		memcpy(raw, a.raw, a.len);
		raw[at] = GW_HS_MAX_AGREE + 1;
		CU_ASSERT_EQUAL(gw_hs_hello_parse(raw, a.len, &h), -EBADMSG);
		CU_ASSERT_EQUAL(gw_hs_hello_parse(a.raw, a.len - 1, &h), -EBADMSG);
		/* the same name twice */
		h = a.h;
		h.agree[1] = h.agree[0];
		CU_ASSERT_FATAL(gw_hs_hello_build(&h, raw, sizeof(raw)) > 0);
		CU_ASSERT_EQUAL(
			gw_hs_hello_parse(raw, (size_t)gw_hs_hello_build(&h, raw, sizeof(raw)), &h),
			-EBADMSG);
	}
}

static void test_refusal(void)
{
	struct gw_hs_result r = { .peer_rank = 3 };
	uint8_t f[GW_HS_FINISHED_MAX];
	ssize_t len = gw_hs_finished_build(NULL, -ENOPROTOOPT, "no common codec", f, sizeof(f));
	char err[256];

	CU_ASSERT_FATAL(len > 0);
	CU_ASSERT_EQUAL(gw_hs_finished_check(&r, f, (size_t)len, err, sizeof(err)), -ECONNREFUSED);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "rank 3 refused: no common codec"));
	f[45] = 0x07; /* control characters */
	CU_ASSERT_EQUAL(gw_hs_finished_check(&r, f, (size_t)len, err, sizeof(err)), -EBADMSG);
	CU_ASSERT_EQUAL(gw_hs_finished_build(NULL, 0, "x", f, sizeof(f)), -EINVAL);
}

static void test_hostile_hello(void)
{
	struct side a;
	struct gw_hs_hello h;
	uint8_t g[GW_HS_HELLO_MAX + 8];

	mk(&a, 2, "topk:ratio=0.5,int8,none", GW_MAC_OPTIONAL, key_a, GW_HS_F_FALLBACK, 1);
	for (size_t l = 0; l < a.len; l++)
		CU_ASSERT_EQUAL(gw_hs_hello_parse(a.raw, l, &h), -EBADMSG);
	memcpy(g, a.raw, a.len);
	g[a.len] = 0;
	CU_ASSERT_EQUAL(gw_hs_hello_parse(g, a.len + 1, &h), -EBADMSG);
#define BAD(stmt)                                                                                  \
	do {                                                                                       \
		memcpy(g, a.raw, a.len);                                                           \
		stmt;                                                                              \
		CU_ASSERT_EQUAL(gw_hs_hello_parse(g, a.len, &h), -EBADMSG);                        \
	} while (0)
	BAD(g[0] ^= 1);	  /* magic */
	BAD(g[6] = 0x80); /* unknown flag */
	BAD(g[8] = 9);	  /* rank >= size */
	BAD(g[24] = 3);	  /* MAC mode */
	BAD(g[25] = 5);	  /* too many algorithms */
	BAD(g[26] = 0);	  /* no codec */
	BAD(g[26] = 9);
	BAD(g[27] = 1);				   /* reserved */
	BAD(g[63] = 0);				   /* a spec of length 0 */
	BAD(g[63] = 200);			   /* longer than the rest */
	BAD(memcpy(g + 64, "topk:ratio=2.5", 14)); /* out of range */
	BAD(g[62] = GW_CODEC_INT8);		   /* id and spec disagree */
#undef BAD
	/* A codec this build does not know is skipped, not fatal. */
	memcpy(g, a.raw, a.len);
	g[62] = 99;
	CU_ASSERT_EQUAL(gw_hs_hello_parse(g, a.len, &h), 0);
	CU_ASSERT_EQUAL(h.ncodecs, 2);
	CU_ASSERT_PTR_NOT_NULL(strstr(h.list, "topk:ratio=0.5"));
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "codec choice: equal, different lists, parameters", test_codec_choice },
		{ "no common codec, with and without fallback", test_no_common_codec },
		{ "auto: the shared set, none shared, auto on one side", test_auto_sets },
		{ "local vs remote lists", test_local_lists },
		{ "MAC required/optional/off, algorithm, wrong key", test_mac_matrix },
		{ "version skew", test_version_skew },
		{ "values every rank must share", test_agreed_values },
		{ "refusal carries the reason", test_refusal },
		{ "hostile HELLO", test_hostile_hello },
		CU_TEST_INFO_NULL,
	};
	return tu_run("handshake", tests);
}
