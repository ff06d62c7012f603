/* SPDX-License-Identifier: MIT */
/*
 * ctx_send.c - sending on a context: tensors (encoded with error feedback,
 * or exact, gathered without a copy when the caller allows it), byte
 * messages, forwarded payloads, and sealing a frame for tests and tools.
 * A send's new residual is staged here and committed by its wait
 * (ctx_recv.c), so a failed send loses no gradient mass.
 */
#include <stdlib.h>
#include <string.h>
#include "ctx_impl.h"
#include "frame.h"
#include "residual_store.h"

static int scratch_reserve(struct gw_ctx *ctx, size_t need)
{
	void *p;

	if (need <= ctx->scratch_cap)
		return 0;
	if (posix_memalign(&p, 64, need))
		return -ENOMEM;
	free(ctx->scratch);
	ctx->scratch = p;
	ctx->scratch_cap = need;
	return 0;
}

/* A frame of flen bytes was posted on cs: account for it. */
static void sent_posted(struct gw_ctx *ctx, struct conn_slot *cs, uint8_t kind, size_t flen,
			struct gw_ctx_req *r)
{
	r->ctx = ctx;
	r->cs = cs;
	r->seq = cs->send_seq++;
	r->kind = kind;
	r->dir = OP_SEND;
	cs->sbusy = true;
	cs->c->st.wire_sent += (uint64_t)flen;
}

/* Seal the frame whose body is in cs->sbuf and post it. */
static int post_frame(struct gw_ctx *ctx, struct conn_slot *cs, uint8_t kind, uint8_t flags,
		      size_t body, struct gw_ctx_req *r)
{
	struct conn *c = cs->c;
	struct gw_frame_hdr h = { kind, flags, cs->slot, cs->send_seq, body, ctx->epoch };
	ssize_t flen = gw_frame_seal(c->tx, c->hs.mac, &h, cs->sbuf, cs->scap);
	int rc;

	if (flen < 0)
		return (int)flen;
	rc = gw_tp_isend(ctx->tp, c->peer, cs->slot, cs->send_seq, cs->sbuf, (size_t)flen, &r->tp);
	if (!rc)
		sent_posted(ctx, cs, kind, (size_t)flen, r);
	return rc;
}

/*
 * Post an exact tensor without copying it: the frame goes out gathered from
 * its header (and payload header) in cs->sbuf, x itself, and the tag, so x
 * must stay untouched until the send is waited for (GW_CTX_ZEROCOPY).
 */
static int post_gathered(struct gw_ctx *ctx, struct conn_slot *cs, const float *x, uint64_t n,
			 struct gw_ctx_req *r)
{
	struct conn *c = cs->c;
	struct gw_frame_hdr h = { GW_FRAME_TENSOR, 0, cs->slot, cs->send_seq, 0, ctx->epoch };
	size_t tag = gw_mac_tag_len(c->hs.mac), head;
	struct iovec iov[3];
	ssize_t len;
	int rc;

	rc = ctx_buf_reserve(ctx, &cs->sbuf, &cs->scap, &cs->smr,
			     GW_FRAME_HDR + GW_PAYLOAD_HDR + tag);
	if (rc)
		return rc;
	len = gw_payload_head_exact(n, cs->sbuf + GW_FRAME_HDR, cs->scap - GW_FRAME_HDR - tag);
	if (len < 0)
		return (int)len;
	head = GW_FRAME_HDR + (size_t)len;
	h.len = (size_t)len + n * sizeof(float);
	rc = gw_frame_seal_split(c->tx, c->hs.mac, &h, cs->sbuf, head, x, cs->sbuf + head);
	if (rc)
		return rc;
	iov[0] = (struct iovec){ cs->sbuf, head };
	iov[1] = (struct iovec){ (void *)(uintptr_t)x, n * sizeof(float) };
	iov[2] = (struct iovec){ cs->sbuf + head, tag };
	rc = gw_tp_isendv(ctx->tp, c->peer, cs->slot, cs->send_seq, iov, tag ? 3 : 2, &r->tp);
	if (!rc)
		sent_posted(ctx, cs, GW_FRAME_TENSOR, head + n * sizeof(float) + tag, r);
	return rc;
}

