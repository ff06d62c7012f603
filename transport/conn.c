/* SPDX-License-Identifier: MIT */
/*
 * conn.c - connections to every peer: negotiation, then tensors as frames
 * (conn.h has the contract; docs/wire-format.md the bytes).
 *
 * Ownership: the context owns the transport, one struct conn per peer, the
 * residual store and one codec scratch area (encodes run in the caller's
 * thread, one at a time). A conn owns its two MAC contexts and a map of
 * struct conn_slot, which owns the frame buffers of one (peer, slot): one for
 * the send in flight, one for the receive in flight. Buffers only grow,
 * unless gw_ctx_slot_trim() moves idle ones to the context's pool.
 *
 * Handshake (all peers at once, two rounds):
 *   store: "<job>/host/<rank>" = host id
 *   CTRL slot 0 seq 0: HELLO both ways;  decide;  CTRL slot 0 seq 1: FINISHED.
 * A side whose decision fails still sends FINISHED, as a refusal with its
 * reason, so both ends report it instead of one timing out.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include "conn.h"
#include "frame.h"
#include "map.h"
#include "residuals.h"

#define HS_SLOT 0
#define HS_SEQ_HELLO 0
#define HS_SEQ_FINISHED 1
/* Exact tensors at least this large are sent without a copy when the
 * caller allows it (GW_CTX_ZEROCOPY): below, the copy costs less than the
 * gathered send. */
#define GATHER_MIN (64u << 10)
#define POOL_MAX 16

struct conn_slot {
	uint32_t slot;
	uint32_t send_seq, recv_seq;
	uint8_t *sbuf, *rbuf;
	size_t scap, rcap;
	struct gw_tp_mr *smr, *rmr;
	bool sbusy, rbusy;
	size_t stash;		/* recv_any: a frame that arrived unasked, or 0 */
	struct conn *c;
};

struct conn {
	int peer;
	struct gw_hs_result hs;
	struct gw_mac *tx, *rx;
	struct gw_map slots;	/* slot -> struct conn_slot */
	struct gw_conn_stats st;
};

struct gw_ctx {
	int rank, size;
	int timeout_ms, log_level;
	uint64_t min_compress_bytes;
	struct gw_tp *tp;
	struct conn *conns;	/* size entries; conns[rank] unused */
	struct gw_rs *rs;
	struct gw_codec none;
	void *scratch;
	size_t scratch_cap;
	FILE *stats_out;
	/* The first send or receive that failed: its peer (-1: none) and
	 * direction, for the collectives' error message. */
	int failed_peer, failed_dir;
	/* Frame buffers that gw_ctx_slot_trim() took from idle slots, for the
	 * next slot that needs one (largest kept when full). */
	struct pool_buf {
		uint8_t *buf;
		size_t cap;
		struct gw_tp_mr *mr;
	} pool[POOL_MAX];
	unsigned npool;
};

#define ctx_log(ctx, lvl, ...) gw_log((ctx)->log_level, (lvl), (ctx)->rank, __VA_ARGS__)

/* ---- slots and buffers ----------------------------------------------------- */

static struct conn_slot *slot_get(struct conn *c, uint32_t slot)
{
	struct conn_slot *cs = gw_map_get(&c->slots, slot);

	if (cs)
		return cs;
	cs = calloc(1, sizeof(*cs));
	if (!cs)
		return NULL;
	cs->slot = slot;
	cs->c = c;
	if (gw_map_put(&c->slots, slot, cs)) {
		free(cs);
		return NULL;
	}
	return cs;
}

static void slot_free(struct gw_ctx *ctx, struct conn_slot *cs)
{
	gw_tp_mr_dereg(ctx->tp, cs->smr);
	gw_tp_mr_dereg(ctx->tp, cs->rmr);
	free(cs->sbuf);
	free(cs->rbuf);
	free(cs);
}

/* Keep an idle buffer in the pool, or free it (or a smaller pooled one). */
static void buf_park(struct gw_ctx *ctx, uint8_t **buf, size_t *cap,
		     struct gw_tp_mr **mr)
{
	struct pool_buf b = { *buf, *cap, *mr };

	*buf = NULL;
	*cap = 0;
	*mr = NULL;
	if (!b.buf)
		return;
	if (ctx->npool == POOL_MAX) {
		unsigned small = 0;

		for (unsigned i = 1; i < POOL_MAX; i++)
			if (ctx->pool[i].cap < ctx->pool[small].cap)
				small = i;
		if (ctx->pool[small].cap < b.cap) {
			struct pool_buf t = ctx->pool[small];

			ctx->pool[small] = b;
			b = t;
		}
		gw_tp_mr_dereg(ctx->tp, b.mr);
		free(b.buf);
		return;
	}
	ctx->pool[ctx->npool++] = b;
}

/* Make *buf hold need bytes; register it when the provider wants that. */
static int buf_reserve(struct gw_ctx *ctx, uint8_t **buf, size_t *cap,
		       struct gw_tp_mr **mr, size_t need)
{
	size_t ncap = *cap ? *cap : 4096;
	unsigned best = POOL_MAX;
	uint8_t *nb;
	int rc;

	if (need <= *cap)
		return 0;
	gw_tp_mr_dereg(ctx->tp, *mr);
	*mr = NULL;
	free(*buf);
	*buf = NULL;
	*cap = 0;
	for (unsigned i = 0; i < ctx->npool; i++)	/* best fit */
		if (ctx->pool[i].cap >= need &&
		    (best == POOL_MAX || ctx->pool[i].cap < ctx->pool[best].cap))
			best = i;
	if (best < POOL_MAX) {
		*buf = ctx->pool[best].buf;
		*cap = ctx->pool[best].cap;
		*mr = ctx->pool[best].mr;
		ctx->pool[best] = ctx->pool[--ctx->npool];
		return 0;
	}
	while (ncap < need)
		ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
	if (posix_memalign((void **)&nb, 64, ncap))
		return -ENOMEM;
	if (ctx->tp && (gw_tp_mr_mode(ctx->tp) & FI_MR_LOCAL)) {
		rc = gw_tp_mr_reg(ctx->tp, nb, ncap, mr);
		if (rc) {
			free(nb);
			return rc;
		}
	}
	*buf = nb;
	*cap = ncap;
	return 0;
}

static int scratch_reserve(struct gw_ctx *ctx, size_t need)
{
	void *p;

	if (need <= ctx->scratch_cap)
		return 0;
	if (posix_memalign(&p, 64, need))
		return -ENOMEM;
	free(ctx->scratch);
	ctx->scratch = p;
	ctx->scratch_cap = need;
	return 0;
}

