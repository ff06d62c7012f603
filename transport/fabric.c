/* SPDX-License-Identifier: MIT */
/*
 * fabric.c - the libfabric objects of a context: fi_getinfo, fabric,
 * domain, RDM endpoint, address vector, completion queue, and memory
 * registration.
 *
 * Choices (the aws-ofi-nccl way):
 *  - FI_EP_RDM with FI_TAGGED | FI_MSG | FI_DIRECTED_RECV: reliable,
 *    connectionless, exact-tag receives directed at one peer.
 *  - mode FI_CONTEXT | FI_CONTEXT2: every op starts with a fi_context2.
 *  - mr_mode: we accept LOCAL | VIRT_ADDR | ALLOCATED | PROV_KEY | ENDPOINT
 *    and honour what the provider keeps; with FI_MR_LOCAL (or force_mr)
 *    every buffer gets a descriptor (per request, or from a caller
 *    registration covering it).
 *  - providers, unless named: verbs;ofi_rxm, then net (libfabric's native
 *    TCP RDM endpoint), then tcp;ofi_rxm. net fills a shaped 1 Gbit/s link
 *    both ways where tcp;ofi_rxm moved about half (docs/performance.md),
 *    and its automatic data progress lets waiters sleep in the kernel: in
 *    1.17 that progress runs inside fi_cq_sread(), which also waits on the
 *    provider's sockets (no provider thread: we open no EQ). Its 1.17
 *    version stops reading a connection at a message that has no receive
 *    posted yet and is over 128 bytes (transport.h, "Ordering");
 *  - the CQ has a file-descriptor wait object so waiters sleep in
 *    fi_cq_sread(); a provider without one gets a CQ without wait object
 *    and waiters back off. Not FI_WAIT_UNSPEC: shm 1.17 then picks a
 *    yield/futex wait whose fi_cq_sread() ignored its timeout here (both
 *    ranks stuck in it for 20 s after a truncated receive).
 *  - a requested interface is binding: the chosen domain must carry its
 *    name, or create fails. There is no fall-back to another interface.
 * Teardown runs in reverse order of creation (tp_fabric_close()), except
 * for shm endpoints that share a process (below, "shm in one process").
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define GW_TP_INTERNAL
#include "transport.h"

#define TP_FI_VERSION FI_VERSION(1, 17)
#define TP_MR_MODE                                                                                 \
	(FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)

int tp_errno(int fi_err)
{
	int e = fi_err < 0 ? -fi_err : fi_err;

	switch (e) {
	case 0:
		return 0;
	case FI_ETRUNC:
		return -EMSGSIZE;
	case FI_ENODATA:
		return -ENODATA;
	case FI_EAGAIN:
		return -EAGAIN;
	default:
		/* libfabric's low codes are errno values; the rest are its own. */
		return e < FI_ERRNO_OFFSET ? -e : -EIO;
	}
}

static struct fi_info *make_hints(const struct gw_tp_cfg *cfg, const char *prov)
{
	struct fi_info *h = fi_allocinfo();

	if (!h)
		return NULL;
	h->caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->ep_attr->type = FI_EP_RDM;
	h->domain_attr->mr_mode = TP_MR_MODE;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->fabric_attr->prov_name = strdup(prov);
	if (cfg->iface)
		h->domain_attr->name = strdup(cfg->iface);
	if (!h->fabric_attr->prov_name || (cfg->iface && !h->domain_attr->name)) {
		fi_freeinfo(h);
		return NULL;
	}
	return h;
}

