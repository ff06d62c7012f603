/* SPDX-License-Identifier: MIT */
/*
 * frame.c - sealing and opening frames (layout in frame.h).
 *
 * Opening trusts nothing. The tag sits at the end of what arrived and its
 * length follows from the connection's algorithm, not from the frame, so the
 * MAC is checked before any header field is believed; only then are magic,
 * version, kind, flags, the body length (must equal what
 * arrived) and the expected slot and sequence number checked.
 */
#include <errno.h>
#include <string.h>
#include "../common/bytes.h"
#include "frame.h"

size_t gw_frame_bound(size_t body_len, enum gw_mac_alg alg)
{
	return GW_FRAME_HDR + body_len + gw_mac_tag_len(alg);
}

int gw_frame_seal_split(struct gw_mac *m, enum gw_mac_alg alg, const struct gw_frame_hdr *h,
			uint8_t *head, size_t head_len, const void *tail, uint8_t *tag)
{
	size_t tail_len = GW_FRAME_HDR + h->len - head_len;
	struct iovec iov[2] = { { head, head_len }, { (void *)(uintptr_t)tail, tail_len } };

	if ((alg != GW_MAC_NONE) != (m != NULL) || (alg != GW_MAC_NONE && !gw_mac_tag_len(alg)))
		return -EINVAL;
	if ((h->kind != GW_FRAME_TENSOR && h->kind != GW_FRAME_BYTES) || head_len < GW_FRAME_HDR ||
	    head_len - GW_FRAME_HDR > h->len || (tail_len && !tail))
		return -EINVAL;
	gw_put32(head, GW_FRAME_MAGIC);
	head[4] = GW_FRAME_VERSION;
	head[5] = h->kind;
	head[6] = (uint8_t)alg;
	head[7] = h->flags;
	gw_put32(head + 8, h->slot);
	gw_put32(head + 12, h->epoch);
	gw_put64(head + 16, h->seq);
	gw_put64(head + 24, h->len);
	return m ? gw_mac_sign(m, h->seq, h->slot, iov, tail_len ? 2 : 1, tag) : 0;
}

ssize_t gw_frame_seal(struct gw_mac *m, enum gw_mac_alg alg, const struct gw_frame_hdr *h,
		      uint8_t *frame, size_t cap)
{
	size_t tag = gw_mac_tag_len(alg);
	int rc;

	if (h->len > cap || cap - h->len < GW_FRAME_HDR + tag)
		return -ENOSPC;
	rc = gw_frame_seal_split(m, alg, h, frame, GW_FRAME_HDR + h->len, NULL,
				 frame + GW_FRAME_HDR + h->len);
	return rc ? rc : (ssize_t)(GW_FRAME_HDR + h->len + tag);
}

int gw_frame_open(struct gw_mac *m, enum gw_mac_alg alg, const uint8_t *frame, size_t len,
		  uint32_t want_slot, uint64_t want_seq, struct gw_frame_hdr *h,
		  const uint8_t **body)
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
	if (gw_get32(frame) != GW_FRAME_MAGIC)
		return -EBADMSG;
	if (frame[4] != GW_FRAME_VERSION)
		return -EPROTONOSUPPORT;
	h->kind = frame[5];
	h->flags = frame[7];
	h->slot = gw_get32(frame + 8);
	h->seq = gw_get64(frame + 16);
	h->len = gw_get64(frame + 24);
	h->epoch = gw_get32(frame + 12);
	if ((h->kind != GW_FRAME_TENSOR && h->kind != GW_FRAME_BYTES) || frame[6] != (uint8_t)alg ||
	    (h->flags & ~GW_FRAME_F_LOSSY) || h->len != len - GW_FRAME_HDR - tag)
		return -EBADMSG;
	if (h->slot != want_slot || h->seq != want_seq)
		return -EPROTO;
	*body = frame + GW_FRAME_HDR;
	return 0;
}
