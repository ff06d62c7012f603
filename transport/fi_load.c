/* SPDX-License-Identifier: MIT */
/*
 * fi_load.c - libfabric, loaded on first use, leaving the host's signal
 * dispositions as they were.
 *
 * Why. Debian's libfabric links its psm provider in, and with it
 * libinfinipath, whose constructor installs handlers for SIGTERM, SIGINT,
 * SIGSEGV, SIGBUS, SIGILL and SIGABRT that print a backtrace and exit(1).
 * Had libgradwire.so named libfabric as a dependency, loading gradwire would
 * run that constructor before any of our code, and a launcher's SIGTERM
 * would end a job with status 1 instead of "killed by SIGTERM" (143); Python
 * would lose its own SIGINT handler. Excluding providers (FI_PROVIDER=^psm)
 * cannot help: the constructor runs when libfabric.so is loaded, whatever
 * providers are used later.
 *
 * What. The five libfabric functions the transport calls are defined here
 * (hidden, so they never interpose on anyone else's libfabric). The first
 * call dlopen()s libfabric.so.1 and resolves them with dlvsym() at the
 * symbol versions the build linked against (meson probes them:
 * GW_FI_VER_*). Around that dlopen, and around every fi_getinfo() and
 * fi_fabric() (where providers initialise and may load more libraries),
 * every signal's disposition is saved and those that changed are put back.
 * Invariant: after any call here returns, the dispositions are the host's.
 * (A host thread that changes a disposition during that window loses its
 * change; a signal arriving inside it meets the library's handler.)
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include "transport.h"
#include "fi_load.h"

#ifndef GW_FI_LIBRARY
#define GW_FI_LIBRARY "libfabric.so.1"
#endif

struct sigsave {
	struct sigaction act[NSIG];
	unsigned char ok[NSIG];
};

static void sig_save(struct sigsave *s)
{
	for (int i = 1; i < NSIG; i++)
		s->ok[i] = i != SIGKILL && i != SIGSTOP && !sigaction(i, NULL, &s->act[i]);
}

/* Put back every disposition that changed since sig_save(). */
static int sig_restore(const struct sigsave *s)
{
	int restored = 0;

	for (int i = 1; i < NSIG; i++) {
		struct sigaction now;

		if (!s->ok[i] || sigaction(i, NULL, &now))
			continue;
		if (now.sa_handler != s->act[i].sa_handler ||
		    (now.sa_flags & SA_SIGINFO) != (s->act[i].sa_flags & SA_SIGINFO)) {
			sigaction(i, &s->act[i], NULL);
			restored++;
		}
	}
	return restored;
}

static struct {
	pthread_once_t once;
	int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
		       struct fi_info **);
	void (*freeinfo)(struct fi_info *);
	struct fi_info *(*dupinfo)(const struct fi_info *);
	int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
	const char *(*strerror)(int);
	uint32_t (*version)(void);
	int restored;	 /* dispositions the load changed and we put back */
	atomic_int held; /* fi_info lists handed to us and not yet freed */
	char why[256];	 /* the load failed: dlerror() */
} fi = { .once = PTHREAD_ONCE_INIT };

static void *sym(void *h, const char *name, const char *ver)
{
	void *p = ver && *ver ? dlvsym(h, name, ver) : NULL;

	return p ? p : dlsym(h, name);
}

/*
 * The shm provider's default for a message beyond its inline sizes is a
 * single copy by the receiver (CMA, process_vm_readv()), one system call and
 * page pinning per message. Copies through its shared buffers (its SAR
 * protocol) cost less for the sizes a ring moves in one message, also with
 * CPU-bound processes beside the ranks, and beat Open MPI's vader there
 * (docs/performance.md, "Why the defaults are what they are"). Longer
 * messages are slower that way, so the ring cuts them into 1 MiB segments
 * (coll/ring.c). Set before
 * libfabric reads it, unless the host set it (FI_SHM_DISABLE_CMA=0 keeps
 * CMA); a libfabric the host initialised earlier keeps its own choice.
 */
static void shm_defaults(void)
{
	setenv("FI_SHM_DISABLE_CMA", "1", 0);
}