bool gw_ctx_compresses(const struct gw_ctx *ctx, int peer, uint64_t n)
{
	const struct gw_hs_result *hs = &ctx->conns[peer].hs;
	bool lossy = hs->codec.ops->lossy;

	for (int i = 0; hs->autoc && i < hs->nset; i++)
		lossy |= hs->set[i].ops->lossy;
	return lossy && n * sizeof(float) >= ctx->min_compress_bytes;
}

/* The codec a lossy send on c uses: the default, or under auto the one
 * GW_CTX_CODEC() in flags names when the set holds it. */
static const struct gw_codec *send_codec(const struct conn *c, unsigned flags)
{
	unsigned want = flags >> 8 & 0xffu;

	for (int i = 0; c->hs.autoc && want && i < c->hs.nset; i++)
		if (c->hs.set[i].ops->id == want - 1)
			return &c->hs.set[i];
	return &c->hs.codec;
}

int gw_ctx_isend(struct gw_ctx *ctx, int peer, uint32_t slot, const float *x, uint64_t n,
		 unsigned flags, struct gw_ctx_req *r)
{
	return gw_ctx_isend_sent(ctx, peer, slot, x, n, flags, NULL, r);
}

int gw_ctx_isend_sent(struct gw_ctx *ctx, int peer, uint32_t slot, const float *x, uint64_t n,
		      unsigned flags, float *sent, struct gw_ctx_req *r)
{
	const struct gw_codec *codec;
	struct gw_rstore_entry *e = NULL;
	struct conn_slot *cs;
	size_t tag, need;
	ssize_t len;
	int rc, reshaped;

	rc = ctx_req_begin(ctx, peer, slot, x, n, r, &cs);
	if (rc)
		return rc;
	if (cs->sbusy)
		return -EBUSY;
	codec = send_codec(cs->c, flags);
	r->lossy = (flags & GW_CTX_LOSSY) && gw_ctx_compresses(ctx, peer, n);
	/* `none` (auto chose it) over a residual of zeros sends x and leaves
	 * zeros: the exact frame, without error feedback's passes. */
	if (r->lossy && codec->ops->id == GW_CODEC_NONE &&
	    gw_rstore_zero(ctx->rs, (uint32_t)peer, slot, n))
		r->lossy = false;
	if (!r->lossy && sent == x) /* exact: the bits sent are x's own */
		sent = NULL;
	if (!r->lossy && !sent && (flags & GW_CTX_ZEROCOPY) && n * sizeof(float) >= GATHER_MIN &&
	    gw_tp_can_sendv(ctx->tp, 3)) {
		rc = post_gathered(ctx, cs, x, n, r);
		r->n = n;
		return rc;
	}
	if (!r->lossy)
		codec = &ctx->none;
	tag = gw_mac_tag_len(cs->c->hs.mac);
	need = gw_frame_bound(gw_payload_bound(codec, n), cs->c->hs.mac);
	rc = ctx_buf_reserve(ctx, &cs->sbuf, &cs->scap, &cs->smr, need);
	if (rc)
		return rc;
	if (r->lossy) {
		rc = gw_rstore_get(ctx->rs, (uint32_t)peer, slot, n, codec, &e, &reshaped);
		if (!rc)
			rc = gw_rstore_stage(e);
		if (!rc)
			rc = scratch_reserve(ctx, gw_codec_scratch_size(codec, n));
		if (rc)
			return rc;
		if (reshaped) {
			cs->c->st.residual_resets++;
			ctx_log(ctx, GW_LOG_WARN,
				"rank %d slot %u: a tensor of %llu values "
				"replaces the residual's shape; residual re-zeroed",
				peer, slot, (unsigned long long)n);
		}
		len = gw_payload_encode(codec, e->state, ctx->scratch, x, e->res.buf, e->staged, n,
					cs->sbuf + GW_FRAME_HDR, cs->scap - GW_FRAME_HDR - tag);
	} else {
		len = gw_payload_encode(codec, NULL, NULL, x, NULL, NULL, n,
					cs->sbuf + GW_FRAME_HDR, cs->scap - GW_FRAME_HDR - tag);
	}
	if (len < 0)
		return (int)len;
	if (sent) { /* what the peer will decode, from the same bytes */
		rc = gw_payload_decode(cs->sbuf + GW_FRAME_HDR, (size_t)len, sent, n);
		if (rc)
			return rc;
	}
	rc = post_frame(ctx, cs, GW_FRAME_TENSOR, r->lossy ? GW_FRAME_F_LOSSY : 0, (size_t)len, r);
	if (rc)
		return rc;
	if (e) {
		e->pending = 1;
		e->staged_zero = codec->ops->id == GW_CODEC_NONE;
	}
	r->res = e;
	r->n = n;
	return 0;
}

