/* SPDX-License-Identifier: MIT */
/*
 * conn.c - connections to every peer: negotiation, then tensors as frames
 * (conn.h has the contract; docs/wire-format.md the bytes).
 *
 * Ownership: the context owns the transport, one struct conn per peer, the
 * residual store and one codec scratch area (encodes run in the caller's
 * thread, one at a time). A conn owns its two MAC contexts and a map of
 * struct conn_slot, which owns the frame buffers of one (peer, slot): one for
 * the send in flight, one for the receive in flight. Buffers only grow.
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

/* Make *buf hold need bytes; register it when the provider wants that. */
static int buf_reserve(struct gw_ctx *ctx, uint8_t **buf, size_t *cap,
		       struct gw_tp_mr **mr, size_t need)
{
	size_t ncap = *cap ? *cap : 4096;
	uint8_t *nb;
	int rc;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
	gw_tp_mr_dereg(ctx->tp, *mr);
	*mr = NULL;
	free(*buf);
	*buf = NULL;
	*cap = 0;
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

static uint64_t host_id_default(void)
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
	char buf[128], *save = NULL;

	if (!list)
		list = "gmac-aes256,hmac-sha256";
	if (strlen(list) >= sizeof(buf))
		goto bad;
	strcpy(buf, list);
	h->nalgs = 0;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		enum gw_mac_alg a;

		if (gw_mac_alg_parse(t, &a) || a == GW_MAC_NONE ||
		    h->nalgs == GW_HS_MAX_ALGS)
			goto bad;
		h->algs[h->nalgs++] = (uint8_t)a;
	}
	if (h->nalgs)
		return 0;
bad:
	snprintf(err, errlen, "MAC algorithms '%s': expected a list of "
		 "gmac-aes256, hmac-sha256", list);
	return -EINVAL;
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
	return parse_algs(cfg->mac_algs, h, err, errlen);
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
	uint64_t host = cfg->host_id ? cfg->host_id : host_id_default();
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
