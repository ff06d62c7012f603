/* SPDX-License-Identifier: MIT */
/*
 * mkcorpus.c - gw-mkcorpus: writes the seed corpora of the fuzz targets.
 *
 * usage: gw-mkcorpus [CORPUS_DIR]   (default: the source tree's
 *                                     tests/fuzz/corpus)
 *
 * Seeds, into CORPUS_DIR/<target>/:
 *   fuzz_payload          valid payloads of every codec spec below for
 *                         n = 0, 1, 7, 64, 1000 and three data sets (normal,
 *                         hard: zeros of both signs, ties, subnormals, values
 *                         beyond fp16/int8 range; non-finite: a NaN and an Inf,
 *                         so the payload carries the non-finite record), plus
 *                         truncated, extended and bit-flipped copies, plus
 *                         hand-made headers for every wire id.
 *   fuzz_section_<codec>  | n u32 LE | section | of the same payloads, with
 *                         mutations (truncation, trailing byte, n +- 1, flips),
 *                         plus codec-independent seeds, so that every folder
 *                         has inputs even while a codec is a stub.
 * A codec whose encoder returns -ENOSYS (not implemented in this build) is
 * skipped with a message. Every valid payload must decode, or this exits 1.
 *
 * File names are the SHA-1 of the contents (libFuzzer's own naming, so a
 * -merge=1 never duplicates a seed) and generation is deterministic: running
 * it again writes nothing new, and after new codecs land it only adds files.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "gradwire/codec.h"
#include "frame.h"
#include "fuzz_common.h"
#include "../../common/rng.h"
#include "handshake.h"

#ifndef GW_CORPUS_DIR
#define GW_CORPUS_DIR "tests/fuzz/corpus"
#endif

static const char *const section_names[] = {
	"none", "topk", "randomk", "fp16", "bf16", "int8", "onebit", "powersgd",
};
#define NSECTION (sizeof(section_names) / sizeof(section_names[0]))

static const char *const specs[] = {
	"none",
	"fp16",
	"bf16",
	"int8",
	"int8:bucket=4",
	"int8:bucket=1",
	"int8:rounding=stochastic,seed=7",
	"onebit",
	"onebit:bucket=3",
	"topk:ratio=0.01",
	"topk:ratio=0.5",
	"topk:ratio=1",
	"randomk:ratio=0.01",
	"randomk:ratio=0.5,seed=42",
	"powersgd",
	"powersgd:rank=1,min_factor=1",
	"powersgd:rank=6,min_factor=1",
	"powersgd:rank=2,cols=3,min_factor=1",
};

static const uint64_t sizes[] = { 0, 1, 7, 64, 1000 };

static const char *root;
static unsigned long written, existing;

/* ---- SHA-1 (FIPS 180-4), only to name files ------------------------------ */

/* File names: the SHA-1 of the contents (libFuzzer's naming), via OpenSSL. */
static void sha1_hex(const uint8_t *p, size_t len, char out[41])
{
	uint8_t md[20];

	if (!EVP_Digest(p, len, md, NULL, EVP_sha1(), NULL))
		abort();
	for (int i = 0; i < 20; i++)
		sprintf(out + 2 * i, "%02x", md[i]);
}

/* ---- output -------------------------------------------------------------- */

static void mkdir_p(const char *path)
{
	if (mkdir(path, 0755) && errno != EEXIST) {
		fprintf(stderr, "gw-mkcorpus: mkdir %s: %s\n", path, strerror(errno));
		exit(1);
	}
}

static void put(const char *target, const void *data, size_t len)
{
	char name[41], path[4096], tmp[4200];
	struct stat st;
	FILE *f;

	sha1_hex(data, len, name);
	snprintf(path, sizeof(path), "%s/%s/%s", root, target, name);
	if (stat(path, &st) == 0) {
		existing++;
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "wb");
	if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) || rename(tmp, path)) {
		fprintf(stderr, "gw-mkcorpus: write %s: %s\n", path, strerror(errno));
		exit(1);
	}
	written++;
}

/* A section input: | n u32 LE | bytes |. */
static void put_section(unsigned id, uint32_t n, const uint8_t *sec, size_t len)
{
	char target[64];
	uint8_t *b = len < (1u << 30) ? malloc(len + 4) : NULL;

	if (!b)
		abort();
	memcpy(b, &n, 4);
	if (len)
		memcpy(b + 4, sec, len);
	snprintf(target, sizeof(target), "fuzz_section_%s", section_names[id]);
	put(target, b, len + 4);
	free(b);
}

