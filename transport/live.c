/* SPDX-License-Identifier: MIT */
/*
 * live.c - knowing at once that a peer's process is gone.
 *
 * libfabric 1.17 tells nothing when a peer process dies (measured with a
 * peer killed by SIGKILL, docs/design.md "Peer loss"): over net and
 * tcp;ofi_rxm a posted receive from it just waits, and a send to it is
 * refused with FI_EAGAIN until the deadline; over shm a receive waits and
 * a small send even completes. Only the timeout ended such a wait.
 *
 * So each rank also listens on a TCP socket of its own (on the main link's
 * IP address, or 127.0.0.1 when every peer is on this host) and publishes
 * its address in the store ("<job>/tp/live/<rank>"); every rank connects
 * one socket to every peer's. Nothing is ever sent on them and the
 * listener never accepts: the connections wait in its backlog, and the
 * kernel resets them when the listener's process ends however it ends
 * (exit, crash, SIGKILL), so our socket to a dead peer becomes readable
 * (EOF or ECONNRESET). A stopped (SIGSTOP) or busy peer keeps its socket:
 * it is alive, and only the timeout covers it. No thread, no traffic, no
 * syscall per frame: waits that found nothing to complete poll() these
 * sockets at most every TP_LIVE_MS (tp_live_poll()).
 *
 * A peer whose socket closed is declared gone TP_LIVE_GRACE_MS later:
 * meanwhile waits go on progressing, so that what it sent before leaving
 * (a goodbye, a last frame still in a socket buffer) is delivered first.
 * From then on every pending and later operation with it fails with
 * -ECONNRESET (progress.c).
 *
 * Revocation (gw_tp_revoke()) uses the same sockets for a rank that is
 * alive but ends the context (a failed collective, an exception in the
 * caller): it accepts every connection waiting in its listener's backlog,
 * writes its reason on each and closes it, so each peer reads the text and
 * then EOF, and declares it gone at once, without the grace. The only
 * traffic these sockets ever carry is that text. Nothing read from them is
 * trusted: a readable socket means "closed", and the text is kept as
 * printable ASCII for error messages only (it is what the peer process
 * wrote on the connection we opened to the address it published). A
 * stranger who connects to our listener only takes a place in its backlog
 * (and is told the reason if we revoke).
 *
 * Not covered: a cut link (no FIN, no RST) is caught by the timeout, as
 * before; a peer whose listener address cannot be reached (another
 * network, a provider without IP addresses) is not watched, logged once.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#define GW_TP_INTERNAL
#include "transport.h"

#define TP_LIVE_MS 100	     /* at most one poll() of the sockets per this */
#define TP_LIVE_GRACE_MS 300 /* closed socket -> peer gone */
#define TP_LIVE_CONNECT_MS 5000
/* Open files a context may hold per peer: its liveness socket and, over a
 * connection-based provider (net, tcp, ofi_rxm), a connection each way;
 * plus what the process holds besides (the listener, CQ wait fds, the
 * caller's). */
#define TP_FDS_PER_PEER 3
#define TP_FDS_SPARE 64

static bool ip_link(const struct tp_link *l)
{
	return (l->info->addr_format == FI_SOCKADDR_IN &&
		l->namelen >= sizeof(struct sockaddr_in)) ||
	       (l->info->addr_format == FI_SOCKADDR_IN6 &&
		l->namelen >= sizeof(struct sockaddr_in6));
}

/* Our listener's address: an IP link's (port 0), the main one first, or
 * loopback when every link is shm (its peers are all on this host). */