/* ---- handshake ------------------------------------------------------------- */

uint64_t gw_ctx_host_id_default(void)
{
	char name[256] = "";
	uint64_t h = UINT64_C(0xcbf29ce484222325);	/* FNV-1a */

	gethostname(name, sizeof(name) - 1);
	for (const char *p = name; *p; p++)
		h = (h ^ (uint8_t)*p) * UINT64_C(0x100000001b3);
	return h ? h : 1;
}

static int parse_algs(const char *list, struct gw_hs_hello *h, char *err,
		      size_t errlen)
{
	int n;

	if (!list)
		list = "gmac-aes256,hmac-sha256";
	n = gw_mac_alg_list_parse(list, h->algs, GW_HS_MAX_ALGS);
	if (n < 0) {
		snprintf(err, errlen, "MAC algorithms '%s': expected a list of "
			 "gmac-aes256, hmac-sha256", list);
		return n;
	}
	h->nalgs = (uint8_t)n;
	return 0;
}

/* Our HELLO template (codec list and LOCAL flag are set per peer). */
static int hello_base(const struct gw_ctx_cfg *cfg, int rank, int size,
		      bool has_key, uint64_t host, struct gw_hs_hello *h,
		      char *err, size_t errlen)
{
	memset(h, 0, sizeof(*h));
	h->version = cfg->hs_version ? cfg->hs_version : GW_HS_VERSION;
	h->flags = (uint16_t)((has_key ? GW_HS_F_HAS_KEY : 0) |
			      (cfg->fallback ? GW_HS_F_FALLBACK : 0));
	h->rank = (uint32_t)rank;
	h->size = (uint32_t)size;
	h->host_id = host;
	if (cfg->mac_mode < GW_MAC_OFF || cfg->mac_mode > GW_MAC_REQUIRED) {
		snprintf(err, errlen, "MAC mode %d is not off, optional or required",
			 cfg->mac_mode);
		return -EINVAL;
	}
	h->mac_mode = (uint8_t)cfg->mac_mode;
	if (cfg->nagree > GW_HS_MAX_AGREE)
		return -EINVAL;
	h->nagree = cfg->nagree;
	memcpy(h->agree, cfg->agree, sizeof(h->agree));
	return parse_algs(cfg->mac_algs, h, err, errlen);
}

int gw_ctx_cfg_agree(struct gw_ctx_cfg *cfg, const char *name, uint64_t value)
{
	size_t len = name ? strlen(name) : 0;
	uint8_t i;

	if (len < 1 || len > GW_HS_AGREE_NAME_MAX)
		return -EINVAL;
	for (size_t k = 0; k < len; k++)
		if (!((name[k] >= 'A' && name[k] <= 'Z') ||
		      (name[k] >= '0' && name[k] <= '9') || name[k] == '_'))
			return -EINVAL;
	for (i = 0; i < cfg->nagree; i++)
		if (!strcmp(cfg->agree[i].name, name))
			break;
	if (i == GW_HS_MAX_AGREE)
		return -ENOSPC;
	memcpy(cfg->agree[i].name, name, len + 1);
	cfg->agree[i].value = value;
	if (i == cfg->nagree)
		cfg->nagree++;
	return 0;
}

static int codec_list(const char *list, struct gw_hs_hello *h, const char *what,
		      char *err, size_t errlen)
{
	char e[200];
	int n = gw_codec_list_parse(list, h->codecs, GW_HS_MAX_CODECS, e, sizeof(e));

	if (n < 0) {
		snprintf(err, errlen, "%s: %s", what, e);
		return n;
	}
	h->ncodecs = (uint8_t)n;
	return 0;
}

struct hs_peer {
	uint8_t hello_out[GW_HS_HELLO_MAX], hello_in[GW_HS_HELLO_MAX];
	uint8_t fin_out[GW_HS_FINISHED_MAX], fin_in[GW_HS_FINISHED_MAX];
	size_t hello_out_len, fin_out_len;
	ssize_t hello_in_len, fin_in_len;	/* bytes, or -errno */
	struct gw_hs_hello me, peer;
	int rc;				/* our decision for this peer */
	char err[400];
};

/*
 * One round: post a control receive and send to every peer, then wait for
 * all of them under one deadline (everything posted is waited for, even
 * after an error, so no operation outlives its buffer).
 */
static int hs_round(struct gw_ctx *ctx, struct hs_peer *hp, int fin, char *err,
		    size_t errlen)
{
	uint32_t seq = fin ? HS_SEQ_FINISHED : HS_SEQ_HELLO;
	struct gw_tp_req *reqs = calloc(2 * (size_t)ctx->size, sizeof(*reqs));
	int *peer_of = calloc(2 * (size_t)ctx->size, sizeof(*peer_of));
	size_t nreq = 0;
	int rc = reqs && peer_of ? 0 : -ENOMEM;

	for (int p = 0; p < ctx->size && !rc; p++) {
		struct hs_peer *x = &hp[p];

		if (p == ctx->rank)
			continue;
		peer_of[nreq] = p;
		rc = gw_tp_irecv_kind(ctx->tp, GW_TP_KIND_CTRL, p, HS_SLOT, seq,
				      fin ? x->fin_in : x->hello_in,
				      fin ? sizeof(x->fin_in) : sizeof(x->hello_in),
				      &reqs[nreq]);
		if (rc)
			break;
		peer_of[++nreq] = p;
		rc = gw_tp_isend_kind(ctx->tp, GW_TP_KIND_CTRL, p, HS_SLOT, seq,
				      fin ? x->fin_out : x->hello_out,
				      fin ? x->fin_out_len : x->hello_out_len,
				      &reqs[nreq]);
		if (rc)
			break;
		nreq++;
	}
	if (rc && reqs)
		snprintf(err, errlen, "handshake: posting to rank %d failed: %s",
			 peer_of[nreq], gw_strerror(rc));
	if (nreq) {
		int wrc = gw_tp_waitall(ctx->tp, reqs, nreq, ctx->timeout_ms);

		for (size_t i = 0; i < nreq; i++) {
			if (i % 2 == 0)	/* receives: what arrived */
				*(fin ? &hp[peer_of[i]].fin_in_len :
					&hp[peer_of[i]].hello_in_len) = reqs[i].result;
			if (!rc && wrc && reqs[i].result < 0) {
				rc = (int)reqs[i].result;
				snprintf(err, errlen, "handshake with rank %d: %s %s",
					 peer_of[i], i % 2 ? "sending" : "receiving",
					 fin ? "FINISHED" : "HELLO");
				snprintf(err + strlen(err), errlen - strlen(err),
					 " failed: %s", gw_strerror(rc));
			}
		}
	}
	free(reqs);
	free(peer_of);
	return rc;
}

