/* SPDX-License-Identifier: MIT */
/*
 * handshake.h - connection negotiation: HELLO, the decision, FINISHED.
 *
 * Each side sends HELLO (its settings and a fresh nonce), parses the peer's,
 * and both compute the same decision with gw_hs_decide(): the codec, whether
 * frames carry a MAC and which, and the per-direction session keys. Each side
 * then sends FINISHED, which proves it saw the same two HELLOs (and, with a
 * MAC, that it holds the same pre-shared key), or reports why it gave up.
 * Layouts and the rule are in docs/wire-format.md.
 */
#ifndef GW_HANDSHAKE_H
#define GW_HANDSHAKE_H

#include <stdbool.h>
#include <stdint.h>
#include "gradwire/codec.h"
#include "mac.h"

#define GW_HS_VERSION 5
#define GW_HS_NONCE 32
#define GW_HS_MAX_CODECS 8
#define GW_HS_MAX_ALGS 4
#define GW_HS_SPEC_MAX 127
#define GW_HS_MAX_AGREE 8 /* values every rank must share */
#define GW_HS_AGREE_NAME_MAX 47
#define GW_HS_HELLO_MAX                                                                            \
	(60 + GW_HS_MAX_ALGS + GW_HS_MAX_CODECS * (2 + GW_HS_SPEC_MAX) + 1 +                       \
	 GW_HS_MAX_AGREE * (1 + GW_HS_AGREE_NAME_MAX + 8))
#define GW_HS_FINISHED_MAX (42 + 255)

enum gw_mac_mode {
	GW_MAC_OFF = 0,
	GW_MAC_OPTIONAL = 1,
	GW_MAC_REQUIRED = 2,
};

#define GW_HS_F_HAS_KEY 0x1u  /* the sender holds a pre-shared key */
#define GW_HS_F_FALLBACK 0x2u /* it accepts `none` when no codec is common */
#define GW_HS_F_LOCAL 0x4u    /* it believes the peer is on its host */
#define GW_HS_F_AUTO 0x8u     /* its list is a set to choose from (auto) */
#define GW_HS_F_KNOWN 0xfu

/**
 * struct gw_hs_agree - a value every rank of the job must set alike (the
 * layer above names it, e.g. "GRADWIRE_SEGMENT_BYTES"): both HELLOs carry
 * it, and a difference fails the connection naming it and both values.
 */
struct gw_hs_agree {
	char name[GW_HS_AGREE_NAME_MAX + 1];
	uint64_t value;
};

/** struct gw_hs_hello - one side's HELLO, as built or as parsed. */
struct gw_hs_hello {
	uint16_t version;
	uint16_t flags; /* GW_HS_F_* */
	uint32_t rank, size;
	uint64_t host_id;
	uint8_t mac_mode; /* enum gw_mac_mode */
	uint8_t nalgs;
	uint8_t algs[GW_HS_MAX_ALGS]; /* enum gw_mac_alg, preferred first */
	uint8_t ncodecs;	      /* codecs this build knows (unknown ones skipped) */
	struct gw_codec codecs[GW_HS_MAX_CODECS];
	char list[GW_HS_MAX_CODECS * (GW_HS_SPEC_MAX + 1) + 1]; /* as sent */
	uint8_t nonce[GW_HS_NONCE];
	uint8_t nagree;
	struct gw_hs_agree agree[GW_HS_MAX_AGREE];
};

/** struct gw_hs_result - what both sides agreed on. */
struct gw_hs_result {
	struct gw_codec codec; /* the codec (auto: the default, set[0]) */
	bool autoc;	       /* auto: any of set[] may carry a frame */
	uint8_t nset;	       /* auto: the shared codecs; else 1 (codec) */
	struct gw_codec set[GW_HS_MAX_CODECS];
	bool fell_back;	     /* no common codec: `none` by fallback */
	enum gw_mac_alg mac; /* GW_MAC_NONE: frames carry no tag */
	uint8_t key_send[GW_MAC_KEY_LEN], key_recv[GW_MAC_KEY_LEN];
	uint8_t fin_mine[GW_MAC_KEY_LEN], fin_peer[GW_MAC_KEY_LEN];
	uint8_t transcript[32]; /* SHA-256(HELLO of lower rank || of higher) */
	uint32_t peer_rank;
};

/**
 * gw_hs_hello_build() - serialize h (codecs and list must be set) to buf.
 * Return: bytes, or -ENOSPC / -EINVAL.
 */
ssize_t gw_hs_hello_build(const struct gw_hs_hello *h, uint8_t *buf, size_t cap);

/**
 * gw_hs_hello_parse() - parse a hostile HELLO.
 * Return: 0; -EBADMSG (malformed); -EPROTONOSUPPORT (another protocol
 * version: h->version and h->rank are still filled for the message).
 */
int gw_hs_hello_parse(const uint8_t *buf, size_t len, struct gw_hs_hello *h);

/**
 * gw_hs_decide() - the deterministic decision (both sides compute the same).
 * @me, @me_raw, @me_len: our HELLO, parsed and as sent.
 * @peer, @peer_raw, @peer_len: theirs.
 * @psk: the pre-shared key when we hold one, else NULL.
 * Return: 0, or -ENOPROTOOPT (no common codec and no fallback),
 * -EACCES (MAC required by one side, unavailable on the other, or no common
 * algorithm), -EPROTONOSUPPORT (version), -EINVAL (inconsistent ranks, world
 * sizes or hosts); err names both sides' settings. On 0 with r->fell_back,
 * err holds the warning to log (the same text on both sides: both ranks
 * and both codec lists).
 */
int gw_hs_decide(const struct gw_hs_hello *me, const uint8_t *me_raw, size_t me_len,
		 const struct gw_hs_hello *peer, const uint8_t *peer_raw, size_t peer_len,
		 const uint8_t *psk, struct gw_hs_result *r, char *err, size_t errlen);

/**
 * gw_hs_finished_build() - FINISHED for r, or (r == NULL) a refusal carrying
 * status (a negative errno) and msg, so the peer can report our reason.
 */
ssize_t gw_hs_finished_build(const struct gw_hs_result *r, int status, const char *msg,
			     uint8_t *buf, size_t cap);

/**
 * gw_hs_finished_check() - check the peer's hostile FINISHED against r.
 * Return: 0; -EBADMSG (malformed); -EKEYREJECTED (it saw other HELLOs or
 * holds another key); -ECONNREFUSED (the peer refused: its reason in err).
 */
int gw_hs_finished_check(const struct gw_hs_result *r, const uint8_t *buf, size_t len, char *err,
			 size_t errlen);

#endif
