/* SPDX-License-Identifier: MIT */
/*
 * conn.h - the Gloo-style context: a rank's connections to every peer.
 *
 * gw_ctx_create() exchanges host ids through the store, opens the transport
 * (transport.h: a link per provider, peers on this host over the local one),
 * and runs the handshake (handshake.h) with every peer at once: each connection ends with its own
 * codec, MAC algorithm and session keys. Then tensors travel as frames (frame.h) whose body is a
 * codec payload:
 *
 *   send: residual (peer, slot) -> encode(x + r) into the slot's frame buffer
 *         -> seal (MAC) -> post; the new residual is committed when the send
 *         completes, dropped when it fails (no gradient mass is lost);
 *   recv: post at the frame's bound -> open (MAC first, then slot/seq and
 *         every header field) -> check the codec is the negotiated one (or
 *         `none`) -> decode, or decode_add into an accumulator.
 *
 * Sequence numbers count per (peer, slot, direction): the n-th send on a slot
 * matches the peer's n-th receive on it. One send and one receive per
 * (peer, slot) may be in flight at a time (-EBUSY otherwise); frame buffers
 * are kept per (peer, slot) and reused, so the steady state allocates nothing.
 *
 * Every failure is a negative errno and a log line naming the peer and the
 * reason; a receive that fails leaves the caller's buffer untouched.
 */
#ifndef GW_CONN_H
#define GW_CONN_H

#include <stdio.h>
#include "transport.h"
#include "handshake.h"

/** struct gw_ctx_cfg - everything a context needs (plugin/ fills it from GRADWIRE_*). */
struct gw_ctx_cfg {
	struct gw_tp_cfg tp;
	const char *codec;	     /* preference list for remote peers; NULL: "none" */
	const char *codec_local;     /* for peers on this host; NULL: codec */
	bool fallback;		     /* accept `none` when no codec is common */
	int mac_mode;		     /* enum gw_mac_mode */
	const char *mac_key_file;    /* NULL: no key */
	const char *mac_algs;	     /* preference, e.g. "gmac-aes256,hmac-sha256"; NULL: that */
	uint64_t min_compress_bytes; /* smaller tensors always travel exactly */
	uint64_t host_id;	     /* 0: derived from the host name */
	uint16_t hs_version;	     /* 0: GW_HS_VERSION (tests simulate skew) */
	/* Values every rank must set alike (the collectives assume them equal):
	 * they travel in HELLO and a difference fails gw_ctx_create() on every
	 * rank, naming the value and both settings (gw_ctx_cfg_agree()). */
	uint8_t nagree;
	struct gw_hs_agree agree[GW_HS_MAX_AGREE];
};

/**
 * gw_ctx_cfg_agree() - add (or replace) the value called name (upper case,
 * digits and '_', at most GW_HS_AGREE_NAME_MAX characters; a GRADWIRE_*
 * variable's name, so the message says what to fix) to cfg's list of values
 * every rank must share. Return: 0, -EINVAL (bad name), -ENOSPC (list full).
 */
int gw_ctx_cfg_agree(struct gw_ctx_cfg *cfg, const char *name, uint64_t value);

/** struct gw_conn_stats - one connection's counters. */
struct gw_conn_stats {
	char codec[GW_HS_SPEC_MAX + 1];
	enum gw_mac_alg mac;
	char mac_name[32]; /* the MAC's name, e.g. "gmac-aes256" or "none" */
	char provider[32]; /* the libfabric provider that carries it */
	bool fell_back;
	uint64_t frames_sent, frames_recv;
	uint64_t raw_sent, wire_sent; /* bytes of tensor data / of frames */
	uint64_t raw_recv, wire_recv;
	uint64_t mac_failures; /* frames whose tag did not verify */
	uint64_t rejected;     /* other malformed or unexpected frames */
	uint64_t timeouts, errors;
	uint64_t residual_resets;
	/* auto (GRADWIRE_CODEC=auto): the codec the link to the peer carries
	 * now, as a spec ("" before the first choice; an exploration's trials
	 * show), and how often auto's choice changed (gw_ctx_link_codec()).
	 * Otherwise codec and 0. */
	char codec_now[GW_HS_SPEC_MAX + 1];
	uint64_t switches;
};

