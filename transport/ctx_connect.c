/* SPDX-License-Identifier: MIT */
/*
 * ctx_connect.c - connecting a context to every peer: host ids through the
 * store, the handshake's two rounds and this side's decision for each peer.
 * handshake.c keeps the pure rules (messages, decision, keys); this file
 * moves them (conn.h has the contract; docs/wire-format.md the bytes).
 *
 * Host ids. A rank's host id is FNV-1a (64 bits) of its host name
 * (gethostname()) and the kernel's boot id (/proc/sys/kernel/random/boot_id,
 * where readable), or of GRADWIRE_HOST_ID where that is set (cfg->host_id),
 * never 0. The boot id keeps two machines that share a host name apart
 * (shm between them would fail); containers and network namespaces on one
 * kernel share it, and can reach each other over shm. Every rank reads
 * every rank's id from the store (ctx_hosts(): before the transport opens
 * when a local provider applies, else after, ctx.c), so all hold the same
 * list (gw_ctx_host_id()): it decides which provider
 * (link) and which codec list a peer gets, and the collectives' topology
 * (coll/hier.c).
 *
 * Handshake (all peers at once, two rounds), after the transport opened:
 *   CTRL slot 0 seq 0: HELLO both ways;  decide;  CTRL slot 0 seq 1: FINISHED.
 * A side whose decision fails still sends FINISHED, as a refusal with its
 * reason, so both ends report it instead of one timing out.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include "ctx_impl.h"

#define HS_SLOT 0
#define HS_SEQ_HELLO 0
#define HS_SEQ_FINISHED 1
#define HS_SEQ_EPOCH 2
/* The MAC's slot word for an epoch's proof: never a frame's (< 2^28). */
#define EPOCH_PROOF_SLOT UINT32_MAX

uint64_t gw_ctx_host_id_of(const char *name)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a */

	for (const char *p = name; *p; p++)
		h = (h ^ (uint8_t)*p) * UINT64_C(0x100000001b3);
	return h ? h : 1;
}

int gw_ctx_mac_algs_check(const char *list)
{
	uint8_t algs[GW_HS_MAX_ALGS];

	return gw_mac_alg_list_parse(list, algs, GW_HS_MAX_ALGS) < 0 ? -EINVAL : 0;
}

uint64_t gw_ctx_host_id_default(void)
{
	char name[256 + 1 + 64] = "";
	size_t len;
	FILE *f;

	gethostname(name, 256);
	name[256] = 0;
	len = strlen(name);
	/* "<host name>/<boot id>"; the host name alone where /proc is not. */
	f = fopen("/proc/sys/kernel/random/boot_id", "re");
	if (f) {
		name[len] = '/';
		if (fgets(name + len + 1, (int)(sizeof(name) - len - 1), f))
			name[len + 1 + strcspn(name + len + 1, "\n")] = 0;
		else
			name[len] = 0;
		fclose(f);
	}
	return gw_ctx_host_id_of(name);
}

static int parse_algs(const char *list, struct gw_hs_hello *h, char *err, size_t errlen)
{
	int n;

	if (!list)
		list = "gmac-aes256,hmac-sha256";
	n = gw_mac_alg_list_parse(list, h->algs, GW_HS_MAX_ALGS);
	if (n < 0) {
		snprintf(err, errlen,
			 "MAC algorithms '%s': expected a list of gmac-aes256, hmac-sha256", list);
		return n;
	}
	h->nalgs = (uint8_t)n;
	return 0;
}

/* Our HELLO template (codec list and LOCAL flag are set per peer). */
static int hello_base(const struct gw_ctx_cfg *cfg, int rank, int size, bool has_key, uint64_t host,
		      struct gw_hs_hello *h, char *err, size_t errlen)
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
		if (!((name[k] >= 'A' && name[k] <= 'Z') || (name[k] >= '0' && name[k] <= '9') ||
		      name[k] == '_'))
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

static int codec_list(const char *list, struct gw_hs_hello *h, const char *what, char *err,
		      size_t errlen)
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
	ssize_t hello_in_len, fin_in_len; /* bytes, or -errno */
	struct gw_hs_hello me, peer;
	int rc;	 /* our decision for this peer */
	bool on; /* in the round under way */
	char err[400];
};

static const char *const round_name[] = { "HELLO", "FINISHED", "EPOCH" };

/*
 * Why the handshake with peer failed (rc), naming where it was looked for;
 * a peer that never answered or cannot be reached most often sits behind
 * the wrong interface or a firewall, so the message says what to check.
 */
