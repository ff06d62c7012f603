/* SPDX-License-Identifier: MIT */
/*
 * mac.c - frame MACs and HKDF on OpenSSL 3 (EVP_MAC, EVP_KDF).
 *
 * A gw_mac holds one EVP_MAC_CTX keyed once; per frame it is re-initialised
 * with the key kept inside OpenSSL (HMAC: EVP_MAC_init(ctx, NULL, ...);
 * GMAC: a fresh IV = seq || slot). (seq, slot) is authenticated as the first
 * 12 bytes of the MAC input for both algorithms. Tags are compared with
 * CRYPTO_memcmp (constant time). Keys are wiped on destroy.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include "mac.h"

struct gw_mac {
	enum gw_mac_alg alg;
	EVP_MAC *mac;
	EVP_MAC_CTX *ctx;
	uint8_t key[GW_MAC_KEY_LEN];
};

size_t gw_mac_tag_len(enum gw_mac_alg alg)
{
	switch (alg) {
	case GW_MAC_HMAC_SHA256:
		return 32;
	case GW_MAC_GMAC_AES256:
		return 16;
	default:
		return 0;
	}
}

static const char *const alg_names[] = {
	[GW_MAC_NONE] = "none",
	[GW_MAC_HMAC_SHA256] = "hmac-sha256",
	[GW_MAC_GMAC_AES256] = "gmac-aes256",
};

const char *gw_mac_alg_name(enum gw_mac_alg alg)
{
	return (unsigned)alg < sizeof(alg_names) / sizeof(alg_names[0]) ? alg_names[alg] : "?";
}

int gw_mac_alg_parse(const char *name, enum gw_mac_alg *alg)
{
	for (unsigned i = 0; i < sizeof(alg_names) / sizeof(alg_names[0]); i++) {
		if (!strcmp(name, alg_names[i])) {
			*alg = (enum gw_mac_alg)i;
			return 0;
		}
	}
	return -EINVAL;
}

int gw_mac_alg_list_parse(const char *list, uint8_t *algs, int max)
{
	int n = 0;

	for (const char *s = list; s && *s;) {
		size_t l = strcspn(s, ",");
		char name[32];
		enum gw_mac_alg a;

		if (!l || l >= sizeof(name) || n == max)
			return -EINVAL;
		memcpy(name, s, l);
		name[l] = '\0';
		if (gw_mac_alg_parse(name, &a) || a == GW_MAC_NONE)
			return -EINVAL;
		algs[n++] = (uint8_t)a;
		s += l;
		if (*s == ',' && !*++s)
			return -EINVAL; /* a trailing comma */
	}
	return n ? n : -EINVAL;
}

/* (Re)start a MAC computation for (seq, slot). */
static int mac_begin(struct gw_mac *m, uint64_t seq, uint32_t slot, int first)
{
	OSSL_PARAM params[3], *p = params;
	uint8_t iv[12], le[12];

	for (int i = 0; i < 8; i++)
		le[i] = (uint8_t)(seq >> (8 * i));
	for (int i = 0; i < 4; i++)
		le[8 + i] = (uint8_t)(slot >> (8 * i));
	if (m->alg == GW_MAC_HMAC_SHA256) {
		if (first)
			*p++ = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
								(char *)"SHA256", 0);
	} else {
		if (first)
			*p++ = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER,
								(char *)"AES-256-GCM", 0);
		memcpy(iv, le, sizeof(iv));
		*p++ = OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, iv, sizeof(iv));
	}
	*p = OSSL_PARAM_construct_end();
	if (!EVP_MAC_init(m->ctx, first ? m->key : NULL, first ? sizeof(m->key) : 0, params))
		return -EIO;
	if (!EVP_MAC_update(m->ctx, le, sizeof(le)))
		return -EIO;
	return 0;
}

