/* SPDX-License-Identifier: MIT */
/*
 * ctx_recv.c - receiving on a context, and completing requests: post a
 * receive at the frame's bound (or straight into the caller's buffer),
 * deliver (MAC first, then every header field, then decode), wait (which
 * also commits or drops a send's residual), abort, and receive-from-any
 * with the withdrawal of the losing receives.
 */
#include <stdlib.h>
#include <string.h>
#include "../common/bytes.h"
#include "ctx_impl.h"
#include "frame.h"
#include "residual_store.h"

/*
 * Post a receive of a frame of at most need bytes into cs->rbuf; or, when
 * direct, of exactly an exact payload of n values: its frame and payload
 * headers into cs->rbuf, the values straight into dst.
 */
static int post_recv(struct gw_ctx *ctx, struct conn_slot *cs, uint8_t kind, void *dst, uint64_t n,
		     size_t need, int add, bool direct, struct gw_ctx_req *r)
{
	struct iovec iov[2];
	int rc;

	if (cs->rbusy)
		return -EBUSY;
	r->ctx = ctx;
	r->cs = cs;
	r->dst = dst;
	r->n = n;
	r->kind = kind;
	r->dir = OP_RECV;
	r->add = (uint8_t)add;
	r->direct = direct && !cs->stash; /* a stashed frame is whole */
	if (cs->stash) {
		/* Already here (recv_any withdrew it after it arrived): it
		 * holds the sequence number consumed when it was posted. */
		r->seq = cs->recv_seq - 1;
		cs->rbusy = true;
		return 0;
	}
	r->seq = cs->recv_seq;
	rc = ctx_buf_reserve(ctx, &cs->rbuf, &cs->rcap, &cs->rmr, need);
	if (rc)
		return rc;
	if (r->direct) {
		iov[0] = (struct iovec){ cs->rbuf, need };
		iov[1] = (struct iovec){ dst, n * sizeof(float) };
		rc = gw_tp_irecvv(ctx->tp, cs->c->peer, cs->slot, cs->recv_seq, iov, 2, &r->tp);
	} else {
		rc = gw_tp_irecv(ctx->tp, cs->c->peer, cs->slot, cs->recv_seq, cs->rbuf, cs->rcap,
				 &r->tp);
	}
	if (rc)
		return rc;
	cs->rbusy = true;
	cs->recv_seq++;
	return 0;
}

/* Receive bound: the largest of the negotiated codecs' (auto: any of the
 * set may come) and `none`'s (small or exact tensors). */
static size_t tensor_bound(const struct conn *c, const struct gw_codec *none, uint64_t n)
{
	size_t b = gw_payload_bound(none, n);

	for (int i = 0; i < c->hs.nset; i++) {
		size_t a = gw_payload_bound(&c->hs.set[i], n);

		b = a > b ? a : b;
	}
	return gw_frame_bound(b, c->hs.mac);
}

/* Whether a lossy frame may carry codec id on c: the negotiated one, or
 * any of the set under auto. */
static bool codec_agreed(const struct conn *c, unsigned id)
{
	for (int i = 0; i < c->hs.nset; i++)
		if (c->hs.set[i].ops->id == id)
			return true;
	return false;
}

/* A tensor frame of flen bytes and n values of codec id arrived at t (ns):
 * what auto's rate comes from (gw_ctx_flow_take()). */
static void flow_add(struct conn *c, size_t flen, uint64_t n, unsigned id, int64_t t)
{
	struct gw_ctx_flow *f = &c->flow;

	if (!c->hs.autoc || !t)
		return;
	if (!f->frames || t < f->t_first) {
		f->first_bytes = flen;
		f->t_first = t;
	}
	f->t_last = t > f->t_last ? t : f->t_last;
	f->frames++;
	f->bytes += flen;
	if (id < GW_FLOW_CODECS)
		f->values[id] += n;
}

