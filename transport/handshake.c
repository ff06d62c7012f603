/* SPDX-License-Identifier: MIT */
/*
 * handshake.c - HELLO / FINISHED and the negotiation rule.
 *
 * HELLO, little-endian:
 *  0  u32 magic "GWH1"      4  u16 version      6  u16 flags (GW_HS_F_*)
 *  8  u32 rank             12  u32 world size  16  u64 host id
 * 24  u8 MAC mode  25  u8 nalgs (<= 4)  26  u8 ncodecs (1..8)  27  u8 0
 * 28  nonce[32]
 * 60  algs[nalgs] (enum gw_mac_alg, preferred first)
 *     ncodecs x { u8 wire id, u8 len (1..127), spec[len] }
 *     u8 nagree (<= 8), nagree x { u8 len (1..47), name[len] ([A-Z0-9_]),
 *                                  u64 value }   (nothing after)
 *
 * FINISHED:
 *  0  u32 magic "GWFN"  4  u16 version  6  i16 status (0 or -errno)
 *  8  verify[32]: HMAC-SHA256(finished key of the sender, transcript) with a
 *     MAC, else the transcript itself
 * 40  u16 message length (<= 255, 0 unless status != 0)  42  message
 *
 * The rule (both sides compute it from the two HELLOs):
 *  - agreed values: every name either side lists must be listed by both with
 *    the same value (what the collectives assume equal on every rank, e.g.
 *    GRADWIRE_SEGMENT_BYTES); else the connection fails naming the variable
 *    and both values;
 *  - codec: the first codec of the LOWER rank's list whose name the higher
 *    rank also lists, with the lower rank's parameters; none in common: `none`
 *    if both allow fallback (err then holds the warning both sides log,
 *    naming both lists), else the connection fails;
 *  - auto (GW_HS_F_AUTO, GRADWIRE_CODEC=auto[:list]): both sides must set it
 *    (one side only fails the connection, naming both lists); the allowed
 *    set is every codec of the lower rank's list that the higher rank also
 *    lists, in that order, with the lower rank's parameters; its first is
 *    the default; nothing in common fails the connection naming both lists
 *    (no fallback: the user asked for a choice among these);
 *  - MAC: on when both sides hold a key and neither has it off; failing that,
 *    a side that requires it fails the connection; the algorithm is the first
 *    of the lower rank's list the other also lists;
 *  - keys: HKDF-SHA256(psk, salt = nonce_low || nonce_high,
 *      info = "gradwire v1 data" || from u32 || to u32 || transcript) per
 *    direction, and "gradwire v1 finished" || rank u32 || transcript for each
 *    side's FINISHED key; transcript = SHA-256(HELLO_low || HELLO_high).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "../common/bytes.h"
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include "handshake.h"

#define HELLO_MAGIC 0x31485747u	   /* "GWH1" */
#define FINISHED_MAGIC 0x4e465747u /* "GWFN" */

ssize_t gw_hs_hello_build(const struct gw_hs_hello *h, uint8_t *buf, size_t cap)
{
	size_t o = 60;

	if (h->ncodecs < 1 || h->ncodecs > GW_HS_MAX_CODECS || h->nalgs > GW_HS_MAX_ALGS ||
	    h->mac_mode > GW_MAC_REQUIRED)
		return -EINVAL;
	if (cap < GW_HS_HELLO_MAX)
		return -ENOSPC;
	gw_put32(buf, HELLO_MAGIC);
	gw_put16(buf + 4, h->version);
	gw_put16(buf + 6, h->flags);
	gw_put32(buf + 8, h->rank);
	gw_put32(buf + 12, h->size);
	gw_put64(buf + 16, h->host_id);
	buf[24] = h->mac_mode;
	buf[25] = h->nalgs;
	buf[26] = h->ncodecs;
	buf[27] = 0;
	memcpy(buf + 28, h->nonce, GW_HS_NONCE);
	memcpy(buf + o, h->algs, h->nalgs);
	o += h->nalgs;
	for (int i = 0; i < h->ncodecs; i++) {
		char spec[GW_HS_SPEC_MAX + 1];
		ssize_t len = gw_codec_format(&h->codecs[i], spec, sizeof(spec));

		if (len <= 0)
			return -EINVAL;
		buf[o] = h->codecs[i].ops->id;
		buf[o + 1] = (uint8_t)len;
		memcpy(buf + o + 2, spec, (size_t)len);
		o += 2 + (size_t)len;
	}
	if (h->nagree > GW_HS_MAX_AGREE)
		return -EINVAL;
	buf[o++] = h->nagree;
	for (int i = 0; i < h->nagree; i++) {
		size_t nl = strnlen(h->agree[i].name, GW_HS_AGREE_NAME_MAX + 1);

		if (nl < 1 || nl > GW_HS_AGREE_NAME_MAX)
			return -EINVAL;
		buf[o] = (uint8_t)nl;
		memcpy(buf + o + 1, h->agree[i].name, nl);
		gw_put64(buf + o + 1 + nl, h->agree[i].value);
		o += 1 + nl + 8;
	}
	return (ssize_t)o;
}

