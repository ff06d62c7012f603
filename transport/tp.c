/* SPDX-License-Identifier: MIT */
/*
 * tp.c - the transport base, struct gw_tp (gw_tp_*): rank, size, the fabric
 * objects, and the fi_addr_t of every peer, found through the rendezvous
 * store.
 *
 * Address exchange, per link (fabric.c: one endpoint per provider in use):
 * each rank publishes its fi_getname() bytes under "<job>/tp/addr/<rank>"
 * for the main link, "<job>/tp/addr-local/<rank>" for the local one (peers
 * on this host over another provider, e.g. shm), then fetches the address
 * of every rank that link serves (its own included, so a rank can send to
 * itself), each get bounded by cfg->timeout_ms, and inserts them into that
 * link's AV at once. peer[r] is then rank r's address in the AV of link
 * peer_link[r]; a peer is in one link's AV only. The store is only used
 * here; the context keeps no reference to it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define GW_TP_INTERNAL
#include "transport.h"

static int exchange(struct gw_tp *tp, int li, struct gw_store *st)
{
	struct tp_link *l = &tp->link[li];
	const char *job = tp->cfg.job ? tp->cfg.job : "gw";
	const char *kind = l->local ? "addr-local" : "addr";
	char key[256], *names;
	fi_addr_t *addr;
	int *rank_of;
	size_t cap, off = 0, k = 0;
	bool str;
	int ret, n;

	snprintf(key, sizeof(key), "%s/tp/%s/%d", job, kind, tp->rank);
	ret = gw_store_set(st, key, l->name, l->namelen);
	if (ret) {
		tp_log(tp, GW_LOG_ERROR, "store set %s: %s", key, gw_strerror(ret));
		return ret;
	}
	/* Binary addresses have one length; string ones (shm: FI_ADDR_STR)
	 * differ, even between endpoints of one process, and go to the AV
	 * packed, each with its NUL. */
	str = l->info->addr_format == FI_ADDR_STR;
	cap = str ? TP_NAME_MAX : l->namelen;
	names = calloc((size_t)tp->size, cap + 1);
	addr = calloc((size_t)tp->size, sizeof(*addr));
	rank_of = calloc((size_t)tp->size, sizeof(*rank_of));
	ret = -ENOMEM;
	if (!names || !addr || !rank_of)
		goto out_free;
	for (int r = 0; r < tp->size; r++) {
		ssize_t got;

		if (tp->peer_link[r] != li)
			continue;
		snprintf(key, sizeof(key), "%s/tp/%s/%d", job, kind, r);
		got = gw_store_get(st, key, names + off, cap, tp->cfg.timeout_ms);
		if (got < 0 || (!str && got != (ssize_t)l->namelen) ||
		    (str && (got == 0 || strnlen(names + off, (size_t)got) == 0))) {
			ret = got < 0 ? (int)got : -EPROTO;
			tp_log(tp, GW_LOG_ERROR, "%s address of rank %d (%s): %s%s",
			       l->info->fabric_attr->prov_name, r, key, gw_strerror(ret),
			       got >= 0 ? " (length differs: another provider?)" : "");
			goto out_free;
		}
		off += str ? strnlen(names + off, (size_t)got) + 1 : l->namelen;
		names[off] = 0; /* calloc'd: only a string that filled cap */
		rank_of[k++] = r;
	}
	n = fi_av_insert(l->av, names, k, addr, 0, NULL);
	if (n != (int)k) {
		ret = n < 0 ? tp_errno(n) : -EADDRNOTAVAIL;
		tp_log(tp, GW_LOG_ERROR, "fi_av_insert of %zu %s addresses: %d", k,
		       l->info->fabric_attr->prov_name, n);
		goto out_free;
	}
	for (size_t i = 0; i < k; i++) {
		if (addr[i] == FI_ADDR_NOTAVAIL) {
			tp_log(tp, GW_LOG_ERROR, "address of rank %d refused", rank_of[i]);
			ret = -EADDRNOTAVAIL;
			goto out_free;
		}
		tp->peer[rank_of[i]] = addr[i];
	}
	ret = 0;
out_free:
	free(names);
	free(addr);
	free(rank_of);
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
	tp->peer = calloc((size_t)size, sizeof(*tp->peer));
	tp->peer_link = calloc((size_t)size, sizeof(*tp->peer_link));
	if (!tp->peer || !tp->peer_link) {
		ret = -ENOMEM;
		goto err_free_peer;
	}
	ret = tp_fabric_open(tp);
	tp->cfg.hosts = NULL; /* the caller's; used only there */
	if (ret)
		goto err_free_peer;
	for (int i = 0; i < tp->nlinks && !ret; i++)
		ret = exchange(tp, i, st);
	if (ret)
		goto err_close_fabric;
	tp_log(tp, GW_LOG_INFO, "connected %d ranks over %s", size, gw_tp_provider(tp));
	*out = tp;
	return 0;

err_close_fabric:
	tp_fabric_close(tp);
err_free_peer:
	free(tp->peer);
	free(tp->peer_link);
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
	if (!tp || tp->closed)
		return;
	if (tp->any_auto && tp->size > 1)
		linger(tp);
	if (tp->orphans)
		tp_log(tp, GW_LOG_WARN, "%u abandoned operations dropped", tp->orphans);
	/* Endpoint first: nothing refers to our buffers or ops after it. */
	tp_fabric_close_ep(tp);
	tp_ops_free(tp);
	tp->closed = true;
}

void gw_tp_destroy(struct gw_tp *tp)
{
	if (!tp)
		return;
	gw_tp_quiesce(tp);
	while (tp->mrs) {
		struct gw_tp_mr *m = tp->mrs;

		tp->mrs = m->next;
		for (int i = 0; i < TP_LINKS; i++)
			tp_mr_close(m->mr[i]);
		free(m);
	}
	tp_fabric_close(tp);
	free(tp->peer);
	free(tp->peer_link);
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
	if (tp->nlinks == 2)
		return tp->prov_desc;
	return tp->nlinks ? tp->link[0].info->fabric_attr->prov_name : "(closed)";
}

const char *gw_tp_peer_provider(const struct gw_tp *tp, int peer)
{
	const struct tp_link *l;

	if (peer < 0 || peer >= tp->size || tp->peer_link[peer] >= tp->nlinks)
		return "";
	l = &tp->link[tp->peer_link[peer]];
	return l->info ? l->info->fabric_attr->prov_name : "(closed)";
}

int gw_tp_links(const struct gw_tp *tp)
{
	return tp->nlinks;
}

uint64_t gw_tp_mr_mode(const struct gw_tp *tp)
{
	uint64_t m = 0;

	for (int i = 0; i < tp->nlinks; i++)
		m |= tp->link[i].mr_mode;
	return m;
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
	return tp->nlinks ? tp->link[0].addr_str : "";
}