/* ---- data ---------------------------------------------------------------- */

enum dataset { NORMAL, HARD, NONFINITE, NDATASETS };

static void fill(float *x, uint64_t n, enum dataset ds)
{
	uint64_t s = UINT64_C(0xC0A9C0A9) ^ n ^ ((uint64_t)ds << 32);

	gw_fill_normal(x, n, &s);
	if (ds == HARD) {
		static const float hard[] = {
			0.0f,	  -0.0f,    1.0f, -1.0f,    0.5f,	   1e-40f,  -1e-45f,
			65504.0f, 65520.0f, 1e6f, -3.4e38f, 3.4028235e38f, 6.1e-5f, 1.0009765625f,
		};

		for (uint64_t i = 0; i < n; i++)
			if (gw_splitmix64(&s) % 3 == 0)
				x[i] = hard[gw_splitmix64(&s) % (sizeof(hard) / sizeof(hard[0]))];
	} else if (ds == NONFINITE && n) {
		x[n / 3] = NAN;
		x[n / 2] = n > 2 ? INFINITY : x[n / 2];
		if (n > 5)
			x[n - 1] = -INFINITY;
	}
}

/* ---- seeds --------------------------------------------------------------- */

static void mutate_payload(const uint8_t *p, size_t len)
{
	uint8_t *b = malloc(len + 1);
	static const size_t flips[] = { 1, 3, 8, 12, 16, 20, 24, 28, 32, 36 };

	if (!b)
		abort();
	memcpy(b, p, len);
	put("fuzz_payload", b, len - 1); /* truncated */
	put("fuzz_payload", b, len / 2);
	b[len] = 0;
	put("fuzz_payload", b, len + 1); /* trailing byte */
	for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
		if (flips[i] >= len)
			continue;
		b[flips[i]] ^= 0x01;
		put("fuzz_payload", b, len);
		b[flips[i]] ^= 0x01;
	}
	if (len > 40) { /* the middle of the section */
		b[len / 2 + 20] ^= 0x80;
		put("fuzz_payload", b, len);
	}
	free(b);
}

static void mutate_section(unsigned id, uint32_t n, const uint8_t *s, size_t len)
{
	uint8_t *b = malloc(len + 1);

	if (!b)
		abort();
	if (len)
		memcpy(b, s, len);
	if (len) {
		put_section(id, n, b, len - 1);
		put_section(id, n, b, len / 2);
	}
	b[len] = 0xff;
	put_section(id, n, b, len + 1);
	put_section(id, n + 1, b, len);
	if (n)
		put_section(id, n - 1, b, len);
	for (size_t off = 0; off < len; off += len / 4 + 1) {
		b[off] ^= 0xff;
		put_section(id, n, b, len);
		b[off] ^= 0xff;
	}
	if (len) {
		b[len - 1] ^= 0x80;
		put_section(id, n, b, len);
	}
	free(b);
}

