/* SPDX-License-Identifier: MIT */
/*
 * transport.h - private interface of gradwire's transport base: a libfabric
 * RDM endpoint shared by `size` ranks, a rendezvous store to find each other,
 * and tagged sends and receives with bounded, blocking waits.
 *
 * Objects and ownership
 *   struct gw_store   - set/get of small blobs by key: the file store here,
 *                       the host's (c10d's, through the plugin table) in
 *                       plugin/init.c. Owned by the caller; the context only
 *                       uses it during gw_tp_create().
 *   struct gw_tp      - one context: fabric, domain, endpoint, AV, CQ, the
 *                       fi_addr_t of every peer, the pool of in-flight ops.
 *                       Driven by one thread at a time (FI_THREAD_DOMAIN).
 *   struct gw_tp_req  - the caller's handle of one posted send or receive.
 *                       The in-flight state lives in the context's pool, so a
 *                       completion that arrives after its waiter gave up never
 *                       writes into memory the caller has reused.
 *
 * Tags (64 bits, exact match, receives directed at one peer's fi_addr_t):
 *
 *   63     60 59                           32 31                             0
 *   +--------+-------------------------------+--------------------------------+
 *   |  kind  |             slot              |              seq               |
 *   +--------+-------------------------------+--------------------------------+
 *     4 bits           28 bits                           32 bits
 *
 *   kind: GW_TP_KIND_DATA (1) or GW_TP_KIND_CTRL (2); 0 is never sent, so a
 *         zeroed tag matches nothing. slot: a logical stream (a tensor, a
 *         collective's chunk). seq: the message number within the slot.
 *
 * Ordering: messages from one peer match their receives in any order, but
 * over libfabric 1.17's net a message that arrives before its receive is
 * posted and is over 128 bytes stops that peer's connection: nothing later
 * from that peer is read until that receive is posted (net holds up to
 * FI_NET_MAX_SAVED, 4, smaller ones). So a receive may wait for another
 * receive, on another slot, to be posted first; tcp;ofi_rxm holds early
 * messages of any size instead. A host that posts from several threads
 * must let each of them post while another waits (plugin/gloo/device.cc:
 * a waiter that kept the context's lock from a thread destroying a buffer
 * hung the Gloo test over net).
 *
 * Errors: every function returns 0 or a negative errno (sizes as ssize_t).
 * Nothing waits without a deadline.
 */
#ifndef GW_TRANSPORT_H
#define GW_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <sys/types.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_tagged.h>
#include "gradwire/gradwire.h"
#include "../common/log.h"

/* ---- rendezvous store ------------------------------------------------------ */

/**
 * struct gw_store_ops - what a rendezvous store provides.
 * @set: publish val[0..len) under key (replacing an older value atomically:
 *       a reader sees the old or the new value, never a mix). 0 or -errno.
 * @get: copy key's value into buf, waiting up to timeout_ms for the key to
 *       appear. Return: its length, -ETIMEDOUT when it did not appear in
 *       time, -ENOSPC when it is larger than cap, or another -errno.
 * @destroy: free the store (the struct gw_store included, for stores made
 *       by a gw_store_*_create()).
 */
struct gw_store_ops {
	int (*set)(void *s, const char *key, const void *val, size_t len);
	ssize_t (*get)(void *s, const char *key, void *buf, size_t cap, int timeout_ms);
	void (*destroy)(void *s);
};

/** struct gw_store - a store: its ops and the first argument they take. */
struct gw_store {
	const struct gw_store_ops *ops;
	void *s;
};

/**
 * gw_store_file_create() - a store in a folder every rank can reach.
 * Keys become file names (bytes outside [A-Za-z0-9_-] escaped as %XX, so two
 * keys never share a file); set writes a temporary file and rename()s it.
 * The folder must exist. Return: 0, -EINVAL, -ENOMEM, -ENOTDIR.
 */
int gw_store_file_create(const char *dir, struct gw_store **out);