int gw_ctx_irecv(struct gw_ctx *ctx, int peer, uint32_t slot, float *y, uint64_t n, unsigned flags,
		 struct gw_ctx_req *r)
{
	struct conn_slot *cs;
	bool direct;
	int rc;

	rc = ctx_req_begin(ctx, peer, slot, y, n, r, &cs);
	if (rc)
		return rc;
	direct = (flags & (GW_CTX_ZEROCOPY | GW_CTX_ADD)) == GW_CTX_ZEROCOPY &&
		 cs->c->hs.mac == GW_MAC_NONE && n * sizeof(float) >= GATHER_MIN &&
		 gw_tp_can_recvv(ctx->tp, 2);
	return post_recv(ctx, cs, GW_FRAME_TENSOR, y, n,
			 direct ? GW_FRAME_HDR + GW_PAYLOAD_HDR
				: tensor_bound(cs->c, &ctx->none, n),
			 !!(flags & GW_CTX_ADD), direct, r);
}

int gw_ctx_irecv_bytes(struct gw_ctx *ctx, int peer, uint32_t slot, void *buf, size_t len,
		       struct gw_ctx_req *r)
{
	struct conn_slot *cs;
	int rc;

	rc = ctx_req_begin(ctx, peer, slot, buf, len, r, &cs);
	if (rc)
		return rc;
	return post_recv(ctx, cs, GW_FRAME_BYTES, buf, len, gw_frame_bound(len, cs->c->hs.mac), 0,
			 false, r);
}

int gw_ctx_irecv_frame(struct gw_ctx *ctx, int peer, uint32_t slot, size_t cap,
		       struct gw_ctx_req *r)
{
	struct conn_slot *cs;
	int rc;

	rc = ctx_req_begin(ctx, peer, slot, NULL, 0, r, &cs);
	if (rc)
		return rc;
	if (cap > GW_MAX_ELEMS)
		return -EINVAL;
	rc = post_recv(ctx, cs, GW_FRAME_BYTES, NULL, cap, gw_frame_bound(cap, cs->c->hs.mac), 0,
		       false, r);
	r->upto = 1;
	return rc;
}

/*
 * A frame whose MAC failed: one of another epoch of this link, sealed under
 * that epoch's keys (as its header claims, which the MAC then proves)? The
 * sender then lives in the past (a frame it sent before a re-form, or a
 * replay), and the refusal says so. Only epochs of this link's life.
 */
static bool stale(const struct gw_ctx *ctx, const struct conn *c, const uint8_t *f, size_t flen,
		  uint32_t slot, uint32_t seq, struct gw_frame_hdr *h)
{
	uint32_t claim = flen >= GW_FRAME_HDR ? gw_get32(f + 12) : ctx->epoch;
	struct gw_mac *m;
	const uint8_t *body;
	bool yes;

	if (claim == ctx->epoch || claim < c->born || claim > ctx->epoch ||
	    gw_mac_create_epoch(c->hs.mac, c->hs.key_recv, c->born, claim, &m))
		return false;
	yes = !gw_frame_open(m, c->hs.mac, f, flen, slot, seq, h, &body);
	gw_mac_destroy(m);
	return yes;
}

static const char *stale_why(const struct gw_ctx *ctx, uint32_t epoch)
{
	static _Thread_local char why[96];

	snprintf(why, sizeof(why), "a frame of epoch %u; this context is in epoch %u", epoch,
		 ctx->epoch);
	return why;
}

/* Authenticate, check and deliver a received frame of flen bytes in cs
 * (a direct receive: its headers in cs->rbuf, the values already in dst). */
