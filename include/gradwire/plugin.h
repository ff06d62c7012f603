/* SPDX-License-Identifier: MIT */
/*
 * plugin.h - the table a host loads from libgradwire.so: gradwire_plugin_v1.
 *
 * A host dlopen()s the library, dlsym()s "gradwire_plugin_v1" and checks
 * that table->size covers the members it calls (the table only grows by
 * appending; version stays 1 while it does). Everything else goes through
 * the table's function pointers:
 *
 *   init -> context_create[_file] -> send/recv/collectives... ->
 *   context_destroy -> finalize
 *
 * Every member returns 0 or a negative errno (strerror() names it). Calls on
 * one context are blocking and must not overlap (one thread per context);
 * different contexts are independent. A queue (queue_create) runs a
 * context's allreduces on a thread of its own instead. Collectives must be called by every
 * rank in the same order with the same sizes, like MPI.
 */
#ifndef GRADWIRE_PLUGIN_H
#define GRADWIRE_PLUGIN_H

#include "gradwire/gradwire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GRADWIRE_PLUGIN_VERSION 1

/* send() flags: the tensor is a gradient, a lossy codec may carry it. */
#define GRADWIRE_LOSSY 0x1u
/* recv() flags: add the received values to buf instead of storing them. */
#define GRADWIRE_ADD 0x2u

/* Slots of send()/recv() are below this; the collectives use the rest. */
#define GRADWIRE_SLOT_MAX (1u << 24)

/* allreduce() operations. */
enum gradwire_op {
	GRADWIRE_SUM = 0,
	GRADWIRE_AVG = 1, /* the sum divided by the size, on every rank alike */
};

/**
 * struct gradwire_store - the host's rendezvous store (e.g. a c10d store).
 * @size: sizeof(struct gradwire_store) as the host compiled it.
 * @set:  publish val[0..len) under key; a reader sees the old or the new
 *        value, never a mix. Return: 0 or a negative errno.
 * @get:  copy key's value into buf, waiting up to timeout_ms for the key to
 *        appear. Return: its length, -ETIMEDOUT when it did not appear in
 *        time, -ENOSPC when it is larger than cap, or another negative errno.
 * @arg:  passed as the first argument of set and get.
 *
 * gradwire calls the store only inside context_create(), possibly from
 * every rank at once; the host keeps it alive until that call returns.
 */
struct gradwire_store {
	size_t size;
	int (*set)(void *arg, const char *key, const void *val, size_t len);
	ssize_t (*get)(void *arg, const char *key, void *buf, size_t cap, int timeout_ms);
	void *arg;
};

/**
 * struct gradwire_stats - one connection's counters (frozen for v1).
 * @codec: the codec negotiated with the peer, as a spec ("int8:bucket=512").
 * @mac: the frame MAC ("none", "hmac-sha256", "gmac-aes256").
 * @fell_back: the peers shared no codec and use "none".
 * @raw_*: bytes of tensor data; @wire_*: bytes of frames on the wire.
 * @mac_failures: frames whose tag did not verify; @rejected: other bad frames.
 * @provider: the libfabric provider that carries the connection ("net",
 *            "tcp;ofi_rxm", "shm", "verbs;ofi_rxm"). Added after v1's first
 *            release in place of four reserved words, so the size is
 *            unchanged; an older library leaves it empty.
 * @codec_now: with GRADWIRE_CODEC=auto, the codec the link to the peer
 *             carries now ("" before its first choice); else @codec, cut
 *             to 23 characters. @switches: how often auto changed it. Both
 *             in place of reserved words, as @provider.
 */
struct gradwire_stats {
	char codec[128];
	char mac[32];
	uint32_t fell_back;
	uint32_t reserved0;
	uint64_t frames_sent, frames_recv;
	uint64_t raw_sent, wire_sent;
	uint64_t raw_recv, wire_recv;
	uint64_t mac_failures, rejected;
	uint64_t timeouts, errors;
	uint64_t residual_resets;
	char provider[32];
	char codec_now[24];
	uint64_t switches;
};

/* A rank's connections to its peers and its collectives; opaque. */
struct gradwire_context;
struct gradwire_queue;

/**
 * struct gradwire_plugin_v1 - the exported function table.
 * @size:    sizeof(struct gradwire_plugin_v1) of the library; a host checks
 *           size >= offsetof(member it needs) + sizeof(void *).
 * @version: GRADWIRE_PLUGIN_VERSION (1).
 */