/* Call the store's ops; gw_store_destroy() accepts NULL. */
int gw_store_set(struct gw_store *st, const char *key, const void *val, size_t len);
ssize_t gw_store_get(struct gw_store *st, const char *key, void *buf, size_t cap, int timeout_ms);
void gw_store_destroy(struct gw_store *st);

/* ---- context ------------------------------------------------------------- */

/**
 * gw_tp_provider_hint() - "libfabric X.Y offers: a, b, c" in buf, for an
 * error about a provider that is not there; asked: the provider named
 * (NULL: the defaults), "net" on libfabric 1.18 or later adds that it was
 * renamed tcp.
 */
void gw_tp_provider_hint(const char *asked, char *buf, size_t len);

/**
 * struct gw_tp_cfg - transport settings, filled by the caller (the plugin
 * layer reads GRADWIRE_* variables; the transport reads no environment).
 * @provider: libfabric provider for peers on other hosts (and for every
 *            peer when no local provider applies), e.g. "tcp;ofi_rxm" or
 *            "shm"; NULL tries "verbs;ofi_rxm", then the native TCP
 *            provider (gw_fi_tcp_provider(): "net" before libfabric
 *            1.18, "tcp" after), then "tcp;ofi_rxm".
 * @provider_local: provider for peers on this host (same host id in
 *            @hosts), e.g. "shm". Named and unavailable: create fails
 *            (-ENODATA), never a fall-back. NULL: see @local_auto.
 * @local_auto: with provider_local NULL: true takes "shm" for peers on this
 *            host where libfabric offers it, else @provider; false (the
 *            zeroed default) uses @provider for every peer, one endpoint.
 * @hosts: every rank's host id (size entries), or NULL: every peer is
 *            treated as remote (one endpoint). Read only in gw_tp_create().
 * @iface: domain name ("lo", "mlx5_0"); NULL: gw_tp_iface_pick()'s rule
 *         (loopback and bridges last when peers are on other hosts).
 *         When set, a provider without that domain is an error, never a
 *         fall-back to another interface. It binds the local provider too,
 *         unless that is shm (whose one domain is "shm").
 * @job: prefix of the store keys (separates jobs sharing a store); NULL: "gw".
 * @timeout_ms: deadline of the address exchange and of blocking calls (> 0).
 * @force_mr: register every buffer even when the provider does not need it.
 * @log_level: enum gw_log_level.
 * @spin_us: how long a waiter polls (yielding the core each time) after
 *           traffic before it sleeps on the CQ: 0 = default (200 us),
 *           < 0 = never sleep (for a rank that owns its core).
 * @one_conn: false: a provider over kernel TCP sockets gets one endpoint
 *            that sends and one that receives, and two ranks of one IP
 *            address have a connection per direction (fabric.c, "two
 *            endpoints"); true keeps one endpoint, one connection per pair.
 *            Every rank must choose alike.
 */
struct gw_tp_cfg {
	const char *provider;
	const char *provider_local;
	bool local_auto;
	const uint64_t *hosts;
	const char *iface;
	const char *job;
	int timeout_ms;
	bool force_mr;
	int log_level;
	int spin_us;
	bool one_conn;
};

struct gw_tp;

/**
 * gw_tp_create() - open the fabric and connect rank to its size - 1 peers.
 * Opens one endpoint ("link") per provider in use: the main one for peers
 * on other hosts, the local one for peers on this host (when it is another
 * provider; tp.c says which links open). Publishes each endpoint's address
 * under "<job>/tp/addr/<rank>" (main) or "<job>/tp/addr-local/<rank>"
 * (local), fetches every peer's from the key of the link that peer uses
 * (each within cfg->timeout_ms) and inserts it in that link's AV only.
 * With host ids, every rank first publishes which provider serves its
 * peers on its host and on others ("<job>/tp/links/<rank>") and checks
 * every peer's against its own, so that ranks configured differently fail
 * at once, naming the peer and both providers in err (when not NULL),
 * instead of waiting for an address that never comes.
 * Return: 0, -EINVAL, -ENODATA (no such provider/interface), -ENOENT (the
 * named cfg->provider_local is not available), -EPROTO (a peer uses another
 * provider for our pair), -ETIMEDOUT (a peer never published: err, when
 * not NULL, says "rank N never joined", and how long this rank waited),
 * -ENOMEM, or another -errno from libfabric.
 */