/* Codec wire ids that gw_ctx_flow counts values for. */
#define GW_FLOW_CODECS 8

/**
 * struct gw_ctx_flow - the tensor frames received from a peer on an auto
 * connection since the last gw_ctx_flow_take(): what its rate is measured
 * from. The first frame's start is unknown, so a rate is
 * (bytes - first_bytes) / (t_last - t_first).
 */
struct gw_ctx_flow {
	uint64_t frames, bytes;		 /* frames, their wire bytes */
	uint64_t first_bytes;		 /* the earliest frame's */
	int64_t t_first, t_last;	 /* the earliest and latest arrival, ns */
	uint64_t values[GW_FLOW_CODECS]; /* values received, per codec wire id */
};

struct gw_ctx;
struct conn_slot;

/** struct gw_ctx_req - a posted tensor or byte send/receive. */
struct gw_ctx_req {
	struct gw_tp_req tp;
	struct gw_ctx *ctx;
	struct conn_slot *cs;
	struct gw_rstore_entry *res; /* sends with error feedback */
	void *dst;		     /* receives: the caller's buffer */
	uint64_t n;		     /* floats, or bytes for byte messages */
	uint32_t seq;
	enum tp_op_dir dir;
	uint8_t kind, add, lossy;
	uint8_t direct; /* receives: straight into dst (ZEROCOPY) */
	uint8_t upto;	/* byte receives: any length up to n */
	/* A completed tensor receive (or a byte receive without dst): its
	 * payload, as it arrived (verified), for gw_ctx_isend_fwd(); valid
	 * until the next receive on its slot. */
	const uint8_t *payload;
	size_t payload_len;
};

#define GW_CTX_LOSSY 0x1u /* isend: a lossy codec may be used */
#define GW_CTX_ADD 0x2u	  /* irecv: acc[i] += value instead of y[i] = value */
/* isend: x stays untouched until the send is waited for, so an exact tensor
 * may go out without a copy (gathered from the caller's buffer).
 * irecv (without ADD): the caller expects an exact (`none`) payload and
 * lets it land in y as it arrives, before the wait, so y must not be read
 * or sent from until then; y's contents are undefined if the wait fails.
 * Used where the connection has no MAC (nothing unverified is ever written
 * to y) and the provider needs no registration; elsewhere a frame buffer. */
#define GW_CTX_ZEROCOPY 0x4u
/* isend with GW_CTX_LOSSY on an auto connection: encode with the codec of
 * wire id `id` if the connection's set holds it (`none`: the values plus
 * their residual go exactly, and the residual is cleared), else with its
 * default. The payload names its codec, under the MAC, and the receiver
 * decodes it as named once it checked the set holds it. */
#define GW_CTX_CODEC(id) ((((unsigned)(id)) + 1u) << 8)

/**
 * gw_ctx_create() - connect rank to its size - 1 peers and negotiate.
 * err receives a one-line reason naming the peer on failure.
 * Return: 0 or -errno (-ENOPROTOOPT no common codec, -EACCES MAC policy,
 * -EKEYREJECTED different keys, -EPROTONOSUPPORT version skew,
 * -ECONNREFUSED the peer refused, -ETIMEDOUT, ...).
 */
int gw_ctx_create(const struct gw_ctx_cfg *cfg, int rank, int size, struct gw_store *st,
		  struct gw_ctx **out, char *err, size_t errlen);