/* Build our HELLO for peer p (its list depends on whether p shares our host). */
static int hello_for(const struct gw_ctx_cfg *cfg, const struct gw_hs_hello *base,
		     bool local, struct hs_peer *x, char *err, size_t errlen)
{
	const char *list = local && cfg->codec_local ? cfg->codec_local :
			   cfg->codec ? cfg->codec : "none";
	ssize_t len;
	int rc;

	x->me = *base;
	if (local)
		x->me.flags |= GW_HS_F_LOCAL;
	rc = codec_list(list, &x->me, local && cfg->codec_local ?
			"GRADWIRE_CODEC_LOCAL" : "GRADWIRE_CODEC", err, errlen);
	if (rc)
		return rc;
	if (RAND_bytes(x->me.nonce, GW_HS_NONCE) != 1)
		return -EIO;
	len = gw_hs_hello_build(&x->me, x->hello_out, sizeof(x->hello_out));
	if (len < 0)
		return (int)len;
	x->hello_out_len = (size_t)len;
	/* Decide from what we sent, parsed back (as the peer reads it). */
	if (x->me.version == GW_HS_VERSION)
		rc = gw_hs_hello_parse(x->hello_out, x->hello_out_len, &x->me);
	return rc;
}

/* Our decision for peer p after round one; on failure x->rc and x->err. */
static void hs_decide(struct gw_ctx *ctx, int p, struct hs_peer *x,
		      const uint8_t *psk)
{
	struct conn *c = &ctx->conns[p];
	ssize_t len;

	x->rc = gw_hs_hello_parse(x->hello_in, (size_t)x->hello_in_len, &x->peer);
	if (x->rc == -EPROTONOSUPPORT || (!x->rc && x->peer.version != x->me.version)) {
		x->rc = -EPROTONOSUPPORT;
		snprintf(x->err, sizeof(x->err), "protocol version skew: rank %d "
			 "speaks %u, rank %d speaks %u", ctx->rank, x->me.version,
			 p, x->peer.version);
	} else if (x->rc) {
		snprintf(x->err, sizeof(x->err), "rank %d sent a malformed HELLO", p);
	} else if (x->peer.rank != (uint32_t)p) {
		x->rc = -EINVAL;
		snprintf(x->err, sizeof(x->err), "the HELLO from rank %d says it is "
			 "rank %u", p, x->peer.rank);
	} else {
		x->rc = gw_hs_decide(&x->me, x->hello_out, x->hello_out_len, &x->peer,
				     x->hello_in, (size_t)x->hello_in_len, psk,
				     &c->hs, x->err, sizeof(x->err));
	}
	if (!x->rc && c->hs.mac &&
	    (gw_mac_create(c->hs.mac, c->hs.key_send, &c->tx) ||
	     gw_mac_create(c->hs.mac, c->hs.key_recv, &c->rx))) {
		x->rc = -EIO;
		snprintf(x->err, sizeof(x->err), "OpenSSL refused the MAC keys");
	}
	len = x->rc ? gw_hs_finished_build(NULL, x->rc, x->err, x->fin_out,
					   sizeof(x->fin_out))
		    : gw_hs_finished_build(&c->hs, 0, NULL, x->fin_out,
					   sizeof(x->fin_out));
	x->fin_out_len = (size_t)(len < 0 ? 0 : len);
}

static int handshake(struct gw_ctx *ctx, const struct gw_ctx_cfg *cfg,
		     struct gw_store *st, const char *job, char *err, size_t errlen)
{
	uint8_t psk[GW_MAC_KEY_LEN];
	bool has_key = false;
	uint64_t host = cfg->host_id ? cfg->host_id : gw_ctx_host_id_default();
	struct gw_hs_hello base;
	struct hs_peer *hp = NULL;
	char key[160];
	int rc;

	if (cfg->mac_key_file && cfg->mac_mode != GW_MAC_OFF) {
		rc = gw_key_file_load(cfg->mac_key_file, psk);
		if (rc) {
			snprintf(err, errlen, "MAC key file %s: %s%s", cfg->mac_key_file,
				 gw_strerror(rc), rc == -EACCES ?
				 " (it must be a regular file only its owner can read)" : "");
			return rc;
		}
		has_key = true;
	}
	rc = hello_base(cfg, ctx->rank, ctx->size, has_key, host, &base, err, errlen);
	if (rc)
		goto out;
	hp = calloc((size_t)ctx->size, sizeof(*hp));
	rc = -ENOMEM;
	if (!hp)
		goto out;

	/* Host ids first: they decide which codec list each peer gets. */
	snprintf(key, sizeof(key), "%s/host/%d", job, ctx->rank);
	rc = gw_store_set(st, key, &host, sizeof(host));
	for (int p = 0; p < ctx->size && !rc; p++) {
		uint64_t ph = 0;
		ssize_t got;

		if (p == ctx->rank)
			continue;
		snprintf(key, sizeof(key), "%s/host/%d", job, p);
		got = gw_store_get(st, key, &ph, sizeof(ph), ctx->timeout_ms);
		if (got != sizeof(ph)) {
			rc = got < 0 ? (int)got : -EBADMSG;
			snprintf(err, errlen, "rank %d's host id: %s", p, gw_strerror(rc));
			break;
		}
		rc = hello_for(cfg, &base, ph == host, &hp[p], err, errlen);
	}
	if (!rc)
		rc = hs_round(ctx, hp, 0, err, errlen);
	if (rc)
		goto out;
	for (int p = 0; p < ctx->size; p++)
		if (p != ctx->rank)
			hs_decide(ctx, p, &hp[p], has_key ? psk : NULL);
	rc = hs_round(ctx, hp, 1, err, errlen);
	for (int p = 0; p < ctx->size && !rc; p++) {
		struct hs_peer *x = &hp[p];
		struct conn *c = &ctx->conns[p];

		if (p == ctx->rank)
			continue;
		if (x->rc) {	/* our own refusal; the peer reports the same */
			rc = x->rc;
			snprintf(err, errlen, "%s", x->err);
			break;
		}
		rc = gw_hs_finished_check(&c->hs, x->fin_in, (size_t)x->fin_in_len,
					  err, errlen);
		if (rc == -EBADMSG)
			snprintf(err, errlen, "rank %d sent a malformed FINISHED", p);
		if (!rc)
			ctx_log(ctx, GW_LOG_INFO, "rank %d: codec %s%s, MAC %s", p,
				c->hs.codec.ops->name, c->hs.fell_back ? " (fallback)" : "",
				gw_mac_alg_name(c->hs.mac));
	}
out:
	free(hp);
	OPENSSL_cleanse(psk, sizeof(psk));
	return rc;
}

