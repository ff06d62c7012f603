/* SPDX-License-Identifier: MIT */
/*
 * coll.h - collectives over a context (conn.h): barrier, broadcast,
 * allgather (exact) and ring allreduce (lossy for gradients).
 *
 * A struct gw_coll wraps one struct gw_ctx (which it does not own) and keeps
 * what the collectives need between calls: the slot each one uses, a scratch
 * chunk, and the first error. Every rank must call the same collectives in the
 * same order with the same sizes (like MPI). Calls are blocking.
 *
 * Slots. Collectives use slots from GW_COLL_SLOT_BASE up, so a user of the
 * same context can keep the slots below it. Successive calls reuse the same
 * slots: sequence numbers per (peer, slot) keep them apart, frame buffers are
 * reused, and the error-feedback residual of each (peer, slot) meets the same
 * chunk of the same tensor again at the next call. Allreduce keeps a stream
 * of slots per tensor: gw_coll_allreduce() tells tensors apart by length,
 * gw_coll_allreduce_id() by the caller's id (use it when two tensors have
 * the same length, or their residuals would mix). Up to GW_COLL_STREAMS
 * streams; more share them, and the context re-zeroes residuals and counts
 * it. Each stream keeps frame buffers of about twice its tensor's bytes.
 *
 * Errors. A failed collective leaves the peers' sequence numbers out of step,
 * so the gw_coll remembers the first error and every later call returns it.
 */
#ifndef GW_COLL_H
#define GW_COLL_H

#include <stddef.h>
#include <stdint.h>

/* The context the collectives run over (transport/conn.h: a caller that
 * creates one includes it). */
struct gw_ctx;

#define GW_COLL_SLOT_BASE (UINT32_C(1) << 24)
#define GW_COLL_STREAMS 1024
#define GW_COLL_SEGMENT_BYTES (UINT64_C(1) << 20)
#define GW_COLL_PIECE_BYTES (UINT64_C(4) << 20)

enum gw_coll_op {
	GW_COLL_SUM = 0,
	GW_COLL_AVG = 1,
};

/* The allreduce algorithm (GRADWIRE_ALGO; hier.c decides). */
enum gw_coll_algo {
	GW_COLL_ALGO_AUTO = 0,	 /* hier where the hosts' layout allows it, else direct */
	GW_COLL_ALGO_RING = 1,	 /* the flat ring over every rank, lossy calls too */
	GW_COLL_ALGO_HIER = 2,	 /* two levels: inside each host, then across hosts */
	GW_COLL_ALGO_DIRECT = 3, /* flat; lossy calls scatter-reduce-allgather */
};

struct gw_coll;

/** gw_coll_create() - collectives over ctx (which must outlive them). */
int gw_coll_create(struct gw_ctx *ctx, struct gw_coll **out);
/** gw_coll_destroy() - accepts NULL; the context stays open. */
void gw_coll_destroy(struct gw_coll *c);
struct gw_ctx *gw_coll_ctx(const struct gw_coll *c);
/**
 * gw_coll_set_segment() - pipeline allreduce chunks in segments of about
 * this many bytes on the wire (0: one segment per chunk). Every rank must
 * set the same, and pass the same flags to each allreduce.
 */
void gw_coll_set_segment(struct gw_coll *c, uint64_t bytes);

/**
 * gw_coll_set_piece() - the hierarchical allreduce cuts a tensor into
 * pieces of about this many bytes (GW_COLL_PIECE_BYTES until set; 0: one
 * piece; never below ranks x the context's min_compress_bytes), whose
 * steps inside and across hosts overlap (hier.c). Every
 * rank must set the same, and the same for every call: it decides the
 * slots, hence which error-feedback residual meets which values.
 */
void gw_coll_set_piece(struct gw_coll *c, uint64_t bytes);