/*
 * libfabric 2.1's tcp provider (1.18 and later) buffers an unexpected
 * message of any size in a malloc()ed copy. When the sender dies while such
 * a message is half read, its receive fails and the provider frees that copy
 * but leaves it on the endpoint's list of saved messages; closing the
 * endpoint frees it again (xnet_complete_rx()'s error path, then
 * xnet_srx_close(): glibc aborts in free()). Seen as a crash in
 * gw_ctx_destroy() after a peer was killed mid-transfer (tests/test_conn.c,
 * "peer killed mid-transfer"), docs/reliability.md.
 *
 * FI_TCP_MAX_SAVED_SIZE=0 (raised by the provider to its receive buffer,
 * FI_TCP_MAX_RX_SIZE) keeps unexpected messages beyond that size in the
 * socket until their receive is posted, as libfabric 1.17's net did, which
 * the transport is built for (transport.h, "Ordering"); nor does a peer
 * then make this process allocate whatever size its header claims. Set
 * before libfabric reads it, unless the host set it.
 */
static void tcp_defaults(void)
{
	setenv("FI_TCP_MAX_SAVED_SIZE", "0", 0);
}

static void load(void)
{
	struct sigsave s;
	void *h;

	shm_defaults();
	tcp_defaults();
	sig_save(&s);
	h = dlopen(GW_FI_LIBRARY, RTLD_NOW | RTLD_LOCAL);
	fi.restored = sig_restore(&s);
	if (!h) {
		snprintf(fi.why, sizeof(fi.why), "%s", dlerror());
		return;
	}
	fi.getinfo = sym(h, "fi_getinfo", GW_FI_VER_GETINFO);
	fi.freeinfo = sym(h, "fi_freeinfo", GW_FI_VER_FREEINFO);
	fi.dupinfo = sym(h, "fi_dupinfo", GW_FI_VER_DUPINFO);
	fi.fabric = sym(h, "fi_fabric", GW_FI_VER_FABRIC);
	fi.strerror = sym(h, "fi_strerror", GW_FI_VER_STRERROR);
	fi.version = sym(h, "fi_version", "FABRIC_1.0");
	if (!fi.getinfo || !fi.freeinfo || !fi.dupinfo || !fi.fabric || !fi.strerror ||
	    !fi.version) {
		snprintf(fi.why, sizeof(fi.why), "%s lacks a function gradwire needs",
			 GW_FI_LIBRARY);
		fi.getinfo = NULL;
	}
}

static bool loaded(void)
{
	pthread_once(&fi.once, load);
	if (!fi.getinfo) {
		gw_log(GW_LOG_ERROR, GW_LOG_ERROR, -1, "libfabric: %s", fi.why);
		return false;
	}
	return true;
}

int gw_fi_restored_signals(void)
{
	pthread_once(&fi.once, load);
	return fi.restored;
}

int gw_fi_info_held(void)
{
	return atomic_load(&fi.held);
}

int fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
	       const struct fi_info *hints, struct fi_info **info)
{
	struct sigsave s;
	int rc;

	if (!loaded())
		return -FI_ENOSYS;
	sig_save(&s);
	rc = fi.getinfo(version, node, service, flags, hints, info);
	sig_restore(&s);
	if (!rc && *info)
		atomic_fetch_add(&fi.held, 1);
	return rc;
}

void fi_freeinfo(struct fi_info *info)
{
	if (info && loaded()) {
		fi.freeinfo(info);
		atomic_fetch_sub(&fi.held, 1);
	}
}

struct fi_info *fi_dupinfo(const struct fi_info *info)
{
	struct fi_info *d = loaded() ? fi.dupinfo(info) : NULL;

	if (d)
		atomic_fetch_add(&fi.held, 1);
	return d;
}

int fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	struct sigsave s;
	int rc;

	if (!loaded())
		return -FI_ENOSYS;
	sig_save(&s);
	rc = fi.fabric(attr, fabric, context);
	sig_restore(&s);
	return rc;
}

const char *fi_strerror(int errnum)
{
	return loaded() ? fi.strerror(errnum) : "libfabric could not be loaded";
}

uint32_t gw_fi_version(void)
{
	return loaded() ? fi.version() : 0;
}

/*
 * libfabric 1.18 renamed its native TCP provider (RDM endpoints over
 * kernel sockets) from "net" to "tcp"; before, "tcp" was only a message
 * provider that ofi_rxm layers over ("tcp;ofi_rxm"). The name depends on the
 * library this process loaded, not on the headers gradwire was built with.
 */
const char *gw_fi_tcp_provider(void)
{
	uint32_t v = gw_fi_version();

	return v && FI_MAJOR(v) == 1 && FI_MINOR(v) < 18 ? "net" : "tcp";
}