/* ---- context --------------------------------------------------------------- */

int gw_ctx_create(const struct gw_ctx_cfg *cfg, int rank, int size,
		  struct gw_store *st, struct gw_ctx **out, char *err, size_t errlen)
{
	const char *job = cfg->tp.job ? cfg->tp.job : "gw";
	struct gw_ctx *ctx;
	int rc;

	snprintf(err, errlen, "no error");
	if (size < 1 || rank < 0 || rank >= size || !st || cfg->tp.timeout_ms <= 0) {
		snprintf(err, errlen, "invalid rank %d / size %d / timeout", rank, size);
		return -EINVAL;
	}
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->rank = rank;
	ctx->failed_peer = -1;
	ctx->size = size;
	ctx->timeout_ms = cfg->tp.timeout_ms;
	ctx->log_level = cfg->tp.log_level;
	ctx->min_compress_bytes = cfg->min_compress_bytes;
	gw_codec_init(&ctx->none, gw_codec_find("none"));
	rc = -ENOMEM;
	ctx->conns = calloc((size_t)size, sizeof(*ctx->conns));
	if (!ctx->conns)
		goto err_free;
	for (int p = 0; p < size; p++) {
		ctx->conns[p].peer = p;
		if (gw_map_init(&ctx->conns[p].slots))
			goto err_free;
	}
	rc = gw_rs_create(&ctx->rs);
	if (rc)
		goto err_free;
	rc = gw_tp_create(&cfg->tp, rank, size, st, &ctx->tp);
	if (rc) {
		snprintf(err, errlen, "transport (%s on %s): %s",
			 cfg->tp.provider ? cfg->tp.provider : "default provider",
			 cfg->tp.iface ? cfg->tp.iface : "default interface",
			 gw_strerror(rc));
		goto err_free;
	}
	rc = handshake(ctx, cfg, st, job, err, errlen);
	if (rc) {
		ctx_log(ctx, GW_LOG_ERROR, "%s", err);
		goto err_free;
	}
	*out = ctx;
	return 0;
err_free:
	gw_ctx_destroy(ctx);
	return rc;
}

void gw_ctx_destroy(struct gw_ctx *ctx)
{
	if (!ctx)
		return;
	if (ctx->stats_out)
		gw_ctx_stats_print(ctx, ctx->stats_out);
	/* Nothing may write into a slot's buffers once they are freed: a
	 * receive still posted (a caller that never waited, a peer's late
	 * frame) would land in freed memory. */
	gw_tp_quiesce(ctx->tp);
	for (int p = 0; ctx->conns && p < ctx->size; p++) {
		struct conn *c = &ctx->conns[p];

		for (size_t i = 0; i < c->slots.cap; i++)
			if (c->slots.e[i].val)
				slot_free(ctx, c->slots.e[i].val);
		gw_map_fini(&c->slots);
		gw_mac_destroy(c->tx);
		gw_mac_destroy(c->rx);
		OPENSSL_cleanse(&c->hs, sizeof(c->hs));
	}
	for (unsigned i = 0; i < ctx->npool; i++) {
		gw_tp_mr_dereg(ctx->tp, ctx->pool[i].mr);
		free(ctx->pool[i].buf);
	}
	gw_tp_destroy(ctx->tp);	/* after the buffers' registrations went */
	gw_rs_destroy(ctx->rs);
	free(ctx->conns);
	free(ctx->scratch);
	free(ctx);
}

int gw_ctx_rank(const struct gw_ctx *ctx) { return ctx->rank; }
int gw_ctx_size(const struct gw_ctx *ctx) { return ctx->size; }
struct gw_tp *gw_ctx_tp(struct gw_ctx *ctx) { return ctx->tp; }

const struct gw_codec *gw_ctx_codec(const struct gw_ctx *ctx, int peer)
{
	if (peer < 0 || peer >= ctx->size || peer == ctx->rank)
		return NULL;
	return &ctx->conns[peer].hs.codec;
}

uint64_t gw_ctx_min_compress_bytes(const struct gw_ctx *ctx)
{
	return ctx->min_compress_bytes;
}

int gw_ctx_own_residual(struct gw_ctx *ctx, uint32_t slot, uint64_t n,
			const struct gw_codec *c, struct gw_rs_entry **e)
{
	int reshaped, rc;

	rc = gw_rs_get(ctx->rs, (uint32_t)ctx->rank, slot, n, c, e, &reshaped);
	if (!rc && reshaped)
		ctx_log(ctx, GW_LOG_WARN, "own slot %u: a tensor of %llu values "
			"replaces the residual's shape; residual re-zeroed", slot,
			(unsigned long long)n);
	return rc;
}

/* ---- sending --------------------------------------------------------------- */

/*
 * The start of every request: clear r, check the arguments (n values or
 * bytes at buf; n of at most GW_MAX_ELEMS) and find the slot of (peer, slot).
 */
static int req_begin(struct gw_ctx *ctx, int peer, uint32_t slot, const void *buf,
		     uint64_t n, struct gw_ctx_req *r, struct conn_slot **cs)
{
	memset(r, 0, sizeof(*r));
	if (peer < 0 || peer >= ctx->size || peer == ctx->rank ||
	    slot > GW_TP_SLOT_MAX || n > GW_MAX_ELEMS || (n && !buf))
		return -EINVAL;
	*cs = slot_get(&ctx->conns[peer], slot);
	return *cs ? 0 : -ENOMEM;
}

/* A frame of flen bytes was posted on cs: account for it. */
static void sent_posted(struct gw_ctx *ctx, struct conn_slot *cs, uint8_t kind,
			size_t flen, struct gw_ctx_req *r)
{
	r->ctx = ctx;
	r->cs = cs;
	r->seq = cs->send_seq++;
	r->kind = kind;
	r->dir = 0;
	cs->sbusy = true;
	cs->c->st.wire_sent += (uint64_t)flen;
}