static void hs_fail(struct gw_ctx *ctx, int peer, const char *dir, const char *msg, int rc,
		    char *err, size_t errlen)
{
	char at[TP_ADDR_TEXT];
	bool unreachable = rc == -ETIMEDOUT || rc == -ECONNREFUSED || rc == -EHOSTUNREACH ||
			   rc == -ENETUNREACH || rc == -ECONNRESET;

	if (gw_tp_peer_addr_str(ctx->tp, peer, at, sizeof(at)))
		snprintf(at, sizeof(at), "an unknown address");
	snprintf(err, errlen, "handshake with rank %d at %s: %s %s failed: %s", peer, at, dir, msg,
		 gw_strerror(rc));
	if (!unreachable)
		return;
	if (rc == -ETIMEDOUT)
		snprintf(err + strlen(err), errlen - strlen(err), " (no answer within %d ms)",
			 ctx->timeout_ms);
	snprintf(err + strlen(err), errlen - strlen(err),
		 "; check that this host reaches that address: GRADWIRE_IFACE chooses the "
		 "interface (this rank is at %s), and a firewall may block the port",
		 gw_tp_addr_str(ctx->tp));
}

/*
 * One round: post a control receive and send to every peer, then wait for
 * all of them under one deadline (everything posted is waited for, even
 * after an error, so no operation outlives its buffer).
 */
static int hs_round(struct gw_ctx *ctx, struct hs_peer *hp, uint32_t seq, char *err, size_t errlen)
{
	struct gw_tp_req *reqs = calloc(2 * (size_t)ctx->size, sizeof(*reqs));
	int *peer_of = calloc(2 * (size_t)ctx->size, sizeof(*peer_of));
	bool hello = seq == HS_SEQ_HELLO;
	size_t nreq = 0;
	int rc = reqs && peer_of ? 0 : -ENOMEM;

	for (int p = 0; p < ctx->size && !rc; p++) {
		struct hs_peer *x = &hp[p];

		if (!x->on)
			continue;
		peer_of[nreq] = p;
		rc = gw_tp_irecv_kind(ctx->tp, GW_TP_KIND_CTRL, p, HS_SLOT, seq,
				      hello ? x->hello_in : x->fin_in,
				      hello ? sizeof(x->hello_in) : sizeof(x->fin_in), &reqs[nreq]);
		if (rc)
			break;
		peer_of[++nreq] = p;
		rc = gw_tp_isend_kind(ctx->tp, GW_TP_KIND_CTRL, p, HS_SLOT, seq,
				      hello ? x->hello_out : x->fin_out,
				      hello ? x->hello_out_len : x->fin_out_len, &reqs[nreq]);
		if (rc)
			break;
		nreq++;
	}
	if (rc && reqs)
		hs_fail(ctx, peer_of[nreq], "posting", round_name[seq], rc, err, errlen);
	if (nreq) {
		int wrc = gw_tp_waitall(ctx->tp, reqs, nreq, ctx->timeout_ms);

		for (size_t i = 0; i < nreq; i++) {
			if (i % 2 == 0) /* receives: what arrived */
				*(hello ? &hp[peer_of[i]].hello_in_len
					: &hp[peer_of[i]].fin_in_len) = reqs[i].result;
			if (!rc && wrc && reqs[i].result < 0) {
				rc = (int)reqs[i].result;
				hs_fail(ctx, peer_of[i], i % 2 ? "sending" : "receiving",
					round_name[seq], rc, err, errlen);
			}
		}
	}
	free(reqs);
	free(peer_of);
	return rc;
}

/* What proves a kept link's epoch: the epoch, the sender's rank and the
 * receiver's, under the epoch's key (as tag), or alone without a MAC. */
static size_t proof_data(const struct gw_ctx *ctx, int from, int to, uint8_t *d)
{
	uint32_t v[3] = { ctx->epoch, (uint32_t)from, (uint32_t)to };

	for (int i = 0; i < 3; i++)
		for (int b = 0; b < 4; b++)
			d[4 * i + b] = (uint8_t)(v[i] >> (8 * b));
	return 12;
}

/*
 * The links this context kept from its last epoch (gw_ctx_reform()) prove
 * that both ends kept them, under the same keys, in one round: each sends
 * the other its proof and checks the other's. A link that fails is
 * forgotten on this end (and, as its proof failed there too, on the
 * other), so the next re-form negotiates it. The round also has every kept
 * peer send to this rank on the new transport before the shm region's name
 * goes (ctx.c), as a newcomer's handshake does.
 */
