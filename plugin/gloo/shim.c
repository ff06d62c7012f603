/* SPDX-License-Identifier: MIT */
/*
 * shim.c - gradwire's context for the Gloo device (shim.h has the contract).
 *
 * A struct gwg_ctx is a struct gw_ctx; a struct gwg_req is a struct
 * gw_ctx_req. Only byte messages are used: Gloo's transport sees bytes, not
 * types, so everything it carries travels exactly (frames are still
 * authenticated when GRADWIRE_MAC asks for it, and counted in statistics).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"
#include "init.h"
#include "shim.h"

_Static_assert(_Alignof(struct gw_ctx_req) <= 16, "gwg_req alignment");

static int load(struct gw_config *cfg, char *err, size_t errlen)
{
	int rc = gw_config_load(cfg, NULL, err, errlen);

	if (rc)
		return rc;
	if (cfg->gloo_compress) {
		snprintf(err, errlen,
			 "GRADWIRE_GLOO_COMPRESS=1 is not supported: "
			 "Gloo's ring allreduce forwards chunks hop by hop, so "
			 "lossy frames would leave replicas different (see "
			 "docs/integration.md); unset it or use 0");
		return -ENOTSUP;
	}
	return 0;
}

int gwg_config_check(int *timeout_ms, char *err, size_t errlen)
{
	struct gw_config cfg;
	int rc = load(&cfg, err, errlen);

	if (!rc && timeout_ms)
		*timeout_ms = (int)cfg.timeout_ms;
	return rc;
}

int gwg_create(int rank, int size, int timeout_ms, const struct gradwire_store *st,
	       struct gwg_ctx **out, char *err, size_t errlen)
{
	struct gw_store store;
	struct gw_config cfg;
	struct gw_ctx_cfg cc;
	struct gw_ctx *ctx;
	int rc;

	rc = load(&cfg, err, errlen);
	if (rc)
		return rc;
	/* One endpoint for every peer: Gloo's rendezvous swaps one address
	 * per rank, and a peer's host id arrives with it (rendezvous.cc), too
	 * late to choose a provider per peer. */
	if (cfg.provider_local && strcmp(cfg.provider_local, "main") &&
	    (!cfg.provider || strcmp(cfg.provider_local, cfg.provider))) {
		snprintf(err, errlen,
			 "GRADWIRE_PROVIDER_LOCAL=%s: the Gloo device uses one provider for every "
			 "peer (GRADWIRE_PROVIDER); unset it, or set it to main or the same",
			 cfg.provider_local);
		return -EINVAL;
	}
	cfg.job = "gloo"; /* the keys of shim.h; the store is ours alone */
	if (timeout_ms > 0 && !getenv("GRADWIRE_TIMEOUT_MS"))
		cfg.timeout_ms = timeout_ms; /* Gloo's, unless set */
	gw_store_host(&store, st);
	gw_config_log(&cfg, rank);
	gw_config_ctx(&cfg, &cc);
	cc.tp.provider_local = NULL;
	cc.tp.local_auto = false;
	rc = gw_ctx_create(&cc, rank, size, &store, &ctx, err, errlen);
	if (rc)
		return rc;
	if (cfg.stats)
		gw_ctx_stats_at_exit(ctx, stderr);
	*out = (struct gwg_ctx *)ctx;
	return 0;
}

void gwg_destroy(struct gwg_ctx *c)
{
	gw_ctx_destroy((struct gw_ctx *)c);
}

uint64_t gwg_host_id(void)
{
	struct gw_config cfg;
	char err[256];

	/* The id the context will use (GRADWIRE_HOST_ID, else the host name):
	 * the addresses' ids must match what the handshake compares. */
	if (gw_config_load(&cfg, NULL, err, sizeof(err)))
		return gw_ctx_host_id_default(); /* the context fails on it anyway */
	return gw_config_host_id(&cfg);
}

const char *gwg_provider(struct gwg_ctx *c)
{
	return gw_ctx_provider((struct gw_ctx *)c);
}

void gwg_log(int level, int rank, const char *msg)
{
	struct gw_config cfg;
	char err[256];

	if (gw_config_load(&cfg, NULL, err, sizeof(err)))
		cfg.log = GW_LOG_WARN;
	gw_log(cfg.log, level, rank, "%s", msg);
}

const char *gwg_strerror(int err)
{
	return gw_strerror(err);
}

size_t gwg_req_size(void)
{
	return sizeof(struct gw_ctx_req);
}

int gwg_isend(struct gwg_ctx *c, int peer, uint32_t slot, const void *buf, size_t len,
	      struct gwg_req *r)
{
	return gw_ctx_isend_bytes((struct gw_ctx *)c, peer, slot, buf, len, (struct gw_ctx_req *)r);
}

int gwg_isend_now(struct gwg_ctx *c, int peer, uint32_t slot, const void *buf, size_t len,
		  struct gwg_req *r)
{
	int rc;

	gw_ctx_post_once((struct gw_ctx *)c, true);
	rc = gwg_isend(c, peer, slot, buf, len, r);
	gw_ctx_post_once((struct gw_ctx *)c, false);
	return rc;
}

int gwg_irecv(struct gwg_ctx *c, int peer, uint32_t slot, void *buf, size_t len, struct gwg_req *r)
{
	return gw_ctx_irecv_bytes((struct gw_ctx *)c, peer, slot, buf, len, (struct gw_ctx_req *)r);
}

int gwg_isend2(struct gwg_ctx *c, int peer, uint32_t slot, const void *head, size_t hlen,
	       const void *buf, size_t len, struct gwg_req *r)
{
	return gw_ctx_isend_bytes_hdr((struct gw_ctx *)c, peer, slot, head, hlen, buf, len,
				      (struct gw_ctx_req *)r);
}

int gwg_irecv_frame(struct gwg_ctx *c, int peer, uint32_t slot, size_t cap, struct gwg_req *r)
{
	return gw_ctx_irecv_frame((struct gw_ctx *)c, peer, slot, cap, (struct gw_ctx_req *)r);
}

void gwg_req_frame(const struct gwg_req *r, const void **bytes, size_t *len)
{
	const struct gw_ctx_req *q = (const struct gw_ctx_req *)r;

	*bytes = q->payload;
	*len = q->payload_len;
}

int gwg_test(struct gwg_ctx *c, struct gwg_req *r)
{
	return gw_ctx_test((struct gw_ctx *)c, (struct gw_ctx_req *)r);
}

int gwg_finish(struct gwg_ctx *c, struct gwg_req *r)
{
	return gw_ctx_wait((struct gw_ctx *)c, (struct gw_ctx_req *)r);
}

void gwg_withdraw(struct gwg_ctx *c, struct gwg_req *r)
{
	gw_ctx_recv_withdraw((struct gw_ctx *)c, (struct gw_ctx_req *)r);
}

void gwg_req_retarget(struct gwg_req *r, void *buf)
{
	gw_ctx_req_retarget((struct gw_ctx_req *)r, buf);
}

int gwg_progress(struct gwg_ctx *c, int timeout_ms)
{
	return gw_ctx_progress((struct gw_ctx *)c, timeout_ms);
}

void gwg_trim(struct gwg_ctx *c, int peer, uint32_t slot)
{
	gw_ctx_slot_trim((struct gw_ctx *)c, peer, slot, 0);
}
