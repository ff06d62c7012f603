/* SPDX-License-Identifier: MIT */
/*
 * tp.c - the transport base, struct gw_tp (gw_tp_*): rank, size, the fabric
 * objects, and the fi_addr_t of every peer, found through the rendezvous
 * store.
 *
 * Address exchange: each rank publishes its fi_getname() bytes under
 * "<job>/tp/addr/<rank>", then fetches every rank's (its own included, so a
 * rank can send to itself), each get bounded by cfg->timeout_ms, and inserts
 * all of them into the AV at once. peer[r] is then the address of rank r.
 * The store is only used here; the context keeps no reference to it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define GW_TP_INTERNAL
#include "transport.h"

static int exchange(struct gw_tp *tp, struct gw_store *st)
{
	const char *job = tp->cfg.job ? tp->cfg.job : "gw";
	char key[256], *names;
	size_t cap, off = 0;
	bool str;
	int ret, n;

	snprintf(key, sizeof(key), "%s/tp/addr/%d", job, tp->rank);
	ret = gw_store_set(st, key, tp->name, tp->namelen);
	if (ret) {
		tp_log(tp, GW_LOG_ERROR, "store set %s: %s", key, gw_strerror(ret));
		return ret;
	}
	/* Binary addresses have one length; string ones (shm: FI_ADDR_STR)
	 * differ, even between endpoints of one process, and go to the AV
	 * packed, each with its NUL. */
	str = tp->info->addr_format == FI_ADDR_STR;
	cap = str ? TP_NAME_MAX : tp->namelen;
	names = calloc((size_t)tp->size, cap + 1);
	if (!names)
		return -ENOMEM;
	for (int r = 0; r < tp->size; r++) {
		ssize_t got;

		snprintf(key, sizeof(key), "%s/tp/addr/%d", job, r);
		got = gw_store_get(st, key, names + off, cap, tp->cfg.timeout_ms);
		if (got < 0 || (!str && got != (ssize_t)tp->namelen) ||
		    (str && (got == 0 || strnlen(names + off, (size_t)got) == 0))) {
			ret = got < 0 ? (int)got : -EPROTO;
			tp_log(tp, GW_LOG_ERROR, "address of rank %d (%s): %s%s", r, key,
			       gw_strerror(ret),
			       got >= 0 ? " (length differs: another provider?)" : "");
			goto out_free;
		}
		off += str ? strnlen(names + off, (size_t)got) + 1 : tp->namelen;
		names[off] = 0; /* calloc'd: only a string that filled cap */
	}
	n = fi_av_insert(tp->av, names, (size_t)tp->size, tp->peer, 0, NULL);
	if (n != tp->size) {
		ret = n < 0 ? tp_errno(n) : -EADDRNOTAVAIL;
		tp_log(tp, GW_LOG_ERROR, "fi_av_insert of %d addresses: %d", tp->size, n);
		goto out_free;
	}
	for (int r = 0; r < tp->size; r++) {
		if (tp->peer[r] == FI_ADDR_NOTAVAIL) {
			tp_log(tp, GW_LOG_ERROR, "address of rank %d refused", r);
			ret = -EADDRNOTAVAIL;
			goto out_free;
		}
	}
	ret = 0;
out_free:
	free(names);
	return ret;
}

int gw_tp_create(const struct gw_tp_cfg *cfg, int rank, int size, struct gw_store *st,
		 struct gw_tp **out)
{
	struct gw_tp *tp;
	int ret;

	if (!cfg || !st || !out || size < 1 || rank < 0 || rank >= size || cfg->timeout_ms <= 0)
		return -EINVAL;
	tp = calloc(1, sizeof(*tp));
	if (!tp)
		return -ENOMEM;
	tp->cfg = *cfg;
	tp->rank = rank;
	tp->size = size;
	tp->next_key = 1;
	tp->peer = calloc((size_t)size, sizeof(*tp->peer));
	if (!tp->peer) {
		ret = -ENOMEM;
		goto err_free_tp;
	}
	ret = tp_fabric_open(tp);
	if (ret)
		goto err_free_peer;
	ret = exchange(tp, st);
	if (ret)
		goto err_close_fabric;
	tp_log(tp, GW_LOG_INFO, "connected %d ranks", size);
	*out = tp;
	return 0;

err_close_fabric:
	tp_fabric_close(tp);
err_free_peer:
	free(tp->peer);
err_free_tp:
	free(tp);
	return ret;
}

/*
 * Leave together, with a provider that progresses by itself (net). Its
 * libfabric 1.17 version drops a message it holds for a receive not yet
 * posted once that connection closes, so a rank that destroyed its context
 * right after its last send completed could take that send with it (seen
 * as a lost barrier message at the end of a 5-rank test). Each rank sends
 * every peer an empty "bye" and closes only when each peer has sent its
 * own, has failed, or timeout_ms has passed: by then every peer has posted
 * whatever it still wanted from us. One timeout in all, posts included (a
 * dead peer's send may not even post).
 */
static void linger(struct gw_tp *tp)
{
	struct gw_tp_req *req = calloc(2 * (size_t)tp->size, sizeof(*req));
	size_t k = 0;
	int ret;

	if (!req)
		return;
	tp->leave_by = gw_now_ms() + tp->cfg.timeout_ms;
	for (int p = 0; p < tp->size; p++) {
		if (p == tp->rank)
			continue;
		if (!gw_tp_irecv_kind(tp, GW_TP_KIND_CTRL, p, TP_BYE_SLOT, 0, NULL, 0, &req[k]))
			k++;
		if (!gw_tp_isend_kind(tp, GW_TP_KIND_CTRL, p, TP_BYE_SLOT, 0, NULL, 0, &req[k]))
			k++;
	}
	ret = gw_tp_waitall(tp, req, k,
			    (int)(tp->leave_by > gw_now_ms() ? tp->leave_by - gw_now_ms() : 1));
	if (ret)
		tp_log(tp, GW_LOG_INFO, "leaving without every peer's goodbye: %s",
		       gw_strerror(ret));
	free(req);
}

void gw_tp_quiesce(struct gw_tp *tp)
{
	if (!tp || !tp->ep)
		return;
	if (tp->auto_progress && tp->size > 1)
		linger(tp);
	if (tp->orphans)
		tp_log(tp, GW_LOG_WARN, "%u abandoned operations dropped", tp->orphans);
	/* Endpoint first: nothing refers to our buffers or ops after it. */
	tp_fabric_close_ep(tp);
	tp_ops_free(tp);
}

void gw_tp_destroy(struct gw_tp *tp)
{
	if (!tp)
		return;
	gw_tp_quiesce(tp);
	while (tp->mrs) {
		struct gw_tp_mr *m = tp->mrs;

		tp->mrs = m->next;
		tp_mr_close(m->mr);
		free(m);
	}
	tp_fabric_close(tp);
	free(tp->peer);
	free(tp);
}

int gw_tp_rank(const struct gw_tp *tp)
{
	return tp->rank;
}

int gw_tp_size(const struct gw_tp *tp)
{
	return tp->size;
}

const char *gw_tp_provider(const struct gw_tp *tp)
{
	return tp->info->fabric_attr->prov_name;
}

uint64_t gw_tp_mr_mode(const struct gw_tp *tp)
{
	return tp->mr_mode;
}

bool gw_tp_blocking(const struct gw_tp *tp)
{
	return tp->blocking;
}

void gw_tp_post_once(struct gw_tp *tp, bool on)
{
	tp->post_once = on;
}

const char *gw_tp_addr_str(const struct gw_tp *tp)
{
	return tp->addr_str;
}
