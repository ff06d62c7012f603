/* SPDX-License-Identifier: MIT */
/*
 * ctx_impl.h - inside a context (conn.h has the contract): its parts and the
 * helpers its files share.
 *
 * Ownership: the context owns the transport, one struct conn per peer, the
 * residual store and one codec scratch area (encodes run in the caller's
 * thread, one at a time). A conn owns its two MAC contexts and a map of
 * struct conn_slot, which owns the frame buffers of one (peer, slot): one for
 * the send in flight, one for the receive in flight. Buffers only grow,
 * unless gw_ctx_slot_trim() moves idle ones to the context's pool.
 *
 * The files: ctx.c (slots, buffers and pool; create, destroy; statistics),
 * ctx_connect.c (host ids, the handshake's rounds and the decision; the pure
 * rules are handshake.c's), ctx_send.c and ctx_recv.c (deliver, wait, abort,
 * receive-from-any).
 */
#ifndef GW_CTX_IMPL_H
#define GW_CTX_IMPL_H

#include "conn.h"
#include "../common/map.h"

/* Exact tensors at least this large are sent without a copy when the
 * caller allows it (GW_CTX_ZEROCOPY): below, the copy costs less than the
 * gathered send. */
#define GATHER_MIN (64u << 10)
/* Idle frame buffers kept (gw_ctx_slot_trim()): at least what a ring holds
 * at once (coll/ring.c: 2 x 8 receives, 8 sends), or every call frees and
 * allocates some anew, and the kernel faults fresh pages in on every call
 * (docs/performance.md, "Memory and soak"). */
#define POOL_MAX 32

struct conn_slot {
	uint32_t slot;
	uint32_t send_seq, recv_seq;
	uint8_t *sbuf, *rbuf;
	size_t scap, rcap;
	struct gw_tp_mr *smr, *rmr;
	bool sbusy, rbusy;
	size_t stash; /* recv_any: a frame that arrived unasked, or 0 */
	struct conn *c;
};

struct conn {
	int peer;
	struct gw_hs_result hs;
	struct gw_mac *tx, *rx;
	struct gw_map slots; /* slot -> struct conn_slot */
	struct gw_conn_stats st;
	struct gw_ctx_flow flow; /* auto: what arrived since the last take */
	unsigned chosen;	 /* auto: the last choice, codec id + 1 (0: none yet) */
	bool ready;		 /* negotiated: hs, tx and rx hold */
	uint32_t born;		 /* the epoch its handshake ran in (its keys': mac.h) */
};

struct gw_ctx {
	int rank, size;
	uint32_t epoch; /* membership epoch (gw_ctx_reform()); every frame carries it */
	int timeout_ms, log_level;
	uint64_t min_compress_bytes;
	struct gw_tp *tp;
	struct conn *conns; /* size entries; conns[rank] unused */
	uint64_t *host;	    /* size entries: every rank's host id (the store's) */
	struct gw_rstore *rs;
	struct gw_codec none;
	void *scratch;
	size_t scratch_cap;
	FILE *stats_out;
	/* The first send or receive that failed: its peer (-1: none) and
	 * direction, for the collectives' error message. */
	int failed_peer;
	enum tp_op_dir failed_dir;
	/* Frame buffers that gw_ctx_slot_trim() took from idle slots, for the
	 * next slot that needs one (largest kept when full). */
	struct pool_buf {
		uint8_t *buf;
		size_t cap;
		struct gw_tp_mr *mr;
	} pool[POOL_MAX];
	unsigned npool;
};

#define ctx_log(ctx, lvl, ...) gw_log((ctx)->log_level, (lvl), (ctx)->rank, __VA_ARGS__)

/* ctx.c */
/* The slot of (peer c, slot), created on first use; NULL: no memory. */
struct conn_slot *ctx_slot_get(struct conn *c, uint32_t slot);
/* Make *buf hold need bytes (a pooled buffer, or a new one registered when
 * the provider wants that). Return: 0, -ENOMEM or a registration's -errno. */
int ctx_buf_reserve(struct gw_ctx *ctx, uint8_t **buf, size_t *cap, struct gw_tp_mr **mr,
		    size_t need);
/* Clear r, check the arguments of a request and find its slot. */
int ctx_req_begin(struct gw_ctx *ctx, int peer, uint32_t slot, const void *buf, uint64_t n,
		  struct gw_ctx_req *r, struct conn_slot **cs);

/* The parts of gw_ctx_create() that gw_ctx_reform() shares. A shell: rank,
 * size, epoch, no connection negotiated yet (the caller destroys it on
 * failure). */
int ctx_alloc(const struct gw_ctx_cfg *cfg, int rank, int size, uint32_t epoch,
	      struct gw_ctx **out);
/* size connections, none negotiated; on failure *out is for the caller to
 * free (gw_map_fini() on each, then free()). */
int ctx_conns_alloc(int size, struct conn **out);
/* Host ids, the transport, and the handshake with every peer whose
 * connection is not ready. err: why, logged. */
int ctx_open(struct gw_ctx *ctx, const struct gw_ctx_cfg *cfg, struct gw_store *st, char *err,
	     size_t errlen);
/* Free every slot (their maps too) and the pool, deregistering from ctx->tp. */
void ctx_buffers_free(struct gw_ctx *ctx);
/* Forget c's negotiation: MACs, keys (wiped). */
void ctx_conn_fini(struct conn *c);

/* ctx_connect.c */
/* Every rank's host id through the store (ctx->host); before the
 * transport opens when it picks each peer's link (ctx.c). err: why, naming
 * the peer. */
int ctx_hosts(struct gw_ctx *ctx, const struct gw_ctx_cfg *cfg, struct gw_store *st,
	      const char *job, char *err, size_t errlen);
/* HELLO and FINISHED with every peer whose connection is not ready (after
 * ctx_hosts() and the transport); fills ctx->conns[p].hs and the MAC
 * contexts and marks it ready. err: why, naming the peer. */
int ctx_handshake(struct gw_ctx *ctx, const struct gw_ctx_cfg *cfg, char *err, size_t errlen);

#endif
