/* SPDX-License-Identifier: MIT */
/*
 * ctx.c - the context itself: its slots, their frame buffers and the pool of
 * idle ones, create and destroy, and the statistics and residual store it
 * keeps for every connection (ctx_impl.h says who owns what).
 */
#include <stdlib.h>
#include <string.h>
#include <openssl/crypto.h>
#include "ctx_impl.h"
#include "residual_store.h"

/* ---- slots and buffers ----------------------------------------------------- */

struct conn_slot *ctx_slot_get(struct conn *c, uint32_t slot)
{
	struct conn_slot *cs = gw_map_get(&c->slots, slot);

	if (cs)
		return cs;
	cs = calloc(1, sizeof(*cs));
	if (!cs)
		return NULL;
	cs->slot = slot;
	cs->c = c;
	if (gw_map_put(&c->slots, slot, cs)) {
		free(cs);
		return NULL;
	}
	return cs;
}

static void slot_free(struct gw_ctx *ctx, struct conn_slot *cs)
{
	gw_tp_mr_dereg(ctx->tp, cs->smr);
	gw_tp_mr_dereg(ctx->tp, cs->rmr);
	free(cs->sbuf);
	free(cs->rbuf);
	free(cs);
}

/* Keep an idle buffer in the pool, or free it (or a smaller pooled one). */
static void buf_park(struct gw_ctx *ctx, uint8_t **buf, size_t *cap, struct gw_tp_mr **mr)
{
	struct pool_buf b = { *buf, *cap, *mr };

	*buf = NULL;
	*cap = 0;
	*mr = NULL;
	if (!b.buf)
		return;
	if (ctx->npool == POOL_MAX) {
		unsigned small = 0;

		for (unsigned i = 1; i < POOL_MAX; i++)
			if (ctx->pool[i].cap < ctx->pool[small].cap)
				small = i;
		if (ctx->pool[small].cap < b.cap) {
			struct pool_buf t = ctx->pool[small];

			ctx->pool[small] = b;
			b = t;
		}
		gw_tp_mr_dereg(ctx->tp, b.mr);
		free(b.buf);
		return;
	}
	ctx->pool[ctx->npool++] = b;
}

/* Make *buf hold need bytes; register it when the provider wants that. */
int ctx_buf_reserve(struct gw_ctx *ctx, uint8_t **buf, size_t *cap, struct gw_tp_mr **mr,
		    size_t need)
{
	size_t ncap = *cap ? *cap : 4096;
	unsigned best = POOL_MAX;
	uint8_t *nb;
	int rc;

	if (need <= *cap)
		return 0;
	gw_tp_mr_dereg(ctx->tp, *mr);
	*mr = NULL;
	free(*buf);
	*buf = NULL;
	*cap = 0;
	for (unsigned i = 0; i < ctx->npool; i++) /* best fit */
		if (ctx->pool[i].cap >= need &&
		    (best == POOL_MAX || ctx->pool[i].cap < ctx->pool[best].cap))
			best = i;
	if (best < POOL_MAX) {
		*buf = ctx->pool[best].buf;
		*cap = ctx->pool[best].cap;
		*mr = ctx->pool[best].mr;
		ctx->pool[best] = ctx->pool[--ctx->npool];
		return 0;
	}
	while (ncap < need)
		ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
	if (posix_memalign((void **)&nb, 64, ncap))
		return -ENOMEM;
	if (ctx->tp && (gw_tp_mr_mode(ctx->tp) & FI_MR_LOCAL)) {
		rc = gw_tp_mr_reg(ctx->tp, nb, ncap, mr);
		if (rc) {
			free(nb);
			return rc;
		}
	}
	*buf = nb;
	*cap = ncap;
	return 0;
}

/* ---- lifecycle ------------------------------------------------------------- */