static int deliver(struct gw_ctx *ctx, struct gw_ctx_req *r, struct conn_slot *cs, size_t flen)
{
	struct conn *c = cs->c;
	struct gw_frame_hdr h;
	struct gw_payload p;
	const uint8_t *body;
	uint8_t head[GW_PAYLOAD_HDR];
	const char *why;
	int rc;

	rc = -EPROTO;
	why = "not the exact payload of the length posted for";
	if (r->direct && flen != GW_FRAME_HDR + GW_PAYLOAD_HDR + r->n * sizeof(float))
		goto reject;
	rc = gw_frame_open(c->rx, c->hs.mac, cs->rbuf, flen, cs->slot, r->seq, &h, &body);
	if (rc == -EKEYREJECTED && stale(ctx, c, cs->rbuf, flen, cs->slot, r->seq, &h))
		rc = -ESTALE;
	else if (!rc && h.epoch != ctx->epoch)
		rc = -ESTALE;
	if (rc) {
		why = rc == -EKEYREJECTED ? "its MAC does not verify"
		      : rc == -EPROTO	  ? "wrong slot or sequence number"
		      : rc == -ESTALE	  ? stale_why(ctx, h.epoch)
					  : "malformed header";
		goto reject;
	}
	rc = -EPROTO;
	why = "a frame of another kind";
	if (h.kind != r->kind)
		goto reject;
	if (r->direct) { /* exactly gw_payload_head_exact()'s header */
		why = "not an exact payload of the values posted for";
		if (h.flags || gw_payload_head_exact(r->n, head, sizeof(head)) != GW_PAYLOAD_HDR ||
		    memcmp(head, body, sizeof(head)))
			goto reject;
		goto accept;
	}
	if (h.kind == GW_FRAME_BYTES) {
		why = r->upto ? "a byte message longer than the receive posted for"
			      : "a byte message of another length";
		if (r->upto ? h.len > r->n : h.len != r->n)
			goto reject;
		r->n = h.len;
		if (!r->dst) { /* gw_ctx_irecv_frame(): left in the frame */
			r->payload = body;
			r->payload_len = h.len;
		} else if (h.len) {
			memcpy(r->dst, body, h.len);
		}
		goto accept;
	}
	rc = gw_payload_parse(body, h.len, &p);
	why = "malformed payload header";
	if (rc)
		goto reject;
	rc = -EPROTO;
	why = "a codec the connection did not negotiate";
	if (p.id != GW_CODEC_NONE && (!codec_agreed(c, p.id) || !(h.flags & GW_FRAME_F_LOSSY)))
		goto reject;
	rc = r->add ? gw_payload_decode_add(body, h.len, r->dst, r->n)
		    : gw_payload_decode(body, h.len, r->dst, r->n);
	why = "a payload that does not decode to the expected tensor";
	if (rc)
		goto reject;
	r->payload = body;
	r->payload_len = h.len;
	flow_add(c, flen, r->n, p.id, r->tp.done_ns);
accept:
	c->st.frames_recv++;
	c->st.wire_recv += flen;
	c->st.raw_recv += r->kind == GW_FRAME_BYTES ? r->n : r->n * sizeof(float);
	return 0;
reject:
	if (rc == -EKEYREJECTED)
		c->st.mac_failures++;
	else
		c->st.rejected++;
	ctx_log(ctx, GW_LOG_ERROR, "frame from rank %d (slot %u, seq %u) rejected: %s (%s)",
		c->peer, cs->slot, r->seq, why, gw_strerror(rc));
	return rc;
}

static void failed(struct gw_ctx *ctx, int peer, enum tp_op_dir dir)
{
	int lost = gw_tp_lost_peer(ctx->tp);

	if (lost >= 0) /* a peer gone ended it: name that one */
		peer = lost;
	if (ctx->failed_peer < 0) {
		ctx->failed_peer = peer;
		ctx->failed_dir = dir;
	}
}

/* Why a request with peer ended, when another rank's loss ended it. */
static const char *lost_why(struct gw_ctx *ctx, int peer)
{
	static _Thread_local char why[64];
	int lost = gw_tp_lost_peer(ctx->tp);

	if (lost < 0 || lost == peer)
		return "";
	snprintf(why, sizeof(why), " (ended: rank %d is gone)", lost);
	return why;
}

