/* SPDX-License-Identifier: MIT */
/*
 * payload.c - the self-describing payload around a codec section.
 *
 *  0      1      2      3      4             8                16
 *  +------+------+------+------+-------------+----------------+
 *  | ver  | id   | dtype| flags| reserved=0  | n (u64)        |
 *  +------+------+------+------+-------------+----------------+
 * 16                       24
 *  | section length (u64)  |
 *  +-----------------------+
 *  [if flags & NONFINITE, 16 bytes:
 *     index u64 (< n) | value bits u32 (NaN or Inf) | reserved u32 = 0]
 *  section (codec parameters + data): exactly `section length` bytes
 *
 * All fields little-endian. Nothing may follow the section. The NONFINITE
 * record carries the first NaN/Inf of the encoded tensor so that every codec,
 * even one whose format cannot represent it (int8, top-k), delivers a tensor
 * in which the receiver's overflow check still fires; the decoder writes the
 * value at its index after the codec's own decode. A `none` section holds
 * every value as itself, so a `none` payload has no record: its header is
 * always GW_PAYLOAD_HDR bytes, which lets an exact frame be sent from, and
 * received into, the caller's buffer (transport/ctx_recv.c).
 *
 * The parser trusts nothing: every field is range-checked before use and the
 * codec's decoder checks the section against n before it writes a byte.
 */
#include "codec_impl.h"

size_t gw_payload_bound(const struct gw_codec *c, uint64_t n)
{
	return GW_PAYLOAD_HDR + GW_PAYLOAD_NONFINITE_REC + c->ops->bound(c, n);
}

/* Write the header (and the non-finite record, if info has one) of a
 * payload of codec id, n values and a section of len bytes: its length. */
static ssize_t put_head(uint8_t *o, uint8_t id, const struct gw_enc_info *info, uint64_t n,
			uint64_t len)
{
	o[0] = GW_PAYLOAD_VERSION;
	o[1] = id;
	o[2] = GW_DTYPE_F32;
	o[3] = (uint8_t)info->flags;
	gw_put32(o + 4, 0);
	gw_put64(o + 8, n);
	gw_put64(o + 16, len);
	if (!(info->flags & GW_PF_NONFINITE))
		return GW_PAYLOAD_HDR;
	gw_put64(o + 24, info->nonfinite_index);
	gw_put32(o + 32, info->nonfinite_bits);
	gw_put32(o + 36, 0);
	return GW_PAYLOAD_HDR + GW_PAYLOAD_NONFINITE_REC;
}

ssize_t gw_payload_encode(const struct gw_codec *c, void *state, void *scratch, const float *x,
			  const float *res, float *res_out, uint64_t n, void *out, size_t cap)
{
	struct gw_enc_info info = { 0 };
	uint8_t *o = out;
	ssize_t len;

	if (!gw_enc_args_ok(x, res, res_out, n) || !out)
		return -EINVAL;
	if (cap < GW_PAYLOAD_HDR + GW_PAYLOAD_NONFINITE_REC)
		return -ENOSPC;
	/* Encode in place for the common case; keep room to slide the
	 * section 16 bytes on in the rare one that needs the record. */
	len = c->ops->encode(c, state, scratch, x, res, res_out, n, o + GW_PAYLOAD_HDR,
			     cap - GW_PAYLOAD_HDR - GW_PAYLOAD_NONFINITE_REC, &info);
	if (len < 0)
		return len;
	if (info.flags & GW_PF_NONFINITE)
		memmove(o + GW_PAYLOAD_HDR + GW_PAYLOAD_NONFINITE_REC, o + GW_PAYLOAD_HDR,
			(size_t)len);
	return put_head(o, c->ops->id, &info, n, (uint64_t)len) + len;
}

ssize_t gw_payload_head_exact(uint64_t n, void *out, size_t cap)
{
	static const struct gw_enc_info none_info;

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
	return -EOPNOTSUPP; /* the section would need byte swapping */
#endif
	if (!out || n > GW_MAX_ELEMS)
		return -EINVAL;
	if (cap < GW_PAYLOAD_HDR)
		return -ENOSPC;
	return put_head(out, GW_CODEC_NONE, &none_info, n, n * 4);
}

int gw_payload_parse(const void *buf, size_t len, struct gw_payload *p)
{
	const uint8_t *b = buf;
	size_t off = GW_PAYLOAD_HDR;

	if (!b || len < GW_PAYLOAD_HDR)
		return -EBADMSG;
	p->version = b[0];
	p->id = b[1];
	p->dtype = b[2];
	p->flags = b[3];
	if (p->version != GW_PAYLOAD_VERSION)
		return -EPROTONOSUPPORT;
	if (p->dtype != GW_DTYPE_F32 || (p->flags & ~GW_PF_KNOWN) || gw_get32(b + 4) != 0)
		return -EBADMSG;
	p->n = gw_get64(b + 8);
	if (p->n > GW_MAX_ELEMS)
		return -EBADMSG;
	p->nonfinite_index = 0;
	p->nonfinite_bits = 0;
	if (p->flags & GW_PF_NONFINITE) {
		if (len - off < GW_PAYLOAD_NONFINITE_REC)
			return -EBADMSG;
		p->nonfinite_index = gw_get64(b + off);
		p->nonfinite_bits = gw_get32(b + off + 8);
		if (p->nonfinite_index >= p->n || !gw_nonfinite(gw_u2f(p->nonfinite_bits)) ||
		    gw_get32(b + off + 12) != 0)
			return -EBADMSG;
		off += GW_PAYLOAD_NONFINITE_REC;
	}
	if (gw_get64(b + 16) != len - off)
		return -EBADMSG;
	p->section = b + off;
	p->section_len = len - off;
	p->ops = gw_codec_find_id(p->id);
	if (!p->ops)
		return -EPROTONOSUPPORT;
	return 0;
}

static int decode(const void *buf, size_t len, float *y, uint64_t n, int add)
{
	struct gw_payload p;
	float old = 0;
	int rc = gw_payload_parse(buf, len, &p);

	if (rc)
		return rc;
	if (p.n != n || (n && !y))
		return -EBADMSG;
	/* The record replaces what the codec decodes at its index, so that
	 * decode_add(acc) == acc + decode() whatever the section holds there. */
	if (p.flags & GW_PF_NONFINITE)
		old = y[p.nonfinite_index];
	rc = add ? p.ops->decode_add(p.section, p.section_len, n, y)
		 : p.ops->decode(p.section, p.section_len, n, y);
	if (rc)
		return rc;
	/* decode stores the record's bits as bits: a select between old + v
	 * and v may legally become v + (add ? old : -0.0), quieting an sNaN
	 * (clang does this). */
	if ((p.flags & GW_PF_NONFINITE) && add)
		y[p.nonfinite_index] = old + gw_u2f(p.nonfinite_bits);
	else if (p.flags & GW_PF_NONFINITE)
		memcpy(&y[p.nonfinite_index], &p.nonfinite_bits, 4);
	return 0;
}

int gw_payload_decode(const void *buf, size_t len, float *y, uint64_t n)
{
	return decode(buf, len, y, n, 0);
}

int gw_payload_decode_add(const void *buf, size_t len, float *acc, uint64_t n)
{
	return decode(buf, len, acc, n, 1);
}