/* Seal the frame whose body is in cs->sbuf and post it. */
static int post_frame(struct gw_ctx *ctx, struct conn_slot *cs, uint8_t kind,
		      uint8_t flags, size_t body, struct gw_ctx_req *r)
{
	struct conn *c = cs->c;
	struct gw_frame_hdr h = { kind, flags, cs->slot, cs->send_seq, body };
	ssize_t flen = gw_frame_seal(c->tx, c->hs.mac, &h, cs->sbuf, cs->scap);
	int rc;

	if (flen < 0)
		return (int)flen;
	rc = gw_tp_isend(ctx->tp, c->peer, cs->slot, cs->send_seq, cs->sbuf,
			 (size_t)flen, &r->tp);
	if (!rc)
		sent_posted(ctx, cs, kind, (size_t)flen, r);
	return rc;
}

/*
 * Post an exact tensor without copying it: the frame goes out gathered from
 * its header (and payload header) in cs->sbuf, x itself, and the tag, so x
 * must stay untouched until the send is waited for (GW_CTX_ZEROCOPY).
 */
static int post_gathered(struct gw_ctx *ctx, struct conn_slot *cs,
			 const float *x, uint64_t n, struct gw_ctx_req *r)
{
	struct conn *c = cs->c;
	struct gw_frame_hdr h = { GW_FRAME_TENSOR, 0, cs->slot, cs->send_seq, 0 };
	size_t tag = gw_mac_tag_len(c->hs.mac), head;
	struct iovec iov[3];
	ssize_t len;
	int rc;

	rc = buf_reserve(ctx, &cs->sbuf, &cs->scap, &cs->smr,
			 GW_FRAME_HDR + GW_PAYLOAD_HDR + tag);
	if (rc)
		return rc;
	len = gw_payload_head_exact(n, cs->sbuf + GW_FRAME_HDR,
				    cs->scap - GW_FRAME_HDR - tag);
	if (len < 0)
		return (int)len;
	head = GW_FRAME_HDR + (size_t)len;
	h.len = (size_t)len + n * sizeof(float);
	rc = gw_frame_seal_split(c->tx, c->hs.mac, &h, cs->sbuf, head, x,
				 cs->sbuf + head);
	if (rc)
		return rc;
	iov[0] = (struct iovec){ cs->sbuf, head };
	iov[1] = (struct iovec){ (void *)(uintptr_t)x, n * sizeof(float) };
	iov[2] = (struct iovec){ cs->sbuf + head, tag };
	rc = gw_tp_isendv(ctx->tp, c->peer, cs->slot, cs->send_seq, iov,
			  tag ? 3 : 2, &r->tp);
	if (!rc)
		sent_posted(ctx, cs, GW_FRAME_TENSOR, head + n * sizeof(float) + tag, r);
	return rc;
}

bool gw_ctx_compresses(const struct gw_ctx *ctx, int peer, uint64_t n)
{
	const struct gw_codec *codec = &ctx->conns[peer].hs.codec;

	return codec->ops->lossy && n * sizeof(float) >= ctx->min_compress_bytes;
}

int gw_ctx_isend(struct gw_ctx *ctx, int peer, uint32_t slot, const float *x,
		 uint64_t n, unsigned flags, struct gw_ctx_req *r)
{
	return gw_ctx_isend_sent(ctx, peer, slot, x, n, flags, NULL, r);
}

int gw_ctx_isend_sent(struct gw_ctx *ctx, int peer, uint32_t slot,
		      const float *x, uint64_t n, unsigned flags, float *sent,
		      struct gw_ctx_req *r)
{
	const struct gw_codec *codec;
	struct gw_rs_entry *e = NULL;
	struct conn_slot *cs;
	size_t tag, need;
	ssize_t len;
	int rc, reshaped;

	rc = req_begin(ctx, peer, slot, x, n, r, &cs);
	if (rc)
		return rc;
	if (cs->sbusy)
		return -EBUSY;
	codec = &cs->c->hs.codec;
	r->lossy = (flags & GW_CTX_LOSSY) && gw_ctx_compresses(ctx, peer, n);
	if (!r->lossy && !sent && (flags & GW_CTX_ZEROCOPY) &&
	    n * sizeof(float) >= GATHER_MIN && gw_tp_can_sendv(ctx->tp, 3)) {
		rc = post_gathered(ctx, cs, x, n, r);
		r->n = n;
		return rc;
	}
	if (!r->lossy)
		codec = &ctx->none;
	tag = gw_mac_tag_len(cs->c->hs.mac);
	need = gw_frame_bound(gw_payload_bound(codec, n), cs->c->hs.mac);
	rc = buf_reserve(ctx, &cs->sbuf, &cs->scap, &cs->smr, need);
	if (rc)
		return rc;
	if (r->lossy) {
		rc = gw_rs_get(ctx->rs, (uint32_t)peer, slot, n, codec, &e, &reshaped);
		if (!rc)
			rc = gw_rs_stage(e);
		if (!rc)
			rc = scratch_reserve(ctx, gw_codec_scratch_size(codec, n));
		if (rc)
			return rc;
		if (reshaped) {
			cs->c->st.residual_resets++;
			ctx_log(ctx, GW_LOG_WARN, "rank %d slot %u: a tensor of %llu values "
				"replaces the residual's shape; residual re-zeroed",
				peer, slot, (unsigned long long)n);
		}
		len = gw_payload_encode(codec, e->state, ctx->scratch, x, e->res.buf,
					e->staged, n, cs->sbuf + GW_FRAME_HDR,
					cs->scap - GW_FRAME_HDR - tag);
	} else {
		len = gw_payload_encode(codec, NULL, NULL, x, NULL, NULL, n,
					cs->sbuf + GW_FRAME_HDR,
					cs->scap - GW_FRAME_HDR - tag);
	}
	if (len < 0)
		return (int)len;
	if (sent) {	/* what the peer will decode, from the same bytes */
		rc = gw_payload_decode(cs->sbuf + GW_FRAME_HDR, (size_t)len, sent, n);
		if (rc)
			return rc;
	}
	rc = post_frame(ctx, cs, GW_FRAME_TENSOR, r->lossy ? GW_FRAME_F_LOSSY : 0,
			(size_t)len, r);
	if (rc)
		return rc;
	if (e)
		e->pending = 1;
	r->res = e;
	r->n = n;
	return 0;
}

int gw_ctx_isend_bytes2(struct gw_ctx *ctx, int peer, uint32_t slot,
			const void *head, size_t hlen, const void *buf, size_t len,
			struct gw_ctx_req *r)
{
	struct conn_slot *cs;
	int rc;