static int live_addr(const struct gw_tp *tp, struct sockaddr_storage *ss, socklen_t *len)
{
	const struct tp_link *ip = NULL;
	bool all_shm = true;

	memset(ss, 0, sizeof(*ss));
	for (int i = tp->nlinks - 1; i >= 0; i--) {
		const struct tp_link *l = &tp->link[i];

		if (ip_link(l) && (!ip || !l->local))
			ip = l;
		all_shm &= !strcmp(l->info->fabric_attr->prov_name, "shm");
	}
	if (ip) {
		bool v4 = ip->info->addr_format == FI_SOCKADDR_IN;

		*len = v4 ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
		memcpy(ss, ip->name, *len);
		if (v4)
			((struct sockaddr_in *)ss)->sin_port = 0;
		else
			((struct sockaddr_in6 *)ss)->sin6_port = 0;
		return 0;
	}
	if (!all_shm)
		return -EAFNOSUPPORT; /* no IP address to listen on */
	((struct sockaddr_in *)ss)->sin_family = AF_INET;
	((struct sockaddr_in *)ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	*len = sizeof(struct sockaddr_in);
	return 0;
}

static int live_listen(struct gw_tp *tp, struct gw_store *st, const char *job)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char key[256];
	int ret = live_addr(tp, &ss, &len);

	if (ret)
		return ret;
	/* Non-blocking: only gw_tp_revoke() accepts, and never waits. */
	tp->live_lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (tp->live_lfd < 0)
		return -errno;
	if (bind(tp->live_lfd, (struct sockaddr *)&ss, len) ||
	    listen(tp->live_lfd, tp->size < 16 ? 16 : tp->size) ||
	    getsockname(tp->live_lfd, (struct sockaddr *)&ss, &len))
		return -errno;
	snprintf(key, sizeof(key), "%s/tp/live/%d", job, tp->rank);
	return gw_store_set(st, key, &ss, len);
}

/* Connect to peer p's listener (published before it looks for ours, so it
 * listens already), within the context's timeout and TP_LIVE_CONNECT_MS. */
static int live_connect(struct gw_tp *tp, struct gw_store *st, const char *job, int p)
{
	struct sockaddr_storage ss;
	int ms = tp->cfg.timeout_ms < TP_LIVE_CONNECT_MS ? tp->cfg.timeout_ms : TP_LIVE_CONNECT_MS;
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	char key[256];
	ssize_t got;
	int fd;

	snprintf(key, sizeof(key), "%s/tp/live/%d", job, p);
	got = gw_store_get(st, key, &ss, sizeof(ss), tp->cfg.timeout_ms);
	if (got < 0)
		return (int)got;
	if ((size_t)got < sizeof(sa_family_t) ||
	    (ss.ss_family == AF_INET && (size_t)got != sizeof(struct sockaddr_in)) ||
	    (ss.ss_family == AF_INET6 && (size_t)got != sizeof(struct sockaddr_in6)) ||
	    (ss.ss_family != AF_INET && ss.ss_family != AF_INET6))
		return -EPROTO;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* SO_SNDTIMEO bounds a blocking connect() too. */
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) ||
	    connect(fd, (struct sockaddr *)&ss, (socklen_t)got)) {
		int e = -errno;

		close(fd);
		return e;
	}
	tp->live_fd[p] = fd;
	return 0;
}

/*
 * A context of size ranks may open about TP_FDS_PER_PEER files per peer:
 * beyond the usual soft limit of 1,024 from about 320 ranks on. As NCCL
 * does, raise the soft limit to the hard one then (any process may raise
 * its own up to there), and say so; warn when even the hard one is short.
 */
static void live_fd_budget(const struct gw_tp *tp)
{
	rlim_t need = (rlim_t)tp->size * TP_FDS_PER_PEER + TP_FDS_SPARE, was;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= need)
		return;
	was = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (rl.rlim_max != was && !setrlimit(RLIMIT_NOFILE, &rl))
		tp_log(tp, GW_LOG_INFO,
		       "raised the soft limit of open files from %llu to the hard limit, %llu: "
		       "%d ranks may need about %llu",
		       (unsigned long long)was, (unsigned long long)rl.rlim_max, tp->size,
		       (unsigned long long)need);
	else
		rl.rlim_cur = was;
	if (rl.rlim_cur < need)
		tp_log(tp, GW_LOG_WARN,
		       "open files are limited to %llu, and %d ranks may need about %llu: raise "
		       "the hard limit (ulimit -Hn, LimitNOFILE=) or a connection will fail "
		       "with EMFILE",
		       (unsigned long long)rl.rlim_cur, tp->size, (unsigned long long)need);
}