int gw_tp_create(const struct gw_tp_cfg *cfg, int rank, int size, struct gw_store *st,
		 struct gw_tp **out, char *err, size_t errlen);
/**
 * gw_tp_destroy() - close everything (accepts NULL); in-flight ops are
 * dropped. With a provider that progresses by itself it first waits (at
 * most cfg->timeout_ms) until every peer is leaving too, so that no send
 * that completed here is lost with the connection (tp.c).
 */
void gw_tp_destroy(struct gw_tp *tp);

/**
 * gw_tp_quiesce() - gw_tp_destroy()'s first half: the goodbye, then close
 * the endpoint and drop in-flight ops. Once it returns, no completion comes
 * and no byte lands in a buffer any posted op named, so an owner may free
 * them; tp then takes only gw_tp_mr_dereg() and gw_tp_destroy(). Accepts
 * NULL and a tp already quiesced.
 */
void gw_tp_quiesce(struct gw_tp *tp);

/**
 * gw_tp_abandon() - gw_tp_quiesce() without the goodbye: for a context whose
 * traffic is given up (a membership change), so that no peer, the dead
 * included, is waited for. Accepts NULL.
 */
void gw_tp_abandon(struct gw_tp *tp);

int gw_tp_rank(const struct gw_tp *tp);
int gw_tp_size(const struct gw_tp *tp);
/** gw_tp_provider() - name of the provider in use ("tcp;ofi_rxm"), or of
 * both, main first, when two links are open ("net+shm"). */
const char *gw_tp_provider(const struct gw_tp *tp);
/** gw_tp_peer_provider() - the provider of the link that carries peer. */
const char *gw_tp_peer_provider(const struct gw_tp *tp, int peer);
/** gw_tp_crowded() - whether this host's ranks (the same host id) outnumber
 * its online CPUs: then a waiter's sched_yield() hands the core to one of
 * them, and waits keep yielding (progress.c). */
bool gw_tp_crowded(const struct gw_tp *tp);
/** gw_tp_links() - how many endpoints (links) are open: 1 or 2. */
int gw_tp_links(const struct gw_tp *tp);
/** gw_tp_mr_mode() - the FI_MR_* bits the providers asked for (of every
 * link, or'ed). */
uint64_t gw_tp_mr_mode(const struct gw_tp *tp);
/** gw_tp_blocking() - true when waits sleep on the CQs' wait objects (every
 * link's), else they back off. */
bool gw_tp_blocking(const struct gw_tp *tp);
/**
 * gw_tp_post_once() - while on, a post the provider refuses for now
 * (FI_EAGAIN) fails at once with -EAGAIN instead of being retried until
 * cfg->timeout_ms: for messages the caller can send later.
 */
void gw_tp_post_once(struct gw_tp *tp, bool on);
/**
 * gw_tp_lost_ends_all() - once on, a peer declared gone (its process ended:
 * live.c) ends every wait with -ECONNRESET, not only those with it: for a
 * collective, which cannot finish without every rank, and whose other
 * ranks may wait for one another. Off (the default), only requests with
 * that peer end (a Gloo pair fails alone, as on Gloo's tcp device).
 */
void gw_tp_lost_ends_all(struct gw_tp *tp, bool on);
/** gw_tp_lost_peer() - the first peer declared gone, or -1. */
int gw_tp_lost_peer(const struct gw_tp *tp);
/* Revocation texts are cut to this many bytes, the NUL included. */
#define GW_TP_WHY_MAX 256
/**
 * gw_tp_revoke() - end tp for good, here and at every peer. Each peer that
 * watches our liveness socket (live.c) reads why and declares us gone at
 * its next look (waits look every TP_LIVE_MS); with gw_tp_lost_ends_all()
 * every wait of its ends. Here every pending and later operation fails
 * with -ECONNABORTED. Once: later calls do nothing. Safe from any thread
 * while another drives tp (only not beside gw_tp_destroy()).
 */