/**
 * gw_coll_auto_force() - with GRADWIRE_CODEC=auto, make this rank state
 * codec wire id ids[i % n] for the links into it at its i-th lossy call
 * from now on, instead of what it measures (no probe, no exploration), for
 * tests and tools. Each rank forces its own links. A forced rank states no
 * rate, so with every rank forced the owners' allgather payloads take the
 * lowest rank's codec: the schedules alone decide every codec, and a run
 * repeats bit for bit. ids: n entries (copied; up to 64); n = 0 measures
 * again. Return: 0, -EINVAL.
 */
int gw_coll_auto_force(struct gw_coll *c, const uint8_t *ids, size_t n);

/**
 * gw_coll_set_algo() - the allreduce algorithm to use (GW_COLL_ALGO_AUTO
 * until set). Every rank must set the same, before its first allreduce.
 */
void gw_coll_set_algo(struct gw_coll *c, enum gw_coll_algo algo);

/**
 * gw_coll_algo() - the allreduce algorithm these collectives run: "ring",
 * "direct" (flat: exact calls on the ring, lossy ones scatter-reduce-
 * allgather, direct.c) or "hier". Decided from the set algorithm and
 * the host ids of every rank (gw_ctx_host_id(), the same list on every
 * rank), so every rank decides alike; the reason is logged
 * (GRADWIRE_LOG=info, or warn when hier was asked for and cannot run).
 * *hosts and *per_host (may be NULL) receive the number of hosts and of
 * ranks on this rank's host.
 */
const char *gw_coll_algo(struct gw_coll *c, int *hosts, int *per_host);

/**
 * gw_coll_error() - the first failure's message (e.g. which ranks disagree
 * on an allreduce, and how), or NULL when nothing failed.
 */
const char *gw_coll_error(const struct gw_coll *c);

/** gw_coll_barrier() - dissemination barrier with zero-length messages. */
int gw_coll_barrier(struct gw_coll *c);

/** gw_coll_broadcast() - root's bytes to every rank (binomial tree, exact). */
int gw_coll_broadcast(struct gw_coll *c, int root, void *buf, size_t bytes);

/**
 * gw_coll_allgather() - recv[r * bytes_per_rank ...] = rank r's send (ring,
 * exact). send may be recv + rank * bytes_per_rank (in place).
 */
int gw_coll_allgather(struct gw_coll *c, const void *send, void *recv, size_t bytes_per_rank);

/**
 * gw_coll_allreduce() - allreduce of buf[0..n) in place: the ring, or the
 * hierarchical allreduce (gw_coll_algo(): an exact reduce-scatter inside each
 * host, the ring across hosts among the ranks of the same local index on
 * their slice, an exact allgather inside each host).
 * @op: GW_COLL_SUM, or GW_COLL_AVG (the sum divided by the size, on every
 *      rank alike).
 * @flags: GW_CTX_LOSSY when buf holds gradients: the reduce-scatter hops and
 *      the owner's first allgather hop may use the negotiated lossy codec
 *      (with error feedback per (peer, slot)); later hops forward exactly.
 *      In the hierarchical allreduce only the hops across hosts may.
 *      Whatever the codec, every rank ends with the same bits. When every
 *      connection of every rank negotiated powersgd with the same
 *      parameters, lossy allreduces use PowerSGD's linear form instead
 *      (lowrank.h: exact sums of the factors P and Q).
 * Return: 0 or -errno (the context's; -ETIMEDOUT when a peer died).
 */
int gw_coll_allreduce(struct gw_coll *c, float *buf, uint64_t n, enum gw_coll_op op,
		      unsigned flags);

/**
 * gw_coll_reduce_scatter() - rank r ends with the sum (or average) over
 * every rank of its shard of buf[0..n): chunk r of the allreduce's rule
 * (buf[r * q + min(r, n % size)], q + (r < n % size) values, q = n / size).
 * The rest of buf is left undefined. With GW_CTX_LOSSY each rank's part of
 * a shard is encoded once, with its own error feedback per (owner, slot),
 * and sent straight to the owner, which adds the decoded parts to its own
 * exactly (GRADWIRE_ALGO=ring: the ring's reduce-scatter, re-encoding at
 * every hop); without it the sum is exact (the ring's). Every rank must
 * make the same calls, as for an allreduce; the tensor's residuals are its
 * own (apart from an allreduce of the same length).
 * Return: 0 or -errno.
 */