/**
 * gw_ctx_reform() - move a context to the members of a new epoch, which the
 * caller decided (the core does not choose who is in; every member passes
 * the same epoch, size and old[]).
 * @pctx: this rank's context, or a pointer to NULL for a process new to the
 *        job (then old[rank] is -1, and a context is created in epoch).
 * @epoch: after the context's (gw_ctx_epoch()).
 * @rank, @size: this rank's place in the new set.
 * @old: size entries, each new rank's rank in the context's last epoch, or
 *       -1 for a newcomer; each old rank at most once.
 * @st: the store, under a job prefix (cfg->tp.job) of this epoch's own.
 * Links between two members of the last epoch keep their negotiation
 * (codec, MAC algorithm) without a handshake, under keys derived for the
 * epoch; links to newcomers are negotiated; ranks are renumbered densely;
 * links to the departed close. Slots restart (sequence numbers at 0) and
 * residuals are dropped: take what they owe first (gw_coll_residual_sum()).
 * Frames of another epoch are refused (-ESTALE). A failure leaves *pctx in
 * the new shape, fit only for another gw_ctx_reform() (a later epoch) or
 * gw_ctx_destroy(). Return: 0, -EINVAL (err says which argument), or
 * gw_ctx_create()'s errors.
 */
int gw_ctx_reform(struct gw_ctx **pctx, const struct gw_ctx_cfg *cfg, uint32_t epoch, int rank,
		  int size, const int *old, struct gw_store *st, char *err, size_t errlen);
/** gw_ctx_epoch() - the context's membership epoch (0 until re-formed). */
uint32_t gw_ctx_epoch(const struct gw_ctx *ctx);
/** gw_ctx_destroy() - accepts NULL; prints statistics when stats_out is set. */
void gw_ctx_destroy(struct gw_ctx *ctx);

int gw_ctx_rank(const struct gw_ctx *ctx);
int gw_ctx_size(const struct gw_ctx *ctx);
struct gw_tp *gw_ctx_tp(struct gw_ctx *ctx);
/**
 * gw_ctx_post_once() - while on, a post the provider refuses for now fails
 * at once with -EAGAIN instead of being retried until the timeout (see
 * gw_tp_post_once()): for messages the caller can send later.
 */
void gw_ctx_post_once(struct gw_ctx *ctx, bool on);
/**
 * gw_ctx_lost_ends_all() - while on, a peer declared gone ends every wait
 * of the context, not only those with it (gw_tp_lost_ends_all()): for the
 * collectives, which cannot finish without every rank.
 */
void gw_ctx_lost_ends_all(struct gw_ctx *ctx, bool on);
/** gw_ctx_provider() - the libfabric provider in use, e.g. "tcp;ofi_rxm",
 * or both, main first, when peers on this host use another ("net+shm"). */
const char *gw_ctx_provider(const struct gw_ctx *ctx);

/**
 * gw_ctx_compresses() - whether a send of n values to peer flagged
 * GW_CTX_LOSSY would use the negotiated lossy codec (it is lossy, and the
 * tensor is at least min_compress_bytes). peer must be a valid peer.
 */
bool gw_ctx_compresses(const struct gw_ctx *ctx, int peer, uint64_t n);

/** gw_ctx_isend() - post float32 x[0..n) to peer on slot. */
int gw_ctx_isend(struct gw_ctx *ctx, int peer, uint32_t slot, const float *x, uint64_t n,
		 unsigned flags, struct gw_ctx_req *r);
/**
 * gw_ctx_isend_sent() - gw_ctx_isend(), and also write to sent[0..n) what
 * the peer will decode (decode(encode(x + r))), bit for bit. A collective
 * keeps that as its own copy so every replica ends identical. sent may be
 * x: it is written once x has been encoded.
 */
int gw_ctx_isend_sent(struct gw_ctx *ctx, int peer, uint32_t slot, const float *x, uint64_t n,
		      unsigned flags, float *sent, struct gw_ctx_req *r);

/**
 * gw_ctx_isend_fwd() - send the payload that the completed receive `from`
 * got, byte for byte, to peer on slot: no new encoding, no new loss, no
 * residual. So a tensor can travel several hops and every rank decodes the
 * same bytes. Return: 0; -EINVAL (from is no completed tensor receive);
 * -EPROTO (the payload's codec is neither `none` nor the one negotiated with
 * peer: the caller sends the decoded values instead).
 */