void gw_tp_revoke(struct gw_tp *tp, const char *why);
/** gw_tp_revoked() - why tp was revoked here, or NULL. */
const char *gw_tp_revoked(const struct gw_tp *tp);
/** gw_tp_peer_why() - what peer said when it revoked (printable ASCII, not
 * trusted: shown, never acted upon), or NULL. */
const char *gw_tp_peer_why(const struct gw_tp *tp, int peer);
/** gw_tp_addr_str() - the first link's address as text (for logs and
 * tests): the main link's when it is open. */
const char *gw_tp_addr_str(const struct gw_tp *tp);
/**
 * gw_tp_peer_addr_str() - the address this rank sends to peer at, as text
 * ("127.0.0.1:40123", "[::1]:40123", or the provider's own form), for
 * messages that must say where a peer was looked for.
 * Return: 0, -EINVAL (not a peer), -ENOENT (no address known); buf is ""
 * then.
 */
int gw_tp_peer_addr_str(const struct gw_tp *tp, int peer, char *buf, size_t len);
/* Room for gw_tp_peer_addr_str()'s text. */
#define TP_ADDR_TEXT 256

/* iface.c: the main link's interface when GRADWIRE_IFACE names none. */
enum gw_iface_kind {
	GW_IFACE_PLAIN,	   /* eth0, ens3, ib0, mlx5_0, ... */
	GW_IFACE_VIRTUAL,  /* bridges and virtual ones: docker*, br-*, veth*, ... */
	GW_IFACE_LOOPBACK, /* lo */
};
/** gw_tp_iface_kind() - what the interface (domain) name looks like. */
enum gw_iface_kind gw_tp_iface_kind(const char *name);
/**
 * gw_tp_iface_pick() - the domain to use among names[0..n) (fi_getinfo()'s
 * order; a NULL name counts as plain).
 * @want: GRADWIRE_IFACE, or NULL.
 * @remote: some peer is on another host, or host ids are not known yet.
 * @why: set to why that one (for the log), a static string.
 * Return: the index: want's exact match; without want, the first name when
 * !remote, else the first plain one, then the first virtual one, then
 * loopback. -1: want is not there, or n < 1.
 */
int gw_tp_iface_pick(const char *const *names, int n, const char *want, bool remote,
		     const char **why);
/**
 * gw_tp_shm_unname() - remove the names of tp's shm regions from /dev/shm.
 * Only once every peer on this host has mapped them, i.e. has sent to this
 * rank over shm: a region lives on while it is mapped, but no peer can map
 * it any more. From then on a rank that is killed leaves nothing in
 * /dev/shm. Return: 0, or -errno when a name could not be removed (one
 * already gone is no error); the transport works on either way.
 */
int gw_tp_shm_unname(struct gw_tp *tp);

/* ---- memory registration ------------------------------------------------- */

struct gw_tp_mr;

/**
 * gw_tp_mr_reg() - register a long-lived buffer. Sends and receives that lie
 * inside it use its descriptor instead of registering per request, on
 * whichever link they travel (one registration per link that wants them:
 * a descriptor belongs to its link's domain). Only needed for speed (and
 * only when a provider wants registration); the
 * caller keeps the buffer alive until gw_tp_mr_dereg().
 * Return: 0, -EINVAL, -ENOMEM, or a -errno from fi_mr_reg.
 */
int gw_tp_mr_reg(struct gw_tp *tp, void *buf, size_t len, struct gw_tp_mr **out);
/** gw_tp_mr_dereg() - undo gw_tp_mr_reg() (accepts NULL). */
void gw_tp_mr_dereg(struct gw_tp *tp, struct gw_tp_mr *mr);
/** gw_tp_mr_count() - registrations made so far (cache and per request). */
uint64_t gw_tp_mr_count(const struct gw_tp *tp);

