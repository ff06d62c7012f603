/* SPDX-License-Identifier: MIT */
/*
 * test_conn.c - connections over loopback (tcp;ofi_rxm on lo, and shm):
 * negotiation, tensors through every codec, MACs, a hostile peer, a killed
 * peer, and a long run that the sanitizer build checks for leaks.
 *
 * Ranks are forked (tp_harness.h). Each rank mirrors what its peer sends: it
 * runs the same codec on the same data with its own residual, so a received
 * tensor must equal decode(encode(x + r)) bit for bit, step after step. This
 * checks the codec, the residual per peer and the frame path all at once.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tutil.h"
#include "tp_harness.h"
#include "conn.h"
#include "frame.h"
#include "codec_impl.h"
#include "init.h"

#define TIMEOUT_MS 8000

struct conn_arg {
	const char *codec, *codec_local;
	const char *codec_r[8]; /* per rank codec list, overriding codec */
	const char *provider, *iface;
	int mac_mode;
	int mac_r[8];	    /* per rank MAC mode + 1, overriding mac_mode */
	const char *key[8]; /* per rank key file, NULL for none */
	bool fallback;
	uint64_t host[8]; /* per rank host id (0: the real one) */
	uint16_t version[8];
	uint64_t seg_r[8]; /* per rank GRADWIRE_SEGMENT_BYTES to agree on (0: none) */
	uint64_t sizes[8];
	int nsizes, steps;
	int want_rc;	      /* gw_ctx_create's expected result */
	const char *want_err; /* ...and a piece of its message */
	int kill_rank;	      /* rank that dies mid-transfer, or -1 */
	int messages;	      /* long run */
	bool zerocopy;	      /* exchange: exact sends with GW_CTX_ZEROCOPY */
	int timeout_ms;	      /* the context's (0: TIMEOUT_MS) */
	int log_level;	      /* the context's (0: GW_LOG_ERROR) */
	const char *want_log; /* body_negotiate: a line every rank logs */
	int absent_rank;      /* body_negotiate: rank + 1 that never starts (0: none) */
	bool links;	      /* host ids before the transport (as the plugin) */
	char keydir[64];
};

static struct gw_ctx_cfg ctx_cfg(const struct conn_arg *a, int rank)
{
	struct tp_env env = { .provider = a->provider ? a->provider : tp_net_provider(),
			      .iface = a->provider ? a->iface : "lo",
			      .log_level = a->log_level ? a->log_level : GW_LOG_ERROR,
			      .timeout_ms = a->timeout_ms ? a->timeout_ms : TIMEOUT_MS };
	struct gw_ctx_cfg c = { .tp = tp_cfg(&env) };

	c.tp.local_auto = a->links;
	c.codec = a->codec_r[rank] ? a->codec_r[rank] : a->codec;
	c.codec_local = a->codec_local;
	c.fallback = a->fallback;
	c.mac_mode = a->mac_r[rank] ? a->mac_r[rank] - 1 : a->mac_mode;
	c.mac_key_file = a->key[rank];
	c.host_id = a->host[rank] ? a->host[rank] : (uint64_t)(rank + 1) * 1000;
	c.hs_version = a->version[rank];
	c.min_compress_bytes = 4096;
	if (a->seg_r[rank]) {
		gw_ctx_cfg_agree(&c, "GRADWIRE_MIN_COMPRESS_BYTES", c.min_compress_bytes);
		gw_ctx_cfg_agree(&c, "GRADWIRE_SEGMENT_BYTES", a->seg_r[rank]);
	}
	return c;
}

static struct gw_ctx *open_ctx(const struct conn_arg *a, int rank, int size, const char *dir,
			       struct gw_store **st, int *rc, char *err, size_t errlen)
{
	struct gw_ctx_cfg cfg = ctx_cfg(a, rank);
	struct gw_ctx *ctx = NULL;

	*rc = gw_store_file_create(dir, st);
	if (*rc)
		return NULL;
	*rc = gw_ctx_create(&cfg, rank, size, *st, &ctx, err, errlen);
	/* Only loopback: a rank whose endpoint is elsewhere stops here. */
	if (!*rc && tp_check_loopback(gw_ctx_tp(ctx),
				      &(struct tp_env){ .provider = a->provider ? a->provider
										: tp_net_provider(),
							.iface = a->provider ? a->iface : "lo" })) {
		gw_ctx_destroy(ctx);
		ctx = NULL;
		*rc = -EADDRNOTAVAIL;
		snprintf(err, errlen, "endpoint not on loopback");
	}
	return ctx;
}

/* The data rank r sends at step s: deterministic, so receivers can mirror it. */
static void data_of(float *x, uint64_t n, int r, int s)
{
	tu_fill(x, n, (uint64_t)r * 7919 + (uint64_t)s * 104729 + n);
}

/* ---- exchange: every codec, ring, mirrored -------------------------------- */

static int body_exchange(int rank, int size, const char *dir, void *arg)
{
	const struct conn_arg *a = arg;
	int next = (rank + 1) % size, prev = (rank + size - 1) % size, rc;
	struct gw_store *st;
	char err[512];
	struct gw_ctx *ctx = open_ctx(a, rank, size, dir, &st, &rc, err, sizeof(err));

	if (!ctx) {
		fprintf(stderr, "rank %d: create: %s (%s)\n", rank, err, gw_strerror(rc));
		return 10;
	}
	for (int z = 0; z < a->nsizes; z++) {
		uint64_t n = a->sizes[z];
		float *x = tu_alloc(n * 4), *y = tu_alloc(n * 4), *want = tu_alloc(n * 4);
		float *sent = tu_alloc(n * 4);
		const struct gw_codec *neg = gw_ctx_codec(ctx, prev);
		struct gw_codec c = *neg;
		struct gw_residual r, r2;
		size_t cap;
		uint8_t *pay, *state, *state2;
		void *scratch;

		if (n * 4 < 4096 || !c.ops->lossy || a->zerocopy) /* exact */
			gw_codec_init(&c, gw_codec_find("none"));
		cap = gw_payload_bound(&c, n);
		pay = tu_alloc(cap);
		state = tu_alloc(gw_codec_state_size(&c, n) + 8);
		state2 = tu_alloc(gw_codec_state_size(&c, n) + 8);
		scratch = tu_alloc(gw_codec_scratch_size(&c, n));
		gw_residual_init(&r);
		gw_residual_prepare(&r, n);
		gw_residual_init(&r2);
		gw_residual_prepare(&r2, n);
		for (int s = 0; s < a->steps; s++) {
			struct gw_ctx_req req[2];
			ssize_t len;

			data_of(x, n, rank, s);
			if (a->zerocopy && s == 1) /* the non-finite record */
				x[n / 3] = NAN;
			rc = gw_ctx_irecv(ctx, prev, (uint32_t)z + 1, y, n,
					  a->zerocopy ? GW_CTX_ZEROCOPY : 0, &req[0]);
			if (!rc && a->zerocopy) { /* gathered from x */
				rc = gw_ctx_isend(ctx, next, (uint32_t)z + 1, x, n, GW_CTX_ZEROCOPY,
						  &req[1]);
				memcpy(sent, x, n * 4);
			} else if (!rc) {
				rc = gw_ctx_isend_sent(ctx, next, (uint32_t)z + 1, x, n,
						       GW_CTX_LOSSY, sent, &req[1]);
			}
			if (!rc)
				rc = gw_ctx_waitall(ctx, req, 2);
			if (rc) {
				fprintf(stderr, "rank %d n=%llu step %d: %s\n", rank,
					(unsigned long long)n, s, gw_strerror(rc));
				return 11;
			}
			/* What we sent is what our own mirror decodes. */
			len = gw_payload_encode(&c, state2, scratch, x, r2.buf, r2.buf, n, pay,
						cap);
			if (len < 0 || gw_payload_decode(pay, (size_t)len, want, n) ||
			    memcmp(want, sent, n * 4)) {
				fprintf(stderr,
					"rank %d codec %s n=%llu step %d: sent "
					"differs from the mirror\n",
					rank, c.ops->name, (unsigned long long)n, s);
				return 15;
			}
			/* Mirror prev's encoder: same data, same residual history. */
			data_of(x, n, prev, s);
			if (a->zerocopy && s == 1)
				x[n / 3] = NAN;
			len = gw_payload_encode(&c, state, scratch, x, r.buf, r.buf, n, pay, cap);
			if (len < 0 || gw_payload_decode(pay, (size_t)len, want, n))
				return 12;
			if (memcmp(want, y, n * 4)) {
				uint64_t i = 0;

				while (i < n && gw_f2u(want[i]) == gw_f2u(y[i]))
					i++;
				fprintf(stderr,
					"rank %d codec %s n=%llu step %d: y[%llu]=%a, want %a\n",
					rank, c.ops->name, (unsigned long long)n, s,
					(unsigned long long)i, y[i], want[i]);
				return 13;
			}
		}
		gw_residual_fini(&r);
		gw_residual_fini(&r2);
		free(x), free(y), free(want), free(sent), free(pay), free(state), free(state2),
			free(scratch);
	}
	{
		struct gw_conn_stats s;

		gw_ctx_stats(ctx, next, &s);
		if (s.frames_sent != (uint64_t)(a->nsizes * a->steps) || s.mac_failures ||
		    s.rejected) {
			fprintf(stderr, "rank %d: stats %llu frames\n", rank,
				(unsigned long long)s.frames_sent);
			return 14;
		}
	}
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	return 0;
}

