/* SPDX-License-Identifier: MIT */
/*
 * test_mac.c - frame MACs, HKDF and pre-shared key files, each checked
 * against an independent computation (OpenSSL's one-shot HMAC, AES-GCM with
 * the data as AAD, RFC 5869's test vector).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include "tutil.h"
#include "mac.h"

static const uint8_t key[GW_MAC_KEY_LEN] = "0123456789abcdef0123456789abcde";
static uint8_t data[3000];

static void le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void sign(enum gw_mac_alg alg, uint64_t seq, const uint8_t *d, size_t len, uint8_t *tag)
{
	struct gw_mac *m;
	struct iovec iov[2] = { { (void *)d, len / 3 }, { (void *)(d + len / 3), len - len / 3 } };

	CU_ASSERT_EQUAL_FATAL(gw_mac_create(alg, key, &m), 0);
	CU_ASSERT_EQUAL(gw_mac_sign(m, seq, 0x01020304, iov, 2, tag), 0);
	gw_mac_destroy(m);
}

static void test_hmac_reference(void)
{
	uint8_t tag[32], want[32], *buf = malloc(12 + sizeof(data));
	unsigned wlen = 0;

	le64(buf, 77);
	memcpy(buf + 8, "\x04\x03\x02\x01", 4); /* slot, little-endian */
	memcpy(buf + 12, data, sizeof(data));
	HMAC(EVP_sha256(), key, sizeof(key), buf, 12 + sizeof(data), want, &wlen);
	sign(GW_MAC_HMAC_SHA256, 77, data, sizeof(data), tag);
	CU_ASSERT_EQUAL(wlen, 32);
	CU_ASSERT_EQUAL(memcmp(tag, want, 32), 0);
	CU_ASSERT_EQUAL(gw_mac_tag_len(GW_MAC_HMAC_SHA256), 32);
	free(buf);
}

static void test_gmac_reference(void)
{
	uint8_t tag[16], want[16], iv[12];
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int outl;

	le64(iv, 123456789); /* IV = seq || slot */
	memcpy(iv + 8, "\x04\x03\x02\x01", 4);
	CU_ASSERT_FATAL(EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, key, iv) == 1);
	CU_ASSERT(EVP_EncryptUpdate(c, NULL, &outl, iv, 12) == 1);
	CU_ASSERT(EVP_EncryptUpdate(c, NULL, &outl, data, sizeof(data)) == 1);
	CU_ASSERT(EVP_EncryptFinal_ex(c, want, &outl) == 1);
	CU_ASSERT(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, want) == 1);
	EVP_CIPHER_CTX_free(c);
	sign(GW_MAC_GMAC_AES256, 123456789, data, sizeof(data), tag);
	CU_ASSERT_EQUAL(memcmp(tag, want, 16), 0);
}