static bool agree_name_ok(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	return len > 0;
}

int gw_hs_hello_parse(const uint8_t *buf, size_t len, struct gw_hs_hello *h)
{
	size_t o = 60, lo = 0;
	int ncodecs;

	memset(h, 0, sizeof(*h));
	if (!buf || len < 60 || gw_get32(buf) != HELLO_MAGIC)
		return -EBADMSG;
	h->version = gw_get16(buf + 4);
	h->rank = gw_get32(buf + 8);
	if (h->version != GW_HS_VERSION)
		return -EPROTONOSUPPORT;
	h->flags = gw_get16(buf + 6);
	h->size = gw_get32(buf + 12);
	h->host_id = gw_get64(buf + 16);
	h->mac_mode = buf[24];
	h->nalgs = buf[25];
	ncodecs = buf[26];
	if ((h->flags & ~GW_HS_F_KNOWN) || h->mac_mode > GW_MAC_REQUIRED ||
	    h->nalgs > GW_HS_MAX_ALGS || ncodecs < 1 || ncodecs > GW_HS_MAX_CODECS || buf[27] ||
	    h->rank >= h->size)
		return -EBADMSG;
	memcpy(h->nonce, buf + 28, GW_HS_NONCE);
	if (len - o < h->nalgs)
		return -EBADMSG;
	memcpy(h->algs, buf + o, h->nalgs);
	o += h->nalgs;
	for (int i = 0; i < ncodecs; i++) {
		char spec[GW_HS_SPEC_MAX + 1], err[128];
		const struct gw_codec_ops *ops;
		size_t sl;

		if (len - o < 2)
			return -EBADMSG;
		sl = buf[o + 1];
		if (sl < 1 || sl > GW_HS_SPEC_MAX || len - o - 2 < sl)
			return -EBADMSG;
		memcpy(spec, buf + o + 2, sl);
		spec[sl] = '\0';
		if (memchr(spec, '\0', sl))
			return -EBADMSG;
		lo += (size_t)snprintf(h->list + lo, sizeof(h->list) - lo, "%s%s", i ? " " : "",
				       spec);
		ops = gw_codec_find_id(buf[o]);
		if (ops) { /* a codec this build does not know is skipped */
			struct gw_codec *c = &h->codecs[h->ncodecs];

			if (gw_codec_parse(spec, c, err, sizeof(err)) || c->ops->id != buf[o])
				return -EBADMSG;
			for (int j = 0; j < h->ncodecs; j++)
				if (h->codecs[j].ops->id == c->ops->id)
					return -EBADMSG;
			h->ncodecs++;
		}
		o += 2 + sl;
	}
	if (len - o < 1 || buf[o] > GW_HS_MAX_AGREE)
		return -EBADMSG;
	h->nagree = buf[o++];
	for (int i = 0; i < h->nagree; i++) {
		struct gw_hs_agree *a = &h->agree[i];
		size_t nl;

		if (len - o < 1)
			return -EBADMSG;
		nl = buf[o];
		if (nl < 1 || nl > GW_HS_AGREE_NAME_MAX || len - o - 1 < nl + 8 ||
		    !agree_name_ok((const char *)buf + o + 1, nl))
			return -EBADMSG;
		memcpy(a->name, buf + o + 1, nl);
		a->name[nl] = '\0';
		a->value = gw_get64(buf + o + 1 + nl);
		for (int j = 0; j < i; j++)
			if (!strcmp(h->agree[j].name, a->name))
				return -EBADMSG;
		o += 1 + nl + 8;
	}
	return o == len ? 0 : -EBADMSG;
}

