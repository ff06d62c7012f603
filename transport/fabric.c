/* SPDX-License-Identifier: MIT */
/*
 * fabric.c - the libfabric objects of a context: fi_getinfo, fabric,
 * domain, RDM endpoint, address vector, completion queue, and memory
 * registration (mr.c).
 *
 * Choices (the aws-ofi-nccl way):
 *  - FI_EP_RDM with FI_TAGGED | FI_MSG | FI_DIRECTED_RECV: reliable,
 *    connectionless, exact-tag receives directed at one peer.
 *  - mode FI_CONTEXT | FI_CONTEXT2: every op starts with a fi_context2.
 *  - mr_mode: we accept LOCAL | VIRT_ADDR | ALLOCATED | PROV_KEY | ENDPOINT
 *    and honour what the provider keeps; with FI_MR_LOCAL (or force_mr)
 *    every buffer gets a descriptor (per request, or from a caller
 *    registration covering it).
 *  - providers, unless named (provider.c chooses): verbs;ofi_rxm, then
 *    libfabric's native TCP RDM endpoint (net before 1.18, tcp after), then
 *    tcp;ofi_rxm. net fills a shaped link both
 *    ways where tcp;ofi_rxm moved much less (docs/performance.md),
 *    and its automatic data progress lets waiters sleep in the kernel: in
 *    1.17 that progress runs inside fi_cq_sread(), which also waits on the
 *    provider's sockets (no provider thread: we open no EQ). Its 1.17
 *    version stops reading a connection at a message that has no receive
 *    posted yet and is over 128 bytes (transport.h, "Ordering");
 *  - the CQ has a file-descriptor wait object so waiters sleep in
 *    fi_cq_sread(); a provider without one gets a CQ without wait object
 *    and waiters back off. Not FI_WAIT_UNSPEC: shm 1.17 then picks a
 *    yield/futex wait whose fi_cq_sread() ignored its timeout here (both
 *    ranks stuck in it, far past it, after a truncated receive).
 *  - a requested interface is binding: the chosen domain must carry its
 *    name, or create fails. There is no fall-back to another interface.
 *    Without one, the main link skips loopback and bridges when peers are
 *    on other hosts (iface.c has the rule); the choice is logged at info.
 *  - links: a context opens one set of these objects per provider in use,
 *    a struct tp_link each: the main provider for peers on other hosts,
 *    the local one (shm by default, GRADWIRE_PROVIDER_LOCAL) for peers on
 *    this host; tp_fabric_open() says when which opens. A registration is
 *    per domain, so gw_tp_mr_reg() registers on every link that wants it.
 *  - two endpoints: a provider over kernel TCP sockets (net, tcp, and
 *    ofi_rxm over tcp) gets one endpoint that sends and one that receives,
 *    sharing the link's AV and CQ, so that two ranks of one IP address (one
 *    host) have a connection per direction. On one connection both ranks'
 *    bulk sends meet the socket's lock: the peer's data and the ACKs that
 *    open the window queue behind a sendmsg() in progress and are processed
 *    only when it returns. Two processes on loopback doing a ring
 *    allreduce over bare sockets were much slower on one socket than on
 *    two (docs/performance.md).
 *    Peers of another IP address keep one connection (tp.c): on a wire the
 *    ACKs ride on the data going the other way, and pure ACKs on a second
 *    connection take a share of a saturated link. A rank publishes
 *    both addresses. Not with FI_MR_ENDPOINT (a registration binds to one
 *    endpoint) nor string addresses; cfg.one_conn turns it off.
 * Teardown runs in reverse order of creation (tp_fabric_close()), except
 * for shm endpoints that share a process (below, "shm in one process").
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define GW_TP_INTERNAL
#include "transport.h"

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

/* Endpoint name (namelen bytes) of link l's address format as text. */
static void addr_text(const struct tp_link *l, const void *name, size_t namelen, char *out,
		      size_t len)
{
	if (l->info->addr_format == FI_SOCKADDR_IN && namelen >= sizeof(struct sockaddr_in)) {
		struct sockaddr_in sin;
		char ip[INET_ADDRSTRLEN];

		memcpy(&sin, name, sizeof(sin));
		inet_ntop(AF_INET, &sin.sin_addr, ip, sizeof(ip));
		snprintf(out, len, "%s:%u", ip, ntohs(sin.sin_port));
	} else if (l->info->addr_format == FI_SOCKADDR_IN6 &&
		   namelen >= sizeof(struct sockaddr_in6)) {
		struct sockaddr_in6 sin6;
		char ip[INET6_ADDRSTRLEN];

		memcpy(&sin6, name, sizeof(sin6));
		inet_ntop(AF_INET6, &sin6.sin6_addr, ip, sizeof(ip));
		snprintf(out, len, "[%s]:%u", ip, ntohs(sin6.sin6_port));
	} else if (len > 1 && !fi_av_straddr(l->av, name, out, &len)) {
		out[0] = '?';
		out[1] = '\0';
	}
}

