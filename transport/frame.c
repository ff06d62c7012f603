/* SPDX-License-Identifier: MIT */
/*
 * frame.c - sealing and opening frames (layout in frame.h).
 *
 * Opening trusts nothing. The tag sits at the end of what arrived and its
 * length follows from the connection's algorithm, not from the frame, so the
 * MAC is checked before any header field is believed; only then are magic,
 * version, kind, flags, reserved bits, the body length (must equal what
 * arrived) and the expected slot and sequence number checked.
 */
#include <errno.h>
#include <string.h>
#include "frame.h"

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

size_t gw_frame_bound(size_t body_len, enum gw_mac_alg alg)
{
	return GW_FRAME_HDR + body_len + gw_mac_tag_len(alg);
}

ssize_t gw_frame_seal(struct gw_mac *m, enum gw_mac_alg alg,
		      const struct gw_frame_hdr *h, uint8_t *frame, size_t cap)
{
	size_t tag = gw_mac_tag_len(alg), total;
	struct iovec iov;
	int rc;

	if ((alg != GW_MAC_NONE) != (m != NULL) || (alg != GW_MAC_NONE && !tag))
		return -EINVAL;
	if (h->kind != GW_FRAME_TENSOR && h->kind != GW_FRAME_BYTES)
		return -EINVAL;
	if (h->len > cap || cap - h->len < GW_FRAME_HDR + tag)
		return -ENOSPC;
	total = GW_FRAME_HDR + h->len + tag;
	put32(frame, GW_FRAME_MAGIC);
	frame[4] = GW_FRAME_VERSION;
	frame[5] = h->kind;
	frame[6] = (uint8_t)alg;
	frame[7] = h->flags;
	put32(frame + 8, h->slot);
	put32(frame + 12, 0);
	put64(frame + 16, h->seq);
	put64(frame + 24, h->len);
	if (m) {
		iov.iov_base = frame;
		iov.iov_len = GW_FRAME_HDR + h->len;
		rc = gw_mac_sign(m, h->seq, h->slot, &iov, 1,
				 frame + GW_FRAME_HDR + h->len);
		if (rc)
			return rc;
	}
	return (ssize_t)total;
}

int gw_frame_open(struct gw_mac *m, enum gw_mac_alg alg, const uint8_t *frame,
		  size_t len, uint32_t want_slot, uint64_t want_seq,
		  struct gw_frame_hdr *h, const uint8_t **body)
{
	size_t tag = gw_mac_tag_len(alg);
	struct iovec iov;

	if ((alg != GW_MAC_NONE) != (m != NULL))
		return -EINVAL;
	if (!frame || len < GW_FRAME_HDR + tag)
		return -EBADMSG;
	if (m) {
		/* The (seq, slot) inside the MAC is the one we posted for:
		 * a replayed, reordered or misrouted frame cannot verify. */
		iov.iov_base = (void *)frame;
		iov.iov_len = len - tag;
		if (gw_mac_verify(m, want_seq, want_slot, &iov, 1, frame + len - tag))
			return -EKEYREJECTED;
	}
	if (get32(frame) != GW_FRAME_MAGIC)
		return -EBADMSG;
	if (frame[4] != GW_FRAME_VERSION)
		return -EPROTONOSUPPORT;
	h->kind = frame[5];
	h->flags = frame[7];
	h->slot = get32(frame + 8);
	h->seq = get64(frame + 16);
	h->len = get64(frame + 24);
	if ((h->kind != GW_FRAME_TENSOR && h->kind != GW_FRAME_BYTES) ||
	    frame[6] != (uint8_t)alg || (h->flags & ~GW_FRAME_F_LOSSY) ||
	    get32(frame + 12) != 0 || h->len != len - GW_FRAME_HDR - tag)
		return -EBADMSG;
	if (h->slot != want_slot || h->seq != want_seq)
		return -EPROTO;
	*body = frame + GW_FRAME_HDR;
	return 0;
}