/* ---- messages ------------------------------------------------------------ */

enum gw_tp_kind {
	GW_TP_KIND_DATA = 1,
	GW_TP_KIND_CTRL = 2,
};

#define GW_TP_SLOT_MAX ((UINT32_C(1) << 28) - 1)
/* The CTRL slot of the goodbye gw_tp_destroy() exchanges (tp.c). */
#define TP_BYE_SLOT GW_TP_SLOT_MAX

/** gw_tp_tag() - the 64-bit tag of (kind, slot, seq); see the layout above. */
static inline uint64_t gw_tp_tag(unsigned kind, uint32_t slot, uint32_t seq)
{
	return ((uint64_t)(kind & 0xFu) << 60) | ((uint64_t)(slot & GW_TP_SLOT_MAX) << 32) | seq;
}

/* The direction of a posted operation (a transport op, a context request). */
enum tp_op_dir { OP_SEND, OP_RECV };

struct tp_op;

/**
 * struct gw_tp_req - a posted send or receive, as seen by its caller.
 * @op: the context's in-flight record (NULL once waited for).
 * @result: after a wait, bytes moved or a negative errno.
 */
struct gw_tp_req {
	struct tp_op *op;
	ssize_t result;
	int64_t done_ns; /* when its completion was read (CLOCK_MONOTONIC), or 0 */
};

/**
 * gw_tp_isend() - post a send of buf[0..len) to peer, tag (DATA, slot, seq).
 * The buffer must stay untouched until the request is waited for.
 * FI_EAGAIN from the provider is retried (progressing the CQ) until
 * cfg->timeout_ms. Return: 0, -EINVAL, -ETIMEDOUT, -ENOMEM, or -errno.
 */
int gw_tp_isend(struct gw_tp *tp, int peer, uint32_t slot, uint32_t seq, const void *buf,
		size_t len, struct gw_tp_req *req);
/**
 * gw_tp_can_sendv() - true when gw_tp_isendv() may gather from iovcnt
 * buffers: the provider needs no registration and takes that many.
 */
bool gw_tp_can_sendv(const struct gw_tp *tp, size_t iovcnt);
/**
 * gw_tp_isendv() - gw_tp_isend() of the concatenation of iov[0..iovcnt),
 * sent without copying (fi_tsendv): every buffer must stay untouched until
 * the request is waited for. -EINVAL unless gw_tp_can_sendv().
 */
int gw_tp_isendv(struct gw_tp *tp, int peer, uint32_t slot, uint32_t seq, const struct iovec *iov,
		 size_t iovcnt, struct gw_tp_req *req);
/**
 * gw_tp_irecv() - post a receive of at most cap bytes from peer only, with
 * exactly the tag (DATA, slot, seq). A longer message is an error
 * (-EMSGSIZE from the wait), never silently truncated.
 */
int gw_tp_irecv(struct gw_tp *tp, int peer, uint32_t slot, uint32_t seq, void *buf, size_t cap,
		struct gw_tp_req *req);
/**
 * gw_tp_can_recvv() - true when gw_tp_irecvv() may scatter into iovcnt
 * buffers: the provider needs no registration and takes that many.
 */
bool gw_tp_can_recvv(const struct gw_tp *tp, size_t iovcnt);
/**
 * gw_tp_irecvv() - gw_tp_irecv() into the concatenation of iov[0..iovcnt)
 * (fi_trecvv): the message lands in those buffers as it arrives, before
 * the wait. -EINVAL unless gw_tp_can_recvv().
 */
int gw_tp_irecvv(struct gw_tp *tp, int peer, uint32_t slot, uint32_t seq, const struct iovec *iov,
		 size_t iovcnt, struct gw_tp_req *req);
/* The same with an explicit kind (control messages of the handshake). */
int gw_tp_isend_kind(struct gw_tp *tp, unsigned kind, int peer, uint32_t slot, uint32_t seq,
		     const void *buf, size_t len, struct gw_tp_req *req);
