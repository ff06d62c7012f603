/* SPDX-License-Identifier: MIT */
/*
 * shim.h - the C face of gradwire that the Gloo device (device.cc) uses.
 *
 * The C++ part cannot include the transport's C11 headers, so this file
 * exposes just what a Gloo transport needs: a context created from the
 * GRADWIRE_* variables over a host store, exact byte sends and receives on
 * (peer, slot), a non-blocking test, and progress. Every function returns 0
 * or a negative errno, like the rest of gradwire. A context is driven by one
 * thread at a time: the caller serialises (device.cc holds its mutex).
 */
#ifndef GW_GLOO_SHIM_H
#define GW_GLOO_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include "gradwire/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gwg_ctx;
struct gwg_req;

/* The keys gw_ctx_create() uses, for rank r (the job prefix is "gloo"). */
#define GWG_KEY_ADDR "gloo/tp/addr/%d"
#define GWG_KEY_HOST "gloo/host/%d"
#define GWG_KEY_LIVE "gloo/tp/live/%d" /* set before GWG_KEY_ADDR */

/**
 * gwg_config_check() - load the GRADWIRE_* variables strictly; also rejects
 * GRADWIRE_GLOO_COMPRESS=1 (docs/integration.md says why). On error, err
 * names the variable. *timeout_ms receives GRADWIRE_TIMEOUT_MS.
 */
int gwg_config_check(int *timeout_ms, char *err, size_t errlen);

/**
 * gwg_create() - gw_ctx_create() configured from the environment, with the
 * job prefix "gloo" and the host store st (used only during this call).
 * timeout_ms > 0 (Gloo's context timeout) is the context's timeout unless
 * GRADWIRE_TIMEOUT_MS is set: it bounds the handshake, a post the provider
 * keeps refusing, and the goodbye at the end.
 */
int gwg_create(int rank, int size, int timeout_ms, const struct gradwire_store *st,
	       struct gwg_ctx **out, char *err, size_t errlen);
/** gwg_destroy() - accepts NULL; prints statistics when GRADWIRE_STATS=1. */
void gwg_destroy(struct gwg_ctx *c);

/** gwg_host_id() - this host's id, as the handshake computes it. */
uint64_t gwg_host_id(void);
/** gwg_provider() - the libfabric provider in use, e.g. "tcp;ofi_rxm". */
const char *gwg_provider(struct gwg_ctx *c);
/** gwg_log() - one gradwire log line (level: 0 error .. 3 debug). */
void gwg_log(int level, int rank, const char *msg);
const char *gwg_strerror(int err);

/** Requests: gwg_req_size() bytes, 16-aligned, owned by the caller. */
size_t gwg_req_size(void);
/** Exact bytes: never compressed, never changed. */
int gwg_isend(struct gwg_ctx *c, int peer, uint32_t slot, const void *buf, size_t len,
	      struct gwg_req *r);
int gwg_irecv(struct gwg_ctx *c, int peer, uint32_t slot, void *buf, size_t len, struct gwg_req *r);
/**
 * gwg_isend_now() - gwg_isend(), but -EAGAIN at once when the provider
 * cannot take the send now (a connection not yet, or no longer, there),
 * instead of retrying until GRADWIRE_TIMEOUT_MS.
 */
int gwg_isend_now(struct gwg_ctx *c, int peer, uint32_t slot, const void *buf, size_t len,
		  struct gwg_req *r);
/** One message of head then buf (a bound buffer's offset, then its bytes). */
int gwg_isend2(struct gwg_ctx *c, int peer, uint32_t slot, const void *head, size_t hlen,
	       const void *buf, size_t len, struct gwg_req *r);
/**
 * gwg_irecv_frame() - receive a message of up to cap bytes and leave it in
 * gradwire's frame buffer; after gwg_finish(), gwg_req_frame() gives it.
 */
int gwg_irecv_frame(struct gwg_ctx *c, int peer, uint32_t slot, size_t cap, struct gwg_req *r);
/** gwg_req_frame() - a finished gwg_irecv_frame()'s bytes (valid until the
 * next receive on its slot is posted). */
void gwg_req_frame(const struct gwg_req *r, const void **bytes, size_t *len);
/** gwg_test() - progress once: 1 when r completed, 0 not yet, or -errno. */
int gwg_test(struct gwg_ctx *c, struct gwg_req *r);
/**
 * gwg_finish() - complete r (after gwg_test() said 1, or it had an error):
 * a receive is authenticated and copied to the caller's buffer.
 * Return: 0 or -errno (the error is logged with the peer).
 */
int gwg_finish(struct gwg_ctx *c, struct gwg_req *r);
/**
 * gwg_withdraw() - take back a posted receive that did not complete; a
 * message that had arrived is kept for the next receive on its (peer, slot).
 */
void gwg_withdraw(struct gwg_ctx *c, struct gwg_req *r);
/**
 * gwg_req_retarget() - make the posted receive r deliver into buf instead
 * (same length): for a buffer freed while its receive is still pending.
 */
void gwg_req_retarget(struct gwg_req *r, void *buf);
/** gwg_progress() - read completions for up to timeout_ms. */
int gwg_progress(struct gwg_ctx *c, int timeout_ms);
/** gwg_trim() - move the idle frame buffers of (peer, slot) to the pool. */
void gwg_trim(struct gwg_ctx *c, int peer, uint32_t slot);

#ifdef __cplusplus
}
#endif

#endif