/* gw_ctx_wait() with timeout_ms left (0: only what has completed). */
static int wait_for(struct gw_ctx *ctx, struct gw_ctx_req *r, int timeout_ms)
{
	struct conn_slot *cs = r->cs;
	ssize_t got;

	if (!cs || r->ctx != ctx)
		return -EINVAL;
	if (r->dir == OP_RECV && cs->stash) {
		got = (ssize_t)cs->stash;
		cs->stash = 0;
	} else {
		got = gw_tp_wait(ctx->tp, &r->tp, timeout_ms);
	}
	r->cs = NULL;
	if (r->dir == OP_SEND) {
		cs->sbusy = false;
		if (got < 0) {
			if (r->res)
				gw_rstore_abort(r->res);
			cs->c->st.errors += got != -ETIMEDOUT;
			cs->c->st.timeouts += got == -ETIMEDOUT;
			ctx_log(ctx, GW_LOG_ERROR, "send to rank %d (slot %u) failed: %s%s",
				cs->c->peer, cs->slot, gw_strerror((int)got),
				lost_why(ctx, cs->c->peer));
			failed(ctx, cs->c->peer, OP_SEND);
			return (int)got;
		}
		if (r->res)
			gw_rstore_commit(r->res);
		cs->c->st.frames_sent++;
		cs->c->st.raw_sent += r->kind == GW_FRAME_BYTES ? r->n : r->n * sizeof(float);
		return 0;
	}
	cs->rbusy = false;
	if (got < 0) {
		cs->c->st.errors += got != -ETIMEDOUT;
		cs->c->st.timeouts += got == -ETIMEDOUT;
		ctx_log(ctx, GW_LOG_ERROR, "receive from rank %d (slot %u) failed: %s%s",
			cs->c->peer, cs->slot, gw_strerror((int)got), lost_why(ctx, cs->c->peer));
		failed(ctx, cs->c->peer, OP_RECV);
		return (int)got;
	}
	return deliver(ctx, r, cs, (size_t)got);
}

int gw_ctx_wait(struct gw_ctx *ctx, struct gw_ctx_req *r)
{
	return wait_for(ctx, r, ctx->timeout_ms);
}

/*
 * One deadline for all n: requests to dead peers cost the timeout once, not
 * once each. Until it, waiting only moves the transport; the requests still
 * late then are withdrawn together, in one drain. (Finishing each in turn
 * drained twice: once for the request whose wait ran into the deadline, once
 * more for all the others, up to 2 x 500 ms past it.)
 */
int gw_ctx_waitall(struct gw_ctx *ctx, struct gw_ctx_req *r, size_t n)
{
	int64_t deadline = gw_now_ms() + ctx->timeout_ms, left;
	int first = 0;

	if (n == 1) /* alone, its own wait withdraws it */
		return r->cs ? wait_for(ctx, r, ctx->timeout_ms) : 0;
	for (size_t i = 0; i < n; i++)
		while (r[i].cs && gw_ctx_test(ctx, &r[i]) == 0 &&
		       (left = deadline - gw_now_ms()) > 0)
			if (gw_ctx_progress(ctx, (int)left) < 0)
				goto late; /* the CQ failed: the waits below say how */
late:
	for (size_t i = 0; i < n; i++)
		if (r[i].cs && gw_ctx_test(ctx, &r[i]) == 0)
			gw_ctx_abort_begin(ctx, &r[i]);
	for (size_t i = 0; i < n; i++) {
		int rc = r[i].cs ? wait_for(ctx, &r[i], 0) : 0;

		if (rc && !first)
			first = rc;
	}
	return first;
}