int ctx_alloc(const struct gw_ctx_cfg *cfg, int rank, int size, uint32_t epoch, struct gw_ctx **out)
{
	struct gw_ctx *ctx = calloc(1, sizeof(*ctx));

	if (!ctx)
		return -ENOMEM;
	ctx->rank = rank;
	ctx->size = size;
	ctx->epoch = epoch;
	ctx->failed_peer = -1;
	ctx->timeout_ms = cfg->tp.timeout_ms;
	ctx->log_level = cfg->tp.log_level;
	ctx->min_compress_bytes = cfg->min_compress_bytes;
	gw_codec_init(&ctx->none, gw_codec_find("none"));
	*out = ctx;
	if (ctx_conns_alloc(size, &ctx->conns) || gw_rstore_create(&ctx->rs))
		return -ENOMEM; /* the caller destroys the shell */
	ctx->host = calloc((size_t)size, sizeof(*ctx->host));
	return ctx->host ? 0 : -ENOMEM;
}

int ctx_conns_alloc(int size, struct conn **out)
{
	struct conn *conns = calloc((size_t)size, sizeof(*conns));

	*out = conns;
	if (!conns)
		return -ENOMEM;
	for (int p = 0; p < size; p++) {
		conns[p].peer = p;
		if (gw_map_init(&conns[p].slots))
			return -ENOMEM; /* gw_map_fini() takes the zeroed rest */
	}
	return 0;
}

int ctx_open(struct gw_ctx *ctx, const struct gw_ctx_cfg *cfg, struct gw_store *st, char *err,
	     size_t errlen)
{
	const char *job = cfg->tp.job ? cfg->tp.job : "gw";
	struct gw_tp_cfg tpc;
	bool links;
	int rc;

	/* Host ids before the endpoints when they pick each peer's provider;
	 * else after, as a host whose store learns a peer's host id only with
	 * its address needs (the Gloo device, plugin/gloo/rendezvous.cc). */
	links = cfg->tp.provider_local || cfg->tp.local_auto;
	if (links) {
		rc = ctx_hosts(ctx, cfg, st, job, err, errlen);
		if (rc) {
			ctx_log(ctx, GW_LOG_ERROR, "%s", err);
			return rc;
		}
	}
	tpc = cfg->tp;
	tpc.hosts = links ? ctx->host : NULL;
	err[0] = 0; /* gw_tp_create() may say why itself */
	rc = gw_tp_create(&tpc, ctx->rank, ctx->size, st, &ctx->tp, err, errlen);
	if (rc) {
		if (err[0]) /* not logged yet */
			ctx_log(ctx, GW_LOG_ERROR, "transport: %s", err);
		else if (rc == -ENOENT && tpc.provider_local)
			snprintf(err, errlen,
				 "transport: GRADWIRE_PROVIDER_LOCAL=%s (for peers on this host) "
				 "is not available here: %s",
				 tpc.provider_local, gw_strerror(rc));
		else {
			char hint[320] = "";

			if (rc == -ENODATA)
				gw_tp_provider_hint(tpc.provider, hint, sizeof(hint));
			snprintf(err, errlen, "transport (%s%s%s on %s): %s%s%s",
				 tpc.provider ? tpc.provider : "default provider",
				 tpc.provider_local ? ", local " : "",
				 tpc.provider_local ? tpc.provider_local : "",
				 tpc.iface ? tpc.iface : "default interface", gw_strerror(rc),
				 hint[0] ? "; " : "", hint);
		}
		return rc;
	}
	if (!links)
		rc = ctx_hosts(ctx, cfg, st, job, err, errlen);
	if (!rc)
		rc = ctx_handshake(ctx, cfg, err, errlen);
	if (rc) {
		ctx_log(ctx, GW_LOG_ERROR, "%s", err);
		return rc;
	}
	/* Every peer on this host has sent to this rank over shm in the
	 * handshake, so it has mapped this rank's region: the region's name can
	 * go, and a rank killed from now on leaves no 16 MiB file in /dev/shm. */
	gw_tp_shm_unname(ctx->tp);
	return 0;
}

int gw_ctx_create(const struct gw_ctx_cfg *cfg, int rank, int size, struct gw_store *st,
		  struct gw_ctx **out, char *err, size_t errlen)
{
	struct gw_ctx *ctx = NULL;
	int rc;