static void run(int size, int limit_s, tp_body body, struct conn_arg *a, int want)
{
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(size, limit_s, body, a, codes), 0);
	for (int r = 0; r < size; r++) {
		if (codes[r] != want && !(r == a->kill_rank))
			printf("\n  rank %d exited %d (want %d)\n", r, codes[r], want);
		if (r != a->kill_rank)
			CU_ASSERT_EQUAL(codes[r], want);
	}
}

static const char *const codecs[] = {
	"none",
	"fp16",
	"bf16",
	"int8",
	"int8:rounding=stochastic,bucket=100",
	"onebit",
	"topk:ratio=0.01",
	"randomk:ratio=0.05",
	"powersgd:rank=4",
	"powersgd:rank=16,warmup=1",
};

static void test_exchange_small(void)
{
	for (int size = 2; size <= 4; size += 2) {
		for (size_t i = 0; i < sizeof(codecs) / sizeof(codecs[0]); i++) {
			struct conn_arg a = { .codec = codecs[i],
					      .kill_rank = -1,
					      .sizes = { 1, 7, 1024, 4097, 262144 },
					      .nsizes = 5,
					      .steps = 3 };

			run(size, 60, body_exchange, &a, 0);
		}
	}
}

static void test_exchange_64mib(void)
{
	for (size_t i = 0; i < sizeof(codecs) / sizeof(codecs[0]); i++) {
		struct conn_arg a = { .codec = codecs[i],
				      .kill_rank = -1,
				      .sizes = { 16u << 20 },
				      .nsizes = 1,
				      .steps = 2 };

		run(2, 90, body_exchange, &a, 0);
	}
}

static void test_shm(void)
{
	struct conn_arg a = { .codec = "int8",
			      .provider = "shm",
			      .kill_rank = -1,
			      .sizes = { 1, 4097, 1 << 20 },
			      .nsizes = 3,
			      .steps = 2 };

	run(2, 60, body_exchange, &a, 0);
}

/* ---- negotiation over real connections ------------------------------------ */

/* Every rank creates its context; want_rc and want_err say how that ends. */
static int body_negotiate(int rank, int size, const char *dir, void *arg)
{
	const struct conn_arg *a = arg;
	struct gw_store *st;
	char err[512] = "", log[8192], path[128];
	int rc, saved;
	struct gw_ctx *ctx;

	if (rank == a->absent_rank - 1)
		return 0; /* never joins */
	snprintf(path, sizeof(path), "%s.log%d", dir, rank);
	saved = a->want_log ? tu_capture_begin(path) : -1;
	ctx = open_ctx(a, rank, size, dir, &st, &rc, err, sizeof(err));
	if (a->want_log &&
	    (tu_capture_end(saved, path, log, sizeof(log)) < 0 || !strstr(log, a->want_log))) {
		fprintf(stderr, "rank %d: logged no '%s'\n", rank, a->want_log);
		gw_ctx_destroy(ctx);
		gw_store_destroy(st);
		return 21;
	}
	if (rc != a->want_rc || (a->want_err && !strstr(err, a->want_err))) {
		fprintf(stderr, "rank %d: got %d '%s', want %d '%s'\n", rank, rc, err, a->want_rc,
			a->want_err ? a->want_err : "");
		return 20;
	}
	if (!rc) {
		/* Report the codec chosen toward each peer in the exit code:
		 * bit p set when the link to rank p is compressed. */
		int lossy = 0;

		for (int p = 0; p < size; p++)
			if (p != rank && gw_ctx_codec(ctx, p)->ops->lossy)
				lossy |= 1 << p;
		gw_ctx_destroy(ctx);
		gw_store_destroy(st);
		return lossy;
	}
	gw_store_destroy(st);
	return 0;
}

static void write_key(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs(text, f);
	fclose(f);
	chmod(path, 0600);
}