int gw_ctx_test(struct gw_ctx *ctx, struct gw_ctx_req *r)
{
	if (!r->cs || r->ctx != ctx)
		return -EINVAL;
	if (r->dir == OP_RECV && r->cs->stash)
		return 1;
	return gw_tp_test(ctx->tp, &r->tp);
}

int gw_ctx_progress(struct gw_ctx *ctx, int timeout_ms)
{
	int rc = gw_tp_progress(ctx->tp, timeout_ms);

	return rc < 0 ? rc : 0;
}

int gw_ctx_req_retarget(struct gw_ctx_req *r, void *buf)
{
	if (!r->cs || r->dir != OP_RECV || r->direct)
		return -EINVAL;
	r->dst = buf;
	return 0;
}

void gw_ctx_abort_begin(struct gw_ctx *ctx, struct gw_ctx_req *r)
{
	if (r->cs && r->ctx == ctx && !(r->dir == OP_RECV && r->cs->stash))
		gw_tp_cancel_begin(ctx->tp, &r->tp);
}

void gw_ctx_abort(struct gw_ctx *ctx, struct gw_ctx_req *r)
{
	struct conn_slot *cs = r->cs;
	ssize_t got = -ECANCELED;

	if (!cs || r->ctx != ctx)
		return;
	if (r->dir == OP_RECV && cs->stash)
		cs->stash = 0;
	else /* cancels and drains, or finds it complete */
		got = gw_tp_cancel(ctx->tp, &r->tp);
	if (r->dir == OP_SEND) {
		cs->sbusy = false;
		if (r->res && got >= 0) /* it left after all */
			gw_rstore_commit(r->res);
		else if (r->res)
			gw_rstore_abort(r->res);
	} else {
		cs->rbusy = false;
	}
	r->cs = NULL;
}

int gw_ctx_recv_any(struct gw_ctx *ctx, const int *peers, int npeers, uint32_t slot, float *y,
		    uint64_t n, unsigned flags, int *from)
{
	struct gw_ctx_req *r;
	int64_t deadline = gw_now_ms() + ctx->timeout_ms;
	int winner = -1, rc = 0, posted = 0;

	if (npeers < 1)
		return -EINVAL;
	r = calloc((size_t)npeers, sizeof(*r));
	if (!r)
		return -ENOMEM;
	for (int i = 0; i < npeers && !rc; i++, posted++) /* into frame buffers */
		rc = gw_ctx_irecv(ctx, peers[i], slot, y, n, flags & ~GW_CTX_ZEROCOPY, &r[i]);
	while (!rc && winner < 0) {
		for (int i = 0; i < posted && winner < 0; i++)
			if (gw_ctx_test(ctx, &r[i]) == 1)
				winner = i;
		if (winner >= 0)
			break;
		if (gw_now_ms() >= deadline) {
			rc = -ETIMEDOUT;
			break;
		}
		rc = gw_ctx_progress(ctx, 1);
	}
	/* Withdraw the others: one that arrived anyway is kept for the next
	 * receive on its slot, the others give back their seq. */
	for (int i = 0; i < posted; i++)
		if (i != winner && r[i].cs)
			gw_ctx_recv_withdraw(ctx, &r[i]);
	if (winner >= 0) {
		rc = gw_ctx_wait(ctx, &r[winner]);
		*from = peers[winner];
	}
	free(r);
	return rc;
}

int gw_ctx_recv_withdraw(struct gw_ctx *ctx, struct gw_ctx_req *r)
{
	struct conn_slot *cs = r->cs;
	ssize_t got;

	if (!cs || r->ctx != ctx || r->dir != OP_RECV || r->direct)
		return -EINVAL;
	got = cs->stash ? (ssize_t)cs->stash : gw_tp_cancel(ctx->tp, &r->tp);
	r->cs = NULL;
	cs->rbusy = false;
	if (got >= 0) {
		cs->stash = (size_t)got;
		return 1;
	}
	cs->stash = 0;
	cs->recv_seq--;
	return 0;
}