int gw_mac_create(enum gw_mac_alg alg, const uint8_t key[GW_MAC_KEY_LEN], struct gw_mac **out)
{
	struct gw_mac *m;
	int rc = -EIO;

	if (!gw_mac_tag_len(alg))
		return -EINVAL;
	m = OPENSSL_zalloc(sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->alg = alg;
	memcpy(m->key, key, GW_MAC_KEY_LEN);
	m->mac = EVP_MAC_fetch(NULL, alg == GW_MAC_HMAC_SHA256 ? "HMAC" : "GMAC", NULL);
	if (!m->mac)
		goto err_free;
	m->ctx = EVP_MAC_CTX_new(m->mac);
	if (!m->ctx)
		goto err_free;
	rc = mac_begin(m, 0, 0, 1); /* key once; proves the algorithm works */
	if (rc)
		goto err_free;
	*out = m;
	return 0;
err_free:
	gw_mac_destroy(m);
	return rc;
}

void gw_mac_destroy(struct gw_mac *m)
{
	if (!m)
		return;
	EVP_MAC_CTX_free(m->ctx);
	EVP_MAC_free(m->mac);
	OPENSSL_clear_free(m, sizeof(*m));
}

static int compute(struct gw_mac *m, uint64_t seq, uint32_t slot, const struct iovec *iov, int n,
		   uint8_t *tag)
{
	size_t len = 0, want = gw_mac_tag_len(m->alg);
	int rc = mac_begin(m, seq, slot, 0);

	if (rc)
		return rc;
	for (int i = 0; i < n; i++)
		if (iov[i].iov_len && !EVP_MAC_update(m->ctx, iov[i].iov_base, iov[i].iov_len))
			return -EIO;
	if (!EVP_MAC_final(m->ctx, tag, &len, GW_MAC_TAG_MAX) || len != want)
		return -EIO;
	return 0;
}

int gw_mac_sign(struct gw_mac *m, uint64_t seq, uint32_t slot, const struct iovec *iov, int n,
		uint8_t *tag)
{
	return compute(m, seq, slot, iov, n, tag);
}

int gw_mac_verify(struct gw_mac *m, uint64_t seq, uint32_t slot, const struct iovec *iov, int n,
		  const uint8_t *tag)
{
	uint8_t want[GW_MAC_TAG_MAX];
	int rc = compute(m, seq, slot, iov, n, want);

	if (rc)
		return rc;
	rc = CRYPTO_memcmp(want, tag, gw_mac_tag_len(m->alg)) ? -EBADMSG : 0;
	OPENSSL_cleanse(want, sizeof(want));
	return rc;
}

int gw_hkdf(const uint8_t *ikm, size_t ikm_len, const uint8_t *salt, size_t salt_len,
	    const void *info, size_t info_len, uint8_t *out, size_t out_len)
{
	EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
	EVP_KDF_CTX *ctx = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
	OSSL_PARAM params[5], *p = params;
	int rc = -EIO;

	if (!ctx)
		goto out;
	*p++ = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0);
	*p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)ikm, ikm_len);
	if (salt_len) /* absent salt: RFC 5869's string of zeros */
		*p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt,
							 salt_len);
	*p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)info, info_len);
	*p = OSSL_PARAM_construct_end();
	if (EVP_KDF_derive(ctx, out, out_len, params) == 1)
		rc = 0;
out:
	EVP_KDF_CTX_free(ctx);
	EVP_KDF_free(kdf);
	return rc;
}

int gw_mac_create_epoch(enum gw_mac_alg alg, const uint8_t base[GW_MAC_KEY_LEN], uint32_t born,
			uint32_t epoch, struct gw_mac **out)
{
	uint8_t info[18] = "gradwire epoch", key[GW_MAC_KEY_LEN];
	int rc;

	if (epoch == born)
		return gw_mac_create(alg, base, out);
	for (int i = 0; i < 4; i++)
		info[14 + i] = (uint8_t)(epoch >> (8 * i));
	rc = gw_hkdf(base, GW_MAC_KEY_LEN, NULL, 0, info, sizeof(info), key, sizeof(key));
	if (!rc)
		rc = gw_mac_create(alg, key, out);
	OPENSSL_cleanse(key, sizeof(key));
	return rc;
}

int gw_key_file_load(const char *path, uint8_t key[GW_MAC_KEY_LEN])
{
	uint8_t buf[4097];
	struct stat st;
	ssize_t len;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		rc = -errno;
		goto out;
	}
	rc = -EACCES;
	if (!S_ISREG(st.st_mode) || (st.st_mode & (S_IRWXG | S_IRWXO)))
		goto out;
	len = read(fd, buf, sizeof(buf));
	if (len < 0) {
		rc = -errno;
		goto out;
	}
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
		len--;
	rc = -EINVAL;
	if (len < 16 || len > 4096)
		goto out;
	rc = gw_hkdf(buf, (size_t)len, NULL, 0, "gradwire psk v1", 15, key, GW_MAC_KEY_LEN);
out:
	OPENSSL_cleanse(buf, sizeof(buf));
	close(fd);
	return rc;
}