int gw_coll_reduce_scatter(struct gw_coll *c, float *buf, uint64_t n, enum gw_coll_op op,
			   unsigned flags);
/**
 * gw_coll_residual_sum() - what this rank's error feedback owes the tensor
 * id of gw_coll_allreduce_id(), as one vector: out[0..n) = the sum of its
 * residuals, each over its segment (zeros before a lossy call of it). Added
 * to this rank's values at a later allreduce of the tensor, in this context
 * or in one of other members, it enters the sum as the residuals would
 * have here (coll/residual.c). Return: 0, -EINVAL, -ENOTSUP (PowerSGD's or
 * the hierarchical allreduce's residuals, of another shape), -ENOSPC (the
 * tensor has no stream of its own: GW_COLL_STREAMS tensors came first).
 */
int gw_coll_residual_sum(struct gw_coll *c, uint32_t id, float *out, uint64_t n);

/** gw_coll_reduce_scatter_id() - the same, of the tensor called id. */
int gw_coll_reduce_scatter_id(struct gw_coll *c, uint32_t id, float *buf, uint64_t n,
			      enum gw_coll_op op, unsigned flags);

/**
 * gw_coll_reduce_scatter_counts() - gw_coll_reduce_scatter_id() with shards
 * given as counts per rank: rank r ends with the sum (or average) over
 * every rank of buf[off_r, off_r + counts[r]), off_r = counts[0] + ... +
 * counts[r - 1]. counts has one entry per rank, in rank order, summing to
 * n; any may be 0; NULL, or the chunk rule's own counts, is the plain call
 * (the same bits and wire bytes). The chunks are the ring's (and the direct
 * reduce-scatter's), cut in segments as the chunk rule's are. Every rank
 * must pass the same counts: the call check compares their hash, and
 * ranks that differ all fail with -EINVAL, gw_coll_error() saying that the
 * counts differ. Return: 0, -EINVAL (bad arguments, counts that do not
 * sum to n, or counts that differ between ranks), or -errno.
 */
int gw_coll_reduce_scatter_counts(struct gw_coll *c, uint32_t id, float *buf, uint64_t n,
				  const uint64_t *counts, enum gw_coll_op op, unsigned flags);

/**
 * gw_coll_allgather_f32() - every rank ends with every rank's shard of
 * buf[0..n) (the reduce-scatter's shards: rank r gives chunk r). With
 * GW_CTX_LOSSY each owner encodes its shard once and every rank, the owner
 * included, holds the decoded bits (payloads are forwarded byte for byte),
 * so replicas are identical; without it the copy is exact. id names the
 * tensor (its residuals), as for gw_coll_allreduce_id(). Return: 0 or -errno.
 */
int gw_coll_allgather_f32(struct gw_coll *c, uint32_t id, float *buf, uint64_t n, unsigned flags);
/** gw_coll_allgather_f32_counts() - the same with rank r's shard
 * buf[off_r, off_r + counts[r]) (gw_coll_reduce_scatter_counts()'s rule and
 * checks; NULL: the chunk rule). Return: 0 or -errno. */
int gw_coll_allgather_f32_counts(struct gw_coll *c, uint32_t id, float *buf, uint64_t n,
				 const uint64_t *counts, unsigned flags);

/** gw_coll_allreduce_id() - gw_coll_allreduce() of the tensor called id
 * (the same id on every rank): its error feedback is its own. Ids
 * 0xfffffff0 and up are reserved (PowerSGD's factors). */
int gw_coll_allreduce_id(struct gw_coll *c, uint32_t id, float *buf, uint64_t n, enum gw_coll_op op,
			 unsigned flags);

#endif
