/* SPDX-License-Identifier: MIT */
/*
 * frame.h - the frame every transport message travels in.
 *
 *  0         4      5      6      7      8          12         16
 *  +---------+------+------+------+------+----------+----------+
 *  | "GWF1"  | ver  | kind | mac  | flags| slot u32 | epoch u32|
 *  +---------+------+------+------+------+----------+----------+
 * 16                  24                  32
 *  | seq u64          | body length u64  | body ... | tag |
 *  +------------------+------------------+----------+-----+
 *
 * kind: GW_FRAME_TENSOR (the body is a codec payload, codec/payload.c) or
 * GW_FRAME_BYTES (exact bytes). mac: the connection's negotiated algorithm;
 * the tag (gw_mac_tag_len(mac) bytes, none when off) covers the sequence
 * number, the header and the body, under the sending direction's session key.
 * flags: bit 0 LOSSY (the sender allowed a lossy codec); others reserved 0.
 * epoch: the sender's membership epoch (gw_ctx_reform(); 0 for a context
 * never re-formed). Opening returns it; the receiver refuses another epoch's.
 *
 * The receiver knows which (slot, seq) it posted for and which MAC the
 * connection uses; it verifies the tag FIRST, then every header field.
 */
#ifndef GW_FRAME_H
#define GW_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "mac.h"

#define GW_FRAME_MAGIC 0x31465747u /* "GWF1" little-endian */
#define GW_FRAME_VERSION 1
#define GW_FRAME_HDR 32

enum gw_frame_kind {
	GW_FRAME_TENSOR = 1,
	GW_FRAME_BYTES = 2,
};

#define GW_FRAME_F_LOSSY 0x01u

struct gw_frame_hdr {
	uint8_t kind;
	uint8_t flags;
	uint32_t slot;
	uint64_t seq;
	uint64_t len;	/* body bytes */
	uint32_t epoch; /* the sender's membership epoch */
};

/** gw_frame_bound() - frame bytes for a body of body_len under alg. */
size_t gw_frame_bound(size_t body_len, enum gw_mac_alg alg);

/**
 * gw_frame_seal() - complete a frame whose body the caller already wrote at
 * frame + GW_FRAME_HDR (h->len bytes): write the header and append the tag.
 * @m: the sending direction's MAC, or NULL when alg is GW_MAC_NONE.
 * Return: total frame bytes, -ENOSPC, -EINVAL, -EIO.
 */
ssize_t gw_frame_seal(struct gw_mac *m, enum gw_mac_alg alg, const struct gw_frame_hdr *h,
		      uint8_t *frame, size_t cap);

/**
 * gw_frame_seal_split() - gw_frame_seal() of a frame kept in two pieces:
 * head[0..head_len) holds room for the header and the start of the body,
 * tail the rest of the body (GW_FRAME_HDR + h->len - head_len bytes); the
 * tag goes to tag. The frame on the wire is head, tail, tag (a gathered
 * send, so a large body is never copied). Return: 0, -EINVAL, -EIO.
 */
int gw_frame_seal_split(struct gw_mac *m, enum gw_mac_alg alg, const struct gw_frame_hdr *h,
			uint8_t *head, size_t head_len, const void *tail, uint8_t *tag);

/**
 * gw_frame_open() - authenticate and parse a hostile frame of len bytes.
 * @m, @alg: the receiving direction's MAC and the connection's algorithm.
 * @want_slot, @want_seq: what this receive was posted for.
 * On success h is filled (h->epoch as sent: the caller compares it with
 * its own) and *body points into frame. Without a MAC only
 * frame[0..GW_FRAME_HDR) is read, so a frame received scattered (its
 * header apart from its body) is opened from the header with len the
 * whole frame's length.
 * Return: 0; -EKEYREJECTED (the tag does not verify: tampered, replayed,
 * reordered, misrouted or another session's frame); -EBADMSG (short, or a
 * bad field); -EPROTO (with the MAC off: wrong slot or sequence number);
 * -EPROTONOSUPPORT (version).
 */
int gw_frame_open(struct gw_mac *m, enum gw_mac_alg alg, const uint8_t *frame, size_t len,
		  uint32_t want_slot, uint64_t want_seq, struct gw_frame_hdr *h,
		  const uint8_t **body);

#endif