int gw_ctx_isend_fwd(struct gw_ctx *ctx, int peer, uint32_t slot, const struct gw_ctx_req *from,
		     struct gw_ctx_req *r);

/** gw_ctx_irecv() - post a receive of n float32 values from peer on slot. */
int gw_ctx_irecv(struct gw_ctx *ctx, int peer, uint32_t slot, float *y, uint64_t n, unsigned flags,
		 struct gw_ctx_req *r);
/** Exact bytes (never compressed). */
int gw_ctx_isend_bytes(struct gw_ctx *ctx, int peer, uint32_t slot, const void *buf, size_t len,
		       struct gw_ctx_req *r);
int gw_ctx_irecv_bytes(struct gw_ctx *ctx, int peer, uint32_t slot, void *buf, size_t len,
		       struct gw_ctx_req *r);
/**
 * gw_ctx_isend_bytes_hdr() - one exact byte message of head then buf (both
 * copied into the frame at once), so a host can prefix what the receiver
 * needs to place the bytes.
 */
int gw_ctx_isend_bytes_hdr(struct gw_ctx *ctx, int peer, uint32_t slot, const void *head,
			   size_t hlen, const void *buf, size_t len, struct gw_ctx_req *r);
/**
 * gw_ctx_irecv_frame() - receive the next byte message on (peer, slot) of
 * any length up to cap and leave it in the frame buffer: after a
 * successful gw_ctx_wait(), r->payload and r->payload_len are its bytes
 * (authenticated), valid until the next receive on that slot is posted.
 * A longer message is an error (-EPROTO, logged), never a truncation.
 */
int gw_ctx_irecv_frame(struct gw_ctx *ctx, int peer, uint32_t slot, size_t cap,
		       struct gw_ctx_req *r);

/**
 * gw_ctx_wait() - complete r: a send commits its residual; a receive is
 * authenticated, checked and decoded into the caller's buffer.
 * Return: 0 or -errno (-ETIMEDOUT, -EBADMSG, -EPROTO, transport errors).
 */
int gw_ctx_wait(struct gw_ctx *ctx, struct gw_ctx_req *r);
/**
 * gw_ctx_waitall() - wait for all under one deadline (the context's timeout
 * from now); returns the first error (all are waited, or withdrawn when the
 * deadline passes: the late ones together, in one drain of the transport).
 */
int gw_ctx_waitall(struct gw_ctx *ctx, struct gw_ctx_req *r, size_t n);

/**
 * gw_ctx_test() - whether r can complete without waiting: progress once
 * (without sleeping) unless r has already arrived. A receive kept by
 * gw_ctx_recv_withdraw() is complete at once. gw_ctx_wait() still has to
 * finish r (authenticate, check, decode; commit a send's residual).
 * Return: 1 (complete), 0 (not yet), -EINVAL (r is not posted on ctx), or
 * a progress error.
 */
int gw_ctx_test(struct gw_ctx *ctx, struct gw_ctx_req *r);

/**
 * gw_ctx_progress() - read completions for up to timeout_ms (0: poll once),
 * for a host that drives several requests with gw_ctx_test().
 * Return: 0 or -errno.
 */
int gw_ctx_progress(struct gw_ctx *ctx, int timeout_ms);

/**
 * gw_ctx_req_retarget() - make the posted receive r deliver into buf (of
 * the length posted) instead of the buffer it was posted with: for a host
 * whose buffer goes away while its receive is still pending. Not for a
 * receive that lands straight in the caller's buffer (GW_CTX_ZEROCOPY).
 * Return: 0, or -EINVAL (r is no receive in flight through a frame buffer).
 */
int gw_ctx_req_retarget(struct gw_ctx_req *r, void *buf);

/**
 * gw_ctx_abort() - give up a posted request without waiting for it: it is
 * cancelled (a send that had already left commits its residual, one that
 * had not drops it; a receive's data, if any arrived, is discarded) and its
 * (peer, slot) is free again. For a caller
 * that failed partway through a batch; the sequence numbers of that slot
 * are then out of step with the peer's. Accepts a request never posted.
 */