int gw_tp_irecv_kind(struct gw_tp *tp, unsigned kind, int peer, uint32_t slot, uint32_t seq,
		     void *buf, size_t cap, struct gw_tp_req *req);

/**
 * gw_tp_wait() - wait until req completes, at most timeout_ms.
 * Return: bytes sent or received (also stored in req->result), or:
 *   -ETIMEDOUT  it did not complete in time; it was cancelled (fi_cancel) and
 *               its completion drained, so the buffer may be reused. (A send
 *               the provider cannot cancel stays owned by the context until
 *               it completes or the context is destroyed; a warning says so.)
 *               A message that wins the race with the cancel is reported as
 *               received, never lost.
 *   -EMSGSIZE   the message was larger than the receive's cap (FI_ETRUNC).
 *               ofi_rxm 1.17 reports this only for eager messages (up to
 *               its ~16 KiB buffer size); a larger SAR or rendezvous
 *               message never completes a too-small receive, so that wait
 *               ends in -ETIMEDOUT (never a silent truncation, never a
 *               write past cap).
 *   -ECONNABORTED  the provider cancelled it on its own (connection lost).
 *   -ECONNRESET, -EIO, ...  a CQ error, logged with the peer's rank and the
 *               provider's text.
 *   -EINVAL     req was never posted or already waited for.
 */
ssize_t gw_tp_wait(struct gw_tp *tp, struct gw_tp_req *req, int timeout_ms);
/**
 * gw_tp_waitall() - wait for n requests under one deadline; those still
 * pending at the deadline are cancelled like in gw_tp_wait().
 * Return: 0 when all succeeded, else the first negative result in order
 * (each req[i].result holds its own outcome).
 */
int gw_tp_waitall(struct gw_tp *tp, struct gw_tp_req *reqs, size_t n, int timeout_ms);
/**
 * gw_tp_cancel() - take back req now: cancelled and drained as at a
 * deadline, but on purpose (no warning). Return: its result when it had
 * completed (never lost), else -ECANCELED; -EINVAL when not posted.
 */
ssize_t gw_tp_cancel(struct gw_tp *tp, struct gw_tp_req *req);
/**
 * gw_tp_cancel_begin() - ask for req back without waiting. Withdrawing many
 * requests: begin each, then gw_tp_cancel() each; the first of those drains
 * them all under one deadline instead of one each.
 */
void gw_tp_cancel_begin(struct gw_tp *tp, struct gw_tp_req *req);
/**
 * gw_tp_test() - progress once without sleeping.
 * Return: 1 when req has completed (gw_tp_wait() then returns at once), 0 when
 * not yet, -EINVAL for a request not in flight.
 */
int gw_tp_test(struct gw_tp *tp, struct gw_tp_req *req);
/**
 * gw_tp_progress() - read completions for up to timeout_ms (0: poll once).
 * Return: the number of completions handled, or -errno.
 */
int gw_tp_progress(struct gw_tp *tp, int timeout_ms);

/* Blocking forms, with cfg->timeout_ms. */
ssize_t gw_tp_send(struct gw_tp *tp, int peer, uint32_t slot, uint32_t seq, const void *buf,
		   size_t len);
ssize_t gw_tp_recv(struct gw_tp *tp, int peer, uint32_t slot, uint32_t seq, void *buf, size_t cap);

/** gw_now_ms() - CLOCK_MONOTONIC in milliseconds (for deadlines). */
int64_t gw_now_ms(void);
/** gw_now_ns() - CLOCK_MONOTONIC in nanoseconds (for rates). */
int64_t gw_now_ns(void);

/*
 * gw_tp_same_ip() - whether two fi_getname() addresses of format fmt
 * (FI_SOCKADDR_IN or FI_SOCKADDR_IN6) carry the same IP address, ports
 * aside: endpoints of one host's interface. False for other formats. A link
 * with an endpoint per direction uses it for such peers only (fabric.c).
 */