static void test_negotiation(void)
{
	struct conn_arg a;
	int codes[TP_MAX_RANKS];
	char k1[80], k2[80], dir[] = "/tmp/gw-keys-XXXXXX";

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(k1, sizeof(k1), "%s/k1", dir);
	snprintf(k2, sizeof(k2), "%s/k2", dir);
	write_key(k1, "the first key, long enough\n");
	write_key(k2, "a different key, long too\n");

	/* No common codec: both fail and name both lists. */
	a = (struct conn_arg){ .codec_r = { "topk:ratio=0.01,int8", "fp16" },
			       .kill_rank = -1,
			       .want_rc = -ENOPROTOOPT,
			       .want_err = "[fp16] (fallback off)" };
	run(2, 30, body_negotiate, &a, 0);
	/* Different lists: the lower rank's order decides. */
	a = (struct conn_arg){ .codec_r = { "bf16,topk", "topk,bf16" },
			       .kill_rank = -1,
			       .want_rc = 0 };
	CU_ASSERT_EQUAL(tp_run(2, 30, body_negotiate, &a, codes), 0);
	CU_ASSERT_EQUAL(codes[0], 1 << 1);
	CU_ASSERT_EQUAL(codes[1], 1 << 0);

	/* Local vs remote: ranks 0 and 1 share a host, rank 2 does not. */
	a = (struct conn_arg){ .codec = "int8",
			       .codec_local = "none",
			       .kill_rank = -1,
			       .host = { 7, 7, 8 },
			       .want_rc = 0 };
	CU_ASSERT_EQUAL(tp_run(3, 30, body_negotiate, &a, codes), 0);
	CU_ASSERT_EQUAL(codes[0], 1 << 2); /* 0-1 none, 0-2 int8 */
	CU_ASSERT_EQUAL(codes[1], 1 << 2);
	CU_ASSERT_EQUAL(codes[2], (1 << 0) | (1 << 1));

	/* MAC required on one side, off on the other. */
	a = (struct conn_arg){ .codec = "fp16",
			       .key = { k1, k1 },
			       .kill_rank = -1,
			       .mac_r = { GW_MAC_REQUIRED + 1, GW_MAC_OFF + 1 },
			       .want_rc = -EACCES,
			       .want_err = "has it off" };
	run(2, 30, body_negotiate, &a, 0);

	/* Two different keys: FINISHED fails on both sides. */
	a = (struct conn_arg){ .codec = "fp16",
			       .mac_mode = GW_MAC_REQUIRED,
			       .key = { k1, k2 },
			       .kill_rank = -1,
			       .want_rc = -EKEYREJECTED,
			       .want_err = "different keys" };
	run(2, 30, body_negotiate, &a, 0);

	/* Version skew: rank 1 speaks a newer protocol. */
	a = (struct conn_arg){ .codec = "fp16",
			       .version = { 0, GW_HS_VERSION + 1 },
			       .kill_rank = -1,
			       .want_rc = -EPROTONOSUPPORT,
			       .want_err = "version skew" };
	run(2, 30, body_negotiate, &a, 0);

	/* Values the collectives assume equal: a difference fails every
	 * rank's context, naming the variable and both values. */
	a = (struct conn_arg){ .codec = "fp16",
			       .seg_r = { 1 << 20, 65536 },
			       .kill_rank = -1,
			       .want_rc = -EINVAL,
			       .want_err = "GRADWIRE_SEGMENT_BYTES differs: rank 0 has "
					   "1048576, rank 1 has 65536" };
	run(2, 30, body_negotiate, &a, 0);
	a = (struct conn_arg){ .codec = "fp16",
			       .seg_r = { 4096, 4096, 8192 },
			       .kill_rank = -1,
			       .want_rc = -EINVAL,
			       .want_err = "rank 2 has 8192 (every rank must set the same)" };
	run(3, 30, body_negotiate, &a, 0);
	/* Equal values connect. */
	a = (struct conn_arg){
		.codec = "none", .seg_r = { 4096, 4096, 4096 }, .kill_rank = -1, .want_rc = 0
	};
	run(3, 30, body_negotiate, &a, 0x0);

	/* A key file others can read is refused before anything is sent. */
	chmod(k1, 0644);
	a = (struct conn_arg){ .codec = "fp16",
			       .mac_mode = GW_MAC_OPTIONAL,
			       .key = { k1, k1 },
			       .kill_rank = -1,
			       .want_rc = -EACCES,
			       .want_err = "only its owner can read" };
	run(2, 30, body_negotiate, &a, 0);
	unlink(k1);
	unlink(k2);
	rmdir(dir);
}

static void test_fallback(void)
{
	/* Both ranks warn, naming both lists. */
	struct conn_arg a = {
		.codec_r = { "topk,int8", "fp16,bf16" },
		.fallback = true,
		.kill_rank = -1,
		.log_level = GW_LOG_WARN,
		.want_log = "warn: rank 0 <-> rank 1: no common codec: rank 0 offers "
			    "[topk:ratio=0.01 int8:bucket=512,rounding=nearest,seed=0], rank 1 "
			    "offers "
			    "[fp16 bf16]; falling back to none "
			    "(GRADWIRE_CODEC_FALLBACK=0 makes this an error)",
		.want_rc = 0
	};
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL(tp_run(2, 30, body_negotiate, &a, codes), 0);
	CU_ASSERT_EQUAL(codes[0], 0); /* both links `none` */
	CU_ASSERT_EQUAL(codes[1], 0);
}

/* A peer that never starts: the others say it never joined, naming it and
 * how long they waited, whichever key they wait for first (host ids with
 * the plugin's links; else the transport's addresses). */
static void test_never_joined(void)
{
	for (int links = 0; links < 2; links++) {
		struct conn_arg a = { .codec = "none",
				      .kill_rank = -1,
				      .absent_rank = 2 + 1,
				      .links = links,
				      .timeout_ms = 1500,
				      .want_rc = -ETIMEDOUT,
				      .want_err = links ? "rank 2 never joined: its host id "
							  "(test/host/2) was not in the store "
							  "after 1"
							: "rank 2 never joined: its " };
		int codes[TP_MAX_RANKS];
		int64_t t0 = gw_now_ms();

		CU_ASSERT_EQUAL(tp_run(3, 30, body_negotiate, &a, codes), 0);
		CU_ASSERT_EQUAL(codes[0], 0);
		CU_ASSERT_EQUAL(codes[1], 0);
		CU_ASSERT(gw_now_ms() - t0 < 1500 + 3000);
	}
}

/*
 * A peer that publishes its host id and address but never answers (its
 * transport is open, nothing progresses it): the handshake fails at the
 * timeout naming the peer, the address it was looked for at, and what to
 * check.
 */
static int body_silent(int rank, int size, const char *dir, void *arg)
{
	const struct conn_arg *a = arg;
	struct tp_env env = { .provider = tp_net_provider(),
			      .iface = "lo",
			      .log_level = GW_LOG_ERROR,
			      .timeout_ms = a->timeout_ms };
	uint64_t host = 2000, done = 0;
	struct gw_store *st;
	struct gw_tp *tp;
	char err[1024] = "", want[128];
	int rc;
	struct gw_ctx *ctx;

	if (rank == 1) { /* the silent one */
		tp = tp_open(&env, rank, size, dir, &st, &rc);
		if (!tp)
			return 10;
		rc = gw_store_set(st, "test/host/1", &host, sizeof(host));
		/* Until rank 0 is done; never progresses its endpoint. */
		if (!rc && gw_store_get(st, "test/done", &done, sizeof(done),
					4 * a->timeout_ms + 10000) != sizeof(done))
			rc = 11;
		tp_close(tp, st);
		return rc;
	}
	ctx = open_ctx(a, rank, size, dir, &st, &rc, err, sizeof(err));
	gw_ctx_destroy(ctx);
	snprintf(want, sizeof(want), "(no answer within %d ms); check that this host reaches",
		 a->timeout_ms);
	if (rc != -ETIMEDOUT || !strstr(err, "handshake with rank 1 at 127.0.0.1:") ||
	    !strstr(err, " HELLO failed: Connection timed out") || !strstr(err, want) ||
	    !strstr(err, "GRADWIRE_IFACE chooses the interface (this rank is at 127.0.0.1:") ||
	    !strstr(err, "a firewall may block the port")) {
		fprintf(stderr, "rank 0: got %d '%s'\n", rc, err);
		rc = 20;
	} else {
		fprintf(stderr, "rank 0: %s\n", err);
		rc = 0;
	}
	gw_store_set(st, "test/done", &done, sizeof(done));
	gw_store_destroy(st);
	return rc;
}

static void test_silent_peer(void)
{
	struct conn_arg a = { .codec = "none", .kill_rank = -1, .timeout_ms = 1500 };
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL(tp_run(2, 60, body_silent, &a, codes), 0);
	CU_ASSERT_EQUAL(codes[0], 0);
	CU_ASSERT_EQUAL(codes[1], 0);
}

/* ---- MAC on the data path -------------------------------------------------- */

static void test_mac_exchange(void)
{
	char key[80], dir[] = "/tmp/gw-keys-XXXXXX";

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(key, sizeof(key), "%s/key", dir);
	write_key(key, "a shared secret for the test run\n");
	for (int m = GW_MAC_OPTIONAL; m <= GW_MAC_REQUIRED; m++) {
		struct conn_arg a = { .codec = "topk:ratio=0.1",
				      .mac_mode = m,
				      .key = { key, key, key },
				      .kill_rank = -1,
				      .sizes = { 3, 5000, 300000 },
				      .nsizes = 3,
				      .steps = 3 };

		run(3, 60, body_exchange, &a, 0);
	}
	unlink(key);
	rmdir(dir);
}

/* Exact tensors sent gathered from the caller's buffer (no copy) and, with
 * the MAC off, received straight into it; small ones copied, a NaN among
 * them, with the MAC off and required. */