void gw_ctx_abort(struct gw_ctx *ctx, struct gw_ctx_req *r);
/**
 * gw_ctx_abort_begin() - the first half of gw_ctx_abort(), without waiting.
 * To give up many requests at once, begin each, then gw_ctx_abort() each:
 * they drain together, within one bounded wait.
 */
void gw_ctx_abort_begin(struct gw_ctx *ctx, struct gw_ctx_req *r);

/**
 * gw_ctx_recv_any() - receive n values on slot from whichever of peers[]
 * sends first; *from says who. The receives posted to the others are
 * cancelled (their sequence numbers are not consumed). They all go through
 * frame buffers: GW_CTX_ZEROCOPY is ignored here.
 */
int gw_ctx_recv_any(struct gw_ctx *ctx, const int *peers, int npeers, uint32_t slot, float *y,
		    uint64_t n, unsigned flags, int *from);

/**
 * gw_ctx_seal() - seal body[0..len) as a frame to peer (slot, seq) with the
 * connection's send key, without sending it or touching any counter. For
 * tests that play a hostile peer, and for tools. Return: frame bytes or -errno.
 */
ssize_t gw_ctx_seal(struct gw_ctx *ctx, int peer, uint8_t kind, uint8_t flags, uint32_t slot,
		    uint32_t seq, const void *body, size_t len, uint8_t *out, size_t cap);

/**
 * gw_ctx_recv_withdraw() - take back a posted receive that did not complete
 * (what gw_ctx_recv_any() does with the peers that lose), for hosts that
 * build their own receive-from-any. A message that already arrived is kept
 * for the next receive on its (peer, slot); otherwise the receive is
 * cancelled and its sequence number given back. Not for a receive that
 * lands straight in the caller's buffer (GW_CTX_ZEROCOPY): -EINVAL.
 * Return: 1 (it had arrived and is kept), 0 (cancelled), -EINVAL.
 */
int gw_ctx_recv_withdraw(struct gw_ctx *ctx, struct gw_ctx_req *r);

/**
 * gw_ctx_slot_trim() - take the frame buffers of (peer, slot) that are idle
 * and larger than keep bytes; its sequence numbers stay. They go to the
 * context's pool (32 buffers, the largest kept), where the next slot that
 * needs a buffer finds one, or are freed. For hosts whose slots come and go
 * (Gloo's tags), so buffers neither pile up per slot nor are allocated anew
 * for every message. Return: 0, or -EINVAL for a bad peer.
 */
int gw_ctx_slot_trim(struct gw_ctx *ctx, int peer, uint32_t slot, size_t keep);

/**
 * gw_ctx_failed_peer() - the peer of the first send or receive on ctx that
 * failed to complete (a timeout, a dead peer), or -1; *receiving (if
 * not NULL) says whether it was a receive.
 */
int gw_ctx_failed_peer(const struct gw_ctx *ctx, bool *receiving);

/** gw_ctx_host_id_default() - the host id used when cfg->host_id is 0:
 * gw_ctx_host_id_of() of "<host name>/<boot id>" (gethostname(),
 * /proc/sys/kernel/random/boot_id; the host name alone without that file). */
uint64_t gw_ctx_host_id_default(void);
/** gw_ctx_host_id_of() - the host id of a name: FNV-1a 64 of its bytes
 * (1 where that is 0), what GRADWIRE_HOST_ID=name sets. */
uint64_t gw_ctx_host_id_of(const char *name);
/**
 * gw_ctx_host_id() - rank's host id as every rank read it from the store at
 * gw_ctx_create() (so all ranks hold the same list), or 0 for a bad rank.
 */
uint64_t gw_ctx_host_id(const struct gw_ctx *ctx, int rank);
/** gw_ctx_log_level() - the context's log level (enum gw_log_level). */
int gw_ctx_log_level(const struct gw_ctx *ctx);

