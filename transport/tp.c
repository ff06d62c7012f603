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
 * peer_link[r]; a peer is in one link's AV only. A link with an endpoint
 * per direction (fabric.c) publishes both addresses, the sending one
 * first. peer_src[r] is r's sending endpoint, where its messages to us come
 * from; peer[r], where we send, is r's receiving endpoint when r has our
 * IP address (gw_tp_same_ip(): its traffic never leaves the host), else
 * its sending one again: one connection, as without the second endpoint.
 * Both ranks of a pair decide alike. The store is only used here; the
 * context keeps no reference to it.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define GW_TP_INTERNAL
#include "transport.h"

static int exchange(struct gw_tp *tp, int li, struct gw_store *st, char *err, size_t errlen)
{
	int64_t t0 = gw_now_ms();
	struct tp_link *l = &tp->link[li];
	const char *job = tp->cfg.job ? tp->cfg.job : "gw";
	const char *kind = l->local ? "addr-local" : "addr";
	char key[256], *names;
	fi_addr_t *addr;
	int *rank_of;
	size_t cap, off = 0, k = 0, per = l->rx_ep ? 2 : 1;
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
	 * packed, each with its NUL. Room for any, so that a peer's of another
	 * length is read and refused as such. */
	str = l->info->addr_format == FI_ADDR_STR;
	cap = TP_NAME_MAX;
	names = calloc((size_t)tp->size, cap + 1);
	addr = calloc((size_t)tp->size * per, sizeof(*addr));
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
		if (got == -ETIMEDOUT && err) { /* without host ids, the first key */
			ret = (int)got;
			snprintf(
				err, errlen,
				"rank %d never joined: its %s address (%s) was not in the store "
				"after %lld ms (GRADWIRE_TIMEOUT_MS); is it running, with the same "
				"store and GRADWIRE_JOB?",
				r, l->info->fabric_attr->prov_name, key,
				(long long)(gw_now_ms() - t0));
			goto out_free; /* the caller logs err */
		}
		if (got < 0 || (!str && got != (ssize_t)l->namelen) ||
		    (str && (got == 0 || strnlen(names + off, (size_t)got) == 0))) {
			ret = got < 0 ? (int)got : -EPROTO;
			tp_log(tp, GW_LOG_ERROR, "%s address of rank %d (%s): %s%s",
			       l->info->fabric_attr->prov_name, r, key, gw_strerror(ret),
			       got >= 0 ? " (length differs: another provider, or "
					  "GRADWIRE_ONE_CONNECTION set on one side only?)"
					: "");
			goto out_free;
		}
		off += str ? strnlen(names + off, (size_t)got) + 1 : l->namelen;
		names[off] = 0; /* calloc'd: only a string that filled cap */
		rank_of[k++] = r;
	}
	/* Binary addresses of one length: each rank's one or two are k * per
	 * entries of the same size. */
	n = fi_av_insert(l->av, names, k * per, addr, 0, NULL);
	if (n != (int)(k * per)) {
		ret = n < 0 ? tp_errno(n) : -EADDRNOTAVAIL;
		tp_log(tp, GW_LOG_ERROR, "fi_av_insert of %zu %s addresses: %d", k * per,
		       l->info->fabric_attr->prov_name, n);
		goto out_free;
	}
	for (size_t i = 0; i < k; i++) {
		if (addr[i * per] == FI_ADDR_NOTAVAIL ||
		    addr[i * per + per - 1] == FI_ADDR_NOTAVAIL) {
			tp_log(tp, GW_LOG_ERROR, "address of rank %d refused", rank_of[i]);
			ret = -EADDRNOTAVAIL;
			goto out_free;
		}
		tp->peer_src[rank_of[i]] = addr[i * per];
		tp->peer[rank_of[i]] = addr[i * per];
		if (per == 2 && gw_tp_same_ip(l->name, names + i * l->namelen, l->namelen / 2,
					      l->info->addr_format))
			tp->peer[rank_of[i]] = addr[i * per + 1];
	}
	ret = 0;
out_free:
	free(names);
	free(addr);
	free(rank_of);
	return ret;
}

bool gw_tp_same_ip(const void *a, const void *b, size_t len, uint32_t fmt)
{
	struct sockaddr_in a4, b4;
	struct sockaddr_in6 a6, b6;

	if (fmt == FI_SOCKADDR_IN && len >= sizeof(a4)) {
		memcpy(&a4, a, sizeof(a4));
		memcpy(&b4, b, sizeof(b4));
		return a4.sin_family == AF_INET && b4.sin_family == AF_INET &&
		       a4.sin_addr.s_addr == b4.sin_addr.s_addr;
	}
	if (fmt == FI_SOCKADDR_IN6 && len >= sizeof(a6)) {
		memcpy(&a6, a, sizeof(a6));
		memcpy(&b6, b, sizeof(b6));
		return a6.sin6_family == AF_INET6 && b6.sin6_family == AF_INET6 &&
		       !memcmp(&a6.sin6_addr, &b6.sin6_addr, sizeof(a6.sin6_addr));
	}
	return false;
}

/* The provider serving this rank's peers on its host (local) or on others:
 * the link of such a peer; "" when it has none. */
static const char *serving(const struct gw_tp *tp, const uint64_t *h, bool local)
{
	for (int r = 0; r < tp->size; r++)
		if (r != tp->rank && (h[r] == h[tp->rank]) == local)
			return gw_tp_peer_provider(tp, r);
	return "";
}