static void test_zerocopy(void)
{
	char key[80], dir[] = "/tmp/gw-keys-XXXXXX";

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(key, sizeof(key), "%s/key", dir);
	write_key(key, "a shared secret for the test run\n");
	for (int m = GW_MAC_OFF; m <= GW_MAC_REQUIRED; m += 2) {
		struct conn_arg a = { .codec = "int8",
				      .mac_mode = m,
				      .key = { key, key, key },
				      .kill_rank = -1,
				      .sizes = { 3, 5000, 300000 },
				      .nsizes = 3,
				      .steps = 3,
				      .zerocopy = true };

		run(3, 60, body_exchange, &a, 0);
	}
	unlink(key);
	rmdir(dir);
}

/* ---- a hostile peer --------------------------------------------------------- */

/* Oversized goes last: after it, ofi_rxm may drop the attacker's connection. */
enum {
	H_FLIP,
	H_TRUNC,
	H_REPLAY_SLOT,
	H_REPLAY_SEQ,
	H_GARBAGE,
	H_WRONG_CODEC,
	H_OVERSIZE,
	H_COUNT
};

#define HOSTILE_N 16

/*
 * Rank 2 completes the handshake like anyone, then sends rank 0 forged
 * frames through the raw transport, one per slot 100 + attack. Rank 0 must
 * reject each (buffer untouched, counters up) and then still serve the
 * honest rank 1.
 */
static int body_hostile(int rank, int size, const char *dir, void *arg)
{
	const struct conn_arg *a = arg;
	struct gw_store *st;
	char err[512];
	int rc;
	struct gw_ctx *ctx = open_ctx(a, rank, size, dir, &st, &rc, err, sizeof(err));
	float x[HOSTILE_N], y[HOSTILE_N];

	if (!ctx)
		return 30;
	tu_fill(x, HOSTILE_N, 99);
	if (rank == 2) {
		struct gw_tp *tp = gw_ctx_tp(ctx);
		uint8_t body[256], f[8192], g[8192];
		struct gw_codec none;
		ssize_t blen, flen;

		gw_codec_init(&none, gw_codec_find("none"));
		blen = gw_payload_encode(&none, NULL, NULL, x, NULL, NULL, HOSTILE_N, body,
					 sizeof(body));
		flen = gw_ctx_seal(ctx, 0, GW_FRAME_TENSOR, 0, 100, 0, body, (size_t)blen, f,
				   sizeof(f));
		if (blen < 0 || flen < 0)
			return 31;
		for (int h = 0; h < H_COUNT; h++) {
			uint32_t slot = 100 + (uint32_t)h;
			size_t len = (size_t)flen;

			memcpy(g, f, (size_t)flen);
			switch (h) {
			case H_FLIP: /* a valid frame for this slot, one bit off */
				gw_ctx_seal(ctx, 0, GW_FRAME_TENSOR, 0, slot, 0, body, (size_t)blen,
					    g, sizeof(g));
				g[GW_FRAME_HDR + 30] ^= 0x10;
				break;
			case H_TRUNC:
				gw_ctx_seal(ctx, 0, GW_FRAME_TENSOR, 0, slot, 0, body, (size_t)blen,
					    g, sizeof(g));
				len -= 9;
				break;
			case H_REPLAY_SLOT: /* slot 100's frame sent to this slot */
				break;
			case H_REPLAY_SEQ: /* a frame for seq 1 arriving as seq 0 */
				gw_ctx_seal(ctx, 0, GW_FRAME_TENSOR, 0, slot, 1, body, (size_t)blen,
					    g, sizeof(g));
				break;
			case H_GARBAGE:
				for (size_t i = 0; i < len; i++)
					g[i] = (uint8_t)(i * 131 + 7);
				break;
			case H_OVERSIZE: /* larger than the receive's buffer */
				len = 8000;
				break;
			case H_WRONG_CODEC: { /* honest MAC, codec not negotiated */
				struct gw_codec fp16;
				uint8_t b2[256];
				ssize_t l2;

				gw_codec_init(&fp16, gw_codec_find("fp16"));
				l2 = gw_payload_encode(&fp16, NULL, NULL, x, NULL, NULL, HOSTILE_N,
						       b2, sizeof(b2));
				len = (size_t)gw_ctx_seal(ctx, 0, GW_FRAME_TENSOR, GW_FRAME_F_LOSSY,
							  slot, 0, b2, (size_t)l2, g, sizeof(g));
				break;
			}
			}
			if (gw_tp_send(tp, 0, slot, 0, g, len) < 0)
				return 32;
		}
	}
	if (rank == 0) {
		static const int want[H_COUNT] = {
			[H_FLIP] = -EKEYREJECTED,	 [H_TRUNC] = -EKEYREJECTED,
			[H_REPLAY_SLOT] = -EKEYREJECTED, [H_REPLAY_SEQ] = -EKEYREJECTED,
			[H_GARBAGE] = -EKEYREJECTED,	 [H_OVERSIZE] = -EMSGSIZE,
			[H_WRONG_CODEC] = -EPROTO,
		};
		struct gw_conn_stats s;
		struct gw_ctx_req r;

		for (int h = 0; h < H_COUNT; h++) {
			for (int i = 0; i < HOSTILE_N; i++)
				y[i] = 42.0f;
			rc = gw_ctx_irecv(ctx, 2, 100 + (uint32_t)h, y, HOSTILE_N, 0, &r);
			if (!rc)
				rc = gw_ctx_wait(ctx, &r);
			if (rc != want[h] && !(h == H_OVERSIZE && rc == -ETIMEDOUT)) {
				fprintf(stderr, "attack %d: got %d (%s), want %d\n", h, rc,
					gw_strerror(rc), want[h]);
				return 33;
			}
			for (int i = 0; i < HOSTILE_N; i++)
				if (y[i] != 42.0f)
					return 34; /* the buffer was touched */
		}
		gw_ctx_stats(ctx, 2, &s);
		if (s.mac_failures != 5 || s.rejected != 1 || s.errors + s.timeouts != 1) {
			fprintf(stderr, "counters: mac %llu rejected %llu errors %llu\n",
				(unsigned long long)s.mac_failures, (unsigned long long)s.rejected,
				(unsigned long long)(s.errors + s.timeouts));
			return 35;
		}
		/* Still serving the honest peer. */
		rc = gw_ctx_irecv(ctx, 1, 300, y, HOSTILE_N, 0, &r);
		if (!rc)
			rc = gw_ctx_wait(ctx, &r);
		if (rc || memcmp(x, y, sizeof(x)))
			return 36;
	} else if (rank == 1) {
		struct gw_ctx_req r;

		rc = gw_ctx_isend(ctx, 0, 300, x, HOSTILE_N, 0, &r);
		if (!rc)
			rc = gw_ctx_wait(ctx, &r);
		if (rc)
			return 37;
	}
	if (tp_barrier(st, rank, size, "hostile-end", TIMEOUT_MS))
		return 38;
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	return 0;
}

static void test_hostile_frames(void)
{
	char key[80], dir[] = "/tmp/gw-keys-XXXXXX";
	struct conn_arg a = { .codec = "int8", .mac_mode = GW_MAC_REQUIRED, .kill_rank = -1 };

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(key, sizeof(key), "%s/key", dir);
	write_key(key, "the key of the hostile peer test\n");
	a.key[0] = a.key[1] = a.key[2] = key;
	run(3, 60, body_hostile, &a, 0);
	unlink(key);
	rmdir(dir);
}

/* ---- receives straight into the caller's buffer ----------------------------- */

#define DIRECT_N 40000 /* 160 kB: above the size where frames are gathered */
enum { D_HONEST, D_LOSSY, D_SHORT, D_NOT_EXACT, D_HONEST_AGAIN, D_COUNT };