struct gradwire_plugin_v1 {
	size_t size;
	unsigned version;

	/**
	 * @init: load and check every GRADWIRE_* variable of the process
	 * environment, once (later calls return 0 until finalize()). An invalid
	 * value or an unknown GRADWIRE_* name is -EINVAL, and err (if not NULL)
	 * names the variable. Must succeed before context_create().
	 */
	int (*init)(char *err, size_t errlen);

	/**
	 * @context_create: connect rank (0 <= rank < size) to its size - 1
	 * peers, exchanging addresses through the host's store, and negotiate
	 * codec and MAC with each. Blocks until every peer is connected or the
	 * GRADWIRE_TIMEOUT_MS deadline. On failure err gets a one-line reason
	 * naming the peer. Return: 0 and *out, or -EINVAL (bad argument, init()
	 * not called), -ENOPROTOOPT (no common codec), -EACCES (MAC policy),
	 * -ETIMEDOUT, ...
	 */
	int (*context_create)(int rank, int size, const struct gradwire_store *store,
			      struct gradwire_context **out, char *err, size_t errlen);

	/**
	 * @context_create_file: context_create() with a file store in dir, a
	 * folder that exists and that every rank reaches (works under any
	 * launcher that gives rank and size).
	 */
	int (*context_create_file)(int rank, int size, const char *dir,
				   struct gradwire_context **out, char *err, size_t errlen);

	/**
	 * @context_destroy: close the connections (accepts NULL). Operations in
	 * flight on peers are dropped; prints statistics if GRADWIRE_STATS=1.
	 */
	void (*context_destroy)(struct gradwire_context *ctx);

	/**
	 * @send: send float32 x[0..n) to peer on slot (< GRADWIRE_SLOT_MAX);
	 * returns when the frame has left. With GRADWIRE_LOSSY the negotiated
	 * codec may compress it (error feedback per peer and slot); without it
	 * the values arrive exactly. The n-th send on a slot matches the peer's
	 * n-th recv on it. Return: 0, -EINVAL, -ETIMEDOUT, ...
	 */
	int (*send)(struct gradwire_context *ctx, int peer, uint32_t slot, const float *x,
		    uint64_t n, unsigned flags);

	/**
	 * @recv: receive n float32 values from peer on slot into y (or add them
	 * to y with GRADWIRE_ADD). A frame that fails authentication or checks
	 * is -EBADMSG / -EPROTO and leaves y untouched.
	 */
	int (*recv)(struct gradwire_context *ctx, int peer, uint32_t slot, float *y, uint64_t n,
		    unsigned flags);

	/** @send_bytes: send buf[0..len) to peer on slot, exactly. */
	int (*send_bytes)(struct gradwire_context *ctx, int peer, uint32_t slot, const void *buf,
			  size_t len);

	/** @recv_bytes: receive exactly len bytes from peer on slot. */
	int (*recv_bytes)(struct gradwire_context *ctx, int peer, uint32_t slot, void *buf,
			  size_t len);

	/**
	 * @allreduce: ring allreduce of buf[0..n) in place; op is enum
	 * gradwire_op. With GRADWIRE_LOSSY the hops may use the negotiated
	 * lossy codec (error feedback per tensor length); every rank still ends
	 * with the same bits. After a failure (e.g. -ETIMEDOUT, a dead peer)
	 * buf holds partial sums (unspecified) and every later collective on
	 * ctx returns the same error.
	 */
	int (*allreduce)(struct gradwire_context *ctx, float *buf, uint64_t n, int op,
			 unsigned flags);

	/**
	 * @allgather: recv[r * bytes_per_rank ...] = rank r's send, exactly.
	 * send may be recv + rank * bytes_per_rank (in place).
	 */
	int (*allgather)(struct gradwire_context *ctx, const void *send, void *recv,
			 size_t bytes_per_rank);

	/** @broadcast: root's buf[0..bytes) to every rank, exactly. */
	int (*broadcast)(struct gradwire_context *ctx, int root, void *buf, size_t bytes);

	/** @barrier: returns once every rank has entered it. */
	int (*barrier)(struct gradwire_context *ctx);

	/**
	 * @stats: the counters of the connection to peer (peer != own rank).
	 * Return: 0, or -EINVAL for a bad peer.
	 */
	int (*stats)(struct gradwire_context *ctx, int peer, struct gradwire_stats *out);

	/**
	 * @residuals_save: write this rank's error-feedback residuals (every
	 * peer and slot) to path, for a checkpoint.
	 */
	int (*residuals_save)(struct gradwire_context *ctx, const char *path);