/*
 * Providers agree. Ranks that chose different providers for one pair (a
 * GRADWIRE_PROVIDER or GRADWIRE_PROVIDER_LOCAL set differently, shm found
 * on one side only) would wait for an address the peer never publishes and
 * fail at the store's timeout, naming the wrong cause. So each rank
 * publishes "<job>/tp/links/<rank>": the provider for its peers on its host
 * and the one for the others, two NUL-terminated names, before any address
 * is read, and checks every peer's against its own. Only with host ids
 * (without them one link serves all and its addresses show a mismatch).
 */
static int links_agree(struct gw_tp *tp, const uint64_t *h, struct gw_store *st, char *err,
		       size_t errlen)
{
	const char *job = tp->cfg.job ? tp->cfg.job : "gw";
	const char *mine[2] = { serving(tp, h, false), serving(tp, h, true) };
	char key[256], rec[2 * TP_NAME_MAX], got_rec[2 * TP_NAME_MAX + 1];
	size_t a = strlen(mine[0]) + 1, b = strlen(mine[1]) + 1;
	int ret;

	if (a + b > sizeof(rec))
		return -ENAMETOOLONG;
	memcpy(rec, mine[0], a);
	memcpy(rec + a, mine[1], b);
	snprintf(key, sizeof(key), "%s/tp/links/%d", job, tp->rank);
	ret = gw_store_set(st, key, rec, a + b);
	if (ret) {
		tp_log(tp, GW_LOG_ERROR, "store set %s: %s", key, gw_strerror(ret));
		return ret;
	}
	for (int r = 0; r < tp->size; r++) {
		bool local = h[r] == h[tp->rank];
		const char *theirs;
		ssize_t got;
		size_t n0;

		if (r == tp->rank)
			continue;
		snprintf(key, sizeof(key), "%s/tp/links/%d", job, r);
		got = gw_store_get(st, key, got_rec, sizeof(got_rec) - 1, tp->cfg.timeout_ms);
		if (got < 0) {
			tp_log(tp, GW_LOG_ERROR, "the providers of rank %d (%s): %s", r, key,
			       gw_strerror((int)got));
			return (int)got;
		}
		got_rec[got] = 0;
		n0 = strnlen(got_rec, (size_t)got);
		theirs = !local ? got_rec : n0 < (size_t)got ? got_rec + n0 + 1 : "";
		if (strcmp(theirs, mine[local])) {
			if (err)
				snprintf(
					err, errlen,
					"rank %d reaches its peers on %s over '%s', this rank over "
					"'%s': set GRADWIRE_PROVIDER%s alike on every rank",
					r, local ? "its host" : "other hosts", theirs, mine[local],
					local ? "_LOCAL" : "");
			return -EPROTO;
		}
	}
	return 0;
}

int gw_tp_create(const struct gw_tp_cfg *cfg, int rank, int size, struct gw_store *st,
		 struct gw_tp **out, char *err, size_t errlen)
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
	tp->live_lfd = -1;
	tp->lost_first = -1;
	tp->peer = calloc((size_t)size, sizeof(*tp->peer));
	tp->peer_src = calloc((size_t)size, sizeof(*tp->peer_src));
	tp->peer_link = calloc((size_t)size, sizeof(*tp->peer_link));
	tp->peer_failed = calloc((size_t)size, sizeof(*tp->peer_failed));
	if (!tp->peer || !tp->peer_src || !tp->peer_link || !tp->peer_failed) {
		ret = -ENOMEM;
		goto err_free_peer;
	}
	ret = tp_fabric_open(tp);
	if (ret)
		goto err_free_peer;
	if (tp->cfg.hosts)
		ret = links_agree(tp, tp->cfg.hosts, st, err, errlen);
	tp->cfg.hosts = NULL; /* the caller's; used only here */
	if (!ret)
		ret = tp_live_listen(tp, st);
	for (int i = 0; i < tp->nlinks && !ret; i++)
		ret = exchange(tp, i, st, err, errlen);
	if (!ret)
		ret = tp_live_connect(tp, st);
	if (ret)
		goto err_close_fabric;
	tp_log(tp, GW_LOG_INFO, "connected %d ranks over %s", size, gw_tp_provider(tp));
	*out = tp;
	return 0;

err_close_fabric:
	tp_live_close(tp);
	tp_fabric_close(tp);
err_free_peer:
	free(tp->peer);
	free(tp->peer_src);
	free(tp->peer_link);
	free(tp->peer_failed);
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
 * dead peer's send may not even post). A peer whose latest operation failed
 * (timed out, lost its connection) is not waited for: it is dead, stopped
 * or cut off, and would only make the teardown after a failure cost one
 * more timeout (a whole second timeout after a killed peer).
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
		if (p == tp->rank || tp->peer_failed[p])
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

void gw_tp_abandon(struct gw_tp *tp)
{
	for (int p = 0; tp && p < tp->size; p++)
		tp->peer_failed[p] = true; /* no goodbye to wait for */
	gw_tp_quiesce(tp);
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
	tp_live_close(tp);
	free(tp->peer);
	free(tp->peer_src);
	free(tp->peer_link);
	free(tp->peer_failed);
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

bool gw_tp_crowded(const struct gw_tp *tp)
{
	return tp->crowded;
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