int gw_ctx_isend_bytes_hdr(struct gw_ctx *ctx, int peer, uint32_t slot, const void *head,
			   size_t hlen, const void *buf, size_t len, struct gw_ctx_req *r)
{
	struct conn_slot *cs;
	int rc;

	if (hlen > GW_MAX_ELEMS || (hlen && !head))
		return -EINVAL;
	rc = ctx_req_begin(ctx, peer, slot, buf, len, r, &cs);
	if (rc)
		return rc;
	if (len > GW_MAX_ELEMS - hlen)
		return -EINVAL;
	if (cs->sbusy)
		return -EBUSY;
	rc = ctx_buf_reserve(ctx, &cs->sbuf, &cs->scap, &cs->smr,
			     gw_frame_bound(hlen + len, cs->c->hs.mac));
	if (rc)
		return rc;
	if (hlen)
		memcpy(cs->sbuf + GW_FRAME_HDR, head, hlen);
	if (len)
		memcpy(cs->sbuf + GW_FRAME_HDR + hlen, buf, len);
	rc = post_frame(ctx, cs, GW_FRAME_BYTES, 0, hlen + len, r);
	r->n = hlen + len;
	return rc;
}

int gw_ctx_isend_bytes(struct gw_ctx *ctx, int peer, uint32_t slot, const void *buf, size_t len,
		       struct gw_ctx_req *r)
{
	return gw_ctx_isend_bytes_hdr(ctx, peer, slot, NULL, 0, buf, len, r);
}

int gw_ctx_isend_fwd(struct gw_ctx *ctx, int peer, uint32_t slot, const struct gw_ctx_req *from,
		     struct gw_ctx_req *r)
{
	struct conn_slot *cs;
	struct gw_payload p;
	int rc;

	if (!from || from->dir != OP_RECV || from->kind != GW_FRAME_TENSOR || !from->payload ||
	    gw_payload_parse(from->payload, from->payload_len, &p))
		return -EINVAL;
	rc = ctx_req_begin(ctx, peer, slot, from->payload, p.n, r, &cs);
	if (rc)
		return rc;
	if (p.id != GW_CODEC_NONE && send_codec(cs->c, GW_CTX_CODEC(p.id))->ops->id != p.id)
		return -EPROTO;
	if (cs->sbusy)
		return -EBUSY;
	rc = ctx_buf_reserve(ctx, &cs->sbuf, &cs->scap, &cs->smr,
			     gw_frame_bound(from->payload_len, cs->c->hs.mac));
	if (rc)
		return rc;
	memcpy(cs->sbuf + GW_FRAME_HDR, from->payload, from->payload_len);
	rc = post_frame(ctx, cs, GW_FRAME_TENSOR, p.id != GW_CODEC_NONE ? GW_FRAME_F_LOSSY : 0,
			from->payload_len, r);
	r->n = p.n;
	return rc;
}

ssize_t gw_ctx_seal(struct gw_ctx *ctx, int peer, uint8_t kind, uint8_t flags, uint32_t slot,
		    uint32_t seq, const void *body, size_t len, uint8_t *out, size_t cap)
{
	struct gw_frame_hdr h = { kind, flags, slot, seq, len, ctx->epoch };
	struct conn *c;

	if (peer < 0 || peer >= ctx->size || peer == ctx->rank || cap < GW_FRAME_HDR ||
	    cap - GW_FRAME_HDR < len)
		return -EINVAL;
	c = &ctx->conns[peer];
	memmove(out + GW_FRAME_HDR, body, len);
	return gw_frame_seal(c->tx, c->hs.mac, &h, out, cap);
}