/* Payloads and sections of one spec; 0, or 1 when the codec is a stub. */
static int seed_spec(const char *spec)
{
	struct gw_codec c;
	char err[256] = "";

	if (gw_codec_parse(spec, &c, err, sizeof(err))) {
		fprintf(stderr, "gw-mkcorpus: %s: %s (skipped)\n", spec, err);
		return 1;
	}
	c.ops = gw_codec_generic(c.ops);
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		uint64_t n = sizes[si];

		for (int ds = 0; ds < NDATASETS; ds++) {
			size_t cap = gw_payload_bound(&c, n);
			size_t ssz = gw_codec_state_size(&c, n);
			size_t csz = gw_codec_scratch_size(&c, n);
			float *x = calloc(n + 1, sizeof(float));
			float *y = calloc(n + 1, sizeof(float));
			uint8_t *out = calloc(cap + 1, 1);
			void *state = calloc(ssz + 1, 1);
			void *scratch = calloc(csz + 1, 1);
			struct gw_payload p;
			ssize_t len;
			int rc;

			if (!x || !y || !out || !state || !scratch)
				abort();
			if (ds == NONFINITE && n == 0)
				goto next;
			fill(x, n, (enum dataset)ds);
			len = gw_payload_encode(&c, state, scratch, x, NULL, NULL, n, out, cap);
			if (len == -ENOSYS) {
				fprintf(stderr,
					"gw-mkcorpus: %s (%s): encode not "
					"implemented in this build, skipped\n",
					spec, c.ops->impl);
				free(x), free(y), free(out), free(state), free(scratch);
				return 1;
			}
			if (len < 0) {
				fprintf(stderr, "gw-mkcorpus: %s n=%llu: encode: %s\n", spec,
					(unsigned long long)n, gw_strerror((int)len));
				exit(1);
			}
			rc = gw_payload_parse(out, (size_t)len, &p);
			if (!rc)
				rc = gw_payload_decode(out, (size_t)len, y, n);
			if (rc) {
				fprintf(stderr,
					"gw-mkcorpus: %s n=%llu: its own payload "
					"does not decode: %s\n",
					spec, (unsigned long long)n, gw_strerror(rc));
				exit(1);
			}
			put("fuzz_payload", out, (size_t)len);
			if (c.ops->id < NSECTION)
				put_section(c.ops->id, (uint32_t)n, p.section, p.section_len);
			if ((n == 7 || n == 64) && ds != HARD) {
				mutate_payload(out, (size_t)len);
				if (c.ops->id < NSECTION)
					mutate_section(c.ops->id, (uint32_t)n, p.section,
						       p.section_len);
			}
		next:
			free(x), free(y), free(out), free(state), free(scratch);
		}
	}
	return 0;
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Hand-made headers and sections that need no working encoder. */
static void seed_handmade(void)
{
	static const unsigned ids[] = { 0, 1, 2, 3, 4, 5, 6, 7, 255 };
	uint8_t b[24 + 16 + 64];

	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		/* n = 0, empty section; n = 7, 28 bytes of small floats. */
		memset(b, 0, sizeof(b));
		b[0] = GW_PAYLOAD_VERSION, b[1] = (uint8_t)ids[i], b[2] = GW_DTYPE_F32;
		put("fuzz_payload", b, 24);
		put_le64(b + 8, 7);
		put_le64(b + 16, 28);
		for (int k = 0; k < 28; k++)
			b[24 + k] = (uint8_t)(k * 37);
		put("fuzz_payload", b, 24 + 28);
		/* The same with a non-finite record (index 3, +Inf). */
		b[3] = GW_PF_NONFINITE;
		memset(b + 24, 0, 16);
		b[24] = 3;
		b[24 + 8 + 2] = 0x80, b[24 + 8 + 3] = 0x7f;
		for (int k = 0; k < 28; k++)
			b[40 + k] = (uint8_t)(k * 37);
		put("fuzz_payload", b, 24 + 16 + 28);
	}
	/* Malformed headers: version, dtype, flags, reserved, n, length. */
	memset(b, 0, sizeof(b));
	b[0] = GW_PAYLOAD_VERSION, b[2] = GW_DTYPE_F32;
	put_le64(b + 8, 1);
	put_le64(b + 16, 4);
	put("fuzz_payload", b, 28);
	b[0] = 2;
	put("fuzz_payload", b, 28);
	b[0] = GW_PAYLOAD_VERSION, b[2] = 2;
	put("fuzz_payload", b, 28);
	b[2] = GW_DTYPE_F32, b[3] = 0x80;
	put("fuzz_payload", b, 28);
	b[3] = 0, b[5] = 1;
	put("fuzz_payload", b, 28);
	b[5] = 0;
	put_le64(b + 8, (UINT64_C(1) << 40) + 1);
	put("fuzz_payload", b, 28);
	put_le64(b + 8, (UINT64_C(1) << 20) + 1); /* valid, above the target's cap */
	put_le64(b + 16, 4 * ((UINT64_C(1) << 20) + 1));
	put("fuzz_payload", b, 28);
	put_le64(b + 8, 1);
	put_le64(b + 16, UINT64_MAX);
	put("fuzz_payload", b, 28);
	put("fuzz_payload", b, 23);
	put("fuzz_payload", b, 0);

	for (unsigned id = 0; id < NSECTION; id++) {
		static const uint8_t pat[] = {
			0x00, 0x00, 0x80, 0x3f, 0x07, 0x00, 0x00, 0x00, 0x01, 0x00,
			0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x02, 0x00, 0x00,
			0x00, 0x00, 0xc0, 0x7f, 0x10, 0x00, 0x00, 0x00,
		};

		put_section(id, 0, NULL, 0);
		put_section(id, 0, pat, 4);
		put_section(id, 1, pat, 4);
		put_section(id, 7, pat, sizeof(pat));
		put_section(id, 7, pat, 14);
		put_section(id, 65535, pat, 3);
	}
}