bool gw_tp_same_ip(const void *a, const void *b, size_t len, uint32_t fmt);

/* ---- inside the transport ------------------------------------------------- */

#ifdef GW_TP_INTERNAL
#include <stdatomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>

enum tp_op_state { OP_FREE, OP_POSTED, OP_DONE, OP_ORPHAN };

/*
 * One in-flight operation. fi_context2 comes first: libfabric's FI_CONTEXT2
 * mode lets the provider use it, and a completion's op_context points at it.
 */
struct tp_op {
	struct fi_context2 ctx;
	struct tp_op *next; /* free list */
	enum tp_op_state state;
	enum tp_op_dir dir;
	bool cancelling; /* we called fi_cancel on it */
	uint8_t link;	 /* index in gw_tp.link[] it was posted on */
	int peer;
	uint64_t tag;
	size_t len;	   /* send length or receive cap */
	struct fid_mr *mr; /* per-request registration, or NULL */
	ssize_t result;
	int64_t done_ns; /* when its completion was read */
};

#define TP_LINKS 2

struct gw_tp_mr {
	struct gw_tp_mr *next;
	uintptr_t base;
	size_t len;
	struct fid_mr *mr[TP_LINKS]; /* one per link that wants registration */
};

struct tp_slab {
	struct tp_slab *next;
	struct tp_op ops[64];
};

#define TP_NAME_MAX 256

/*
 * One endpoint and what belongs to it: the fabric objects of one provider.
 * A context has one link, or two when peers on this host use another
 * provider than peers on other hosts (tp.c).
 */
struct tp_link {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;     /* sends, and receives unless rx_ep */
	struct fid_ep *rx_ep;  /* two endpoints (fabric.c): receives */
	bool local;	       /* serves only peers on this host ("addr-local") */
	bool blocking;	       /* fi_cq_sread works */
	bool auto_progress;    /* the provider moves data without our calls */
	bool shm;	       /* counted among this process's shm endpoints (fabric.c) */
	struct fid_ep *shm_ep; /* shm: quiesced, closed later (fabric.c) */
	int shm_lock;	       /* shm: fd of the region's file, flock()ed while named */
	bool need_mr;	       /* FI_MR_LOCAL or force_mr */
	int wait_fd;	       /* the CQ's wait fd (FI_GETWAIT), or -1 */
	uint64_t mr_mode;
	uint64_t next_key;	/* requested keys when !FI_MR_PROV_KEY */
	char name[TP_NAME_MAX]; /* our fi_getname() address; ep's then rx_ep's */
	size_t namelen;		/* of both with rx_ep (binary, equal lengths) */
	char addr_str[TP_NAME_MAX];
};

struct gw_tp {
	struct gw_tp_cfg cfg; /* cfg.hosts is NULL after create */
	int rank, size;

	struct tp_link link[TP_LINKS];
	int nlinks;
	/* Of every link: waits sleep (each CQ has a wait object), progress is
	 * automatic; any link: linger at the end (tp.c), registration. */
	bool blocking;
	bool auto_progress;
	bool any_auto;
	bool need_mr;
	bool post_once;	      /* gw_tp_post_once() */
	bool hot;	      /* traffic lately (on any link): poll before sleeping */
	int64_t contended_us; /* until then waits sleep, never yield (progress.c) */
	bool crowded;	      /* this host's ranks outnumber its CPUs (progress.c) */
	bool closed;	      /* endpoints closed (gw_tp_quiesce()) */
	uint64_t mr_count;
	size_t tx_iov_limit, rx_iov_limit; /* the smallest of the links' */
	char prov_desc[64];		   /* gw_tp_provider() with two links */