/* fi_getinfo for one provider string; keeps the first matching entry. */
static int get_info(struct gw_tp *tp, const char *prov)
{
	struct fi_info *hints, *list = NULL, *pick = NULL;
	int ret;

	hints = make_hints(&tp->cfg, prov);
	if (!hints)
		return -ENOMEM;
	ret = fi_getinfo(TP_FI_VERSION, NULL, NULL, 0, hints, &list);
	fi_freeinfo(hints);
	if (ret) {
		tp_log(tp, GW_LOG_INFO, "provider %s%s%s: %s", prov, tp->cfg.iface ? " on " : "",
		       tp->cfg.iface ? tp->cfg.iface : "", fi_strerror(-ret));
		return tp_errno(ret);
	}
	/* A layered name ("tcp;ofi_rxm") matches exactly; a requested
	 * interface must be the domain's name, never something near it. */
	for (struct fi_info *i = list; i && !pick; i = i->next) {
		if (tp->cfg.iface &&
		    (!i->domain_attr->name || strcmp(i->domain_attr->name, tp->cfg.iface)))
			continue;
		pick = i;
	}
	if (!pick) {
		tp_log(tp, GW_LOG_ERROR, "provider %s has no domain %s", prov, tp->cfg.iface);
		fi_freeinfo(list);
		return -ENODATA;
	}
	tp->info = fi_dupinfo(pick);
	fi_freeinfo(list);
	return tp->info ? 0 : -ENOMEM;
}

static void format_addr(struct gw_tp *tp)
{
	size_t len = sizeof(tp->addr_str);

	if (tp->info->addr_format == FI_SOCKADDR_IN && tp->namelen >= sizeof(struct sockaddr_in)) {
		struct sockaddr_in sin;
		char ip[INET_ADDRSTRLEN];

		memcpy(&sin, tp->name, sizeof(sin));
		inet_ntop(AF_INET, &sin.sin_addr, ip, sizeof(ip));
		snprintf(tp->addr_str, len, "%s:%u", ip, ntohs(sin.sin_port));
	} else if (tp->info->addr_format == FI_SOCKADDR_IN6 &&
		   tp->namelen >= sizeof(struct sockaddr_in6)) {
		struct sockaddr_in6 sin6;
		char ip[INET6_ADDRSTRLEN];

		memcpy(&sin6, tp->name, sizeof(sin6));
		inet_ntop(AF_INET6, &sin6.sin6_addr, ip, sizeof(ip));
		snprintf(tp->addr_str, len, "[%s]:%u", ip, ntohs(sin6.sin6_port));
	} else if (!fi_av_straddr(tp->av, tp->name, tp->addr_str, &len)) {
		tp->addr_str[0] = '?';
		tp->addr_str[1] = '\0';
	}
}

/*
 * shm in one process. libfabric 1.17's shm reaches a peer endpoint of the
 * same process through that endpoint's own mapping of its region (found on
 * the process-wide ep_name_list by smr_map_to_region()), not a mapping of
 * its own, and closing an endpoint unmaps its region (smr_free()) while its
 * list entry stays. Another endpoint of the process that then progresses a
 * transfer with it, answers it or sends to it writes into unmapped memory:
 * SIGSEGV in shm's progress when ranks that are threads of one process end
 * at different times. Endpoints in different processes map each other
 * themselves, and such a mapping outlives the peer.
 *
 * So while other shm endpoints of this process are open, a context that
 * closes parks its objects instead (nothing progresses them any more, so
 * no completion comes and no byte lands in its buffers: the guarantee of
 * gw_tp_quiesce() holds), and the last shm context of the process closes
 * them all. A process that keeps one shm context while creating and
 * destroying others keeps the others' regions until then.
 */
struct parked {
	struct parked *next;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_domain *domain;
	struct fid_fabric *fabric;
	struct fi_info *info;
};

static pthread_mutex_t shm_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned shm_open_eps;	  /* shm endpoints of this process not closed */
static struct parked *shm_parked; /* closed ones, still open in libfabric */

static void close_objects(struct fid_ep *ep, struct fid_cq *cq, struct fid_av *av,
			  struct fid_domain *domain, struct fid_fabric *fabric,
			  struct fi_info *info)
{
	if (ep)
		fi_close(&ep->fid);
	if (cq)
		fi_close(&cq->fid);
	if (av)
		fi_close(&av->fid);
	if (domain)
		fi_close(&domain->fid);
	if (fabric)
		fi_close(&fabric->fid);
	if (info)
		fi_freeinfo(info);
}

/* tp closes: park its objects (true), or take every parked one (*all) to
 * close after tp's own, when tp was the last. */