	snprintf(err, errlen, "no error");
	if (size < 1 || rank < 0 || rank >= size || !st || cfg->tp.timeout_ms <= 0) {
		snprintf(err, errlen, "invalid rank %d / size %d / timeout", rank, size);
		return -EINVAL;
	}
	rc = ctx_alloc(cfg, rank, size, 0, &ctx);
	if (!rc)
		rc = ctx_open(ctx, cfg, st, err, errlen);
	if (rc) {
		gw_ctx_destroy(ctx);
		return rc;
	}
	*out = ctx;
	return 0;
}

void ctx_buffers_free(struct gw_ctx *ctx)
{
	for (int p = 0; ctx->conns && p < ctx->size; p++) {
		struct conn *c = &ctx->conns[p];

		for (size_t i = 0; i < c->slots.cap; i++)
			if (c->slots.e[i].val)
				slot_free(ctx, c->slots.e[i].val);
		gw_map_fini(&c->slots);
	}
	for (unsigned i = 0; i < ctx->npool; i++) {
		gw_tp_mr_dereg(ctx->tp, ctx->pool[i].mr);
		free(ctx->pool[i].buf);
	}
	ctx->npool = 0;
}

void ctx_conn_fini(struct conn *c)
{
	gw_mac_destroy(c->tx);
	gw_mac_destroy(c->rx);
	c->tx = c->rx = NULL;
	OPENSSL_cleanse(&c->hs, sizeof(c->hs));
	c->ready = false;
}

void gw_ctx_destroy(struct gw_ctx *ctx)
{
	if (!ctx)
		return;
	if (ctx->stats_out)
		gw_ctx_stats_print(ctx, ctx->stats_out);
	/* Nothing may write into a slot's buffers once they are freed: a
	 * receive still posted (a caller that never waited, a peer's late
	 * frame) would land in freed memory. */
	gw_tp_quiesce(ctx->tp);
	ctx_buffers_free(ctx);
	for (int p = 0; ctx->conns && p < ctx->size; p++)
		ctx_conn_fini(&ctx->conns[p]);
	gw_tp_destroy(ctx->tp); /* after the buffers' registrations went */
	gw_rstore_destroy(ctx->rs);
	free(ctx->conns);
	free(ctx->host);
	free(ctx->scratch);
	free(ctx);
}

int gw_ctx_rank(const struct gw_ctx *ctx)
{
	return ctx->rank;
}
int gw_ctx_size(const struct gw_ctx *ctx)
{
	return ctx->size;
}
struct gw_tp *gw_ctx_tp(struct gw_ctx *ctx)
{
	return ctx->tp;
}
void gw_ctx_post_once(struct gw_ctx *ctx, bool on)
{
	gw_tp_post_once(ctx->tp, on);
}
void gw_ctx_lost_ends_all(struct gw_ctx *ctx, bool on)
{
	gw_tp_lost_ends_all(ctx->tp, on);
}

uint64_t gw_ctx_host_id(const struct gw_ctx *ctx, int rank)
{
	return rank >= 0 && rank < ctx->size ? ctx->host[rank] : 0;
}

int gw_ctx_log_level(const struct gw_ctx *ctx)
{
	return ctx->log_level;
}

const char *gw_ctx_provider(const struct gw_ctx *ctx)
{
	return gw_tp_provider(ctx->tp);
}

const struct gw_codec *gw_ctx_codec(const struct gw_ctx *ctx, int peer)
{
	if (peer < 0 || peer >= ctx->size || peer == ctx->rank)
		return NULL;
	return &ctx->conns[peer].hs.codec;
}

int gw_ctx_codec_set(const struct gw_ctx *ctx, int peer, const struct gw_codec **set)
{
	if (peer < 0 || peer >= ctx->size || peer == ctx->rank || !ctx->conns[peer].hs.autoc)
		return 0;
	*set = ctx->conns[peer].hs.set;
	return ctx->conns[peer].hs.nset;
}

