/* SPDX-License-Identifier: MIT */
/*
 * provider.c - which libfabric provider and interface a link opens: the
 * hints gradwire asks with, fi_getinfo() per provider name, the default
 * list, and errors that name what the loaded libfabric offers.
 *
 * The default list is verbs;ofi_rxm, then the native TCP provider of the
 * libfabric this process loaded (gw_fi_tcp_provider(): net before 1.18,
 * tcp after: a name found at run time, so one binary meets either), then
 * tcp;ofi_rxm. A named provider or interface is binding: no fall-back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define GW_TP_INTERNAL
#include "transport.h"
#include "fi_load.h"

#define TP_FI_VERSION FI_VERSION(1, 17)
#define TP_MR_MODE                                                                                 \
	(FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)

/* The hints gradwire asks with, for provider prov (NULL: any) on iface
 * (NULL: any). */
static struct fi_info *make_hints(const char *prov, const char *iface)
{
	struct fi_info *h = fi_allocinfo();

	if (!h)
		return NULL;
	h->caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->ep_attr->type = FI_EP_RDM;
	h->domain_attr->mr_mode = TP_MR_MODE;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	if (prov)
		h->fabric_attr->prov_name = strdup(prov);
	if (iface)
		h->domain_attr->name = strdup(iface);
	if ((prov && !h->fabric_attr->prov_name) || (iface && !h->domain_attr->name)) {
		fi_freeinfo(h);
		return NULL;
	}
	return h;
}

/* fi_getinfo for one provider string on iface (NULL: any); keeps in *out
 * the entry gw_tp_iface_pick() chooses (iface.c: with remote, loopback and
 * bridges only when nothing else is offered). */
static int get_info(struct gw_tp *tp, const char *prov, const char *iface, bool remote,
		    struct fi_info **out)
{
	struct fi_info *hints, *list = NULL, *pick = NULL;
	const char *names[64], *why;
	int ret, n = 0, k;

	*out = NULL;
	hints = make_hints(prov, iface);
	if (!hints)
		return -ENOMEM;
	ret = fi_getinfo(TP_FI_VERSION, NULL, NULL, 0, hints, &list);
	fi_freeinfo(hints);
	if (ret) {
		tp_log(tp, GW_LOG_INFO, "provider %s%s%s: %s", prov, iface ? " on " : "",
		       iface ? iface : "", fi_strerror(-ret));
		return tp_errno(ret);
	}
	/* A layered name ("tcp;ofi_rxm") matches exactly; a requested
	 * interface must be the domain's name, never something near it. */
	for (struct fi_info *i = list; i && n < (int)(sizeof(names) / sizeof(names[0]));
	     i = i->next)
		names[n++] = i->domain_attr->name;
	k = gw_tp_iface_pick(names, n, iface, remote, &why);
	for (struct fi_info *i = list; i && k >= 0; i = i->next, k--)
		if (!k)
			pick = i;
	if (pick)
		tp_log(tp, GW_LOG_INFO, "provider %s: interface %s (%s)", prov,
		       pick->domain_attr->name ? pick->domain_attr->name : "?", why);
	if (!pick) {
		tp_log(tp, GW_LOG_ERROR, "provider %s has no domain %s", prov, iface);
		fi_freeinfo(list);
		return -ENODATA;
	}
	*out = fi_dupinfo(pick);
	fi_freeinfo(list);
	return *out ? 0 : -ENOMEM;
}

/* The providers this libfabric offers gradwire (RDM, tagged), as
 * "a, b, c" in buf, for an error that names what exists. */
static void offered(char *buf, size_t len)
{
	struct fi_info *hints = make_hints(NULL, NULL), *list = NULL;
	size_t at = 0;

	buf[0] = '\0';
	if (!hints)
		return;
	if (!fi_getinfo(TP_FI_VERSION, NULL, NULL, 0, hints, &list)) {
		for (struct fi_info *i = list; i && at + 1 < len; i = i->next) {
			const char *p = i->fabric_attr->prov_name;
			bool seen = false;

			for (struct fi_info *j = list; j != i && !seen; j = j->next)
				seen = !strcmp(j->fabric_attr->prov_name, p);
			if (!seen)
				at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? ", " : "",
						       p);
		}
		fi_freeinfo(list);
	}
	fi_freeinfo(hints);
	if (!buf[0])
		snprintf(buf, len, "none");
}

void gw_tp_provider_hint(const char *asked, char *buf, size_t len)
{
	uint32_t v = gw_fi_version();
	char have[256];

	offered(have, sizeof(have));
	snprintf(buf, len, "libfabric %u.%u offers: %s%s", FI_MAJOR(v), FI_MINOR(v), have,
		 asked && !strcmp(asked, "net") && !strcmp(gw_fi_tcp_provider(), "tcp")
			 ? " (libfabric 1.18 renamed net to tcp)"
			 : "");
}

/* The main provider: cfg.provider, or the first of the defaults; remote:
 * it serves peers on other hosts, or host ids are not known yet. */
int tp_resolve_main(struct gw_tp *tp, bool remote, struct fi_info **out)
{
	const char *defaults[] = { "verbs;ofi_rxm", gw_fi_tcp_provider(), "tcp;ofi_rxm" };
	char tried[64], hint[320];
	int ret = -ENODATA;

	if (tp->cfg.provider) {
		ret = get_info(tp, tp->cfg.provider, tp->cfg.iface, remote, out);
	} else {
		for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]) && ret; i++)
			ret = get_info(tp, defaults[i], tp->cfg.iface, remote, out);
	}
	if (ret) {
		snprintf(tried, sizeof(tried), "%s, %s, %s", defaults[0], defaults[1], defaults[2]);
		gw_tp_provider_hint(tp->cfg.provider, hint, sizeof(hint));
		tp_log(tp, GW_LOG_ERROR, "no usable provider (%s) on %s: %s; %s",
		       tp->cfg.provider ? tp->cfg.provider : tried,
		       tp->cfg.iface ? tp->cfg.iface : "any interface", gw_strerror(ret), hint);
	}
	return ret;
}

/*
 * The local provider: cfg.provider_local (unavailable: an error), or with
 * cfg.local_auto shm where libfabric offers it. *out stays NULL when the
 * main provider serves this host's peers too. The interface binds it
 * unless it is shm.
 */
int tp_resolve_local(struct gw_tp *tp, struct fi_info **out)
{
	const char *prov = tp->cfg.provider_local ? tp->cfg.provider_local : "shm";
	int ret;

	*out = NULL;
	if (!tp->cfg.provider_local && !tp->cfg.local_auto)
		return 0;
	ret = get_info(tp, prov, strcmp(prov, "shm") ? tp->cfg.iface : NULL, false, out);
	if (ret && tp->cfg.provider_local) {
		tp_log(tp, GW_LOG_ERROR,
		       "the provider for peers on this host (GRADWIRE_PROVIDER_LOCAL=%s) is not "
		       "available: %s",
		       prov, gw_strerror(ret));
		return ret == -ENOMEM ? ret : -ENOENT;
	}
	if (ret)
		tp_log(tp, GW_LOG_INFO,
		       "no shm here (%s): peers on this host use the main provider",
		       gw_strerror(ret));
	return ret == -ENOMEM ? ret : 0;
}