static void format_addr(struct tp_link *l)
{
	addr_text(l, l->name, l->namelen, l->addr_str, sizeof(l->addr_str));
}

int gw_tp_peer_addr_str(const struct gw_tp *tp, int peer, char *buf, size_t len)
{
	const struct tp_link *l;
	uint8_t name[TP_NAME_MAX];
	size_t namelen = sizeof(name);

	if (!len)
		return -EINVAL;
	buf[0] = '\0';
	if (peer < 0 || peer >= tp->size || peer == tp->rank || tp->peer_link[peer] >= tp->nlinks)
		return -EINVAL;
	l = &tp->link[tp->peer_link[peer]];
	if (!l->av || fi_av_lookup(l->av, tp->peer[peer], name, &namelen) || namelen > sizeof(name))
		return -ENOENT;
	addr_text(l, name, namelen, buf, len);
	return 0;
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

/* Link l of tp closes: park its objects (true), or take every parked one
 * (*all) to close after l's own, when l was the last. */
static bool shm_park(struct gw_tp *tp, struct tp_link *l, struct parked **all)
{
	struct parked *p = NULL;
	bool park;

	*all = NULL;
	pthread_mutex_lock(&shm_mu);
	park = --shm_open_eps > 0;
	if (park)
		p = malloc(sizeof(*p));
	if (p) {
		*p =
			(struct parked){ shm_parked, l->ep,	l->cq,	l->av,
					 l->domain,  l->fabric, l->info };
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

static int open_cq(struct gw_tp *tp, struct tp_link *l)
{
	struct fi_cq_attr attr = {
		.format = FI_CQ_FORMAT_TAGGED,
		.wait_obj = FI_WAIT_FD,
		.size = 0,
	};
	int ret;

	l->wait_fd = -1;
	ret = fi_cq_open(l->domain, &attr, &l->cq, NULL);
	if (ret == 0) {
		l->blocking = attr.wait_obj != FI_WAIT_NONE;
		/* Two links wait in poll() on both fds (progress.c). */
		if (l->blocking && fi_control(&l->cq->fid, FI_GETWAIT, &l->wait_fd))
			l->wait_fd = -1;
		return 0;
	}
	tp_log(tp, GW_LOG_INFO, "%s CQ with a wait fd: %s; waits back off",
	       l->info->fabric_attr->prov_name, fi_strerror(-ret));
	attr.wait_obj = FI_WAIT_NONE;
	l->blocking = false;
	return tp_errno(fi_cq_open(l->domain, &attr, &l->cq, NULL));
}

/*
 * shm's region names. libfabric 1.17 names an endpoint's region in /dev/shm
 * after the process ("fi_shm://<pid>", then uid and an index per endpoint)
 * and refuses one whose name is taken (EBUSY) unless the pid recorded in
 * the old region is dead. A rank that was killed leaves its region behind;
 * once its pid comes round again, the new process finds the old region
 * with its own pid recorded in it, and open failed. Naming the region
 * after the pid and 64 random bits never meets one left behind.
 */
static int shm_name(struct fi_info *info)
{
	unsigned long long nonce;
	char name[64], *dup;

	if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
		return -errno;
	snprintf(name, sizeof(name), "fi_shm://gw-%ld-%016llx", (long)getpid(), nonce);
	dup = strdup(name);
	if (!dup)
		return -ENOMEM;
	free(info->src_addr);
	info->src_addr = dup;
	info->src_addrlen = strlen(dup) + 1;
	return 0;
}

/* Link l's shm region: its name in /dev/shm ("fi_shm://<name>"), or NULL. */
static const char *region_of(const struct tp_link *l)
{
	const char *name = strstr(l->addr_str, "://");

	return l->shm && name ? name + 3 : NULL;
}

int gw_tp_shm_unname(struct gw_tp *tp)
{
	int rc = 0;

	for (int i = 0; tp && i < tp->nlinks; i++) {
		struct tp_link *l = &tp->link[i];
		const char *name = region_of(l);

		if (!l->shm)
			continue;
		if (!name) {
			tp_log(tp, GW_LOG_WARN, "shm address %s names no region", l->addr_str);
			rc = -EINVAL;
		} else if (shm_unlink(name) && errno != ENOENT) {
			rc = -errno;
			tp_log(tp, GW_LOG_WARN, "removing the name of shm region %s: %s", name,
			       strerror(errno));
		}
		if (l->shm_lock >= 0)
			close(l->shm_lock);
		l->shm_lock = -1;
	}
	return rc;
}

/*
 * Regions of ranks killed before their context was up (before
 * gw_tp_shm_unname()) stay in /dev/shm. While its region is named, a rank
 * holds a shared flock() on its file (shm_lock()); a new shm link removes
 * every gradwire region of this user that nobody holds and that was
 * created over SHM_SWEEP_AGE_S ago (a live rank takes its lock a moment
 * after libfabric creates the file). A lock, unlike a pid, means the same
 * in every pid namespace that shares /dev/shm.
 */
#define SHM_DIR "/dev/shm"
#define SHM_SWEEP_AGE_S 60

/* "gw-<pid>-<16 hex digits>:<uid>:<index>", as shm_name() makes them. */
static bool gw_region(const char *n)
{
	unsigned long pid;
	char hex[17];
	int end = 0;

	return sscanf(n, "gw-%lu-%16[0-9a-f]%n", &pid, hex, &end) == 2 && strlen(hex) == 16 &&
	       n[end] == ':';
}

static void shm_sweep(struct gw_tp *tp)
{
	DIR *d = opendir(SHM_DIR);
	time_t now = time(NULL);
	struct dirent *e;

	while (d && (e = readdir(d))) {
		struct stat st;
		int fd;

		if (!gw_region(e->d_name))
			continue;
		fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd < 0)
			continue;
		if (!fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
		    now - st.st_mtime > SHM_SWEEP_AGE_S && !flock(fd, LOCK_EX | LOCK_NB) &&
		    !unlinkat(dirfd(d), e->d_name, 0))
			tp_log(tp, GW_LOG_INFO,
			       "removed %s/%s: the shm region of a rank that is gone", SHM_DIR,
			       e->d_name);
		close(fd);
	}
	if (d)
		closedir(d);
}

/* Hold a shared lock on link l's region file while it is named. */
static void shm_lock(struct gw_tp *tp, struct tp_link *l)
{
	const char *name = region_of(l);
	char path[sizeof(SHM_DIR) + TP_NAME_MAX];

	if (!name)
		return;
	snprintf(path, sizeof(path), "%s/%s", SHM_DIR, name);
	l->shm_lock = open(path, O_RDONLY | O_CLOEXEC);
	if (l->shm_lock >= 0 && flock(l->shm_lock, LOCK_SH)) {
		close(l->shm_lock);
		l->shm_lock = -1;
	}
	if (l->shm_lock < 0)
		tp_log(tp, GW_LOG_DEBUG, "no lock on %s: %s", path, strerror(errno));
}

/* Whether link l gets a receiving endpoint of its own (top of file). */
static bool want_rx_ep(const struct gw_tp *tp, const struct tp_link *l)
{
	const char *prov = l->info->fabric_attr->prov_name;

	return !tp->cfg.one_conn && !l->shm && !(l->mr_mode & FI_MR_ENDPOINT) &&
	       l->info->addr_format != FI_ADDR_STR &&
	       (!strcmp(prov, "net") || !strcmp(prov, "tcp") || !strcmp(prov, "tcp;ofi_rxm"));
}

/* One endpoint of link l, bound to its AV and CQ, enabled; its address is
 * appended to l->name. */
static int ep_open(struct tp_link *l, struct fid_ep **out)
{
	size_t len = sizeof(l->name) - l->namelen;
	struct fid_ep *ep;
	int ret;

	ret = tp_errno(fi_endpoint(l->domain, l->info, &ep, NULL));
	if (ret)
		return ret;
	ret = tp_errno(fi_ep_bind(ep, &l->av->fid, 0));
	if (!ret)
		ret = tp_errno(fi_ep_bind(ep, &l->cq->fid, FI_TRANSMIT | FI_RECV));
	if (!ret)
		ret = tp_errno(fi_enable(ep));
	if (!ret)
		ret = tp_errno(fi_getname(&ep->fid, l->name + l->namelen, &len));
	if (ret) {
		fi_close(&ep->fid);
		return ret;
	}
	l->namelen += len;
	*out = ep;
	return 0;
}

/* Open link l's objects from l->info (which it then owns, also on failure:
 * freed and cleared). */
static int link_open(struct gw_tp *tp, struct tp_link *l)
{
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	int ret;

	l->next_key = 1;
	l->wait_fd = -1;
	l->mr_mode = l->info->domain_attr->mr_mode;
	l->auto_progress = l->info->domain_attr->data_progress == FI_PROGRESS_AUTO;
	l->need_mr = (l->mr_mode & FI_MR_LOCAL) || tp->cfg.force_mr;
	l->shm = !strcmp(l->info->fabric_attr->prov_name, "shm");
	l->shm_lock = -1;

	if (l->shm)
		shm_sweep(tp);
	ret = l->shm ? shm_name(l->info) : 0;
	if (ret)
		goto err_info;
	ret = tp_errno(fi_fabric(l->info->fabric_attr, &l->fabric, NULL));
	if (ret)
		goto err_info;
	ret = tp_errno(fi_domain(l->fabric, l->info, &l->domain, NULL));
	if (ret)
		goto err_fabric;
	ret = tp_errno(fi_av_open(l->domain, &av_attr, &l->av, NULL));
	if (ret)
		goto err_domain;
	ret = open_cq(tp, l);
	if (ret)
		goto err_av;
	l->namelen = 0;
	ret = ep_open(l, &l->ep);
	if (ret)
		goto err_cq;
	if (want_rx_ep(tp, l)) {
		size_t one = l->namelen;

		ret = ep_open(l, &l->rx_ep);
		if (ret)
			goto err_ep;
		if (l->namelen != 2 * one) { /* tp.c splits the two in halves */
			ret = -EPROTO;
			goto err_ep;
		}
	}
	format_addr(l);
	if (l->shm) {
		shm_lock(tp, l);
		pthread_mutex_lock(&shm_mu);
		shm_open_eps++;
		pthread_mutex_unlock(&shm_mu);
	}
	tp_log(tp, GW_LOG_INFO,
	       "%sprovider %s fabric %s domain %s address %s mr_mode 0x%llx%s "
	       "waits %s%s",
	       l->local ? "peers on this host: " : "", l->info->fabric_attr->prov_name,
	       l->info->fabric_attr->name, l->info->domain_attr->name, l->addr_str,
	       (unsigned long long)l->mr_mode, l->need_mr ? " (registering buffers)" : "",
	       l->blocking ? "sleep on the CQ" : "back off",
	       l->rx_ep ? ", a receiving endpoint for peers of its IP address" : "");
	return 0;

err_ep:
	if (l->rx_ep)
		fi_close(&l->rx_ep->fid);
	l->rx_ep = NULL;
	fi_close(&l->ep->fid);
	l->ep = NULL;
err_cq:
	fi_close(&l->cq->fid);
	l->cq = NULL;
err_av:
	fi_close(&l->av->fid);
	l->av = NULL;
err_domain:
	fi_close(&l->domain->fid);
	l->domain = NULL;
err_fabric:
	fi_close(&l->fabric->fid);
	l->fabric = NULL;
err_info:
	l->shm = false;
	tp_log(tp, GW_LOG_ERROR, "opening %s failed: %s", l->info->fabric_attr->prov_name,
	       gw_strerror(ret));
	fi_freeinfo(l->info);
	l->info = NULL;
	return ret;
}

static bool same_provider(const struct fi_info *a, const struct fi_info *b)
{
	return !strcmp(a->fabric_attr->prov_name, b->fabric_attr->prov_name);
}

/*
 * Which links open. Peers on this host (same host id in cfg.hosts) use the
 * local provider, the others the main one; both the same: one link (the
 * main one) for all, as without a local provider. No peer on another host:
 * the main link is not opened, nor is a local one without another rank on
 * this host (a rank alone on its host sends to itself over the main link).
 * Every rank of a host takes the same decision (host ids are the same list
 * everywhere), and a pair of peers always uses links of the same kind.
 */
int tp_fabric_open(struct gw_tp *tp)
{
	const uint64_t *h = tp->cfg.hosts;
	struct fi_info *main_info = NULL, *local_info = NULL;
	bool remote = false, local = false;
	long here = 0, cpus;
	int ret;

	for (int r = 0; h && r < tp->size; r++) {
		if (r == tp->rank)
			continue;
		if (h[r] == h[tp->rank])
			local = true;
		else
			remote = true;
	}
	/* A named local provider must exist even where no peer needs it: a
	 * wrong name fails on one host as it would on many. */
	if (local || tp->cfg.provider_local) {
		ret = tp_resolve_local(tp, &local_info);
		if (ret)
			return ret;
	}
	if (!local) {
		fi_freeinfo(local_info);
		local_info = NULL;
	}
	if (remote || !local_info) {
		ret = tp_resolve_main(tp, remote || !h, &main_info);
		if (ret)
			goto err_free;
	}
	if (main_info && local_info && same_provider(main_info, local_info)) {
		fi_freeinfo(local_info);
		local_info = NULL;
	}
	tp->nlinks = 0;
	if (main_info)
		tp->link[tp->nlinks++].info = main_info;
	if (local_info) {
		tp->link[tp->nlinks].local = true;
		tp->link[tp->nlinks++].info = local_info;
	}
	main_info = local_info = NULL;
	for (int i = 0; i < tp->nlinks; i++) {
		ret = link_open(tp, &tp->link[i]);
		if (ret) {
			for (int k = i + 1; k < tp->nlinks; k++) {
				fi_freeinfo(tp->link[k].info);
				tp->link[k].info = NULL;
			}
			tp->nlinks = i;
			tp_fabric_close(tp);
			return ret;
		}
	}
	/* Peers: the local link for this host's (this rank too), when open. */
	for (int r = 0; r < tp->size; r++) {
		bool same = h && h[r] == h[tp->rank]; /* no host ids: not crowded */

		tp->peer_link[r] = (uint8_t)(tp->nlinks == 2 && same);
		here += same;
	}
	cpus = sysconf(_SC_NPROCESSORS_ONLN);
	tp->crowded = cpus > 0 && here > cpus;
	tp->blocking = tp->auto_progress = true;
	tp->tx_iov_limit = tp->rx_iov_limit = SIZE_MAX;
	for (int i = 0; i < tp->nlinks; i++) {
		struct tp_link *l = &tp->link[i];

		tp->blocking &= l->blocking && (tp->nlinks == 1 || l->wait_fd >= 0);
		tp->auto_progress &= l->auto_progress;
		tp->any_auto |= l->auto_progress;
		tp->need_mr |= l->need_mr;
		if (l->info->tx_attr->iov_limit < tp->tx_iov_limit)
			tp->tx_iov_limit = l->info->tx_attr->iov_limit;
		if (l->info->rx_attr->iov_limit < tp->rx_iov_limit)
			tp->rx_iov_limit = l->info->rx_attr->iov_limit;
	}
	if (tp->nlinks == 2)
		snprintf(tp->prov_desc, sizeof(tp->prov_desc), "%s+%s",
			 tp->link[0].info->fabric_attr->prov_name,
			 tp->link[1].info->fabric_attr->prov_name);
	return 0;

err_free:
	fi_freeinfo(local_info);
	return ret;
}

void tp_fabric_close_ep(struct gw_tp *tp)
{
	for (int i = 0; i < tp->nlinks; i++) {
		struct tp_link *l = &tp->link[i];

		if (l->shm) /* never progressed again; tp_fabric_close() decides */
			l->shm_ep = l->ep;
		else if (l->ep)
			fi_close(&l->ep->fid);
		if (l->rx_ep)
			fi_close(&l->rx_ep->fid);
		l->ep = NULL;
		l->rx_ep = NULL;
	}
}

void tp_fabric_close(struct gw_tp *tp)
{
	for (int i = 0; i < tp->nlinks; i++) {
		struct tp_link *l = &tp->link[i];
		struct parked *all = NULL;

		if (l->shm_ep)
			l->ep = l->shm_ep;
		l->shm_ep = NULL;
		if (l->rx_ep)
			fi_close(&l->rx_ep->fid);
		l->rx_ep = NULL;
		if (!l->shm || !shm_park(tp, l, &all))
			close_objects(l->ep, l->cq, l->av, l->domain, l->fabric, l->info);
		while (all) { /* the last shm context of the process: the parked ones */
			struct parked *p = all;

			all = p->next;
			close_objects(p->ep, p->cq, p->av, p->domain, p->fabric, p->info);
			free(p);
		}
		if (l->shm_lock >= 0)
			close(l->shm_lock);
		l->shm_lock = -1;
		l->shm = false;
		l->ep = NULL;
		l->cq = NULL;
		l->av = NULL;
		l->domain = NULL;
		l->fabric = NULL;
		l->info = NULL;
	}
	tp->nlinks = 0;
}
