/* SPDX-License-Identifier: MIT */
/*
 * mac.h - frame authentication (OpenSSL EVP_MAC) and key derivation (HKDF).
 *
 * Two algorithms, negotiated per connection:
 *   GW_MAC_HMAC_SHA256  HMAC-SHA256, 32-byte tag, the conservative default;
 *   GW_MAC_GMAC_AES256  GMAC (AES-256-GCM authenticating only), 16-byte tag,
 *                       faster where the CPU has AES-NI and carry-less
 *                       multiply. Its 96-bit IV is the frame's (seq, slot):
 *                       sequence numbers count per slot, so the pair never
 *                       repeats under one session key (the keys are per
 *                       direction and per session).
 * Every tag covers (seq, slot) as its first 12 bytes, so a replayed,
 * reordered or misrouted frame fails verification.
 */
#ifndef GW_MAC_H
#define GW_MAC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

enum gw_mac_alg {
	GW_MAC_NONE = 0,
	GW_MAC_HMAC_SHA256 = 1,
	GW_MAC_GMAC_AES256 = 2,
};

#define GW_MAC_KEY_LEN 32
#define GW_MAC_TAG_MAX 32

struct gw_mac;

/** gw_mac_tag_len() - tag bytes of alg (0 for GW_MAC_NONE or unknown). */
size_t gw_mac_tag_len(enum gw_mac_alg alg);
/** gw_mac_alg_name() - "hmac-sha256", "gmac-aes256", "none", or "?". */
const char *gw_mac_alg_name(enum gw_mac_alg alg);
/** gw_mac_alg_parse() - the inverse of gw_mac_alg_name(); -EINVAL if unknown. */
int gw_mac_alg_parse(const char *name, enum gw_mac_alg *alg);

/**
 * gw_mac_alg_list_parse() - parse "gmac-aes256,hmac-sha256" (preferred
 * first) into at most max algorithm ids. "none", an unknown name, an empty
 * entry or more than max entries is -EINVAL.
 * Return: the number of algorithms (>= 1) or -EINVAL.
 */
int gw_mac_alg_list_parse(const char *list, uint8_t *algs, int max);

/**
 * gw_mac_create() - a MAC context for one direction of one session.
 * Return: 0, -EINVAL (alg), -ENOMEM, -EIO (OpenSSL refused).
 */
int gw_mac_create(enum gw_mac_alg alg, const uint8_t key[GW_MAC_KEY_LEN], struct gw_mac **out);
void gw_mac_destroy(struct gw_mac *m);

/**
 * gw_mac_sign() - tag over (seq u64, slot u32, iov[0..n)) into tag
 * (gw_mac_tag_len bytes). (seq, slot) must never repeat under one key.
 */
int gw_mac_sign(struct gw_mac *m, uint64_t seq, uint32_t slot, const struct iovec *iov, int n,
		uint8_t *tag);
/**
 * gw_mac_verify() - recompute and compare in constant time.
 * Return: 0 when the tag matches, -EBADMSG when it does not, -EIO.
 */
int gw_mac_verify(struct gw_mac *m, uint64_t seq, uint32_t slot, const struct iovec *iov, int n,
		  const uint8_t *tag);

/**
 * gw_hkdf() - HKDF-SHA256 (RFC 5869) extract-and-expand.
 * Return: 0 or -EIO.
 */
int gw_hkdf(const uint8_t *ikm, size_t ikm_len, const uint8_t *salt, size_t salt_len,
	    const void *info, size_t info_len, uint8_t *out, size_t out_len);

/**
 * gw_mac_create_epoch() - gw_mac_create() with a connection's key for a
 * membership epoch: base, the handshake's key, in the epoch the handshake
 * ran in (born); HKDF(base, "gradwire epoch" || epoch) in every later one,
 * so that sequence numbers, which restart in each epoch, never repeat under
 * one key, and no frame verifies in another epoch than its own.
 */
int gw_mac_create_epoch(enum gw_mac_alg alg, const uint8_t base[GW_MAC_KEY_LEN], uint32_t born,
			uint32_t epoch, struct gw_mac **out);

/**
 * gw_key_file_load() - read a pre-shared key from path.
 * The file must be a regular file that neither group nor others can read or
 * write; its contents (16 to 4096 bytes, trailing newline stripped) are
 * condensed with HKDF into a 32-byte key.
 * Return: 0, -EACCES (permissions), -EINVAL (size), -errno (open/read).
 */
int gw_key_file_load(const char *path, uint8_t key[GW_MAC_KEY_LEN]);

#endif