static bool shm_park(struct gw_tp *tp, struct parked **all)
{
	struct parked *p = NULL;
	bool park;

	*all = NULL;
	pthread_mutex_lock(&shm_mu);
	park = --shm_open_eps > 0;
	if (park)
		p = malloc(sizeof(*p));
	if (p) {
		*p = (struct parked){ shm_parked, tp->ep,     tp->cq,  tp->av,
				      tp->domain, tp->fabric, tp->info };
		shm_parked = p;
	} else if (!park) {
		*all = shm_parked;
		shm_parked = NULL;
	}
	pthread_mutex_unlock(&shm_mu);
	if (park && !p)
		tp_log(tp, GW_LOG_WARN,
		       "no memory to keep a closed shm endpoint open while "
		       "others of this process live; closing it");
	return p != NULL;
}

static int open_cq(struct gw_tp *tp)
{
	struct fi_cq_attr attr = {
		.format = FI_CQ_FORMAT_TAGGED,
		.wait_obj = FI_WAIT_FD,
		.size = 0,
	};
	int ret;

	ret = fi_cq_open(tp->domain, &attr, &tp->cq, NULL);
	if (ret == 0) {
		tp->blocking = attr.wait_obj != FI_WAIT_NONE;
		return 0;
	}
	tp_log(tp, GW_LOG_INFO, "CQ with a wait fd: %s; waits back off", fi_strerror(-ret));
	attr.wait_obj = FI_WAIT_NONE;
	tp->blocking = false;
	return tp_errno(fi_cq_open(tp->domain, &attr, &tp->cq, NULL));
}

int tp_fabric_open(struct gw_tp *tp)
{
	static const char *const defaults[] = { "verbs;ofi_rxm", "net", "tcp;ofi_rxm" };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	int ret = -ENODATA;

	if (tp->cfg.provider) {
		ret = get_info(tp, tp->cfg.provider);
	} else {
		for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]) && ret; i++)
			ret = get_info(tp, defaults[i]);
	}
	if (ret) {
		tp_log(tp, GW_LOG_ERROR, "no usable provider (%s) on %s: %s",
		       tp->cfg.provider ? tp->cfg.provider : "verbs;ofi_rxm, net, tcp;ofi_rxm",
		       tp->cfg.iface ? tp->cfg.iface : "any interface", gw_strerror(ret));
		return ret;
	}
	tp->mr_mode = tp->info->domain_attr->mr_mode;
	tp->auto_progress = tp->info->domain_attr->data_progress == FI_PROGRESS_AUTO;
	tp->need_mr = (tp->mr_mode & FI_MR_LOCAL) || tp->cfg.force_mr;

	ret = tp_errno(fi_fabric(tp->info->fabric_attr, &tp->fabric, NULL));
	if (ret)
		goto err_info;
	ret = tp_errno(fi_domain(tp->fabric, tp->info, &tp->domain, NULL));
	if (ret)
		goto err_fabric;
	ret = tp_errno(fi_av_open(tp->domain, &av_attr, &tp->av, NULL));
	if (ret)
		goto err_domain;
	ret = open_cq(tp);
	if (ret)
		goto err_av;
	ret = tp_errno(fi_endpoint(tp->domain, tp->info, &tp->ep, NULL));
	if (ret)
		goto err_cq;
	ret = tp_errno(fi_ep_bind(tp->ep, &tp->av->fid, 0));
	if (!ret)
		ret = tp_errno(fi_ep_bind(tp->ep, &tp->cq->fid, FI_TRANSMIT | FI_RECV));
	if (!ret)
		ret = tp_errno(fi_enable(tp->ep));
	if (ret)
		goto err_ep;
	tp->namelen = sizeof(tp->name);
	ret = tp_errno(fi_getname(&tp->ep->fid, tp->name, &tp->namelen));
	if (ret)
		goto err_ep;
	format_addr(tp);
	tp->shm = !strcmp(tp->info->fabric_attr->prov_name, "shm");
	if (tp->shm) {
		pthread_mutex_lock(&shm_mu);
		shm_open_eps++;
		pthread_mutex_unlock(&shm_mu);
	}
	tp_log(tp, GW_LOG_INFO,
	       "provider %s fabric %s domain %s address %s mr_mode 0x%llx%s "
	       "waits %s",
	       tp->info->fabric_attr->prov_name, tp->info->fabric_attr->name,
	       tp->info->domain_attr->name, tp->addr_str, (unsigned long long)tp->mr_mode,
	       tp->need_mr ? " (registering buffers)" : "",
	       tp->blocking ? "sleep in fi_cq_sread" : "back off");
	return 0;