	if (hlen > GW_MAX_ELEMS || (hlen && !head))
		return -EINVAL;
	rc = req_begin(ctx, peer, slot, buf, len, r, &cs);
	if (rc)
		return rc;
	if (len > GW_MAX_ELEMS - hlen)
		return -EINVAL;
	if (cs->sbusy)
		return -EBUSY;
	rc = buf_reserve(ctx, &cs->sbuf, &cs->scap, &cs->smr,
			 gw_frame_bound(hlen + len, cs->c->hs.mac));
	if (rc)
		return rc;
	if (hlen)
		memcpy(cs->sbuf + GW_FRAME_HDR, head, hlen);
	if (len)
		memcpy(cs->sbuf + GW_FRAME_HDR + hlen, buf, len);
	rc = post_frame(ctx, cs, GW_FRAME_BYTES, 0, hlen + len, r);
	r->n = hlen + len;
	return rc;
}

int gw_ctx_isend_bytes(struct gw_ctx *ctx, int peer, uint32_t slot,
		       const void *buf, size_t len, struct gw_ctx_req *r)
{
	return gw_ctx_isend_bytes2(ctx, peer, slot, NULL, 0, buf, len, r);
}

int gw_ctx_isend_fwd(struct gw_ctx *ctx, int peer, uint32_t slot,
		     const struct gw_ctx_req *from, struct gw_ctx_req *r)
{
	struct conn_slot *cs;
	struct gw_payload p;
	int rc;

	if (!from || from->dir != 1 || from->kind != GW_FRAME_TENSOR ||
	    !from->payload || gw_payload_parse(from->payload, from->payload_len, &p))
		return -EINVAL;
	rc = req_begin(ctx, peer, slot, from->payload, p.n, r, &cs);
	if (rc)
		return rc;
	if (p.id != GW_CODEC_NONE && p.id != cs->c->hs.codec.ops->id)
		return -EPROTO;
	if (cs->sbusy)
		return -EBUSY;
	rc = buf_reserve(ctx, &cs->sbuf, &cs->scap, &cs->smr,
			 gw_frame_bound(from->payload_len, cs->c->hs.mac));
	if (rc)
		return rc;
	memcpy(cs->sbuf + GW_FRAME_HDR, from->payload, from->payload_len);
	rc = post_frame(ctx, cs, GW_FRAME_TENSOR,
			p.id != GW_CODEC_NONE ? GW_FRAME_F_LOSSY : 0,
			from->payload_len, r);
	r->n = p.n;
	return rc;
}

ssize_t gw_ctx_seal(struct gw_ctx *ctx, int peer, uint8_t kind, uint8_t flags,
		    uint32_t slot, uint32_t seq, const void *body, size_t len,
		    uint8_t *out, size_t cap)
{
	struct gw_frame_hdr h = { kind, flags, slot, seq, len };
	struct conn *c;

	if (peer < 0 || peer >= ctx->size || peer == ctx->rank ||
	    cap < GW_FRAME_HDR || cap - GW_FRAME_HDR < len)
		return -EINVAL;
	c = &ctx->conns[peer];
	memmove(out + GW_FRAME_HDR, body, len);
	return gw_frame_seal(c->tx, c->hs.mac, &h, out, cap);
}

/* ---- receiving ------------------------------------------------------------- */

/*
 * Post a receive of a frame of at most need bytes into cs->rbuf; or, when
 * direct, of exactly an exact payload of n values: its frame and payload
 * headers into cs->rbuf, the values straight into dst.
 */
static int post_recv(struct gw_ctx *ctx, struct conn_slot *cs, uint8_t kind,
		     void *dst, uint64_t n, size_t need, int add, bool direct,
		     struct gw_ctx_req *r)
{
	struct iovec iov[2];
	int rc;

	if (cs->rbusy)
		return -EBUSY;
	r->ctx = ctx;
	r->cs = cs;
	r->dst = dst;
	r->n = n;
	r->kind = kind;
	r->dir = 1;
	r->add = (uint8_t)add;
	r->direct = direct && !cs->stash;	/* a stashed frame is whole */
	if (cs->stash) {
		/* Already here (recv_any withdrew it after it arrived): it
		 * holds the sequence number consumed when it was posted. */
		r->seq = cs->recv_seq - 1;
		cs->rbusy = true;
		return 0;
	}
	r->seq = cs->recv_seq;
	rc = buf_reserve(ctx, &cs->rbuf, &cs->rcap, &cs->rmr, need);
	if (rc)
		return rc;
	if (r->direct) {
		iov[0] = (struct iovec){ cs->rbuf, need };
		iov[1] = (struct iovec){ dst, n * sizeof(float) };
		rc = gw_tp_irecvv(ctx->tp, cs->c->peer, cs->slot, cs->recv_seq, iov, 2,
				  &r->tp);
	} else {
		rc = gw_tp_irecv(ctx->tp, cs->c->peer, cs->slot, cs->recv_seq, cs->rbuf,
				 cs->rcap, &r->tp);
	}
	if (rc)
		return rc;
	cs->rbusy = true;
	cs->recv_seq++;
	return 0;
}

/* Receive bound: the negotiated codec or `none` (small or exact tensors). */
static size_t tensor_bound(const struct conn *c, const struct gw_codec *none,
			   uint64_t n)
{
	size_t a = gw_payload_bound(&c->hs.codec, n), b = gw_payload_bound(none, n);

	return gw_frame_bound(a > b ? a : b, c->hs.mac);
}

int gw_ctx_irecv(struct gw_ctx *ctx, int peer, uint32_t slot, float *y,
		 uint64_t n, unsigned flags, struct gw_ctx_req *r)
{
	struct conn_slot *cs;
	bool direct;
	int rc;

	rc = req_begin(ctx, peer, slot, y, n, r, &cs);
	if (rc)
		return rc;
	direct = (flags & (GW_CTX_ZEROCOPY | GW_CTX_ADD)) == GW_CTX_ZEROCOPY &&
		 cs->c->hs.mac == GW_MAC_NONE && n * sizeof(float) >= GATHER_MIN &&
		 gw_tp_can_recvv(ctx->tp, 2);
	return post_recv(ctx, cs, GW_FRAME_TENSOR, y, n,
			 direct ? GW_FRAME_HDR + GW_PAYLOAD_HDR
				: tensor_bound(cs->c, &ctx->none, n),
			 !!(flags & GW_CTX_ADD), direct, r);
}