int gw_ctx_link_codec(struct gw_ctx *ctx, int peer, unsigned id, bool trial)
{
	struct conn *c;
	char now[sizeof(c->st.codec_now)];

	if (peer < 0 || peer >= ctx->size || peer == ctx->rank || !ctx->conns[peer].hs.autoc)
		return -EINVAL;
	c = &ctx->conns[peer];
	for (int i = 0; i < c->hs.nset; i++) {
		if (c->hs.set[i].ops->id != id)
			continue;
		if (gw_codec_format(&c->hs.set[i], now, sizeof(now)) < 0)
			now[0] = '\0';
		memcpy(c->st.codec_now, now, sizeof(now));
		if (trial)
			return 0;
		if (c->chosen && c->chosen != id + 1)
			c->st.switches++;
		c->chosen = id + 1;
		return 0;
	}
	return -ENOENT;
}

int gw_ctx_flow_take(struct gw_ctx *ctx, int peer, struct gw_ctx_flow *out)
{
	if (peer < 0 || peer >= ctx->size || peer == ctx->rank)
		return -EINVAL;
	*out = ctx->conns[peer].flow;
	memset(&ctx->conns[peer].flow, 0, sizeof(*out));
	return 0;
}

/* "auto:" and the set's specs, comma-separated, as far as len allows. */
static void set_format(const struct gw_hs_result *hs, char *s, size_t len)
{
	size_t o = (size_t)snprintf(s, len, "auto:");

	for (int i = 0; i < hs->nset && o < len; i++) {
		char spec[GW_HS_SPEC_MAX + 1];

		if (gw_codec_format(&hs->set[i], spec, sizeof(spec)) < 0)
			break;
		o += (size_t)snprintf(s + o, len - o, "%s%s", i ? "," : "", spec);
	}
}

uint64_t gw_ctx_min_compress_bytes(const struct gw_ctx *ctx)
{
	return ctx->min_compress_bytes;
}

int gw_ctx_own_residual(struct gw_ctx *ctx, uint32_t slot, uint64_t n, const struct gw_codec *c,
			struct gw_ctx_own *own)
{
	struct gw_rstore_entry *e;
	int reshaped, rc;

	rc = gw_rstore_get(ctx->rs, (uint32_t)ctx->rank, slot, n, c, &e, &reshaped);
	if (rc)
		return rc;
	if (reshaped)
		ctx_log(ctx, GW_LOG_WARN,
			"own slot %u: a tensor of %llu values "
			"replaces the residual's shape; residual re-zeroed",
			slot, (unsigned long long)n);
	gw_rstore_dirty(e); /* the caller writes it */
	*own = (struct gw_ctx_own){ &e->res, e->state, e->state_len };
	return 0;
}

/* ---- requests -------------------------------------------------------------- */

/*
 * The start of every request: clear r, check the arguments (n values or
 * bytes at buf; n of at most GW_MAX_ELEMS) and find the slot of (peer, slot).
 */
int ctx_req_begin(struct gw_ctx *ctx, int peer, uint32_t slot, const void *buf, uint64_t n,
		  struct gw_ctx_req *r, struct conn_slot **cs)
{
	memset(r, 0, sizeof(*r));
	if (peer < 0 || peer >= ctx->size || peer == ctx->rank || slot > GW_TP_SLOT_MAX ||
	    n > GW_MAX_ELEMS || (n && !buf))
		return -EINVAL;
	*cs = ctx_slot_get(&ctx->conns[peer], slot);
	return *cs ? 0 : -ENOMEM;
}

int gw_ctx_slot_trim(struct gw_ctx *ctx, int peer, uint32_t slot, size_t keep)
{
	struct conn_slot *cs;

	if (peer < 0 || peer >= ctx->size || peer == ctx->rank)
		return -EINVAL;
	cs = gw_map_get(&ctx->conns[peer].slots, slot);
	if (!cs)
		return 0;
	if (!cs->sbusy && cs->scap > keep)
		buf_park(ctx, &cs->sbuf, &cs->scap, &cs->smr);
	if (!cs->rbusy && !cs->stash && cs->rcap > keep)
		buf_park(ctx, &cs->rbuf, &cs->rcap, &cs->rmr);
	return 0;
}