/*
 * Rank 0 posts exact receives with GW_CTX_ZEROCOPY (MAC off, so they land
 * in y). Rank 1 sends an exact frame, an int8 one, an exact one of half the
 * values, and one of the right length whose payload header is not exact;
 * only the honest ones may complete, the others fail with -EPROTO, and the
 * connection still serves the last honest one.
 */
static int body_direct(int rank, int size, const char *dir, void *arg)
{
	const struct conn_arg *a = arg;
	struct gw_store *st;
	char err[512];
	int rc = 0;
	struct gw_ctx *ctx = open_ctx(a, rank, size, dir, &st, &rc, err, sizeof(err));
	float *x = tu_alloc(DIRECT_N * 4), *y = tu_alloc(DIRECT_N * 4);
	struct gw_ctx_req r;

	if (!ctx)
		return 40;
	tu_fill(x, DIRECT_N, 7);
	x[123] = NAN;
	x[DIRECT_N - 1] = -INFINITY;
	if (rank == 1) {
		size_t cap = GW_FRAME_HDR + GW_PAYLOAD_HDR + DIRECT_N * 4 + 64;
		uint8_t *body = tu_alloc(cap), *f = tu_alloc(cap);
		struct gw_codec none;
		ssize_t blen, flen;

		gw_codec_init(&none, gw_codec_find("none"));
		for (int d = 0; d < D_COUNT && !rc; d++) {
			uint32_t slot = 200 + (uint32_t)d;

			switch (d) {
			case D_LOSSY:
				rc = gw_ctx_isend(ctx, 0, slot, x, DIRECT_N, GW_CTX_LOSSY, &r);
				break;
			case D_SHORT:
				rc = gw_ctx_isend(ctx, 0, slot, x, DIRECT_N / 2, GW_CTX_ZEROCOPY,
						  &r);
				break;
			case D_NOT_EXACT: /* exact length, another codec's id */
				blen = gw_payload_encode(&none, NULL, NULL, x, NULL, NULL, DIRECT_N,
							 body, cap);
				body[1] = GW_CODEC_INT8;
				flen = gw_ctx_seal(ctx, 0, GW_FRAME_TENSOR, 0, slot, 0, body,
						   (size_t)blen, f, cap);
				if (blen < 0 || flen < 0 ||
				    gw_tp_send(gw_ctx_tp(ctx), 0, slot, 0, f, (size_t)flen) < 0)
					return 41;
				continue;
			default:
				rc = gw_ctx_isend(ctx, 0, slot, x, DIRECT_N, GW_CTX_ZEROCOPY, &r);
			}
			if (!rc)
				rc = gw_ctx_wait(ctx, &r);
		}
		free(body);
		free(f);
		if (rc)
			return 42;
	} else {
		struct gw_conn_stats s;

		for (int d = 0; d < D_COUNT; d++) {
			int want = d == D_HONEST || d == D_HONEST_AGAIN ? 0 : -EPROTO;

			memset(y, 0, DIRECT_N * 4);
			rc = gw_ctx_irecv(ctx, 1, 200 + (uint32_t)d, y, DIRECT_N, GW_CTX_ZEROCOPY,
					  &r);
			if (!rc)
				rc = gw_ctx_wait(ctx, &r);
			if (rc != want) {
				fprintf(stderr, "direct case %d: got %d (%s), want %d\n", d, rc,
					gw_strerror(rc), want);
				return 43;
			}
			if (!want && memcmp(x, y, DIRECT_N * 4))
				return 44; /* not bit for bit, NaN and Inf included */
			if (!want && r.payload)
				return 45; /* nothing to forward: it is in y */
		}
		gw_ctx_stats(ctx, 1, &s);
		if (s.rejected != 3)
			return 46;
	}
	free(x);
	free(y);
	if (tp_barrier(st, rank, size, "direct-end", TIMEOUT_MS))
		return 47;
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	return 0;
}

static void test_direct_recv(void)
{
	struct conn_arg a = { .codec = "int8", .mac_mode = GW_MAC_OFF, .kill_rank = -1 };

	run(2, 60, body_direct, &a, 0);
}

/* Rank 1 speaks raw libfabric: garbage where HELLO and FINISHED belong. */
static int body_garbage_hello(int rank, int size, const char *dir, void *arg)
{
	const struct conn_arg *a = arg;
	struct gw_store *st;
	char err[512] = "";
	int rc;

	if (rank == 0) {
		struct gw_ctx *ctx = open_ctx(a, rank, size, dir, &st, &rc, err, sizeof(err));

		gw_ctx_destroy(ctx);
		gw_store_destroy(st);
		if (rc != -EBADMSG || !strstr(err, "malformed HELLO")) {
			fprintf(stderr, "rank 0: %d '%s'\n", rc, err);
			return 40;
		}
		return 0;
	} else {
		struct tp_env env = { .provider = tp_net_provider(),
				      .iface = "lo",
				      .log_level = GW_LOG_ERROR,
				      .timeout_ms = TIMEOUT_MS };
		struct gw_store *hst = NULL;
		struct gw_tp *tp;
		uint64_t host = 77;
		uint8_t junk[300], in[2048];

		/* The host id first: a context reads them before it opens its
		 * transport (they pick each peer's provider). */
		if (gw_store_file_create(dir, &hst) ||
		    gw_store_set(hst, "test/host/1", &host, sizeof(host)))
			return 41;
		gw_store_destroy(hst);
		tp = tp_open(&env, rank, size, dir, &st, &rc);
		if (!tp)
			return 41;
		struct gw_tp_req sr, rr;

		for (size_t i = 0; i < sizeof(junk); i++)
			junk[i] = (uint8_t)(i * 37 + 1);
		/* magic and this version (GW_HS_VERSION), then nonsense */
		_Static_assert(GW_HS_VERSION == 5, "the junk speaks version 5");
		memcpy(junk, "GWH1\x05\x00", 6);
		/* Round one: take rank 0's HELLO, answer with garbage. */
		if (gw_tp_irecv_kind(tp, GW_TP_KIND_CTRL, 0, 0, 0, in, sizeof(in), &rr) ||
		    gw_tp_isend_kind(tp, GW_TP_KIND_CTRL, 0, 0, 0, junk, sizeof(junk), &sr))
			return 42;
		gw_tp_wait(tp, &sr, TIMEOUT_MS);
		gw_tp_wait(tp, &rr, TIMEOUT_MS);
		/* Round two: rank 0's refusal in, a garbage FINISHED out. */
		if (gw_tp_irecv_kind(tp, GW_TP_KIND_CTRL, 0, 0, 1, in, sizeof(in), &rr) ||
		    gw_tp_isend_kind(tp, GW_TP_KIND_CTRL, 0, 0, 1, junk, 50, &sr))
			return 43;
		gw_tp_wait(tp, &sr, TIMEOUT_MS);
		gw_tp_wait(tp, &rr, TIMEOUT_MS);
		tp_close(tp, st);
		return 0;
	}
}

static void test_garbage_hello(void)
{
	struct conn_arg a = { .codec = "fp16", .kill_rank = -1 };

	run(2, 30, body_garbage_hello, &a, 0);
}

/* ---- a peer killed mid-transfer --------------------------------------------- */

/* A dead peer is known this soon (transport/live.c), whatever the timeout. */
#define KILL_SEEN_MS 2000

