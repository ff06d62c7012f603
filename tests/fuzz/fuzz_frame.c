/* SPDX-License-Identifier: MIT */
/*
 * fuzz_frame.c - gw_frame_open() on hostile bytes.
 *
 * Input: | alg u8 | slot u32 | seq u32 | frame |. The frame is opened with a
 * fixed key under that MAC algorithm (mod 3) for that (slot, seq). Checks:
 * no crash or overread; an accepted frame's body lies inside the input and
 * its length is what arrived; and an accepted frame is canonical: sealing
 * its header and body again reproduces the input bit for bit (so there is
 * no second encoding a verifier would also accept).
 */
#include "fuzz_common.h"
#include "frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t key[GW_MAC_KEY_LEN] = FUZZ_FRAME_KEY;
	struct gw_mac *m = NULL;
	struct gw_frame_hdr h;
	const uint8_t *body;
	enum gw_mac_alg alg;
	uint32_t slot, seq;
	uint8_t *again;
	ssize_t len;
	int rc;

	if (size < 9)
		return 0;
	alg = (enum gw_mac_alg)(data[0] % 3);
	memcpy(&slot, data + 1, 4);
	memcpy(&seq, data + 5, 4);
	data += 9;
	size -= 9;
	if (alg && gw_mac_create(alg, key, &m))
		abort();
	rc = gw_frame_open(m, alg, data, size, slot, seq, &h, &body);
	FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -EKEYREJECTED || rc == -EPROTO ||
			   rc == -EPROTONOSUPPORT,
		   "open: %d", rc);
	if (!rc) {
		FUZZ_CHECK(body == data + GW_FRAME_HDR &&
				   h.len == size - GW_FRAME_HDR - gw_mac_tag_len(alg),
			   "body outside");
		again = malloc(size);
		memcpy(again + GW_FRAME_HDR, body, h.len);
		len = gw_frame_seal(m, alg, &h, again, size);
		FUZZ_CHECK(len == (ssize_t)size && !memcmp(again, data, size),
			   "an accepted frame is not canonical");
		free(again);
	}
	gw_mac_destroy(m);
	return 0;
}
