/* SPDX-License-Identifier: MIT */
/*
 * test_frame.c - frames: layout, authentication first, and rejection of
 * tampered, truncated, replayed, reordered, misrouted and foreign frames.
 */
#include <stdlib.h>
#include "tutil.h"
#include "frame.h"

static const uint8_t k1[GW_MAC_KEY_LEN] = "session key one, 32 bytes long.";
static const uint8_t k2[GW_MAC_KEY_LEN] = "session key two, 32 bytes long.";
static const enum gw_mac_alg algs[] = { GW_MAC_NONE, GW_MAC_HMAC_SHA256, GW_MAC_GMAC_AES256 };

static ssize_t make(struct gw_mac *m, enum gw_mac_alg alg, uint8_t *f, size_t cap, uint32_t slot,
		    uint64_t seq, size_t len)
{
	struct gw_frame_hdr h = { GW_FRAME_TENSOR, GW_FRAME_F_LOSSY, slot, seq, len, 7 };

	for (size_t i = 0; i < len; i++)
		f[GW_FRAME_HDR + i] = (uint8_t)(i ^ seq);
	return gw_frame_seal(m, alg, &h, f, cap);
}

static void test_round_trip(void)
{
	for (size_t a = 0; a < 3; a++) {
		uint8_t f[GW_FRAME_HDR + 100 + GW_MAC_TAG_MAX];
		struct gw_mac *m = NULL;
		struct gw_frame_hdr h;
		const uint8_t *body;
		ssize_t len;

		if (algs[a])
			CU_ASSERT_EQUAL_FATAL(gw_mac_create(algs[a], k1, &m), 0);
		len = make(m, algs[a], f, sizeof(f), 3, 9, 100);
		CU_ASSERT_EQUAL(len, (ssize_t)gw_frame_bound(100, algs[a]));
		CU_ASSERT_EQUAL(f[0], 'G');
		CU_ASSERT_EQUAL(f[3], '1');
		CU_ASSERT_EQUAL(f[6], algs[a]);
		CU_ASSERT_EQUAL(gw_frame_open(m, algs[a], f, (size_t)len, 3, 9, &h, &body), 0);
		CU_ASSERT_EQUAL(h.kind, GW_FRAME_TENSOR);
		CU_ASSERT_EQUAL(h.flags, GW_FRAME_F_LOSSY);
		CU_ASSERT_EQUAL(h.len, 100);
		CU_ASSERT_EQUAL(h.epoch, 7);
		CU_ASSERT_PTR_EQUAL(body, f + GW_FRAME_HDR);
		CU_ASSERT_EQUAL(make(m, algs[a], f, (size_t)len - 1, 3, 9, 100), -ENOSPC);
		gw_mac_destroy(m);
	}
}

static void test_rejects(void)
{
	for (size_t a = 0; a < 3; a++) {
		uint8_t f[GW_FRAME_HDR + 64 + GW_MAC_TAG_MAX], g[sizeof(f)];
		struct gw_mac *m = NULL, *other = NULL;
		struct gw_frame_hdr h;
		const uint8_t *body;
		size_t len;

		if (algs[a]) {
			CU_ASSERT_EQUAL_FATAL(gw_mac_create(algs[a], k1, &m), 0);
			CU_ASSERT_EQUAL_FATAL(gw_mac_create(algs[a], k2, &other), 0);
		}
		len = (size_t)make(m, algs[a], f, sizeof(f), 1, 41, 64);
		for (size_t l = 0; l < len; l++) /* every truncation */
			CU_ASSERT_EQUAL(gw_frame_open(m, algs[a], f, l, 1, 41, &h, &body),
					algs[a] && l >= gw_frame_bound(0, algs[a]) ? -EKEYREJECTED
										   : -EBADMSG);
		/* Replayed (an old seq) or reordered (a future one) frame. */
		CU_ASSERT_EQUAL(gw_frame_open(m, algs[a], f, len, 1, 42, &h, &body),
				algs[a] ? -EKEYREJECTED : -EPROTO);
		CU_ASSERT_EQUAL(gw_frame_open(m, algs[a], f, len, 1, 40, &h, &body),
				algs[a] ? -EKEYREJECTED : -EPROTO);
		CU_ASSERT_EQUAL(gw_frame_open(m, algs[a], f, len, 2, 41, &h, &body),
				algs[a] ? -EKEYREJECTED : -EPROTO); /* another slot */
		if (!algs[a]) {
			memcpy(g, f, len);
			g[0] ^= 1;
			CU_ASSERT_EQUAL(gw_frame_open(m, 0, g, len, 1, 41, &h, &body), -EBADMSG);
			memcpy(g, f, len);
			g[4] = 2;
			CU_ASSERT_EQUAL(gw_frame_open(m, 0, g, len, 1, 41, &h, &body),
					-EPROTONOSUPPORT);
			memcpy(g, f, len);
			g[24] ^= 1; /* body length lies */
			CU_ASSERT_EQUAL(gw_frame_open(m, 0, g, len, 1, 41, &h, &body), -EBADMSG);
			memcpy(g, f, len);
			g[13] = 1; /* the epoch: returned for the caller to compare */
			CU_ASSERT_EQUAL(gw_frame_open(m, 0, g, len, 1, 41, &h, &body), 0);
			CU_ASSERT_EQUAL(h.epoch, 7 + 256);
			continue;
		}
		/* With a MAC, every single bit flip anywhere is caught. */
		for (size_t bit = 0; bit < 8 * len; bit++) {
			memcpy(g, f, len);
			g[bit / 8] ^= (uint8_t)(1u << (bit % 8));
			CU_ASSERT_EQUAL(gw_frame_open(m, algs[a], g, len, 1, 41, &h, &body),
					-EKEYREJECTED);
		}
		/* A frame of another session (other key), and the MAC off. */
		CU_ASSERT_EQUAL(gw_frame_open(other, algs[a], f, len, 1, 41, &h, &body),
				-EKEYREJECTED);
		CU_ASSERT_EQUAL(gw_frame_open(NULL, GW_MAC_NONE, f, len, 1, 41, &h, &body),
				-EBADMSG);
		gw_mac_destroy(m);
		gw_mac_destroy(other);
	}
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "seal and open", test_round_trip },
		{ "tampered, truncated, replayed, foreign", test_rejects },
		CU_TEST_INFO_NULL,
	};
	return tu_run("frame", tests);
}