static const char *const mode_names[] = { "off", "optional", "required" };

static int digest(const uint8_t *a, size_t al, const uint8_t *b, size_t bl, uint8_t out[32])
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) && EVP_DigestUpdate(c, a, al) &&
		 EVP_DigestUpdate(c, b, bl) && EVP_DigestFinal_ex(c, out, NULL);

	EVP_MD_CTX_free(c);
	return ok ? 0 : -EIO;
}

/* HKDF with info = label || u32 a [|| u32 b] || transcript. */
static int derive(const uint8_t *psk, const uint8_t *salt, const char *label, uint32_t a, int64_t b,
		  const uint8_t *transcript, uint8_t *out)
{
	uint8_t info[64];
	size_t l = strlen(label), o;

	memcpy(info, label, l);
	gw_put32(info + l, a);
	o = l + 4;
	if (b >= 0) {
		gw_put32(info + o, (uint32_t)b);
		o += 4;
	}
	memcpy(info + o, transcript, 32);
	return gw_hkdf(psk, GW_MAC_KEY_LEN, salt, 2 * GW_HS_NONCE, info, o + 32, out,
		       GW_MAC_KEY_LEN);
}

static const struct gw_hs_agree *find_agree(const struct gw_hs_hello *h, const char *name)
{
	for (int i = 0; i < h->nagree; i++)
		if (!strcmp(h->agree[i].name, name))
			return &h->agree[i];
	return NULL;
}

/* Every value either side must share: the first difference, in err. */
static int check_agree(const struct gw_hs_hello *a, const struct gw_hs_hello *b, char *err,
		       size_t errlen)
{
	for (int i = 0; i < a->nagree; i++) {
		const struct gw_hs_agree *x = &a->agree[i], *y = find_agree(b, x->name);

		if (!y) {
			snprintf(err, errlen,
				 "%s: rank %u sets %llu, rank %u does "
				 "not know it (a different gradwire build)",
				 x->name, a->rank, (unsigned long long)x->value, b->rank);
			return -EINVAL;
		}
		if (x->value != y->value) {
			const struct gw_hs_agree *lo = a->rank < b->rank ? x : y;

			snprintf(err, errlen,
				 "%s differs: rank %u has %llu, rank %u "
				 "has %llu (every rank must set the same)",
				 x->name, a->rank < b->rank ? a->rank : b->rank,
				 (unsigned long long)lo->value,
				 a->rank < b->rank ? b->rank : a->rank,
				 (unsigned long long)(lo == x ? y : x)->value);
			return -EINVAL;
		}
	}
	return 0;
}

static int has_alg(const struct gw_hs_hello *h, uint8_t alg)
{
	return memchr(h->algs, alg, h->nalgs) != NULL;
}

