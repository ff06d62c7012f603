/* SPDX-License-Identifier: MIT */
/*
 * ctx_epoch.c - membership epochs: gw_ctx_reform() moves a context to a new
 * member set that the caller decided (conn.h has the contract).
 *
 * What a survivor keeps of each link to another survivor: its negotiation
 * (codec or auto set, MAC algorithm, the handshake's keys) and its
 * statistics. Its MAC keys are derived afresh for the epoch
 * (gw_mac_create_epoch()), and every frame carries its epoch, so a frame of
 * one epoch is refused in another (ctx_recv.c). What goes: the links to the
 * departed, every slot with its sequence numbers and frame buffers, the
 * residuals (the caller takes what they owe first: coll/residual.c), and the
 * transport. Each epoch opens its endpoints afresh: a failed step can leave
 * a survivor's frames queued at another survivor, unmatched, and libfabric
 * 1.17's net stops reading a connection behind such a frame, so only a new
 * endpoint is sure to start clean. Newcomers then get the handshake, and only
 * they (both ends of a pair agree which links are ready: ctx_connect.c).
 *
 * A reform that fails (a member that never published, a newcomer refused)
 * leaves the context in the new shape without a transport: ready for
 * another gw_ctx_reform(), or gw_ctx_destroy(), and nothing else.
 */
#include <stdlib.h>
#include <string.h>
#include "ctx_impl.h"
#include "residual_store.h"

/* old[] names each old rank at most once, this rank's as rank (a newcomer,
 * ctx NULL, cannot check the others' against an epoch it was not in). */
static int check_old(const struct gw_ctx *ctx, int rank, int size, const int *old, char *err,
		     size_t errlen)
{
	for (int r = 0; r < size; r++) {
		if (old[r] < -1 || (ctx && old[r] >= ctx->size)) {
			snprintf(err, errlen, "new rank %d: old rank %d is not in the last epoch",
				 r, old[r]);
			return -EINVAL;
		}
		for (int q = 0; q < r; q++)
			if (old[r] >= 0 && old[q] == old[r]) {
				snprintf(err, errlen, "old rank %d appears twice in the new set",
					 old[r]);
				return -EINVAL;
			}
	}
	if (old[rank] != (ctx ? ctx->rank : -1)) {
		snprintf(err, errlen,
			 "new rank %d must be this rank's (old rank %d), not old rank %d", rank,
			 ctx ? ctx->rank : -1, old[rank]);
		return -EINVAL;
	}
	return 0;
}

/* The epoch's keys on c, a link kept from the last. */
static int rekey(struct gw_ctx *ctx, struct conn *c)
{
	gw_mac_destroy(c->tx);
	gw_mac_destroy(c->rx);
	c->tx = c->rx = NULL;
	if (!c->hs.mac)
		return 0;
	if (gw_mac_create_epoch(c->hs.mac, c->hs.key_send, c->born, ctx->epoch, &c->tx) ||
	    gw_mac_create_epoch(c->hs.mac, c->hs.key_recv, c->born, ctx->epoch, &c->rx))
		return -EIO;
	return 0;
}

/* Move ctx to (rank, size, epoch): conns re-indexed, departed ones dropped,
 * everything of the old epoch's traffic gone. */
static int reshape(struct gw_ctx *ctx, uint32_t epoch, int rank, int size, const int *old)
{
	struct conn *conns = NULL;
	uint64_t *host = calloc((size_t)size, sizeof(*host));
	struct gw_rstore *rs = NULL;
	int rc = ctx_conns_alloc(size, &conns);

	if (!rc && host)
		rc = gw_rstore_create(&rs);
	if (rc || !host || !rs) {
		for (int r = 0; conns && r < size; r++)
			gw_map_fini(&conns[r].slots);
		free(conns);
		free(host);
		gw_rstore_destroy(rs);
		return -ENOMEM; /* ctx as it was */
	}
	/* Nothing of the old epoch may land in a buffer from here on. */
	gw_tp_abandon(ctx->tp);
	ctx_buffers_free(ctx);
	gw_tp_destroy(ctx->tp);
	ctx->tp = NULL;
	for (int r = 0; r < size; r++) {
		struct conn *c = old[r] >= 0 ? &ctx->conns[old[r]] : NULL;
		struct gw_map slots = conns[r].slots;

		if (!c || r == rank || !c->ready)
			continue;
		conns[r] = *c; /* moved: negotiation, keys, statistics */
		conns[r].slots = slots;
		conns[r].peer = r;
		memset(c, 0, sizeof(*c));
		host[r] = ctx->host[old[r]];
	}
	for (int p = 0; p < ctx->size; p++) /* the departed */
		ctx_conn_fini(&ctx->conns[p]);
	free(ctx->conns);
	free(ctx->host);
	gw_rstore_destroy(ctx->rs);
	ctx->conns = conns;
	ctx->host = host;
	ctx->rs = rs;
	ctx->rank = rank;
	ctx->size = size;
	ctx->epoch = epoch;
	ctx->failed_peer = -1;
	for (int r = 0; r < size; r++)
		if (conns[r].ready && rekey(ctx, &conns[r]))
			return -EIO;
	return 0;
}

int gw_ctx_reform(struct gw_ctx **pctx, const struct gw_ctx_cfg *cfg, uint32_t epoch, int rank,
		  int size, const int *old, struct gw_store *st, char *err, size_t errlen)
{
	struct gw_ctx *ctx = *pctx;
	int rc, kept = 0;

	snprintf(err, errlen, "no error");
	if (size < 1 || rank < 0 || rank >= size || !old || !st || cfg->tp.timeout_ms <= 0) {
		snprintf(err, errlen, "invalid rank %d / size %d / timeout", rank, size);
		return -EINVAL;
	}
	if (ctx && epoch <= ctx->epoch) {
		snprintf(err, errlen, "epoch %u does not come after this context's, %u", epoch,
			 ctx->epoch);
		return -EINVAL;
	}
	rc = check_old(ctx, rank, size, old, err, errlen);
	if (rc)
		return rc;
	if (!ctx) { /* a newcomer: a shell, kept for the next try on failure */
		rc = ctx_alloc(cfg, rank, size, epoch, pctx);
		if (rc) {
			gw_ctx_destroy(*pctx);
			*pctx = NULL;
			snprintf(err, errlen, "%s", gw_strerror(rc));
			return rc;
		}
		return ctx_open(*pctx, cfg, st, err, errlen);
	}
	rc = reshape(ctx, epoch, rank, size, old);
	if (rc) {
		snprintf(err, errlen, "re-forming in epoch %u: %s", epoch, gw_strerror(rc));
		return rc;
	}
	for (int r = 0; r < size; r++)
		kept += ctx->conns[r].ready;
	rc = ctx_open(ctx, cfg, st, err, errlen);
	if (!rc)
		ctx_log(ctx, GW_LOG_INFO, "epoch %u: rank %d of %d, %d links kept, %d new", epoch,
			rank, size, kept, size - 1 - kept);
	return rc;
}

uint32_t gw_ctx_epoch(const struct gw_ctx *ctx)
{
	return ctx->epoch;
}