static void test_verify(void)
{
	static const enum gw_mac_alg algs[] = { GW_MAC_HMAC_SHA256, GW_MAC_GMAC_AES256 };

	for (size_t a = 0; a < 2; a++) {
		uint8_t tag[GW_MAC_TAG_MAX], other[GW_MAC_KEY_LEN];
		size_t tl = gw_mac_tag_len(algs[a]);
		struct iovec iov = { data, 100 };
		struct gw_mac *m, *m2;

		CU_ASSERT_EQUAL_FATAL(gw_mac_create(algs[a], key, &m), 0);
		uint8_t t2[GW_MAC_TAG_MAX];

		CU_ASSERT_EQUAL(gw_mac_sign(m, 5, 2, &iov, 1, tag), 0);
		CU_ASSERT_EQUAL(gw_mac_verify(m, 5, 2, &iov, 1, tag), 0);
		/* Many frames on one context: re-keying per frame works. */
		for (uint64_t s = 6; s < 40; s++)
			CU_ASSERT_EQUAL(gw_mac_sign(m, s, 2, &iov, 1, t2), 0);
		CU_ASSERT_EQUAL(gw_mac_sign(m, 5, 2, &iov, 1, t2), 0);
		CU_ASSERT_EQUAL(memcmp(t2, tag, tl), 0); /* deterministic */
		CU_ASSERT_EQUAL(gw_mac_verify(m, 5, 2, &iov, 1, tag), 0);
		CU_ASSERT_EQUAL(gw_mac_verify(m, 6, 2, &iov, 1, tag), -EBADMSG); /* replay */
		CU_ASSERT_EQUAL(gw_mac_verify(m, 5, 3, &iov, 1, tag), -EBADMSG); /* other slot */
		CU_ASSERT_EQUAL(gw_mac_sign(m, 5, 3, &iov, 1, t2), 0);
		CU_ASSERT_NOT_EQUAL(memcmp(t2, tag, tl), 0);
		for (size_t bit = 0; bit < 8 * 100; bit += 7) {
			data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
			CU_ASSERT_EQUAL(gw_mac_verify(m, 5, 2, &iov, 1, tag), -EBADMSG);
			data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		}
		for (size_t bit = 0; bit < 8 * tl; bit++) {
			tag[bit / 8] ^= (uint8_t)(1u << (bit % 8));
			CU_ASSERT_EQUAL(gw_mac_verify(m, 5, 2, &iov, 1, tag), -EBADMSG);
			tag[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		}
		memcpy(other, key, sizeof(other));
		other[0] ^= 1; /* another session */
		CU_ASSERT_EQUAL_FATAL(gw_mac_create(algs[a], other, &m2), 0);
		CU_ASSERT_EQUAL(gw_mac_verify(m2, 5, 2, &iov, 1, tag), -EBADMSG);
		gw_mac_destroy(m2);
		gw_mac_destroy(m);
	}
	CU_ASSERT_EQUAL(gw_mac_create(GW_MAC_NONE, key, &(struct gw_mac *){ NULL }), -EINVAL);
	gw_mac_destroy(NULL);
}

static void test_names(void)
{
	enum gw_mac_alg a;

	CU_ASSERT_EQUAL(gw_mac_alg_parse("gmac-aes256", &a), 0);
	CU_ASSERT_EQUAL(a, GW_MAC_GMAC_AES256);
	CU_ASSERT_STRING_EQUAL(gw_mac_alg_name(GW_MAC_HMAC_SHA256), "hmac-sha256");
	CU_ASSERT_EQUAL(gw_mac_alg_parse("md5", &a), -EINVAL);
}

static void test_hkdf_rfc5869(void)
{
	/* RFC 5869, A.1 (SHA-256, test case 1). */
	uint8_t ikm[22], salt[13], info[10], okm[42];
	static const uint8_t want[42] = { 0x3c, 0xb2, 0x5f, 0x25, 0xfa, 0xac, 0xd5, 0x7a, 0x90,
					  0x43, 0x4f, 0x64, 0xd0, 0x36, 0x2f, 0x2a, 0x2d, 0x2d,
					  0x0a, 0x90, 0xcf, 0x1a, 0x5a, 0x4c, 0x5d, 0xb0, 0x2d,
					  0x56, 0xec, 0xc4, 0xc5, 0xbf, 0x34, 0x00, 0x72, 0x08,
					  0xd5, 0xb8, 0x87, 0x18, 0x58, 0x65 };

	memset(ikm, 0x0b, sizeof(ikm));
	for (int i = 0; i < 13; i++)
		salt[i] = (uint8_t)i;
	for (int i = 0; i < 10; i++)
		info[i] = (uint8_t)(0xf0 + i);
	CU_ASSERT_EQUAL(
		gw_hkdf(ikm, sizeof(ikm), salt, sizeof(salt), info, sizeof(info), okm, sizeof(okm)),
		0);
	CU_ASSERT_EQUAL(memcmp(okm, want, sizeof(want)), 0);
}

static void write_file(const char *path, const char *s, mode_t mode)
{
	FILE *f = fopen(path, "w");

	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs(s, f);
	fclose(f);
	CU_ASSERT_EQUAL(chmod(path, mode), 0);
}

static void test_key_file(void)
{
	char dir[] = "/tmp/gw-mac-XXXXXX", p[64];
	uint8_t k1[32], k2[32];

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(p, sizeof(p), "%s/key", dir);
	write_file(p, "a secret of some length\n", 0600);
	CU_ASSERT_EQUAL(gw_key_file_load(p, k1), 0);
	write_file(p, "a secret of some length", 0400); /* newline stripped */
	CU_ASSERT_EQUAL(gw_key_file_load(p, k2), 0);
	CU_ASSERT_EQUAL(memcmp(k1, k2, 32), 0);
	write_file(p, "another secret, longer", 0600);
	CU_ASSERT_EQUAL(gw_key_file_load(p, k2), 0);
	CU_ASSERT_NOT_EQUAL(memcmp(k1, k2, 32), 0);
	write_file(p, "a secret of some length", 0644); /* others can read */
	CU_ASSERT_EQUAL(gw_key_file_load(p, k2), -EACCES);
	write_file(p, "a secret of some length", 0660); /* group can write */
	CU_ASSERT_EQUAL(gw_key_file_load(p, k2), -EACCES);
	write_file(p, "short", 0600);
	CU_ASSERT_EQUAL(gw_key_file_load(p, k2), -EINVAL);
	CU_ASSERT_EQUAL(gw_key_file_load(dir, k2), -EACCES); /* not a file */
	unlink(p);
	CU_ASSERT_EQUAL(gw_key_file_load(p, k2), -ENOENT);
	rmdir(dir);
}

/* Keys per membership epoch: the base in the epoch the link was born in,
 * another key in every later epoch, the same on both ends. */
static void test_epoch_keys(void)
{
	static const uint8_t base[GW_MAC_KEY_LEN] = "the base key of a link, 32 bytes";
	struct iovec iov = { (void *)"frame", 5 };

	for (int a = GW_MAC_HMAC_SHA256; a <= GW_MAC_GMAC_AES256; a++) {
		uint8_t t[4][GW_MAC_TAG_MAX];
		struct gw_mac *m;

		for (uint32_t e = 0; e < 4; e++) {
			CU_ASSERT_EQUAL_FATAL(
				gw_mac_create_epoch((enum gw_mac_alg)a, base, 1, e + 1, &m), 0);
			CU_ASSERT_EQUAL(gw_mac_sign(m, 0, 9, &iov, 1, t[e]), 0);
			gw_mac_destroy(m);
		}
		CU_ASSERT_EQUAL_FATAL(gw_mac_create((enum gw_mac_alg)a, base, &m), 0);
		CU_ASSERT_EQUAL(gw_mac_verify(m, 0, 9, &iov, 1, t[0]), 0); /* born: the base */
		for (int e = 1; e < 4; e++) {
			CU_ASSERT_NOT_EQUAL(gw_mac_verify(m, 0, 9, &iov, 1, t[e]), 0);
			for (int f = 0; f < e; f++)
				CU_ASSERT_NOT_EQUAL(memcmp(t[e], t[f], gw_mac_tag_len(a)), 0);
		}
		gw_mac_destroy(m);
		CU_ASSERT_EQUAL_FATAL(gw_mac_create_epoch((enum gw_mac_alg)a, base, 1, 3, &m), 0);
		CU_ASSERT_EQUAL(gw_mac_verify(m, 0, 9, &iov, 1, t[2]), 0); /* reproducible */
		gw_mac_destroy(m);
	}
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "hmac-sha256 equals OpenSSL's one-shot HMAC", test_hmac_reference },
		{ "gmac-aes256 equals AES-GCM over AAD", test_gmac_reference },
		{ "verify rejects flips, replays, other keys", test_verify },
		{ "algorithm names", test_names },
		{ "HKDF-SHA256 RFC 5869 vector", test_hkdf_rfc5869 },
		{ "key files: permissions, size", test_key_file },
		{ "keys per membership epoch", test_epoch_keys },
		CU_TEST_INFO_NULL,
	};
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 37 + 11);
	return tu_run("mac", tests);
}