	/**
	 * @residuals_load: replace the residuals with those saved in path by
	 * the same rank of a context of the same size.
	 */
	int (*residuals_load)(struct gradwire_context *ctx, const char *path);

	/** @residuals_reset: zero every residual (e.g. after a restart). */
	void (*residuals_reset)(struct gradwire_context *ctx);

	/**
	 * @finalize: forget the configuration loaded by init(); -EBUSY while a
	 * context is open. init() may be called again afterwards.
	 */
	int (*finalize)(void);

	/** @strerror: text for a return code; a static string, never NULL. */
	const char *(*strerror)(int err);

	/**
	 * @allreduce_id: allreduce() of the tensor the host calls id (the same
	 * id on every rank, e.g. a DDP bucket index). Its error feedback and
	 * codec state are its own, even when another tensor has the same
	 * length (allreduce() tells tensors apart by length only).
	 */
	int (*allreduce_id)(struct gradwire_context *ctx, uint32_t id, float *buf, uint64_t n,
			    int op, unsigned flags);

	/**
	 * @queue_create: a queue of allreduce_id() calls on ctx, run in the
	 * order submitted by one thread of gradwire's own, so the host goes on
	 * while they travel (a DDP hook returns a future). While the queue
	 * exists, ctx takes no other call but stats() and error(); every rank
	 * must submit the same allreduces in the same order.
	 */
	int (*queue_create)(struct gradwire_context *ctx, struct gradwire_queue **out);

	/**
	 * @queue_submit: queue allreduce_id(ctx, id, buf, n, op, flags). buf
	 * stays the caller's to keep valid and untouched until the ticket is
	 * done. Return: 0 and *ticket (1, 2, ... in order); -ENOBUFS when
	 * GRADWIRE_QUEUE_MAX tickets wait or run; -ECANCELED once
	 * queue_destroy() has begun; -EINVAL.
	 */
	int (*queue_submit)(struct gradwire_queue *q, uint32_t id, float *buf, uint64_t n, int op,
			    unsigned flags, uint64_t *ticket);

	/**
	 * @queue_wait: wait up to timeout_ms (< 0: without limit) for ticket.
	 * Return: its allreduce's result (0 or -errno, -ECANCELED when the
	 * queue went before it ran), -EAGAIN when not done in time, -ENOENT for
	 * a ticket not issued or older than the last GRADWIRE_QUEUE_MAX. Any
	 * thread may wait.
	 */
	int (*queue_wait)(struct gradwire_queue *q, uint64_t ticket, int timeout_ms);

	/**
	 * @queue_destroy: queue_cancel(), then wait for the running allreduce
	 * (within GRADWIRE_TIMEOUT_MS), join the thread and free. Accepts NULL.
	 * No other call on q may be in progress or follow; call it before
	 * context_destroy().
	 */
	void (*queue_destroy)(struct gradwire_queue *q);

	/**
	 * @queue_cancel: tickets not started end with -ECANCELED at once (their
	 * waiters return), the running one still finishes, later submits fail
	 * with -ECANCELED. Safe from any thread while queue_wait() calls are in
	 * progress (e.g. to stop a thread that waits, before queue_destroy()).
	 */
	void (*queue_cancel)(struct gradwire_queue *q);

	/**
	 * @error: what the first failed collective on ctx said (which ranks,
	 * which peer, what differed; a peer that revoked and its reason), or,
	 * after revoke() here, its reason; NULL while nothing failed. The
	 * text stays valid until context_destroy().
	 */
	const char *(*error)(struct gradwire_context *ctx);

	/**
	 * @reduce_scatter: rank r ends with the sum (GRADWIRE_SUM) or average
	 * over every rank of its shard of buf[0..n), the tensor the host calls
	 * id: buf[r * q + min(r, n % size) ...], q + (r < n % size) values, q = n
	 * / size (the allreduce's chunks). The rest of buf is left undefined.
	 * With GRADWIRE_LOSSY each rank's part of a shard is encoded once, with
	 * its own error feedback, and sent straight to the shard's owner, which
	 * adds the decoded parts to its own values exactly; otherwise the sum
	 * is exact. For sharded training (ZeRO): about half an allreduce's bytes.
	 */
	int (*reduce_scatter)(struct gradwire_context *ctx, uint32_t id, float *buf, uint64_t n,
			      int op, unsigned flags);