static int epoch_round(struct gw_ctx *ctx, struct hs_peer *hp, char *err, size_t errlen)
{
	int rc;

	for (int p = 0; p < ctx->size; p++) {
		struct hs_peer *x = &hp[p];
		struct conn *c = &ctx->conns[p];
		uint8_t d[12];
		struct iovec iov = { d, proof_data(ctx, ctx->rank, p, d) };

		x->on = p != ctx->rank && c->ready;
		if (!x->on)
			continue;
		memcpy(x->fin_out, d, iov.iov_len);
		x->fin_out_len = iov.iov_len;
		if (c->tx && !gw_mac_sign(c->tx, ctx->epoch, EPOCH_PROOF_SLOT, &iov, 1,
					  x->fin_out + iov.iov_len))
			x->fin_out_len += gw_mac_tag_len(c->hs.mac);
	}
	rc = hs_round(ctx, hp, HS_SEQ_EPOCH, err, errlen);
	for (int p = 0; p < ctx->size; p++) {
		struct hs_peer *x = &hp[p];
		struct conn *c = &ctx->conns[p];
		size_t tag = gw_mac_tag_len(c->hs.mac);
		uint8_t d[12];
		struct iovec iov = { d, proof_data(ctx, p, ctx->rank, d) };

		if (!x->on)
			continue;
		x->on = false;
		if (x->fin_in_len == (ssize_t)(iov.iov_len + tag) && !memcmp(x->fin_in, d, 12) &&
		    (!c->rx || !gw_mac_verify(c->rx, ctx->epoch, EPOCH_PROOF_SLOT, &iov, 1,
					      x->fin_in + iov.iov_len)))
			continue;
		ctx_conn_fini(c);
		if (!rc) {
			rc = -EKEYREJECTED;
			snprintf(err, errlen,
				 "rank %d did not prove the link of epoch %u that this rank kept "
				 "(%s): a link negotiated on one end only; the next re-form "
				 "negotiates it",
				 p, ctx->epoch,
				 x->fin_in_len < 0 ? gw_strerror((int)x->fin_in_len)
						   : "another proof");
		}
	}
	return rc;
}

/* Build our HELLO for peer p (its list depends on whether p shares our host). */
static int hello_for(const struct gw_ctx_cfg *cfg, const struct gw_hs_hello *base, bool local,
		     struct hs_peer *x, char *err, size_t errlen)
{
	const char *list = local && cfg->codec_local ? cfg->codec_local
			   : cfg->codec		     ? cfg->codec
						     : "none";
	ssize_t len;
	int rc;