int gw_hs_decide(const struct gw_hs_hello *me, const uint8_t *me_raw, size_t me_len,
		 const struct gw_hs_hello *peer, const uint8_t *peer_raw, size_t peer_len,
		 const uint8_t *psk, struct gw_hs_result *r, char *err, size_t errlen)
{
	const struct gw_hs_hello *lo = me->rank < peer->rank ? me : peer;
	const struct gw_hs_hello *hi = lo == me ? peer : me;
	uint8_t salt[2 * GW_HS_NONCE];
	bool my_mac, peer_mac;
	int rc;

	memset(r, 0, sizeof(*r));
	r->peer_rank = peer->rank;
	if (peer->version != me->version) {
		snprintf(err, errlen, "protocol version skew: rank %u speaks %u, rank %u speaks %u",
			 me->rank, me->version, peer->rank, peer->version);
		return -EPROTONOSUPPORT;
	}
	if (peer->size != me->size || peer->rank == me->rank) {
		snprintf(err, errlen,
			 "rank %u (world size %u) met rank %u (world size %u): not the same job",
			 me->rank, me->size, peer->rank, peer->size);
		return -EINVAL;
	}
	if (!(me->flags & GW_HS_F_LOCAL) != !(peer->flags & GW_HS_F_LOCAL) ||
	    !(me->flags & GW_HS_F_LOCAL) != (me->host_id != peer->host_id)) {
		snprintf(err, errlen, "ranks %u and %u disagree on whether they share a host",
			 me->rank, peer->rank);
		return -EINVAL;
	}

	/* Values every rank must share (lower rank's list first, so both
	 * sides name the same difference). */
	rc = check_agree(lo, hi, err, errlen);
	if (!rc)
		rc = check_agree(hi, lo, err, errlen);
	if (rc)
		return rc;

	/* Codec: the lower rank's preference order (auto: every shared one). */
	if ((lo->flags ^ hi->flags) & GW_HS_F_AUTO) {
		const struct gw_hs_hello *a = lo->flags & GW_HS_F_AUTO ? lo : hi;
		const struct gw_hs_hello *f = a == lo ? hi : lo;

		snprintf(err, errlen,
			 "rank %u sets GRADWIRE_CODEC=auto [%s], rank %u a fixed list [%s]: "
			 "either every rank uses auto or none does",
			 a->rank, a->list, f->rank, f->list);
		return -ENOPROTOOPT;
	}
	r->autoc = (lo->flags & GW_HS_F_AUTO) != 0;
	for (int i = 0; i < lo->ncodecs && (r->autoc || !r->nset); i++)
		for (int j = 0; j < hi->ncodecs; j++)
			if (lo->codecs[i].ops->id == hi->codecs[j].ops->id) {
				r->set[r->nset++] = lo->codecs[i];
				break;
			}
	if (r->nset)
		r->codec = r->set[0];
	if (!r->codec.ops && r->autoc) {
		snprintf(err, errlen,
			 "no common codec for GRADWIRE_CODEC=auto: rank %u allows [%s], "
			 "rank %u allows [%s]",
			 lo->rank, lo->list, hi->rank, hi->list);
		return -ENOPROTOOPT;
	}
	if (!r->codec.ops) {
		if (!(lo->flags & hi->flags & GW_HS_F_FALLBACK)) {
			snprintf(err, errlen,
				 "no common codec: rank %u offers [%s]"
				 " (fallback %s), rank %u offers [%s] (fallback %s)",
				 lo->rank, lo->list, lo->flags & GW_HS_F_FALLBACK ? "on" : "off",
				 hi->rank, hi->list, hi->flags & GW_HS_F_FALLBACK ? "on" : "off");
			return -ENOPROTOOPT;
		}
		gw_codec_init(&r->codec, gw_codec_find("none"));
		r->set[0] = r->codec;
		r->nset = 1;
		r->fell_back = true;
		/* Not an error, but a link that silently loses its codec costs
		 * the user the bandwidth they asked for: both sides warn with
		 * the same text (ctx_connect.c). */
		snprintf(err, errlen,
			 "rank %u <-> rank %u: no common codec: rank %u offers [%s], rank %u "
			 "offers [%s]; falling back to none (GRADWIRE_CODEC_FALLBACK=0 makes "
			 "this an error)",
			 lo->rank, hi->rank, lo->rank, lo->list, hi->rank, hi->list);
	}

	/* MAC. */
	my_mac = me->mac_mode != GW_MAC_OFF && (me->flags & GW_HS_F_HAS_KEY) && psk;
	peer_mac = peer->mac_mode != GW_MAC_OFF && (peer->flags & GW_HS_F_HAS_KEY);
	if (my_mac && peer_mac) {
		for (int i = 0; i < lo->nalgs && !r->mac; i++)
			if (gw_mac_tag_len(lo->algs[i]) && has_alg(hi, lo->algs[i]))
				r->mac = lo->algs[i];
		if (!r->mac) {
			snprintf(err, errlen, "no common MAC algorithm between rank %u and rank %u",
				 me->rank, peer->rank);
			return -EACCES;
		}
	} else if (me->mac_mode == GW_MAC_REQUIRED || peer->mac_mode == GW_MAC_REQUIRED) {
		snprintf(err, errlen, "MAC: rank %u has it %s%s, rank %u has it %s%s", me->rank,
			 mode_names[me->mac_mode], me->flags & GW_HS_F_HAS_KEY ? "" : " (no key)",
			 peer->rank, mode_names[peer->mac_mode],
			 peer->flags & GW_HS_F_HAS_KEY ? "" : " (no key)");
		return -EACCES;
	}

	/* Transcript and keys. */
	rc = lo == me ? digest(me_raw, me_len, peer_raw, peer_len, r->transcript)
		      : digest(peer_raw, peer_len, me_raw, me_len, r->transcript);
	if (rc || !r->mac)
		return rc;
	memcpy(salt, lo->nonce, GW_HS_NONCE);
	memcpy(salt + GW_HS_NONCE, hi->nonce, GW_HS_NONCE);
	if (derive(psk, salt, "gradwire v1 data", me->rank, peer->rank, r->transcript,
		   r->key_send) ||
	    derive(psk, salt, "gradwire v1 data", peer->rank, me->rank, r->transcript,
		   r->key_recv) ||
	    derive(psk, salt, "gradwire v1 finished", me->rank, -1, r->transcript, r->fin_mine) ||
	    derive(psk, salt, "gradwire v1 finished", peer->rank, -1, r->transcript, r->fin_peer))
		return -EIO;
	OPENSSL_cleanse(salt, sizeof(salt));
	return 0;
}