	fi_addr_t *peer;     /* size entries, in their link's AV (sends go there) */
	fi_addr_t *peer_src; /* size entries: where its messages come from (its
			      * sending endpoint); != peer[] for the peers of
			      * a link's rx_ep (fabric.c, "Two endpoints") */
	uint8_t *peer_link;  /* size entries: index in link[] */
	bool *peer_failed;   /* size entries: its latest operation failed (linger) */
	/* Liveness (live.c): our listener (-1: none), a socket to each peer's
	 * (-1: none), when it closed (0: open), and peers declared gone. */
	int live_lfd;
	int *live_fd;
	int64_t *live_gone;
	bool *peer_lost;
	int64_t live_next; /* the next poll() of live_fd[] */
	int lost_first;	   /* the first peer declared gone, or -1 */
	bool lost_all;	   /* gw_tp_lost_ends_all() */
	/* Revocation (live.c), from any thread: 0, 1 (claimed: every op here
	 * ends), 2 (revoke_why written); what each peer said as it revoked
	 * (NULL: nothing). */
	atomic_int revoked;
	char revoke_why[GW_TP_WHY_MAX];
	char **peer_why;

	struct tp_slab *slabs;
	struct tp_op *free_ops;
	unsigned orphans;     /* ops whose waiter gave up */
	int64_t leave_by;     /* leaving (linger): posts give up at this time */
	struct gw_tp_mr *mrs; /* caller registrations */
};

#define tp_log(tp, lvl, ...) gw_log((tp)->cfg.log_level, (lvl), (tp)->rank, __VA_ARGS__)

/* fabric.c */
/* Open the links (which: tp.c) and map every peer to one (peer_link[]). */
/* provider.c: the main provider's fi_info (cfg.provider, or the first of
 * the defaults that is there; remote: it serves peers on other hosts, or
 * host ids are not known yet), and the local one (*out NULL when the main
 * provider serves this host's peers too). Return: 0 or -errno, logged. */
int tp_resolve_main(struct gw_tp *tp, bool remote, struct fi_info **out);
int tp_resolve_local(struct gw_tp *tp, struct fi_info **out);
int tp_fabric_open(struct gw_tp *tp);
void tp_fabric_close_ep(struct gw_tp *tp);
void tp_fabric_close(struct gw_tp *tp);
int tp_errno(int fi_err);

/* mr.c */
int tp_mr_for(struct gw_tp *tp, unsigned link, const void *buf, size_t len, uint64_t access,
	      struct fid_mr **own, void **desc);
void tp_mr_close(struct fid_mr *mr);

/* progress.c */
void tp_ops_free(struct gw_tp *tp);
/* Recycle op (its registration closed). */
void tp_op_put(struct gw_tp *tp, struct tp_op *op);
/* The endpoint op is posted on. */
struct fid_ep *tp_op_ep(const struct gw_tp *tp, const struct tp_op *op);
/* "send to" or "receive from", for log lines. */
const char *tp_op_dir_name(const struct tp_op *op);
/* One batch of completions, sleeping up to timeout_ms for the first when
 * the CQs can block. Return: completions handled (0: none), or -errno. */
int tp_progress_once(struct gw_tp *tp, int timeout_ms);
/* Wait up to left ms for something to complete (*step: the backoff's
 * state, 0 at a wait's start). Return: > 0 when something completed or a
 * peer was declared gone, 0, or -errno. */
int tp_progress_wait(struct gw_tp *tp, int64_t left, unsigned *step);

/* live.c */
/* Listen and publish "<job>/tp/live/<rank>" (before the addresses: the
 * Gloo device sends it within its own). 0, or -errno (-ENOMEM, the
 * store's); a socket that fails only disables watching. */
int tp_live_listen(struct gw_tp *tp, struct gw_store *st);
/* Connect to every peer's listener (after the addresses). 0, or -errno
 * (-ETIMEDOUT: a peer never published); others only disable watching it. */
int tp_live_connect(struct gw_tp *tp, struct gw_store *st);
void tp_live_close(struct gw_tp *tp);
/* At most every TP_LIVE_MS: look at the sockets, declare peers gone
 * (peer_lost[]). True when one was declared gone by this call. */
bool tp_live_poll(struct gw_tp *tp);
#endif /* GW_TP_INTERNAL */

#endif