/* Frames: | alg u8 | slot u32 | seq u32 | frame |, sealed with FUZZ_KEY. */
static void seed_frames(void)
{
	static const uint8_t key[GW_MAC_KEY_LEN] = FUZZ_FRAME_KEY;
	uint8_t buf[9 + GW_FRAME_HDR + 64 + GW_MAC_TAG_MAX];

	for (int alg = 0; alg <= GW_MAC_GMAC_AES256; alg++) {
		struct gw_mac *m = NULL;

		if (alg && gw_mac_create((enum gw_mac_alg)alg, key, &m))
			abort();
		for (size_t len = 0; len <= 64; len += 32) {
			struct gw_frame_hdr h = { GW_FRAME_TENSOR, 0, 5, 9, len, 0 };
			uint32_t slot = 5, seq = 9;
			ssize_t fl;

			buf[0] = (uint8_t)alg;
			memcpy(buf + 1, &slot, 4);
			memcpy(buf + 5, &seq, 4);
			for (size_t i = 0; i < len; i++)
				buf[9 + GW_FRAME_HDR + i] = (uint8_t)(i * 3);
			fl = gw_frame_seal(m, (enum gw_mac_alg)alg, &h, buf + 9, sizeof(buf) - 9);
			if (fl < 0)
				abort();
			put("fuzz_frame", buf, 9 + (size_t)fl);
			buf[9 + 20] ^= 1; /* and a tampered copy */
			put("fuzz_frame", buf, 9 + (size_t)fl);
		}
		gw_mac_destroy(m);
	}
}

/* Handshake messages: | kind u8 (0 HELLO, 1 FINISHED) | bytes |. */
static void seed_handshake(void)
{
	static const char *const lists[] = { "topk:ratio=0.01,int8,none", "fp16",
					     "onebit:bucket=64,bf16", GW_CODEC_AUTO_DEFAULT };
	uint8_t buf[1 + GW_HS_HELLO_MAX];

	for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
		struct gw_hs_hello h = { .version = GW_HS_VERSION,
					 .size = 4,
					 .rank = (uint32_t)i,
					 .host_id = 9,
					 .mac_mode = (uint8_t)(i % 3),
					 .nalgs = 2,
					 .algs = { 2, 1 },
					 .flags = (uint16_t)(i == 3 ? GW_HS_F_AUTO : i & 3) };
		char err[128];
		int n = gw_codec_list_parse(lists[i], h.codecs, GW_HS_MAX_CODECS, err, sizeof(err));
		ssize_t len;

		if (n < 0)
			abort();
		h.ncodecs = (uint8_t)n;
		buf[0] = 0;
		len = gw_hs_hello_build(&h, buf + 1, sizeof(buf) - 1);
		if (len < 0)
			abort();
		put("fuzz_handshake", buf, 1 + (size_t)len);
	}
	{
		struct gw_hs_result r = { .peer_rank = 1 };
		ssize_t len;

		buf[0] = 1;
		len = gw_hs_finished_build(&r, 0, NULL, buf + 1, sizeof(buf) - 1);
		put("fuzz_handshake", buf, 1 + (size_t)len);
		len = gw_hs_finished_build(NULL, -ENOPROTOOPT, "no common codec", buf + 1,
					   sizeof(buf) - 1);
		put("fuzz_handshake", buf, 1 + (size_t)len);
	}
}

int main(int argc, char **argv)
{
	char dir[4096];
	int stubs = 0;

	if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
		fprintf(stderr, "usage: gw-mkcorpus [CORPUS_DIR]\n");
		return 2;
	}
	root = argc == 2 ? argv[1] : GW_CORPUS_DIR;
	mkdir_p(root);
	snprintf(dir, sizeof(dir), "%s/fuzz_payload", root);
	mkdir_p(dir);
	for (unsigned id = 0; id < NSECTION; id++) {
		snprintf(dir, sizeof(dir), "%s/fuzz_section_%s", root, section_names[id]);
		mkdir_p(dir);
	}
	snprintf(dir, sizeof(dir), "%s/fuzz_frame", root);
	mkdir_p(dir);
	snprintf(dir, sizeof(dir), "%s/fuzz_handshake", root);
	mkdir_p(dir);
	seed_frames();
	seed_handshake();
	seed_handmade();
	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
		stubs += seed_spec(specs[i]);
	printf("gw-mkcorpus: %s: %lu new file(s), %lu already there%s\n", root, written, existing,
	       stubs ? "; some codecs skipped (see above): re-run once they land" : "");
	return 0;
}