err_ep:
	fi_close(&tp->ep->fid);
	tp->ep = NULL;
err_cq:
	fi_close(&tp->cq->fid);
	tp->cq = NULL;
err_av:
	fi_close(&tp->av->fid);
	tp->av = NULL;
err_domain:
	fi_close(&tp->domain->fid);
	tp->domain = NULL;
err_fabric:
	fi_close(&tp->fabric->fid);
	tp->fabric = NULL;
err_info:
	tp_log(tp, GW_LOG_ERROR, "opening %s failed: %s", tp->info->fabric_attr->prov_name,
	       gw_strerror(ret));
	fi_freeinfo(tp->info);
	tp->info = NULL;
	return ret;
}

void tp_fabric_close_ep(struct gw_tp *tp)
{
	if (tp->shm) /* never progressed again; tp_fabric_close() decides */
		tp->shm_ep = tp->ep;
	else if (tp->ep)
		fi_close(&tp->ep->fid);
	tp->ep = NULL;
}

void tp_fabric_close(struct gw_tp *tp)
{
	struct parked *all = NULL;

	if (tp->shm_ep)
		tp->ep = tp->shm_ep;
	tp->shm_ep = NULL;
	if (!tp->shm || !shm_park(tp, &all))
		close_objects(tp->ep, tp->cq, tp->av, tp->domain, tp->fabric, tp->info);
	while (all) { /* the last shm context of the process: the parked ones */
		struct parked *p = all;

		all = p->next;
		close_objects(p->ep, p->cq, p->av, p->domain, p->fabric, p->info);
		free(p);
	}
	tp->shm = false;
	tp->ep = NULL;
	tp->cq = NULL;
	tp->av = NULL;
	tp->domain = NULL;
	tp->fabric = NULL;
	tp->info = NULL;
}

/* ---- memory registration ------------------------------------------------- */

static int reg(struct gw_tp *tp, const void *buf, size_t len, uint64_t access, struct fid_mr **out)
{
	struct fid_mr *mr;
	uint64_t key = (tp->mr_mode & FI_MR_PROV_KEY) ? 0 : tp->next_key++;
	int ret;

	ret = fi_mr_reg(tp->domain, buf, len, access, 0, key, 0, &mr, NULL);
	if (ret) {
		tp_log(tp, GW_LOG_ERROR, "fi_mr_reg(%p, %zu): %s", buf, len, fi_strerror(-ret));
		return tp_errno(ret);
	}
	if (tp->mr_mode & FI_MR_ENDPOINT) {
		ret = fi_mr_bind(mr, &tp->ep->fid, 0);
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
 * The descriptor for buf[0..len): NULL when the provider needs none, a
 * caller registration covering it, or a fresh one (*own, closed by the
 * caller of this function once the op completes).
 */
int tp_mr_for(struct gw_tp *tp, const void *buf, size_t len, uint64_t access, struct fid_mr **own,
	      void **desc)
{
	uintptr_t b = (uintptr_t)buf;
	int ret;

	*own = NULL;
	*desc = NULL;
	if (!tp->need_mr || !len)
		return 0;
	for (struct gw_tp_mr *m = tp->mrs; m; m = m->next) {
		if (b >= m->base && len <= m->len && b - m->base <= m->len - len) {
			*desc = fi_mr_desc(m->mr);
			return 0;
		}
	}
	ret = reg(tp, buf, len, access, own);
	if (ret)
		return ret;
	*desc = fi_mr_desc(*own);
	return 0;
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
		ret = reg(tp, buf, len, FI_SEND | FI_RECV, &m->mr);
		if (ret) {
			free(m);
			return ret;
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
	tp_mr_close(mr->mr);
	free(mr);
}

uint64_t gw_tp_mr_count(const struct gw_tp *tp)
{
	return tp->mr_count;
}