static int body_kill(int rank, int size, const char *dir, void *arg)
{
	const struct conn_arg *a = arg;
	uint64_t n = 4u << 20;
	float *x = tu_alloc(n * 4);
	struct gw_ctx_req r[3];
	struct gw_store *st;
	char err[512];
	int64_t t0;
	int rc = 0, k;
	struct gw_ctx *ctx = open_ctx(a, rank, size, dir, &st, &rc, err, sizeof(err));

	if (!ctx)
		return 50;
	if (rank == a->kill_rank) {
		/* Start sending to everyone, then die with the frames in flight. */
		gw_ctx_isend(ctx, 0, 1, x, n, 0, &r[0]);
		usleep(20000);
		raise(SIGKILL);
	}
	/* Three receives never sent, under a timeout of a minute: the dead
	 * peer's closed connection ends them all within KILL_SEEN_MS. */
	t0 = gw_now_ms();
	for (k = 0; k < 3 && !rc; k++)
		rc = gw_ctx_irecv(ctx, a->kill_rank, 2 + (uint32_t)k, x + k * (n / 4), n / 4, 0,
				  &r[k]);
	if (!rc)
		rc = gw_ctx_waitall(ctx, r, 3);
	if (rc != -ECONNRESET || gw_now_ms() - t0 > KILL_SEEN_MS) {
		fprintf(stderr, "rank %d: %d after %lld ms\n", rank, rc,
			(long long)(gw_now_ms() - t0));
		return 51;
	}
	fprintf(stderr, "rank %d: the dead peer gave %s after %lld ms\n", rank, gw_strerror(rc),
		(long long)(gw_now_ms() - t0));
	/* Later posts to it fail at once, sends and receives (the send
	 * encodes 1 Mi values first: a loaded host may take a while). */
	t0 = gw_now_ms();
	if (gw_ctx_isend(ctx, a->kill_rank, 9, x, n / 4, 0, &r[0]) != -ECONNRESET ||
	    gw_ctx_irecv(ctx, a->kill_rank, 10, x, n / 4, 0, &r[1]) != -ECONNRESET ||
	    gw_now_ms() - t0 > 1000) {
		fprintf(stderr, "rank %d: a post to the dead peer did not fail at once\n", rank);
		return 53;
	}
	/* Leaving does not wait for the dead peer's goodbye. */
	t0 = gw_now_ms();
	gw_ctx_destroy(ctx);
	if (gw_now_ms() - t0 > 1500) {
		fprintf(stderr, "rank %d: destroy took %lld ms\n", rank,
			(long long)(gw_now_ms() - t0));
		return 52;
	}
	gw_store_destroy(st);
	free(x);
	return 0;
}

/* Over the network provider, then shm. */
static void test_killed_peer(void)
{
	for (int shm = 0; shm < 2; shm++) {
		struct conn_arg a = { .codec = "fp16",
				      .kill_rank = 2,
				      .timeout_ms = 60000,
				      .provider = shm ? "shm" : NULL };
		int codes[TP_MAX_RANKS];

		CU_ASSERT_EQUAL_FATAL(tp_run(3, 60, body_kill, &a, codes), 0);
		CU_ASSERT_EQUAL(codes[0], 0);
		CU_ASSERT_EQUAL(codes[1], 0);
		CU_ASSERT_EQUAL(codes[2], 128 + SIGKILL);
	}
}

/* ---- sends past the deadline: withdrawn together ------------------------- */

#define LATE 6
#define LATE_N (UINT64_C(1) << 20) /* values: 4 MiB */
#define LATE_TMO 400

/*
 * Rank 0 posts LATE exact sends of 4 MiB that rank 1 takes only later, and
 * waits for them all in one gw_ctx_waitall() with a 400 ms timeout. net
 * cannot take back a send it has begun or queued, so withdrawing the late
 * ones costs a drain of 500 ms: one for all of them. (Finishing them in
 * turn drained once for the send whose wait ran into the deadline and once
 * more for the rest: 400 + 2 x 500 ms at least.) Then rank 1 receives
 * every one, value for value: the withdrawn sends still deliver.
 */
static int body_late(int rank, int size, const char *dir, void *arg)
{
	const struct conn_arg *a = arg;
	float *x = tu_alloc(LATE * LATE_N * 4), *want = tu_alloc(LATE_N * 4);
	struct gw_ctx_req r[LATE];
	struct gw_store *st;
	char err[512], got;
	int rc, code = 0;
	struct gw_ctx *ctx = open_ctx(a, rank, size, dir, &st, &rc, err, sizeof(err));

	if (!ctx)
		return 70;
	if (rank == 0) {
		int64_t t0;

		for (int i = 0; i < LATE; i++) {
			data_of(x + i * LATE_N, LATE_N, 0, i);
			if (gw_ctx_isend(ctx, 1, 30 + (uint32_t)i, x + i * LATE_N, LATE_N, 0,
					 &r[i]))
				return 71;
		}
		t0 = gw_now_ms();
		rc = gw_ctx_waitall(ctx, r, LATE);
		t0 = gw_now_ms() - t0;
		printf("%s after %lld ms (timeout %d ms) ", gw_strerror(rc), (long long)t0,
		       LATE_TMO);
		if (rc != -ETIMEDOUT || t0 > LATE_TMO + 500 + 400)
			code = 72;
	}
	if (tp_barrier(st, rank, size, "late-waited", TIMEOUT_MS))
		code = 73;
	for (int i = 0; rank == 1 && !code && i < LATE; i++) {
		data_of(want, LATE_N, 0, i);
		rc = gw_ctx_irecv(ctx, 0, 30 + (uint32_t)i, x, LATE_N, 0, &r[0]);
		if (!rc)
			rc = gw_ctx_waitall(ctx, r, 1);
		if (rc || memcmp(x, want, LATE_N * 4)) {
			fprintf(stderr, "rank 1: late send %d: %s\n", i, gw_strerror(rc));
			code = 74;
		}
	}
	if (rank == 1 && gw_store_set(st, "late-got", "1", 1))
		code = 75;
	/* Rank 0 moves its withdrawn sends until rank 1 has them all. */
	for (int64_t end = gw_now_ms() + TIMEOUT_MS; rank == 0 && !code;) {
		if (gw_store_get(st, "late-got", &got, 1, 1) == 1)
			break;
		if (gw_now_ms() > end)
			code = 76;
		gw_ctx_progress(ctx, 10);
	}
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	free(x);
	free(want);
	return code;
}

static void test_late_sends(void)
{
	struct conn_arg a = { .codec = "none", .kill_rank = -1, .timeout_ms = LATE_TMO };

	run(2, 60, body_late, &a, 0);
}

/* ---- a long run (the sanitizer build checks it for leaks) ------------------ */

static int body_long(int rank, int size, const char *dir, void *arg)
{
	const struct conn_arg *a = arg;
	int peer = 1 - rank, rc;
	float x[256], y[256];
	struct gw_store *st;
	char err[512];
	struct gw_ctx *ctx = open_ctx(a, rank, size, dir, &st, &rc, err, sizeof(err));
	struct gw_conn_stats s;

	if (!ctx)
		return 60;
	for (int m = 0; m < a->messages; m++) {
		struct gw_ctx_req r[2];

		tu_fill(x, 256, (uint64_t)m);
		rc = gw_ctx_irecv(ctx, peer, (uint32_t)m % 7, y, 256, 0, &r[0]);
		if (!rc)
			rc = gw_ctx_isend(ctx, peer, (uint32_t)m % 7, x, 256, GW_CTX_LOSSY, &r[1]);
		if (!rc)
			rc = gw_ctx_waitall(ctx, r, 2);
		if (rc) {
			fprintf(stderr, "message %d: %s\n", m, gw_strerror(rc));
			return 61;
		}
	}
	gw_ctx_stats(ctx, peer, &s);
	if (s.frames_sent != (uint64_t)a->messages || s.frames_recv != (uint64_t)a->messages)
		return 62;
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	return 0;
}