	x->me = *base;
	if (local)
		x->me.flags |= GW_HS_F_LOCAL;
	if (gw_codec_auto_list(list)) {
		x->me.flags |= GW_HS_F_AUTO;
		list = gw_codec_auto_list(list);
	}
	rc = codec_list(list, &x->me,
			local && cfg->codec_local ? "GRADWIRE_CODEC_LOCAL" : "GRADWIRE_CODEC", err,
			errlen);
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

/* Our decision for peer p after round one; on failure x->rc and x->err (on
 * a fallback to none, x->err holds the warning). */
static void hs_decide(struct gw_ctx *ctx, int p, struct hs_peer *x, const uint8_t *psk)
{
	struct conn *c = &ctx->conns[p];
	ssize_t len;

	x->rc = gw_hs_hello_parse(x->hello_in, (size_t)x->hello_in_len, &x->peer);
	if (x->rc == -EPROTONOSUPPORT || (!x->rc && x->peer.version != x->me.version)) {
		x->rc = -EPROTONOSUPPORT;
		snprintf(x->err, sizeof(x->err),
			 "protocol version skew: rank %d speaks %u, rank %d speaks %u", ctx->rank,
			 x->me.version, p, x->peer.version);
	} else if (x->rc) {
		snprintf(x->err, sizeof(x->err), "rank %d sent a malformed HELLO", p);
	} else if (x->peer.rank != (uint32_t)p) {
		x->rc = -EINVAL;
		snprintf(x->err, sizeof(x->err), "the HELLO from rank %d says it is rank %u", p,
			 x->peer.rank);
	} else {
		ctx_conn_fini(c); /* an earlier try's, in an epoch that did not form */
		x->rc = gw_hs_decide(&x->me, x->hello_out, x->hello_out_len, &x->peer, x->hello_in,
				     (size_t)x->hello_in_len, psk, &c->hs, x->err, sizeof(x->err));
	}
	c->born = ctx->epoch;
	if (!x->rc && c->hs.mac &&
	    (gw_mac_create(c->hs.mac, c->hs.key_send, &c->tx) ||
	     gw_mac_create(c->hs.mac, c->hs.key_recv, &c->rx))) {
		x->rc = -EIO;
		snprintf(x->err, sizeof(x->err), "OpenSSL refused the MAC keys");
	}
	len = x->rc ? gw_hs_finished_build(NULL, x->rc, x->err, x->fin_out, sizeof(x->fin_out))
		    : gw_hs_finished_build(&c->hs, 0, NULL, x->fin_out, sizeof(x->fin_out));
	x->fin_out_len = (size_t)(len < 0 ? 0 : len);
}

int ctx_hosts(struct gw_ctx *ctx, const struct gw_ctx_cfg *cfg, struct gw_store *st,
	      const char *job, char *err, size_t errlen)
{
	uint64_t host = cfg->host_id ? cfg->host_id : gw_ctx_host_id_default();
	int64_t t0 = gw_now_ms();
	char key[160];
	int rc;

	snprintf(key, sizeof(key), "%s/host/%d", job, ctx->rank);
	ctx->host[ctx->rank] = host;
	rc = gw_store_set(st, key, &host, sizeof(host));
	if (rc)
		snprintf(err, errlen, "publishing this rank's host id (%s): %s", key,
			 gw_strerror(rc));
	for (int p = 0; p < ctx->size && !rc; p++) {
		uint64_t ph = 0;
		ssize_t got;

		if (p == ctx->rank)
			continue;
		snprintf(key, sizeof(key), "%s/host/%d", job, p);
		got = gw_store_get(st, key, &ph, sizeof(ph), ctx->timeout_ms);
		if (got == -ETIMEDOUT) { /* the first key every rank publishes */
			rc = (int)got;
			snprintf(
				err, errlen,
				"rank %d never joined: its host id (%s) was not in the store after "
				"%lld ms (GRADWIRE_TIMEOUT_MS); is it running, with the same store "
				"and GRADWIRE_JOB?",
				p, key, (long long)(gw_now_ms() - t0));
			break;
		}
		if (got != sizeof(ph)) {
			rc = got < 0 ? (int)got : -EBADMSG;
			snprintf(err, errlen, "rank %d's host id: %s", p, gw_strerror(rc));
			break;
		}
		ctx->host[p] = ph;
	}
	return rc;
}

int ctx_handshake(struct gw_ctx *ctx, const struct gw_ctx_cfg *cfg, char *err, size_t errlen)
{
	uint8_t psk[GW_MAC_KEY_LEN];
	bool has_key = false;
	uint64_t host = ctx->host[ctx->rank];
	struct gw_hs_hello base;
	struct hs_peer *hp = NULL;
	int rc;

	if (cfg->mac_key_file && cfg->mac_mode != GW_MAC_OFF) {
		rc = gw_key_file_load(cfg->mac_key_file, psk);
		if (rc) {
			snprintf(err, errlen, "MAC key file %s: %s%s", cfg->mac_key_file,
				 gw_strerror(rc),
				 rc == -EACCES
					 ? " (it must be a regular file only its owner can read)"
					 : "");
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
	rc = 0;

	/* Kept links first: a failure there ends the call (both ends forget
	 * the link) before newcomers are waited for. */
	rc = epoch_round(ctx, hp, err, errlen);
	/* Host ids (ctx_hosts()) decide which codec list each peer gets. */
	for (int p = 0; p < ctx->size && !rc; p++) {
		hp[p].on = p != ctx->rank && !ctx->conns[p].ready;
		if (hp[p].on)
			rc = hello_for(cfg, &base, ctx->host[p] == host, &hp[p], err, errlen);
	}
	if (!rc)
		rc = hs_round(ctx, hp, HS_SEQ_HELLO, err, errlen);
	if (rc)
		goto out;
	for (int p = 0; p < ctx->size; p++)
		if (hp[p].on)
			hs_decide(ctx, p, &hp[p], has_key ? psk : NULL);
	rc = hs_round(ctx, hp, HS_SEQ_FINISHED, err, errlen);
	/* Each connection whose FINISHED came is ready, whatever happened with
	 * the others: both ends of a pair then agree on which links a later
	 * gw_ctx_reform() keeps. The first failure is this call's. */
	for (int p = 0; p < ctx->size; p++) {
		struct hs_peer *x = &hp[p];
		struct conn *c = &ctx->conns[p];
		char why[400];
		int prc;

		if (!x->on || x->fin_in_len <= 0)
			continue;
		if (x->rc) { /* our own refusal; the peer reports the same */
			prc = x->rc;
			snprintf(why, sizeof(why), "%s", x->err);
		} else {
			prc = gw_hs_finished_check(&c->hs, x->fin_in, (size_t)x->fin_in_len, why,
						   sizeof(why));
			if (prc == -EBADMSG)
				snprintf(why, sizeof(why), "rank %d sent a malformed FINISHED", p);
		}
		c->ready = !prc;
		if (prc && !rc) {
			rc = prc;
			snprintf(err, errlen, "%s", why);
		}
		if (prc)
			continue;
		if (c->hs.fell_back) /* gw_hs_decide()'s warning, both lists */
			ctx_log(ctx, GW_LOG_WARN, "%s", x->err);
		ctx_log(ctx, GW_LOG_INFO, "rank %d: codec %s%s, MAC %s", p, c->hs.codec.ops->name,
			c->hs.fell_back ? " (fallback)" : "", gw_mac_alg_name(c->hs.mac));
	}
out:
	free(hp);
	OPENSSL_cleanse(psk, sizeof(psk));
	return rc;
}
