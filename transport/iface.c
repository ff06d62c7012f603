/* SPDX-License-Identifier: MIT */
/*
 * iface.c - which of a provider's domains (network interfaces) the main
 * link takes when GRADWIRE_IFACE names none: a pure rule over the names
 * fi_getinfo() lists, so a test can feed it any list (fabric.c applies it).
 *
 * The rule, as NCCL (NCCL_SOCKET_IFNAME unset) and Gloo do:
 *  - a named interface: exactly that one, or none (never a fall-back);
 *  - every peer on this host (host ids known, none other): the provider's
 *    first, loopback included (it reaches them all);
 *  - peers on other hosts, or host ids not known yet (the Gloo device):
 *    the first interface that is neither loopback nor a bridge or virtual
 *    one of containers and VMs (docker*, br-*, virbr*, veth*, cni*,
 *    flannel*, ...), which cannot carry traffic to another host, or carry
 *    it the long way; failing that, the first such bridge; failing that,
 *    loopback (which reaches only this host: the choice says so).
 */
#include <string.h>
#include "transport.h"

/* Name prefixes of bridges and virtual interfaces of containers and VMs. */
static const char *const virtual_prefix[] = {
	"docker", "br-",   "virbr", "veth",  "cni",    "flannel", "cali", "weave",
	"vxlan",  "kube-", "lxcbr", "lxdbr", "podman", "vnet",	  "tunl", NULL,
};

enum gw_iface_kind gw_tp_iface_kind(const char *name)
{
	if (!name)
		return GW_IFACE_PLAIN;
	/* "lo", and its aliases "lo:1" */
	if (!strncmp(name, "lo", 2) && (!name[2] || name[2] == ':'))
		return GW_IFACE_LOOPBACK;
	for (int i = 0; virtual_prefix[i]; i++)
		if (!strncmp(name, virtual_prefix[i], strlen(virtual_prefix[i])))
			return GW_IFACE_VIRTUAL;
	return GW_IFACE_PLAIN;
}

int gw_tp_iface_pick(const char *const *names, int n, const char *want, bool remote,
		     const char **why)
{
	static const char *const reason[] = {
		[GW_IFACE_PLAIN] = "the first that is neither loopback nor a bridge, as peers "
				   "may be on other hosts",
		[GW_IFACE_VIRTUAL] = "a bridge or virtual interface: the provider offers no "
				     "other but loopback, and peers may be on other hosts",
		[GW_IFACE_LOOPBACK] = "loopback, which reaches only this host: the provider "
				      "offers no other, and peers may be on other hosts",
	};
	int best = -1;

	*why = "none";
	if (want) {
		for (int i = 0; i < n; i++)
			if (names[i] && !strcmp(names[i], want)) {
				*why = "named by GRADWIRE_IFACE";
				return i;
			}
		return -1;
	}
	if (n < 1)
		return -1;
	if (!remote) {
		*why = "the provider's first, as every peer is on this host";
		return 0;
	}
	for (int i = 0; i < n; i++)
		if (best < 0 || gw_tp_iface_kind(names[i]) < gw_tp_iface_kind(names[best]))
			best = i;
	*why = reason[gw_tp_iface_kind(names[best])];
	return best;
}