static void test_long_run(void)
{
	char key[80], dir[] = "/tmp/gw-keys-XXXXXX";
	struct conn_arg a = {
		.codec = "int8", .mac_mode = GW_MAC_REQUIRED, .kill_rank = -1, .messages = 10000
	};

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(key, sizeof(key), "%s/key", dir);
	write_key(key, "the key of the long run, long enough\n");
	a.key[0] = a.key[1] = key;
	run(2, 120, body_long, &a, 0);
	unlink(key);
	rmdir(dir);
}

/* ---- receive from any, exact bytes, residual checkpoints -------------------- */

static int body_any(int rank, int size, const char *dir, void *arg)
{
	const struct conn_arg *a = arg;
	struct gw_store *st;
	char err[512], path[300];
	int rc, seen = 0;
	struct gw_ctx *ctx = open_ctx(a, rank, size, dir, &st, &rc, err, sizeof(err));
	float x[64], y[64];
	uint8_t b[100], bin[100];
	struct gw_ctx_req r;

	if (!ctx)
		return 70;
	if (rank == 0) {
		int peers[2] = { 1, 2 };

		for (int k = 0; k < 2; k++) { /* one from each, in either order */
			int from = -1;

			rc = gw_ctx_recv_any(ctx, peers, 2, 5, y, 64, 0, &from);
			if (rc || from < 1 || from > 2 || (seen & (1 << from))) {
				fprintf(stderr, "recv_any %d: rc %d (%s) from %d\n", k, rc,
					gw_strerror(rc), from);
				return 71;
			}
			seen |= 1 << from;
			tu_fill(x, 64, (uint64_t)from);
			if (memcmp(x, y, sizeof(x)))
				return 72;
		}
		/* Exact bytes, and a byte message of another length. */
		rc = gw_ctx_irecv_bytes(ctx, 1, 6, bin, sizeof(bin), &r);
		if (rc || gw_ctx_wait(ctx, &r))
			return 73;
		for (int i = 0; i < 100; i++)
			if (bin[i] != (uint8_t)(i * 7))
				return 74;
		rc = gw_ctx_irecv_bytes(ctx, 1, 7, bin, 50, &r);
		if (rc || gw_ctx_wait(ctx, &r) != -EPROTO)
			return 75;
	} else {
		tu_fill(x, 64, (uint64_t)rank);
		rc = gw_ctx_isend(ctx, 0, 5, x, 64, 0, &r);
		if (rc || gw_ctx_wait(ctx, &r))
			return 76;
		if (rank == 1) {
			for (int i = 0; i < 100; i++)
				b[i] = (uint8_t)(i * 7);
			rc = gw_ctx_isend_bytes(ctx, 0, 6, b, 100, &r);
			if (rc || gw_ctx_wait(ctx, &r))
				return 77;
			rc = gw_ctx_isend_bytes(ctx, 0, 7, b, 40, &r);
			if (rc || gw_ctx_wait(ctx, &r))
				return 78;
		}
	}
	/* Residuals survive a checkpoint: what one context saved, another
	 * (here the same one after a reset) continues from bit for bit. */
	snprintf(path, sizeof(path), "%s/res-%d", dir, rank);
	if (rank == 1) {
		float big[5000];

		tu_fill(big, 5000, 3);
		rc = gw_ctx_isend(ctx, 0, 8, big, 5000, GW_CTX_LOSSY, &r);
		if (rc || gw_ctx_wait(ctx, &r) || gw_ctx_residuals_save(ctx, path))
			return 79;
		gw_ctx_residuals_reset(ctx);
		if (gw_ctx_residuals_load(ctx, path))
			return 80;
		rc = gw_ctx_isend(ctx, 0, 8, big, 5000, GW_CTX_LOSSY, &r);
		if (rc || gw_ctx_wait(ctx, &r))
			return 81;
	}
	if (rank == 0) {
		float big[5000], got[5000], want[5000];
		uint8_t pay[64 << 10];
		struct gw_codec c;
		struct gw_residual res;
		ssize_t len;

		gw_codec_init(&c, gw_codec_find("fp16"));
		gw_residual_init(&res);
		gw_residual_prepare(&res, 5000);
		tu_fill(big, 5000, 3);
		for (int step = 0; step < 2; step++) {
			rc = gw_ctx_irecv(ctx, 1, 8, got, 5000, 0, &r);
			if (rc || gw_ctx_wait(ctx, &r))
				return 82;
			len = gw_payload_encode(&c, NULL, NULL, big, res.buf, res.buf, 5000, pay,
						sizeof(pay));
			if (len < 0 || gw_payload_decode(pay, (size_t)len, want, 5000) ||
			    memcmp(want, got, sizeof(got)))
				return 83 + step;
		}
		gw_residual_fini(&res);
	}
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	return 0;
}

static void test_any_bytes_checkpoint(void)
{
	struct conn_arg a = { .codec = "fp16", .kill_rank = -1 };

	run(3, 60, body_any, &a, 0);
}

/* ---- withdrawn receives, trimmed slots (what the Gloo device uses) ---------- */

static void fill_bytes(uint8_t *b, size_t n, unsigned k)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 13 + k);
}

static int body_withdraw_trim(int rank, int size, const char *dir, void *arg)
{
	struct gw_store *st;
	char err[512];
	int rc;
	struct gw_ctx *ctx = open_ctx(arg, rank, size, dir, &st, &rc, err, sizeof(err));
	struct gw_ctx_req r;
	size_t big = 1 << 20;
	uint8_t a[100], b[100], one = 1, *x = malloc(big), *y = malloc(big);

	if (!ctx || !x || !y)
		return 70;
	if (rank == 1) {
		fill_bytes(a, 100, 1);
		fill_bytes(b, 100, 2);
		if (gw_ctx_isend_bytes(ctx, 0, 9, a, 100, &r) || gw_ctx_wait(ctx, &r) ||
		    gw_ctx_isend_bytes(ctx, 0, 9, b, 100, &r) || gw_ctx_wait(ctx, &r))
			return 71;
		/* Slot 10 only after rank 0 withdrew its receive there. */
		if (gw_ctx_irecv_bytes(ctx, 0, 11, &one, 1, &r) || gw_ctx_wait(ctx, &r) ||
		    gw_ctx_isend_bytes(ctx, 0, 10, a, 100, &r) || gw_ctx_wait(ctx, &r))
			return 72;
		for (unsigned k = 0; k < 4; k++) {
			fill_bytes(x, big, k);
			if (gw_ctx_isend_bytes(ctx, 0, 20 + k, x, big, &r) || gw_ctx_wait(ctx, &r))
				return 73;
		}
	} else {
		int64_t end = gw_now_ms() + 10000;

		/* Withdrawn before anything came: its sequence number is given
		 * back, so the next receive on slot 10 gets the first message. */
		if (gw_ctx_irecv_bytes(ctx, 1, 10, b, 100, &r) ||
		    gw_ctx_recv_withdraw(ctx, &r) != 0 || gw_ctx_recv_withdraw(ctx, &r) != -EINVAL)
			return 74;
		/* Withdrawn after it arrived: kept for the next receive. */
		if (gw_ctx_irecv_bytes(ctx, 1, 9, b, 100, &r))
			return 75;
		while (gw_tp_test(gw_ctx_tp(ctx), &r.tp) == 0 && gw_now_ms() < end)
			;
		if (gw_ctx_recv_withdraw(ctx, &r) != 1)
			return 76;
		fill_bytes(a, 100, 1);
		memset(b, 0, 100);
		if (gw_ctx_irecv_bytes(ctx, 1, 9, b, 100, &r) || gw_ctx_wait(ctx, &r) ||
		    memcmp(a, b, 100))
			return 77;
		fill_bytes(a, 100, 2);
		if (gw_ctx_irecv_bytes(ctx, 1, 9, b, 100, &r) || gw_ctx_wait(ctx, &r) ||
		    memcmp(a, b, 100))
			return 78;
		if (gw_ctx_isend_bytes(ctx, 1, 11, &one, 1, &r) || gw_ctx_wait(ctx, &r))
			return 79;
		fill_bytes(a, 100, 1);
		if (gw_ctx_irecv_bytes(ctx, 1, 10, b, 100, &r) || gw_ctx_wait(ctx, &r) ||
		    memcmp(a, b, 100))
			return 80;
		/* Trimmed slots: their buffers go through the pool, a busy one
		 * keeps its own, and every message still arrives intact. */
		if (gw_ctx_slot_trim(ctx, 0, 20, 0) != -EINVAL ||
		    gw_ctx_slot_trim(ctx, 1, 999, 0) != 0)
			return 81;
		for (unsigned k = 0; k < 4; k++) {
			if (gw_ctx_irecv_bytes(ctx, 1, 20 + k, y, big, &r))
				return 82;
			if (k == 3 && gw_ctx_slot_trim(ctx, 1, 23, 0)) /* busy */
				return 83;
			fill_bytes(x, big, k);
			if (gw_ctx_wait(ctx, &r) || memcmp(x, y, big))
				return 84;
			gw_ctx_slot_trim(ctx, 1, 9, 0);
			gw_ctx_slot_trim(ctx, 1, 20 + k, 0);
		}
	}
	free(x);
	free(y);
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	return 0;
}