int tp_live_listen(struct gw_tp *tp, struct gw_store *st)
{
	const char *job = tp->cfg.job ? tp->cfg.job : "gw";
	char key[256];
	int ret;

	tp->live_lfd = -1;
	tp->lost_first = -1;
	tp->live_fd = malloc((size_t)tp->size * sizeof(*tp->live_fd));
	tp->live_gone = calloc((size_t)tp->size, sizeof(*tp->live_gone));
	tp->peer_lost = calloc((size_t)tp->size, sizeof(*tp->peer_lost));
	tp->peer_why = calloc((size_t)tp->size, sizeof(*tp->peer_why));
	if (!tp->live_fd || !tp->live_gone || !tp->peer_lost || !tp->peer_why)
		return -ENOMEM;
	for (int p = 0; p < tp->size; p++)
		tp->live_fd[p] = -1;
	if (tp->size < 2)
		return 0;
	live_fd_budget(tp);
	ret = live_listen(tp, st, job);
	if (ret) {
		tp_log(tp, GW_LOG_INFO,
		       "no liveness socket (%s): a dead peer is seen only at the timeout",
		       gw_strerror(ret));
		if (tp->live_lfd >= 0)
			close(tp->live_lfd);
		tp->live_lfd = -1;
		/* Peers wait for our key: publish an empty one, "not watched". */
		snprintf(key, sizeof(key), "%s/tp/live/%d", job, tp->rank);
		return gw_store_set(st, key, "", 0);
	}
	return 0;
}

int tp_live_connect(struct gw_tp *tp, struct gw_store *st)
{
	const char *job = tp->cfg.job ? tp->cfg.job : "gw";
	int ret, watched = 0;

	if (tp->live_lfd < 0)
		return 0;
	for (int p = 0; p < tp->size; p++) {
		if (p == tp->rank)
			continue;
		ret = live_connect(tp, st, job, p);
		if (ret == -ETIMEDOUT)
			return ret; /* it never published: as for its fabric address */
		if (ret)
			tp_log(tp, GW_LOG_INFO,
			       "rank %d's liveness socket: %s; its death is seen only at the "
			       "timeout",
			       p, gw_strerror(ret));
		else
			watched++;
	}
	tp->live_next = gw_now_ms() + TP_LIVE_MS;
	tp_log(tp, GW_LOG_DEBUG, "liveness sockets to %d of %d peers", watched, tp->size - 1);
	return 0;
}

void tp_live_close(struct gw_tp *tp)
{
	if (tp->live_fd)
		for (int p = 0; p < tp->size; p++)
			if (tp->live_fd[p] >= 0)
				close(tp->live_fd[p]);
	if (tp->live_lfd >= 0)
		close(tp->live_lfd);
	tp->live_lfd = -1;
	if (tp->peer_why)
		for (int p = 0; p < tp->size; p++)
			free(tp->peer_why[p]);
	free(tp->live_fd);
	free(tp->live_gone);
	free(tp->peer_lost);
	free(tp->peer_why);
	tp->live_fd = NULL;
	tp->live_gone = NULL;
	tp->peer_lost = NULL;
	tp->peer_why = NULL;
}

/* Keep what peer p wrote (its reason to revoke), as printable ASCII, up to
 * GW_TP_WHY_MAX - 1 bytes; the rest is read and dropped. */
static void live_keep(struct gw_tp *tp, int p, const char *buf, size_t len)
{
	char *w = tp->peer_why[p];
	size_t have;

	if (!w) {
		w = tp->peer_why[p] = calloc(1, GW_TP_WHY_MAX);
		if (!w)
			return; /* the close still counts; only the text is lost */
	}
	have = strlen(w);
	for (size_t i = 0; i < len && have < GW_TP_WHY_MAX - 1; i++)
		w[have++] = buf[i] >= 0x20 && buf[i] < 0x7f ? buf[i] : '?';
	w[have] = '\0';
}

/* Read peer p's readable socket: keep its text; whether it closed. A few
 * reads at most per look: a peer that floods it is no sign of death. */
static bool live_closed(struct gw_tp *tp, int p)
{
	char buf[GW_TP_WHY_MAX];

	for (int k = 0; k < 4; k++) {
		ssize_t got = recv(tp->live_fd[p], buf, sizeof(buf), MSG_DONTWAIT);

		if (got == 0)
			return true;
		if (got < 0)
			return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
		live_keep(tp, p, buf, (size_t)got);
	}
	return false;
}