int gw_ctx_irecv_bytes(struct gw_ctx *ctx, int peer, uint32_t slot, void *buf,
		       size_t len, struct gw_ctx_req *r)
{
	struct conn_slot *cs;
	int rc;

	rc = req_begin(ctx, peer, slot, buf, len, r, &cs);
	if (rc)
		return rc;
	return post_recv(ctx, cs, GW_FRAME_BYTES, buf, len,
			 gw_frame_bound(len, cs->c->hs.mac), 0, false, r);
}

int gw_ctx_irecv_frame(struct gw_ctx *ctx, int peer, uint32_t slot, size_t cap,
		       struct gw_ctx_req *r)
{
	struct conn_slot *cs;
	int rc;

	rc = req_begin(ctx, peer, slot, NULL, 0, r, &cs);
	if (rc)
		return rc;
	if (cap > GW_MAX_ELEMS)
		return -EINVAL;
	rc = post_recv(ctx, cs, GW_FRAME_BYTES, NULL, cap,
		       gw_frame_bound(cap, cs->c->hs.mac), 0, false, r);
	r->upto = 1;
	return rc;
}

/* Authenticate, check and deliver a received frame of flen bytes in cs
 * (a direct receive: its headers in cs->rbuf, the values already in dst). */
static int deliver(struct gw_ctx *ctx, struct gw_ctx_req *r,
		   struct conn_slot *cs, size_t flen)
{
	struct conn *c = cs->c;
	struct gw_frame_hdr h;
	struct gw_payload p;
	const uint8_t *body;
	uint8_t head[GW_PAYLOAD_HDR];
	const char *why;
	int rc;

	rc = -EPROTO;
	why = "not the exact payload of the length posted for";
	if (r->direct && flen != GW_FRAME_HDR + GW_PAYLOAD_HDR + r->n * sizeof(float))
		goto reject;
	rc = gw_frame_open(c->rx, c->hs.mac, cs->rbuf, flen, cs->slot, r->seq, &h,
			   &body);
	if (rc) {
		why = rc == -EKEYREJECTED ? "its MAC does not verify" :
		      rc == -EPROTO ? "wrong slot or sequence number" :
		      "malformed header";
		goto reject;
	}
	rc = -EPROTO;
	why = "a frame of another kind";
	if (h.kind != r->kind)
		goto reject;
	if (r->direct) {	/* exactly gw_payload_head_exact()'s header */
		why = "not an exact payload of the values posted for";
		if (h.flags || gw_payload_head_exact(r->n, head, sizeof(head)) !=
				       GW_PAYLOAD_HDR || memcmp(head, body, sizeof(head)))
			goto reject;
		goto accept;
	}
	if (h.kind == GW_FRAME_BYTES) {
		why = r->upto ? "a byte message longer than the receive posted for"
			      : "a byte message of another length";
		if (r->upto ? h.len > r->n : h.len != r->n)
			goto reject;
		r->n = h.len;
		if (!r->dst) {	/* gw_ctx_irecv_frame(): left in the frame */
			r->payload = body;
			r->payload_len = h.len;
		} else if (h.len) {
			memcpy(r->dst, body, h.len);
		}
		goto accept;
	}
	rc = gw_payload_parse(body, h.len, &p);
	why = "malformed payload header";
	if (rc)
		goto reject;
	rc = -EPROTO;
	why = "a codec the connection did not negotiate";
	if (p.id != GW_CODEC_NONE && (p.id != c->hs.codec.ops->id ||
				      !(h.flags & GW_FRAME_F_LOSSY)))
		goto reject;
	rc = r->add ? gw_payload_decode_add(body, h.len, r->dst, r->n)
		    : gw_payload_decode(body, h.len, r->dst, r->n);
	why = "a payload that does not decode to the expected tensor";
	if (rc)
		goto reject;
	r->payload = body;
	r->payload_len = h.len;
accept:
	c->st.frames_recv++;
	c->st.wire_recv += flen;
	c->st.raw_recv += r->kind == GW_FRAME_BYTES ? r->n : r->n * sizeof(float);
	return 0;
reject:
	if (rc == -EKEYREJECTED)
		c->st.mac_failures++;
	else
		c->st.rejected++;
	ctx_log(ctx, GW_LOG_ERROR, "frame from rank %d (slot %u, seq %u) rejected: "
		"%s (%s)", c->peer, cs->slot, r->seq, why, gw_strerror(rc));
	return rc;
}

static void failed(struct gw_ctx *ctx, int peer, int dir)
{
	if (ctx->failed_peer < 0) {
		ctx->failed_peer = peer;
		ctx->failed_dir = dir;
	}
}

int gw_ctx_wait(struct gw_ctx *ctx, struct gw_ctx_req *r)
{
	struct conn_slot *cs = r->cs;
	ssize_t got;

	if (!cs || r->ctx != ctx)
		return -EINVAL;
	if (r->dir == 1 && cs->stash) {
		got = (ssize_t)cs->stash;
		cs->stash = 0;
	} else {
		got = gw_tp_wait(ctx->tp, &r->tp, ctx->timeout_ms);
	}
	r->cs = NULL;
	if (r->dir == 0) {
		cs->sbusy = false;
		if (got < 0) {
			if (r->res)
				gw_rs_abort(r->res);
			cs->c->st.errors += got != -ETIMEDOUT;
			cs->c->st.timeouts += got == -ETIMEDOUT;
			ctx_log(ctx, GW_LOG_ERROR, "send to rank %d (slot %u) failed: %s",
				cs->c->peer, cs->slot, gw_strerror((int)got));
			failed(ctx, cs->c->peer, 0);
			return (int)got;
		}
		if (r->res)
			gw_rs_commit(r->res);
		cs->c->st.frames_sent++;
		cs->c->st.raw_sent += r->kind == GW_FRAME_BYTES ? r->n : r->n * sizeof(float);
		return 0;
	}
	cs->rbusy = false;
	if (got < 0) {
		cs->c->st.errors += got != -ETIMEDOUT;
		cs->c->st.timeouts += got == -ETIMEDOUT;
		ctx_log(ctx, GW_LOG_ERROR, "receive from rank %d (slot %u) failed: %s",
			cs->c->peer, cs->slot, gw_strerror((int)got));
		failed(ctx, cs->c->peer, 1);
		return (int)got;
	}
	return deliver(ctx, r, cs, (size_t)got);
}

int gw_ctx_failed_peer(const struct gw_ctx *ctx, bool *receiving)
{
	if (receiving)
		*receiving = ctx->failed_dir == 1;
	return ctx->failed_peer;
}

