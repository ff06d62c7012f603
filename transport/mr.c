/* SPDX-License-Identifier: MIT */
/*
 * mr.c - memory registration on a context's links: the descriptor a send
 * or receive needs (tp_mr_for()), and the caller's long-lived
 * registrations (gw_tp_mr_reg()).
 *
 * A registration is per domain, so gw_tp_mr_reg() registers on every link
 * whose provider wants descriptors (FI_MR_LOCAL, or force_mr) and keeps
 * them on tp->mrs; tp_mr_for() hands out the one covering a buffer, or
 * registers the buffer for that op alone (the op's owner closes it). Keys
 * come from the link's counter unless the provider picks them
 * (FI_MR_PROV_KEY); with FI_MR_ENDPOINT a region binds to the link's
 * endpoint before use.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#define GW_TP_INTERNAL
#include "transport.h"

static int reg(struct gw_tp *tp, struct tp_link *l, const void *buf, size_t len, uint64_t access,
	       struct fid_mr **out)
{
	struct fid_mr *mr;
	uint64_t key = (l->mr_mode & FI_MR_PROV_KEY) ? 0 : l->next_key++;
	int ret;

	ret = fi_mr_reg(l->domain, buf, len, access, 0, key, 0, &mr, NULL);
	if (ret) {
		tp_log(tp, GW_LOG_ERROR, "fi_mr_reg(%p, %zu) on %s: %s", buf, len,
		       l->info->fabric_attr->prov_name, fi_strerror(-ret));
		return tp_errno(ret);
	}
	if (l->mr_mode & FI_MR_ENDPOINT) {
		ret = fi_mr_bind(mr, &l->ep->fid, 0);
		if (!ret)
			ret = fi_mr_enable(mr);
		if (ret) {
			tp_log(tp, GW_LOG_ERROR, "binding a memory region: %s", fi_strerror(-ret));
			fi_close(&mr->fid);
			return tp_errno(ret);
		}
	}
	tp->mr_count++;
	*out = mr;
	return 0;
}

void tp_mr_close(struct fid_mr *mr)
{
	if (mr)
		fi_close(&mr->fid);
}

/*
 * The descriptor for buf[0..len) on link: NULL when its provider needs
 * none, a caller registration covering it, or a fresh one (*own, closed by
 * the caller of this function once the op completes).
 */
int tp_mr_for(struct gw_tp *tp, unsigned link, const void *buf, size_t len, uint64_t access,
	      struct fid_mr **own, void **desc)
{
	struct tp_link *l = &tp->link[link];
	uintptr_t b = (uintptr_t)buf;
	int ret;

	*own = NULL;
	*desc = NULL;
	if (!l->need_mr || !len)
		return 0;
	for (struct gw_tp_mr *m = tp->mrs; m; m = m->next) {
		if (b >= m->base && len <= m->len && b - m->base <= m->len - len && m->mr[link]) {
			*desc = fi_mr_desc(m->mr[link]);
			return 0;
		}
	}
	ret = reg(tp, l, buf, len, access, own);
	if (ret)
		return ret;
	*desc = fi_mr_desc(*own);
	return 0;
}

static void mr_close_all(struct gw_tp_mr *m)
{
	for (int i = 0; i < TP_LINKS; i++)
		tp_mr_close(m->mr[i]);
}

int gw_tp_mr_reg(struct gw_tp *tp, void *buf, size_t len, struct gw_tp_mr **out)
{
	struct gw_tp_mr *m;
	int ret;

	if (!tp || !buf || !len || !out)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->base = (uintptr_t)buf;
	m->len = len;
	if (tp->need_mr) {
		for (int i = 0; i < tp->nlinks; i++) {
			if (!tp->link[i].need_mr)
				continue;
			ret = reg(tp, &tp->link[i], buf, len, FI_SEND | FI_RECV, &m->mr[i]);
			if (ret) {
				mr_close_all(m);
				free(m);
				return ret;
			}
		}
		m->next = tp->mrs;
		tp->mrs = m;
	}
	*out = m;
	return 0;
}

void gw_tp_mr_dereg(struct gw_tp *tp, struct gw_tp_mr *mr)
{
	if (!tp || !mr)
		return;
	for (struct gw_tp_mr **p = &tp->mrs; *p; p = &(*p)->next) {
		if (*p == mr) {
			*p = mr->next;
			break;
		}
	}
	mr_close_all(mr);
	free(mr);
}

uint64_t gw_tp_mr_count(const struct gw_tp *tp)
{
	return tp->mr_count;
}
