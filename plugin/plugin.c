/* SPDX-License-Identifier: MIT */
/*
 * plugin.c - gradwire_plugin_v1, the table hosts load with dlsym()
 * (include/gradwire/plugin.h), over the context (transport/conn.h) and the
 * collectives (coll.h).
 *
 * State. init() parses the GRADWIRE_* variables once into a process-wide
 * struct gw_config (its strings point into the environment); finalize()
 * forgets it. A mutex guards that configuration and the count of open
 * contexts, so finalize() can refuse (-EBUSY) while one is open; it is held
 * only for those few fields, never while a context connects.
 *
 * Ownership. A struct gradwire_context owns its gw_ctx, the gw_coll over it,
 * and its store: a file store, or an adapter that copies the host's
 * struct gradwire_store (the host's own struct may go once create returns).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gradwire/plugin.h"
#include "coll.h"
#include "config.h"
#include "init.h"
#include "queue.h"

_Static_assert(GRADWIRE_LOSSY == GW_CTX_LOSSY, "send flag");
_Static_assert(GRADWIRE_ADD == GW_CTX_ADD, "recv flag");
_Static_assert(GRADWIRE_SLOT_MAX == GW_COLL_SLOT_BASE, "user slots");
_Static_assert(GRADWIRE_QUEUE_MAX == GW_QUEUE_MAX, "queue depth");
_Static_assert((int)GRADWIRE_SUM == (int)GW_COLL_SUM && (int)GRADWIRE_AVG == (int)GW_COLL_AVG,
	       "allreduce ops");

struct gradwire_context {
	struct gw_ctx *ctx;
	struct gw_coll *coll;	  /* NULL after a context_reform() that failed */
	char why[512];		  /* ...and why it failed */
	struct gw_store *file_st; /* context_create_file() */
	struct gw_store host_st;  /* context_create(): adapter to host */
	struct gradwire_store host;
	unsigned queues; /* open queues, under lock: context_reform() refuses while any is */
};