static void test_withdraw_trim(void)
{
	struct conn_arg a = { .codec = "none", .kill_rank = -1 };

	run(2, 60, body_withdraw_trim, &a, 0);
}

/* ---- destroy with a receive still posted ------------------------------------ */

/*
 * Rank 0 posts a receive it never waits for and destroys its context at
 * once; rank 1 sends into it a moment later, while rank 0 is leaving. The
 * frame must land in a live buffer or nowhere: gw_ctx_destroy() closes the
 * endpoint before it frees what a posted receive may be written into.
 * Under ASan the other order is a heap-use-after-free in libfabric's copy
 * into the freed frame buffer (the Gloo device's teardown hit it).
 */
static int body_pending_destroy(int rank, int size, const char *dir, void *arg)
{
	const struct conn_arg *a = arg;
	static uint8_t buf[1 << 16];
	struct gw_ctx_req r;
	struct gw_store *st;
	char err[512];
	int rc;
	struct gw_ctx *ctx = open_ctx(a, rank, size, dir, &st, &rc, err, sizeof(err));

	(void)size;
	if (!ctx)
		return 10;
	if (rank == 0) {
		if (gw_ctx_irecv_bytes(ctx, 1, 7, buf, sizeof(buf), &r))
			return 11;
		gw_ctx_destroy(ctx); /* never waited for */
	} else {
		usleep(100000);
		memset(buf, 0x5a, sizeof(buf));
		rc = gw_ctx_isend_bytes(ctx, 0, 7, buf, sizeof(buf), &r);
		if (!rc)
			gw_ctx_wait(ctx, &r); /* delivered, or the peer left */
		gw_ctx_destroy(ctx);
	}
	gw_store_destroy(st);
	return 0;
}

static void test_pending_destroy(void)
{
	struct conn_arg a = { .codec = "none", .kill_rank = -1 };

	for (int i = 0; i < 3; i++)
		run(2, 60, body_pending_destroy, &a, 0);
}

/* ---- configured only by GRADWIRE_* variables --------------------------------- */

static int body_env(int rank, int size, const char *dir, void *arg)
{
	struct gw_store *st;
	struct gw_ctx *ctx = NULL;
	struct gw_ctx_req r[2];
	float x[20000], y[20000];
	char err[512], path[300];
	int rc;

	setenv("GRADWIRE_PROVIDER", tp_net_provider(), 1);
	setenv("GRADWIRE_PROVIDER_LOCAL", tp_net_provider(), 1);
	setenv("GRADWIRE_IFACE", "lo", 1);
	setenv("GRADWIRE_JOB", "envjob", 1);
	setenv("GRADWIRE_TIMEOUT_MS", "8000", 1);
	setenv("GRADWIRE_CODEC", "int8:bucket=256", 1);
	setenv("GRADWIRE_STATS", "1", 1);
	/* Statistics go to stderr at finalize: catch them in a file of the
	 * parent's folder (arg; the harness removes its own, dir). */
	snprintf(path, sizeof(path), "%s/stderr-%d", (const char *)arg, rank);
	if (!freopen(path, "w", stderr) || gw_store_file_create(dir, &st))
		return 90;
	rc = gw_ctx_create_env(rank, size, st, &ctx, err, sizeof(err));
	if (rc)
		return 91;
	tu_fill(x, 20000, 5);
	rc = gw_ctx_irecv(ctx, 1 - rank, 1, y, 20000, 0, &r[0]);
	if (!rc)
		rc = gw_ctx_isend(ctx, 1 - rank, 1, x, 20000, GW_CTX_LOSSY, &r[1]);
	if (rc || gw_ctx_waitall(ctx, r, 2))
		return 92;
	gw_ctx_destroy(ctx);
	gw_store_destroy(st);
	fclose(stderr);
	return 0;
}

static void test_env(void)
{
	char dir[] = "/tmp/gw-env-XXXXXX", path[300], line[1024];
	int codes[TP_MAX_RANKS], seen = 0;
	FILE *f;

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	CU_ASSERT_EQUAL_FATAL(tp_run(2, 30, body_env, dir, codes), 0);
	CU_ASSERT_EQUAL(codes[0], 0);
	CU_ASSERT_EQUAL(codes[1], 0);
	for (int r = 0; r < 2; r++) {
		snprintf(path, sizeof(path), "%s/stderr-%d", dir, r);
		f = fopen(path, "r");
		CU_ASSERT_PTR_NOT_NULL_FATAL(f);
		while (fgets(line, sizeof(line), f))
			if (strstr(line, "codec int8:bucket=256,rounding=nearest") &&
			    strstr(line, "sent 1 frames 80000 B raw"))
				seen |= 1 << r;
		fclose(f);
		unlink(path);
	}
	CU_ASSERT_EQUAL(seen, 3); /* both ranks printed their statistics */
	rmdir(dir);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "configured by GRADWIRE_* variables, stats at finalize", test_env },
		{ "receive from any, exact bytes, residual checkpoint", test_any_bytes_checkpoint },
		{ "withdrawn receives, trimmed slots and the buffer pool", test_withdraw_trim },
		{ "destroyed with a receive posted: nothing lands in freed memory",
		  test_pending_destroy },
		{ "exchange: every codec, 2 and 4 ranks, 1..256K values", test_exchange_small },
		{ "exchange: every codec, 64 MiB", test_exchange_64mib },
		{ "exchange over shm", test_shm },
		{ "negotiation matrix", test_negotiation },
		{ "fallback to none", test_fallback },
		{ "a peer that never joined", test_never_joined },
		{ "a peer that never answers the handshake", test_silent_peer },
		{ "MAC optional and required on the data path", test_mac_exchange },
		{ "exact sends without a copy (gathered)", test_zerocopy },
		{ "exact receives straight into the buffer; other frames refused",
		  test_direct_recv },
		{ "hostile peer: forged frames", test_hostile_frames },
		{ "hostile peer: garbage handshake", test_garbage_hello },
		{ "peer killed mid-transfer: seen within 2 s, also over shm", test_killed_peer },
		{ "sends past the deadline: withdrawn in one drain", test_late_sends },
		{ "10,000 messages", test_long_run },
		CU_TEST_INFO_NULL,
	};
	tp_pin_loopback();
	return tu_run("conn", tests);
}