int gw_ctx_waitall(struct gw_ctx *ctx, struct gw_ctx_req *r, size_t n)
{
	int first = 0;

	for (size_t i = 0; i < n; i++) {
		int rc = r[i].cs ? gw_ctx_wait(ctx, &r[i]) : 0;

		if (rc && !first)
			first = rc;
	}
	return first;
}

void gw_ctx_abort(struct gw_ctx *ctx, struct gw_ctx_req *r)
{
	struct conn_slot *cs = r->cs;
	ssize_t got = -ECANCELED;

	if (!cs || r->ctx != ctx)
		return;
	if (r->dir == 1 && cs->stash)
		cs->stash = 0;
	else	/* cancels and drains, or finds it complete */
		got = gw_tp_cancel(ctx->tp, &r->tp);
	if (r->dir == 0) {
		cs->sbusy = false;
		if (r->res && got >= 0)	/* it left after all */
			gw_rs_commit(r->res);
		else if (r->res)
			gw_rs_abort(r->res);
	} else {
		cs->rbusy = false;
	}
	r->cs = NULL;
}

int gw_ctx_recv_any(struct gw_ctx *ctx, const int *peers, int npeers,
		    uint32_t slot, float *y, uint64_t n, unsigned flags, int *from)
{
	struct gw_ctx_req *r;
	int64_t deadline = gw_now_ms() + ctx->timeout_ms;
	int winner = -1, rc = 0, posted = 0;

	if (npeers < 1)
		return -EINVAL;
	r = calloc((size_t)npeers, sizeof(*r));
	if (!r)
		return -ENOMEM;
	for (int i = 0; i < npeers && !rc; i++, posted++)	/* into frame buffers */
		rc = gw_ctx_irecv(ctx, peers[i], slot, y, n, flags & ~GW_CTX_ZEROCOPY,
				  &r[i]);
	while (!rc && winner < 0) {
		for (int i = 0; i < posted && winner < 0; i++)
			if (r[i].cs->stash || gw_tp_test(ctx->tp, &r[i].tp) == 1)
				winner = i;
		if (winner >= 0)
			break;
		if (gw_now_ms() >= deadline) {
			rc = -ETIMEDOUT;
			break;
		}
		rc = gw_tp_progress(ctx->tp, 1);
		rc = rc < 0 ? rc : 0;
	}
	/* Withdraw the others: one that arrived anyway is kept for the next
	 * receive on its slot, the others give back their seq. */
	for (int i = 0; i < posted; i++)
		if (i != winner && r[i].cs)
			gw_ctx_recv_withdraw(ctx, &r[i]);
	if (winner >= 0) {
		rc = gw_ctx_wait(ctx, &r[winner]);
		*from = peers[winner];
	}
	free(r);
	return rc;
}

int gw_ctx_recv_withdraw(struct gw_ctx *ctx, struct gw_ctx_req *r)
{
	struct conn_slot *cs = r->cs;
	ssize_t got;

	if (!cs || r->ctx != ctx || r->dir != 1 || r->direct)
		return -EINVAL;
	got = cs->stash ? (ssize_t)cs->stash : gw_tp_cancel(ctx->tp, &r->tp);
	r->cs = NULL;
	cs->rbusy = false;
	if (got >= 0) {
		cs->stash = (size_t)got;
		return 1;
	}
	cs->stash = 0;
	cs->recv_seq--;
	return 0;
}

int gw_ctx_slot_trim(struct gw_ctx *ctx, int peer, uint32_t slot, size_t keep)
{
	struct conn_slot *cs;

	if (peer < 0 || peer >= ctx->size || peer == ctx->rank)
		return -EINVAL;
	cs = gw_map_get(&ctx->conns[peer].slots, slot);
	if (!cs)
		return 0;
	if (!cs->sbusy && cs->scap > keep)
		buf_park(ctx, &cs->sbuf, &cs->scap, &cs->smr);
	if (!cs->rbusy && !cs->stash && cs->rcap > keep)
		buf_park(ctx, &cs->rbuf, &cs->rcap, &cs->rmr);
	return 0;
}

/* ---- statistics and residuals ---------------------------------------------- */

int gw_ctx_stats(const struct gw_ctx *ctx, int peer, struct gw_conn_stats *s)
{
	const struct conn *c;

	if (peer < 0 || peer >= ctx->size || peer == ctx->rank)
		return -EINVAL;
	c = &ctx->conns[peer];
	*s = c->st;
	if (c->hs.codec.ops)
		gw_codec_format(&c->hs.codec, s->codec, sizeof(s->codec));
	s->mac = c->hs.mac;
	s->fell_back = c->hs.fell_back;
	return 0;
}

void gw_ctx_stats_print(const struct gw_ctx *ctx, FILE *f)
{
	for (int p = 0; p < ctx->size; p++) {
		struct gw_conn_stats s;

		if (gw_ctx_stats(ctx, p, &s))
			continue;
		fprintf(f, "gradwire[%d]: peer %d codec %s%s mac %s | sent %llu frames "
			"%llu B raw %llu B wire (x%.2f) | recv %llu frames %llu B raw "
			"%llu B wire | mac failures %llu rejected %llu timeouts %llu "
			"errors %llu residual resets %llu\n", ctx->rank, p, s.codec,
			s.fell_back ? " (fallback)" : "", gw_mac_alg_name(s.mac),
			(unsigned long long)s.frames_sent, (unsigned long long)s.raw_sent,
			(unsigned long long)s.wire_sent,
			s.wire_sent ? (double)s.raw_sent / (double)s.wire_sent : 0.0,
			(unsigned long long)s.frames_recv, (unsigned long long)s.raw_recv,
			(unsigned long long)s.wire_recv, (unsigned long long)s.mac_failures,
			(unsigned long long)s.rejected, (unsigned long long)s.timeouts,
			(unsigned long long)s.errors, (unsigned long long)s.residual_resets);
	}
}

void gw_ctx_stats_at_exit(struct gw_ctx *ctx, FILE *f)
{
	ctx->stats_out = f;
}

int gw_ctx_residuals_save(struct gw_ctx *ctx, const char *path)
{
	return gw_rs_save(ctx->rs, path);
}

int gw_ctx_residuals_load(struct gw_ctx *ctx, const char *path)
{
	return gw_rs_load(ctx->rs, path);
}

uint64_t gw_ctx_residual_bytes(const struct gw_ctx *ctx)
{
	return gw_rs_bytes(ctx->rs);
}

void gw_ctx_residuals_reset(struct gw_ctx *ctx)
{
	gw_rs_reset(ctx->rs);
}