	/**
	 * @allgather_f32: every rank ends with every rank's shard of buf[0..n)
	 * (reduce_scatter()'s shards; rank r gives shard r), the tensor the
	 * host calls id. With GRADWIRE_LOSSY each owner encodes its shard once
	 * and every rank, the owner included, holds the decoded bits (replicas
	 * identical); otherwise the copy is exact.
	 */
	int (*allgather_f32)(struct gradwire_context *ctx, uint32_t id, float *buf, uint64_t n,
			     unsigned flags);

	/**
	 * @reduce_scatter_counts: reduce_scatter() with the shards given as
	 * counts per rank: rank r ends with the sum or average over every
	 * rank of buf[off_r, off_r + counts[r]), off_r = counts[0] + ... +
	 * counts[r - 1]. counts has size entries summing to n (any may be 0);
	 * NULL, or the allreduce's chunks as counts, is reduce_scatter()
	 * itself. Every rank must pass the same counts: ranks that do not all
	 * fail with -EINVAL, and error() says that the counts differ.
	 */
	int (*reduce_scatter_counts)(struct gradwire_context *ctx, uint32_t id, float *buf,
				     uint64_t n, const uint64_t *counts, int op, unsigned flags);

	/**
	 * @allgather_f32_counts: allgather_f32() with rank r giving
	 * buf[off_r, off_r + counts[r]) (reduce_scatter_counts()'s shards and
	 * checks; NULL: allgather_f32() itself).
	 */
	int (*allgather_f32_counts)(struct gradwire_context *ctx, uint32_t id, float *buf,
				    uint64_t n, const uint64_t *counts, unsigned flags);

	/**
	 * @revoke: end ctx for good, here and on every peer, for reason (cut
	 * to 255 bytes; e.g. the exception a hook raised). Each peer's pending
	 * and later collectives on its context fail within a second of a wait
	 * (-ECONNRESET), and its error() names this rank and reason. Here every
	 * later call fails with -ECONNABORTED. A failed collective revokes by
	 * itself (unless a peer's death ended it: every rank sees that). Safe
	 * from any thread, e.g. while a queue runs; not beside
	 * context_destroy() or context_reform(). Later calls do nothing (in
	 * this epoch: a re-formed context starts unrevoked).
	 */
	void (*revoke)(struct gradwire_context *ctx, const char *reason);

	/**
	 * @residual_sum: what this rank's error feedback owes the tensor id
	 * of allreduce_id(), as one vector: out[0..n) = its residuals, each
	 * over its segment, summed (zeros before a lossy call of it). Added
	 * to this rank's values at its next allreduce_id() of the tensor, in
	 * ctx or in a context of other members (a membership change), it
	 * enters the sum as the residuals would have in ctx. -ENOTSUP under
	 * PowerSGD's or the hierarchical allreduce (residuals of another shape);
	 * -ENOSPC for a tensor that shares a stream (after 1,024 others).
	 */
	int (*residual_sum)(struct gradwire_context *ctx, uint32_t id, float *out, uint64_t n);

	/**
	 * @context_reform: move *ctx to the members of a new epoch, which the
	 * caller decided (as NCCL's shrink and grow: gradwire does not choose
	 * who is in). Every member passes the same epoch, size and old_rank:
	 * for each new rank, its rank in the context's last epoch, or -1 for
	 * a process new to the job, which passes *ctx == NULL and gets a
	 * context. epoch comes after the context's; store is this epoch's own
	 * (keys apart from every other epoch's). Links between members of the
	 * last epoch keep their codec and MAC algorithm without a handshake,
	 * under keys derived for the epoch; frames of another epoch are
	 * refused. Collectives start afresh and residuals are dropped: take
	 * residual_sum() first. While a queue of *ctx is open it returns
	 * -EBUSY and changes nothing (queue_destroy() first). On failure *ctx
	 * (a new one too) takes only another context_reform(), error() (why)
	 * and context_destroy(); other calls return -ENOTCONN.
	 */
	int (*context_reform)(struct gradwire_context **ctx, uint32_t epoch, int rank, int size,
			      const int *old_rank, const struct gradwire_store *store, char *err,
			      size_t errlen);
};

/* queue_submit(): tickets waiting or running at once, at most. */
#define GRADWIRE_QUEUE_MAX 1024

/* The table itself: look it up with dlsym(handle, "gradwire_plugin_v1"). */
GW_API extern const struct gradwire_plugin_v1 gradwire_plugin_v1;

#ifdef __cplusplus
}
#endif
#endif