/**
 * gw_ctx_mac_algs_check() - whether list is a valid cfg->mac_algs value: a
 * comma-separated list of the MAC algorithms gradwire offers.
 * Return: 0, or -EINVAL.
 */
int gw_ctx_mac_algs_check(const char *list);

/** gw_ctx_codec() - the codec negotiated with peer (auto: the default). */
const struct gw_codec *gw_ctx_codec(const struct gw_ctx *ctx, int peer);
/**
 * gw_ctx_codec_set() - the codecs an auto connection to peer may carry, in
 * the lower rank's order (*set: the array). Return: their number, or 0 when
 * the connection is not auto (or peer is not a peer).
 */
int gw_ctx_codec_set(const struct gw_ctx *ctx, int peer, const struct gw_codec **set);
/**
 * gw_ctx_link_codec() - record what auto makes the link to peer carry:
 * codec wire id `id` of its set (the statistics' codec_now). A choice
 * (trial false) other than the last choice counts a switch; an
 * exploration's trial shows in codec_now and counts nothing.
 * Return: 0, -EINVAL (not an auto peer), -ENOENT (not in the set).
 */
int gw_ctx_link_codec(struct gw_ctx *ctx, int peer, unsigned id, bool trial);
/**
 * gw_ctx_flow_take() - what arrived from peer since the last call (struct
 * gw_ctx_flow), and start counting anew. Return: 0, -EINVAL.
 */
int gw_ctx_flow_take(struct gw_ctx *ctx, int peer, struct gw_ctx_flow *out);
int gw_ctx_stats(const struct gw_ctx *ctx, int peer, struct gw_conn_stats *s);
void gw_ctx_stats_print(const struct gw_ctx *ctx, FILE *f);
/** Set where gw_ctx_destroy() prints statistics (NULL: nowhere). */
void gw_ctx_stats_at_exit(struct gw_ctx *ctx, FILE *f);

/** gw_ctx_min_compress_bytes() - tensors below this travel exactly. */
uint64_t gw_ctx_min_compress_bytes(const struct gw_ctx *ctx);

/** struct gw_ctx_own - what gw_ctx_own_residual() lends (valid until the
 * entry is reshaped, reset or the context destroyed). */
struct gw_ctx_own {
	struct gw_residual *res; /* the residual, n values */
	uint8_t *state;		 /* the codec's state, state_len bytes */
	size_t state_len;
};

/**
 * gw_ctx_own_residual() - this rank's own entry of the residual store for
 * slot (peer = own rank), shaped for n values of codec c: error feedback and
 * codec state that a collective keeps per tensor rather than per connection
 * (PowerSGD's allreduce: the residual of M and the shared Q). Saved, loaded
 * and reset with the connections' residuals. Created zeroed; a change of n or
 * codec re-zeroes it and counts a reset, like any entry.
 * Return: 0, -ENOMEM, -EINVAL.
 */
int gw_ctx_own_residual(struct gw_ctx *ctx, uint32_t slot, uint64_t n, const struct gw_codec *c,
			struct gw_ctx_own *own);

/** gw_ctx_residuals_zero() - whether no residual of ctx holds anything but
 * zeros (nothing is owed: an exact call drops nothing). */
bool gw_ctx_residuals_zero(const struct gw_ctx *ctx);

/** gw_ctx_residual_bytes() - heap bytes of error feedback and codec state
 * held (every peer's and slot's residual, staged residual and state). */
uint64_t gw_ctx_residual_bytes(const struct gw_ctx *ctx);

/** Residual checkpointing (all peers and slots of this rank). */
int gw_ctx_residuals_save(struct gw_ctx *ctx, const char *path);
int gw_ctx_residuals_load(struct gw_ctx *ctx, const char *path);
void gw_ctx_residuals_reset(struct gw_ctx *ctx);
/** gw_ctx_residual_add_to() - add the residual of (peer, slot) into
 * dst[0..n) if it holds n values (gw_rstore_add_to()). */
bool gw_ctx_residual_add_to(const struct gw_ctx *ctx, int peer, uint32_t slot, uint64_t n,
			    float *dst);

#endif