/* The host holds this; g is the context the queue runs on. */
struct gradwire_queue {
	struct gw_queue *q;
	struct gradwire_context *g;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct gw_config config; /* valid while loaded */
static bool loaded;
static unsigned long open_contexts;

static void say(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void say(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static int plugin_init(char *err, size_t errlen)
{
	char buf[256];
	int rc = 0;

	pthread_mutex_lock(&lock);
	if (!loaded) {
		buf[0] = '\0';
		rc = gw_config_load(&config, NULL, buf, sizeof(buf));
		if (rc) {
			gw_log(GW_LOG_ERROR, GW_LOG_ERROR, -1, "%s", buf);
			say(err, errlen, "%s", buf);
		}
		loaded = !rc;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

static int plugin_finalize(void)
{
	int rc = 0;

	pthread_mutex_lock(&lock);
	if (open_contexts)
		rc = -EBUSY;
	else
		loaded = false;
	pthread_mutex_unlock(&lock);
	return rc;
}

static void context_free(struct gradwire_context *g)
{
	gw_coll_destroy(g->coll);
	gw_ctx_destroy(g->ctx);
	gw_store_destroy(g->file_st);
	free(g);
}

/* The collectives over g->ctx, with the configuration's settings. */
static int coll_open(struct gradwire_context *g, const struct gw_config *cfg)
{
	int rc = gw_coll_create(g->ctx, &g->coll);

	if (rc)
		return rc;
	gw_coll_set_segment(g->coll, cfg->segment_bytes);
	gw_coll_set_algo(g->coll, (enum gw_coll_algo)cfg->algo);
	return 0;
}

/* Connect g over st with the loaded configuration; frees g on failure. */
static int context_open(struct gradwire_context *g, int rank, int size, struct gw_store *st,
			struct gradwire_context **out, char *err, size_t errlen)
{
	struct gw_config cfg;
	char buf[512] = "";
	bool ok;
	int rc = 0;

	pthread_mutex_lock(&lock);
	ok = loaded;
	if (ok) {
		cfg = config;
		open_contexts++;
	}
	pthread_mutex_unlock(&lock);
	if (!ok) {
		say(err, errlen, "gradwire: init() was not called");
		rc = -EINVAL;
		goto err_free;
	}
	rc = gw_ctx_create_config(&cfg, rank, size, st, &g->ctx, buf, sizeof(buf));
	if (rc) {
		say(err, errlen, "%s", buf);
		goto err_count;
	}
	rc = coll_open(g, &cfg);
	if (rc) {
		say(err, errlen, "gradwire: collectives: %s", gw_strerror(rc));
		goto err_count;
	}
	*out = g;
	return 0;

err_count:
	pthread_mutex_lock(&lock);
	open_contexts--;
	pthread_mutex_unlock(&lock);
err_free:
	context_free(g);
	return rc;
}

static bool bad_group(int rank, int size, char *err, size_t errlen)
{
	if (size >= 1 && rank >= 0 && rank < size)
		return false;
	say(err, errlen, "gradwire: rank %d of size %d", rank, size);
	return true;
}

/* Copy the host's store into g (a newer host's struct may be longer: what
 * this version knows), behind g->host_st. */
static int host_store(struct gradwire_context *g, const struct gradwire_store *store, char *err,
		      size_t errlen)
{
	if (!store || store->size < offsetof(struct gradwire_store, arg) + sizeof(store->arg) ||
	    !store->set || !store->get) {
		say(err, errlen, "gradwire: no store, or one without set/get");
		return -EINVAL;
	}
	memset(&g->host, 0, sizeof(g->host));
	memcpy(&g->host, store, store->size < sizeof(g->host) ? store->size : sizeof(g->host));
	g->host.size = sizeof(g->host);
	gw_store_host(&g->host_st, &g->host);
	return 0;
}

static int plugin_context_create(int rank, int size, const struct gradwire_store *store,
				 struct gradwire_context **out, char *err, size_t errlen)
{
	struct gradwire_context *g;

	if (!out || bad_group(rank, size, err, errlen))
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	if (host_store(g, store, err, errlen)) {
		free(g);
		return -EINVAL;
	}
	return context_open(g, rank, size, &g->host_st, out, err, errlen);
}

static int plugin_context_reform(struct gradwire_context **pg, uint32_t epoch, int rank, int size,
				 const int *old_rank, const struct gradwire_store *store, char *err,
				 size_t errlen)
{
	struct gradwire_context *g;
	struct gw_config cfg;
	struct gw_ctx_cfg cc;
	unsigned queues = 0;
	bool ok, fresh;
	int rc;

	if (!pg || !old_rank || bad_group(rank, size, err, errlen))
		return -EINVAL;
	fresh = !*pg;
	pthread_mutex_lock(&lock);
	ok = loaded;
	if (!fresh)
		queues = (*pg)->queues;
	if (ok) {
		cfg = config;
		open_contexts += fresh;
	}
	pthread_mutex_unlock(&lock);
	if (!ok) {
		say(err, errlen, "gradwire: init() was not called");
		return -EINVAL;
	}
	if (queues) { /* its thread would run on the collectives this frees */
		say(err, errlen,
		    "gradwire: context_reform to epoch %u: %u queue(s) of this context are "
		    "open; queue_destroy() them first",
		    epoch, queues);
		return -EBUSY;
	}
	g = fresh ? calloc(1, sizeof(*g)) : *pg;
	if (!g) {
		pthread_mutex_lock(&lock);
		open_contexts--;
		pthread_mutex_unlock(&lock);
		return -ENOMEM;
	}
	*pg = g;
	gw_coll_destroy(g->coll);
	g->coll = NULL;
	rc = host_store(g, store, g->why, sizeof(g->why));
	gw_store_destroy(g->file_st); /* a file store's context goes on over store */
	g->file_st = NULL;
	gw_config_ctx(&cfg, &cc);
	if (!rc)
		rc = gw_ctx_reform(&g->ctx, &cc, epoch, rank, size, old_rank, &g->host_st, g->why,
				   sizeof(g->why));
	if (!rc && fresh && cfg.stats)
		gw_ctx_stats_at_exit(g->ctx, stderr);
	if (!rc && (rc = coll_open(g, &cfg)))
		snprintf(g->why, sizeof(g->why), "gradwire: collectives: %s", gw_strerror(rc));
	if (rc)
		say(err, errlen, "%s", g->why);
	return rc;
}

static int plugin_context_create_file(int rank, int size, const char *dir,
				      struct gradwire_context **out, char *err, size_t errlen)
{
	struct gradwire_context *g;
	int rc;

	if (!out || !dir || bad_group(rank, size, err, errlen))
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	rc = gw_store_file_create(dir, &g->file_st);
	if (rc) {
		say(err, errlen, "gradwire: file store in %s: %s", dir, gw_strerror(rc));
		free(g);
		return rc;
	}
	return context_open(g, rank, size, g->file_st, out, err, errlen);
}

static void plugin_context_destroy(struct gradwire_context *g)
{
	if (!g)
		return;
	context_free(g);
	pthread_mutex_lock(&lock);
	open_contexts--;
	pthread_mutex_unlock(&lock);
}

/* After a context_reform() that failed: only another, or destroy. */
static bool unformed(const struct gradwire_context *g)
{
	return g && !g->coll;
}

static bool bad_peer(const struct gradwire_context *g, int peer)
{
	return !g || peer < 0 || peer >= gw_ctx_size(g->ctx) || peer == gw_ctx_rank(g->ctx);
}

static int plugin_send(struct gradwire_context *g, int peer, uint32_t slot, const float *x,
		       uint64_t n, unsigned flags)
{
	if (unformed(g))
		return -ENOTCONN;
	struct gw_ctx_req r;
	int rc;

	if (bad_peer(g, peer) || slot >= GRADWIRE_SLOT_MAX || (flags & ~GRADWIRE_LOSSY) ||
	    (!x && n))
		return -EINVAL;
	rc = gw_ctx_isend(g->ctx, peer, slot, x, n, flags, &r);
	return rc ? rc : gw_ctx_wait(g->ctx, &r);
}

static int plugin_recv(struct gradwire_context *g, int peer, uint32_t slot, float *y, uint64_t n,
		       unsigned flags)
{
	if (unformed(g))
		return -ENOTCONN;
	struct gw_ctx_req r;
	int rc;

	if (bad_peer(g, peer) || slot >= GRADWIRE_SLOT_MAX ||
	    (flags & ~(GRADWIRE_LOSSY | GRADWIRE_ADD)) || (!y && n))
		return -EINVAL;
	rc = gw_ctx_irecv(g->ctx, peer, slot, y, n, flags, &r);
	return rc ? rc : gw_ctx_wait(g->ctx, &r);
}

static int plugin_send_bytes(struct gradwire_context *g, int peer, uint32_t slot, const void *buf,
			     size_t len)
{
	if (unformed(g))
		return -ENOTCONN;
	struct gw_ctx_req r;
	int rc;

	if (bad_peer(g, peer) || slot >= GRADWIRE_SLOT_MAX || (!buf && len))
		return -EINVAL;
	rc = gw_ctx_isend_bytes(g->ctx, peer, slot, buf, len, &r);
	return rc ? rc : gw_ctx_wait(g->ctx, &r);
}

static int plugin_recv_bytes(struct gradwire_context *g, int peer, uint32_t slot, void *buf,
			     size_t len)
{
	if (unformed(g))
		return -ENOTCONN;
	struct gw_ctx_req r;
	int rc;

	if (bad_peer(g, peer) || slot >= GRADWIRE_SLOT_MAX || (!buf && len))
		return -EINVAL;
	rc = gw_ctx_irecv_bytes(g->ctx, peer, slot, buf, len, &r);
	return rc ? rc : gw_ctx_wait(g->ctx, &r);
}

/* An allreduce's arguments, for a call on handle (a context or a queue). */
static bool bad_reduce(const void *handle, const float *buf, uint64_t n, int op, unsigned flags)
{
	return !handle || (!buf && n) || (op != GRADWIRE_SUM && op != GRADWIRE_AVG) ||
	       (flags & ~GRADWIRE_LOSSY);
}

static int plugin_allreduce(struct gradwire_context *g, float *buf, uint64_t n, int op,
			    unsigned flags)
{
	if (unformed(g))
		return -ENOTCONN;
	if (bad_reduce(g, buf, n, op, flags))
		return -EINVAL;
	return gw_coll_allreduce(g->coll, buf, n, (enum gw_coll_op)op, flags);
}

static int plugin_allreduce_id(struct gradwire_context *g, uint32_t id, float *buf, uint64_t n,
			       int op, unsigned flags)
{
	if (unformed(g))
		return -ENOTCONN;
	if (bad_reduce(g, buf, n, op, flags))
		return -EINVAL;
	return gw_coll_allreduce_id(g->coll, id, buf, n, (enum gw_coll_op)op, flags);
}

static int plugin_reduce_scatter(struct gradwire_context *g, uint32_t id, float *buf, uint64_t n,
				 int op, unsigned flags)
{
	if (unformed(g))
		return -ENOTCONN;
	if (bad_reduce(g, buf, n, op, flags))
		return -EINVAL;
	return gw_coll_reduce_scatter_id(g->coll, id, buf, n, (enum gw_coll_op)op, flags);
}

static int plugin_allgather_f32(struct gradwire_context *g, uint32_t id, float *buf, uint64_t n,
				unsigned flags)
{
	if (unformed(g))
		return -ENOTCONN;
	if (bad_reduce(g, buf, n, GRADWIRE_SUM, flags))
		return -EINVAL;
	return gw_coll_allgather_f32(g->coll, id, buf, n, flags);
}

static int plugin_reduce_scatter_counts(struct gradwire_context *g, uint32_t id, float *buf,
					uint64_t n, const uint64_t *counts, int op, unsigned flags)
{
	if (unformed(g))
		return -ENOTCONN;
	if (bad_reduce(g, buf, n, op, flags))
		return -EINVAL;
	return gw_coll_reduce_scatter_counts(g->coll, id, buf, n, counts, (enum gw_coll_op)op,
					     flags);
}

static int plugin_allgather_f32_counts(struct gradwire_context *g, uint32_t id, float *buf,
				       uint64_t n, const uint64_t *counts, unsigned flags)
{
	if (unformed(g))
		return -ENOTCONN;
	if (bad_reduce(g, buf, n, GRADWIRE_SUM, flags))
		return -EINVAL;
	return gw_coll_allgather_f32_counts(g->coll, id, buf, n, counts, flags);
}

static int plugin_queue_create(struct gradwire_context *g, struct gradwire_queue **out)
{
	struct gradwire_queue *q;
	int rc;

	if (unformed(g))
		return -ENOTCONN;
	if (!g || !out)
		return -EINVAL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	rc = gw_queue_create(g->coll, &q->q);
	if (rc) {
		free(q);
		return rc;
	}
	q->g = g;
	pthread_mutex_lock(&lock);
	g->queues++;
	pthread_mutex_unlock(&lock);
	*out = q;
	return 0;
}

static int plugin_queue_submit(struct gradwire_queue *q, uint32_t id, float *buf, uint64_t n,
			       int op, unsigned flags, uint64_t *ticket)
{
	if (bad_reduce(q, buf, n, op, flags))
		return -EINVAL;
	return gw_queue_submit(q->q, id, buf, n, (enum gw_coll_op)op, flags, ticket);
}

static int plugin_queue_wait(struct gradwire_queue *q, uint64_t ticket, int timeout_ms)
{
	return q ? gw_queue_wait(q->q, ticket, timeout_ms) : -EINVAL;
}

static void plugin_queue_destroy(struct gradwire_queue *q)
{
	if (!q)
		return;
	gw_queue_destroy(q->q);
	pthread_mutex_lock(&lock);
	q->g->queues--;
	pthread_mutex_unlock(&lock);
	free(q);
}

static void plugin_queue_cancel(struct gradwire_queue *q)
{
	if (q)
		gw_queue_cancel(q->q);
}

static const char *plugin_error(struct gradwire_context *g)
{
	const char *e;

	if (!g)
		return NULL;
	if (unformed(g))
		return g->why;
	e = gw_coll_error(g->coll);
	return e ? e : gw_tp_revoked(gw_ctx_tp(g->ctx));
}

static void plugin_revoke(struct gradwire_context *g, const char *reason)
{
	if (g && !unformed(g))
		gw_tp_revoke(gw_ctx_tp(g->ctx), reason);
}

static int plugin_residual_sum(struct gradwire_context *g, uint32_t id, float *out, uint64_t n)
{
	if (unformed(g))
		return -ENOTCONN;
	return g ? gw_coll_residual_sum(g->coll, id, out, n) : -EINVAL;
}

static int plugin_allgather(struct gradwire_context *g, const void *send, void *recv,
			    size_t bytes_per_rank)
{
	if (unformed(g))
		return -ENOTCONN;
	if (!g || ((!send || !recv) && bytes_per_rank))
		return -EINVAL;
	return gw_coll_allgather(g->coll, send, recv, bytes_per_rank);
}

static int plugin_broadcast(struct gradwire_context *g, int root, void *buf, size_t bytes)
{
	if (unformed(g))
		return -ENOTCONN;
	if (!g || root < 0 || root >= gw_ctx_size(g->ctx) || (!buf && bytes))
		return -EINVAL;
	return gw_coll_broadcast(g->coll, root, buf, bytes);
}

static int plugin_barrier(struct gradwire_context *g)
{
	if (unformed(g))
		return -ENOTCONN;
	return g ? gw_coll_barrier(g->coll) : -EINVAL;
}

/* Frozen for v1: members are added only in place of reserved words. */
_Static_assert(sizeof(struct gradwire_stats) == 320, "struct gradwire_stats changed size");

static int plugin_stats(struct gradwire_context *g, int peer, struct gradwire_stats *out)
{
	if (unformed(g))
		return -ENOTCONN;
	struct gw_conn_stats s;
	int rc;

	if (bad_peer(g, peer) || !out)
		return -EINVAL;
	rc = gw_ctx_stats(g->ctx, peer, &s);
	if (rc)
		return rc;
	memset(out, 0, sizeof(*out));
	snprintf(out->codec, sizeof(out->codec), "%s", s.codec);
	snprintf(out->mac, sizeof(out->mac), "%s", s.mac_name);
	snprintf(out->provider, sizeof(out->provider), "%s", s.provider);
	snprintf(out->codec_now, sizeof(out->codec_now), "%.*s", (int)sizeof(out->codec_now) - 1,
		 s.codec_now);
	out->switches = s.switches;
	out->fell_back = s.fell_back;
	out->frames_sent = s.frames_sent;
	out->frames_recv = s.frames_recv;
	out->raw_sent = s.raw_sent;
	out->wire_sent = s.wire_sent;
	out->raw_recv = s.raw_recv;
	out->wire_recv = s.wire_recv;
	out->mac_failures = s.mac_failures;
	out->rejected = s.rejected;
	out->timeouts = s.timeouts;
	out->errors = s.errors;
	out->residual_resets = s.residual_resets;
	return 0;
}

static int plugin_residuals_save(struct gradwire_context *g, const char *path)
{
	if (unformed(g))
		return -ENOTCONN;
	return g && path ? gw_ctx_residuals_save(g->ctx, path) : -EINVAL;
}

static int plugin_residuals_load(struct gradwire_context *g, const char *path)
{
	if (unformed(g))
		return -ENOTCONN;
	return g && path ? gw_ctx_residuals_load(g->ctx, path) : -EINVAL;
}

static void plugin_residuals_reset(struct gradwire_context *g)
{
	if (g && !unformed(g))
		gw_ctx_residuals_reset(g->ctx);
}

GW_API const struct gradwire_plugin_v1 gradwire_plugin_v1 = {
	.size = sizeof(struct gradwire_plugin_v1),
	.version = GRADWIRE_PLUGIN_VERSION,
	.init = plugin_init,
	.context_create = plugin_context_create,
	.context_create_file = plugin_context_create_file,
	.context_destroy = plugin_context_destroy,
	.send = plugin_send,
	.recv = plugin_recv,
	.send_bytes = plugin_send_bytes,
	.recv_bytes = plugin_recv_bytes,
	.allreduce = plugin_allreduce,
	.allgather = plugin_allgather,
	.broadcast = plugin_broadcast,
	.barrier = plugin_barrier,
	.stats = plugin_stats,
	.residuals_save = plugin_residuals_save,
	.residuals_load = plugin_residuals_load,
	.residuals_reset = plugin_residuals_reset,
	.finalize = plugin_finalize,
	.strerror = gw_strerror,
	.allreduce_id = plugin_allreduce_id,
	.queue_create = plugin_queue_create,
	.queue_submit = plugin_queue_submit,
	.queue_wait = plugin_queue_wait,
	.queue_destroy = plugin_queue_destroy,
	.queue_cancel = plugin_queue_cancel,
	.error = plugin_error,
	.reduce_scatter = plugin_reduce_scatter,
	.allgather_f32 = plugin_allgather_f32,
	.reduce_scatter_counts = plugin_reduce_scatter_counts,
	.allgather_f32_counts = plugin_allgather_f32_counts,
	.revoke = plugin_revoke,
	.residual_sum = plugin_residual_sum,
	.context_reform = plugin_context_reform,
};