/* The sockets that became readable: keep what they say, note when they
 * closed (a peer that revoked: long enough ago to count at once). */
static void live_read(struct gw_tp *tp, int64_t now)
{
	struct pollfd pfd[64];
	int who[64];
	nfds_t n = 0;

	for (int p = 0; p <= tp->size; p++) {
		if (n == 64 || (p == tp->size && n)) {
			if (poll(pfd, n, 0) > 0) {
				for (nfds_t i = 0; i < n; i++) {
					int q = who[i];

					if (!pfd[i].revents || !live_closed(tp, q))
						continue;
					close(pfd[i].fd);
					tp->live_fd[q] = -1;
					tp->live_gone[q] =
						tp->peer_why[q] ? now - TP_LIVE_GRACE_MS : now;
					tp_log(tp, GW_LOG_DEBUG, "rank %d's liveness socket closed",
					       q);
				}
			}
			n = 0;
		}
		if (p < tp->size && tp->live_fd[p] >= 0) {
			pfd[n] = (struct pollfd){ .fd = tp->live_fd[p], .events = POLLIN };
			who[n++] = p;
		}
	}
}

void gw_tp_revoke(struct gw_tp *tp, const char *why)
{
	size_t len;
	int fd, none = 0;

	if (!tp || !atomic_compare_exchange_strong(&tp->revoked, &none, 1))
		return;
	snprintf(tp->revoke_why, sizeof(tp->revoke_why), "%s", why && *why ? why : "revoked");
	len = strlen(tp->revoke_why);
	atomic_store(&tp->revoked, 2);
	tp_log(tp, GW_LOG_ERROR, "revoked: %s", tp->revoke_why);
	if (tp->live_lfd < 0)
		return;
	/* Each peer's connection waits in the backlog (listen(): at least
	 * size); a stranger's takes a place too, hence the bound. */
	for (int i = 0; i < 2 * tp->size + 16; i++) {
		fd = accept4(tp->live_lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			break;
		(void)send(fd, tp->revoke_why, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		close(fd); /* FIN after the text: nothing is ever sent to us */
	}
}

const char *gw_tp_revoked(const struct gw_tp *tp)
{
	return tp && atomic_load(&tp->revoked) == 2 ? tp->revoke_why : NULL;
}

const char *gw_tp_peer_why(const struct gw_tp *tp, int peer)
{
	if (!tp || !tp->peer_why || peer < 0 || peer >= tp->size)
		return NULL;
	return tp->peer_why[peer];
}

void gw_tp_lost_ends_all(struct gw_tp *tp, bool on)
{
	tp->lost_all = on;
}

int gw_tp_lost_peer(const struct gw_tp *tp)
{
	return tp->lost_first;
}

bool tp_live_poll(struct gw_tp *tp)
{
	int64_t now;
	bool lost = false;

	if (atomic_load(&tp->revoked))
		return true; /* every wait ends (wait.c) */
	if (tp->live_lfd < 0)
		return false;
	now = gw_now_ms();
	if (now < tp->live_next)
		return false;
	tp->live_next = now + TP_LIVE_MS;
	live_read(tp, now);
	for (int p = 0; p < tp->size; p++) {
		if (!tp->live_gone[p] || tp->peer_lost[p] ||
		    now - tp->live_gone[p] < TP_LIVE_GRACE_MS)
			continue;
		tp->peer_lost[p] = true;
		tp->peer_failed[p] = true; /* leaving does not wait for it */
		if (tp->lost_first < 0)
			tp->lost_first = p;
		lost = true;
		if (tp->peer_why[p])
			tp_log(tp, GW_LOG_ERROR,
			       "rank %d revoked the context (%s); every operation with it fails "
			       "from now on",
			       p, tp->peer_why[p]);
		else /* while leaving (linger) a peer that left first is no error */
			tp_log(tp, tp->leave_by ? GW_LOG_INFO : GW_LOG_ERROR,
			       "rank %d is gone (its connection closed: its process ended); "
			       "every operation with it fails from now on",
			       p);
	}
	return lost;
}