/* ---- statistics and residuals ---------------------------------------------- */

int gw_ctx_failed_peer(const struct gw_ctx *ctx, bool *receiving)
{
	if (receiving)
		*receiving = ctx->failed_dir == OP_RECV;
	return ctx->failed_peer;
}

int gw_ctx_stats(const struct gw_ctx *ctx, int peer, struct gw_conn_stats *s)
{
	const struct conn *c;

	if (peer < 0 || peer >= ctx->size || peer == ctx->rank)
		return -EINVAL;
	c = &ctx->conns[peer];
	*s = c->st;
	if (c->hs.autoc)
		set_format(&c->hs, s->codec, sizeof(s->codec));
	else if (c->hs.codec.ops)
		gw_codec_format(&c->hs.codec, s->codec, sizeof(s->codec));
	if (!c->hs.autoc)
		memcpy(s->codec_now, s->codec, sizeof(s->codec_now));
	s->mac = c->hs.mac;
	snprintf(s->mac_name, sizeof(s->mac_name), "%s", gw_mac_alg_name(c->hs.mac));
	snprintf(s->provider, sizeof(s->provider), "%s", gw_tp_peer_provider(ctx->tp, peer));
	s->fell_back = c->hs.fell_back;
	return 0;
}

void gw_ctx_stats_print(const struct gw_ctx *ctx, FILE *f)
{
	for (int p = 0; p < ctx->size; p++) {
		struct gw_conn_stats s;

		if (gw_ctx_stats(ctx, p, &s))
			continue;
		fprintf(f,
			"gradwire[%d]: peer %d over %s codec %s%s mac %s | sent %llu frames "
			"%llu B raw %llu B wire (x%.2f) | recv %llu frames %llu B raw "
			"%llu B wire | mac failures %llu rejected %llu timeouts %llu "
			"errors %llu residual resets %llu",
			ctx->rank, p, s.provider, s.codec, s.fell_back ? " (fallback)" : "",
			s.mac_name, (unsigned long long)s.frames_sent,
			(unsigned long long)s.raw_sent, (unsigned long long)s.wire_sent,
			s.wire_sent ? (double)s.raw_sent / (double)s.wire_sent : 0.0,
			(unsigned long long)s.frames_recv, (unsigned long long)s.raw_recv,
			(unsigned long long)s.wire_recv, (unsigned long long)s.mac_failures,
			(unsigned long long)s.rejected, (unsigned long long)s.timeouts,
			(unsigned long long)s.errors, (unsigned long long)s.residual_resets);
		if (ctx->conns[p].hs.autoc)
			fprintf(f, " | now %s, %llu switches", s.codec_now[0] ? s.codec_now : "-",
				(unsigned long long)s.switches);
		fputc('\n', f);
	}
}

void gw_ctx_stats_at_exit(struct gw_ctx *ctx, FILE *f)
{
	ctx->stats_out = f;
}

int gw_ctx_residuals_save(struct gw_ctx *ctx, const char *path)
{
	return gw_rstore_save(ctx->rs, path);
}

int gw_ctx_residuals_load(struct gw_ctx *ctx, const char *path)
{
	return gw_rstore_load(ctx->rs, path);
}

bool gw_ctx_residuals_zero(const struct gw_ctx *ctx)
{
	return gw_rstore_all_zero(ctx->rs);
}

uint64_t gw_ctx_residual_bytes(const struct gw_ctx *ctx)
{
	return gw_rstore_bytes(ctx->rs);
}

void gw_ctx_residuals_reset(struct gw_ctx *ctx)
{
	gw_rstore_reset(ctx->rs);
}

bool gw_ctx_residual_add_to(const struct gw_ctx *ctx, int peer, uint32_t slot, uint64_t n,
			    float *dst)
{
	return peer >= 0 && gw_rstore_add_to(ctx->rs, (uint32_t)peer, slot, n, dst);
}