/* What a FINISHED proves: HMAC(key, transcript), or the transcript. */
static int verify_data(const struct gw_hs_result *r, const uint8_t *key, uint8_t out[32])
{
	struct iovec iov = { (void *)r->transcript, 32 };
	struct gw_mac *m;
	int rc;

	if (!r->mac) {
		memcpy(out, r->transcript, 32);
		return 0;
	}
	rc = gw_mac_create(GW_MAC_HMAC_SHA256, key, &m);
	if (rc)
		return rc;
	rc = gw_mac_sign(m, 0, 0, &iov, 1, out);
	gw_mac_destroy(m);
	return rc;
}

ssize_t gw_hs_finished_build(const struct gw_hs_result *r, int status, const char *msg,
			     uint8_t *buf, size_t cap)
{
	size_t ml = r ? 0 : strnlen(msg ? msg : "", 255);
	int rc;

	if (cap < 42 + ml || (!r && (status >= 0 || status < -32767)))
		return -EINVAL;
	memset(buf, 0, 42);
	gw_put32(buf, FINISHED_MAGIC);
	gw_put16(buf + 4, GW_HS_VERSION);
	gw_put16(buf + 6, (uint16_t)(int16_t)(r ? 0 : status));
	if (r) {
		rc = verify_data(r, r->fin_mine, buf + 8);
		if (rc)
			return rc;
	}
	gw_put16(buf + 40, (uint16_t)ml);
	if (ml)
		memcpy(buf + 42, msg, ml);
	return (ssize_t)(42 + ml);
}

int gw_hs_finished_check(const struct gw_hs_result *r, const uint8_t *buf, size_t len, char *err,
			 size_t errlen)
{
	uint8_t want[32];
	int16_t status;
	size_t ml;
	int rc;

	if (!buf || len < 42 || gw_get32(buf) != FINISHED_MAGIC ||
	    gw_get16(buf + 4) != GW_HS_VERSION)
		return -EBADMSG;
	status = (int16_t)gw_get16(buf + 6);
	ml = gw_get16(buf + 40);
	if (status > 0 || len != 42 + ml || ml > 255 || (!status && ml))
		return -EBADMSG;
	if (status) {
		for (size_t i = 0; i < ml; i++) /* printable text only */
			if (buf[42 + i] < 0x20 || buf[42 + i] > 0x7e)
				return -EBADMSG;
		snprintf(err, errlen, "rank %u refused: %.*s", r->peer_rank, (int)ml,
			 (const char *)buf + 42);
		return -ECONNREFUSED;
	}
	rc = verify_data(r, r->fin_peer, want);
	if (rc)
		return rc;
	if (CRYPTO_memcmp(want, buf + 8, 32)) {
		snprintf(err, errlen, "rank %u's FINISHED does not verify: %s", r->peer_rank,
			 r->mac ? "the two ranks hold different keys "
				  "(GRADWIRE_MAC_KEY_FILE) or saw different HELLOs"
				: "the two ranks saw different HELLOs");
		return -EKEYREJECTED;
	}
	return 0;
}
