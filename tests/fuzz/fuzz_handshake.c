/* SPDX-License-Identifier: MIT */
/*
 * fuzz_handshake.c - the HELLO and FINISHED parsers on hostile bytes.
 *
 * Input: | kind u8 | bytes |. kind 0: a HELLO. It is parsed; when it parses,
 * the decision is computed from both sides against a fixed HELLO of ours,
 * and both sides must agree (codec, parameters, MAC, transcript) or both
 * refuse. kind 1: a FINISHED, checked against fixed results with the MAC
 * off and on; it can only be accepted when it is the one we would send.
 */
#include "fuzz_common.h"
#include "handshake.h"

static const uint8_t psk[GW_MAC_KEY_LEN] = "the handshake fuzzer's key, 32 B";

static void hello(const uint8_t *data, size_t size)
{
	struct gw_hs_hello peer, me = { .version = GW_HS_VERSION,
					.size = 4,
					.mac_mode = GW_MAC_OPTIONAL,
					.nalgs = 2,
					.algs = { 2, 1 },
					.flags = GW_HS_F_HAS_KEY | GW_HS_F_FALLBACK,
					.host_id = 1 };
	struct gw_hs_result r1, r2;
	uint8_t raw[GW_HS_HELLO_MAX];
	char err[512], err2[512];
	ssize_t len;
	int rc1, rc2;

	if (gw_hs_hello_parse(data, size, &peer))
		return;
	me.rank = peer.rank ? 0 : 1;
	me.ncodecs = (uint8_t)gw_codec_list_parse("int8,topk,none", me.codecs, GW_HS_MAX_CODECS,
						  err, sizeof(err));
	len = gw_hs_hello_build(&me, raw, sizeof(raw));
	FUZZ_CHECK(len > 0 && !gw_hs_hello_parse(raw, (size_t)len, &me), "own HELLO");
	if (peer.ncodecs == 0) /* only codecs this build does not know */
		return;
	rc1 = gw_hs_decide(&me, raw, (size_t)len, &peer, data, size, psk, &r1, err, sizeof(err));
	rc2 = gw_hs_decide(&peer, data, size, &me, raw, (size_t)len,
			   (peer.flags & GW_HS_F_HAS_KEY) ? psk : NULL, &r2, err2, sizeof(err2));
	FUZZ_CHECK(rc1 == rc2, "sides disagree: %d (%s) vs %d (%s)", rc1, err, rc2, err2);
	if (!rc1) {
		FUZZ_CHECK(r1.codec.ops->id == r2.codec.ops->id &&
				   !memcmp(&r1.codec.p, &r2.codec.p, sizeof(r1.codec.p)) &&
				   r1.mac == r2.mac && !memcmp(r1.transcript, r2.transcript, 32),
			   "sides decided differently");
		FUZZ_CHECK(!r1.mac || (!memcmp(r1.key_send, r2.key_recv, 32) &&
				       !memcmp(r1.key_recv, r2.key_send, 32)),
			   "session keys do not pair up");
	}
}

static void finished(const uint8_t *data, size_t size)
{
	struct gw_hs_result r = { .peer_rank = 3 };
	uint8_t want[GW_HS_FINISHED_MAX];
	char err[512];

	for (int mac = 0; mac < 2; mac++) {
		ssize_t len;
		int rc;

		r.mac = mac ? GW_MAC_HMAC_SHA256 : GW_MAC_NONE;
		memset(r.fin_peer, 0x5a, sizeof(r.fin_peer));
		memcpy(r.fin_mine, r.fin_peer, sizeof(r.fin_mine));
		rc = gw_hs_finished_check(&r, data, size, err, sizeof(err));
		FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -EKEYREJECTED || rc == -ECONNREFUSED,
			   "check: %d", rc);
		if (rc)
			continue;
		len = gw_hs_finished_build(&r, 0, NULL, want, sizeof(want));
		FUZZ_CHECK(len == (ssize_t)size && !memcmp(want, data, size),
			   "accepted a FINISHED we would not send");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] == 0)
		hello(data + 1, size - 1);
	else
		finished(data + 1, size - 1);
	return 0;
}
