/* SPDX-License-Identifier: MIT */
/*
 * perf_mpi.c - gradwire-perf's rendezvous through MPI, so that ranks started
 * by mpirun on several hosts meet without a shared folder (nccl-tests'
 * MPI=1 build does the same for NCCL's unique id).
 *
 * The store pushes: set(key, val) sends "key\0val" to every other rank on
 * a communicator of its own (a duplicate of MPI_COMM_WORLD, so no message
 * of the store meets another), and keeps it in this rank's table; get(key)
 * receives whatever arrived, into the table, until key is there or its
 * timeout passed. No collective is involved after creation, so ranks that
 * make different numbers of set() and get() calls (a rank with no peer on
 * its host has no shm link to publish) never wait for one another's calls.
 * MPI delivers the messages of one sender in order, so a later set() of a
 * key replaces the older value on every rank, as the store's contract asks.
 *
 * Invariants: a message is received whole (its size from MPI_Probe's
 * status) and refused unless it holds a NUL-terminated key; a send's buffer
 * lives until its request completed (destroy waits for them a bounded time
 * and leaks what is left rather than free it under MPI).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <mpi.h>
#define GW_TP_INTERNAL
#include "perf_mpi.h"

#define TAG 0x6777 /* any: the communicator is the store's own */
#define MSG_MAX 65536

struct entry {
	char *key;
	void *val;
	size_t len;
};

struct send {
	MPI_Request req;
	void *buf;
};

struct mpi_store {
	struct gw_store st; /* first: st.s points back here */
	MPI_Comm comm;
	int rank, size;
	struct entry *e;
	size_t n, cap;
	struct send *tx;
	size_t ntx, captx;
};

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

bool gw_perf_mpi_launched(void)
{
	return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

int gw_perf_mpi_init(int *rank, int *size)
{
	if (MPI_Init(NULL, NULL) != MPI_SUCCESS)
		return -EIO;
	MPI_Comm_rank(MPI_COMM_WORLD, rank);
	MPI_Comm_size(MPI_COMM_WORLD, size);
	return 0;
}

void gw_perf_mpi_finalize(void)
{
	MPI_Finalize();
}

static struct entry *find(struct mpi_store *m, const char *key)
{
	for (size_t i = 0; i < m->n; i++)
		if (!strcmp(m->e[i].key, key))
			return &m->e[i];
	return NULL;
}

/* key = val[0..len) in the table, replacing an older value. */
static int put(struct mpi_store *m, const char *key, const void *val, size_t len)
{
	struct entry *e = find(m, key);
	void *copy = malloc(len ? len : 1);

	if (!copy)
		return -ENOMEM;
	memcpy(copy, val, len);
	if (!e) {
		if (m->n == m->cap) {
			size_t cap = m->cap ? 2 * m->cap : 32;
			struct entry *ne = realloc(m->e, cap * sizeof(*ne));

			if (!ne)
				goto err_free;
			m->e = ne;
			m->cap = cap;
		}
		e = &m->e[m->n];
		e->key = strdup(key);
		if (!e->key)
			goto err_free;
		e->val = NULL;
		m->n++;
	}
	free(e->val);
	e->val = copy;
	e->len = len;
	return 0;
err_free:
	free(copy);
	return -ENOMEM;
}

/* Receive every message that arrived. Return: 0 or -errno. */
static int drain(struct mpi_store *m)
{
	for (;;) {
		MPI_Status s;
		int flag = 0, count = 0, rc;
		char *buf;
		size_t kl;

		if (MPI_Iprobe(MPI_ANY_SOURCE, TAG, m->comm, &flag, &s) != MPI_SUCCESS)
			return -EIO;
		if (!flag)
			return 0;
		MPI_Get_count(&s, MPI_BYTE, &count);
		if (count < 0 || count > MSG_MAX)
			return -EMSGSIZE;
		buf = malloc((size_t)count + 1);
		if (!buf)
			return -ENOMEM;
		if (MPI_Recv(buf, count, MPI_BYTE, s.MPI_SOURCE, TAG, m->comm, MPI_STATUS_IGNORE) !=
		    MPI_SUCCESS) {
			free(buf);
			return -EIO;
		}
		kl = strnlen(buf, (size_t)count);
		rc = kl == 0 || kl == (size_t)count
			     ? -EBADMSG
			     : put(m, buf, buf + kl + 1, (size_t)count - kl - 1);
		free(buf);
		if (rc)
			return rc;
	}
}

static int mpi_set(void *s, const char *key, const void *val, size_t len)
{
	struct mpi_store *m = s;
	size_t kl = strlen(key);
	int rc;

	if (!kl || kl + 1 + len > MSG_MAX)
		return -EINVAL;
	rc = put(m, key, val, len);
	for (int r = 0; r < m->size && !rc; r++) {
		struct send *t;

		if (r == m->rank)
			continue;
		if (m->ntx == m->captx) {
			size_t cap = m->captx ? 2 * m->captx : 64;
			struct send *nt = realloc(m->tx, cap * sizeof(*nt));

			if (!nt)
				return -ENOMEM;
			m->tx = nt;
			m->captx = cap;
		}
		t = &m->tx[m->ntx];
		t->buf = malloc(kl + 1 + len);
		if (!t->buf)
			return -ENOMEM;
		memcpy(t->buf, key, kl + 1);
		memcpy((char *)t->buf + kl + 1, val, len);
		if (MPI_Isend(t->buf, (int)(kl + 1 + len), MPI_BYTE, r, TAG, m->comm, &t->req) !=
		    MPI_SUCCESS) {
			free(t->buf);
			return -EIO;
		}
		m->ntx++;
	}
	return rc;
}

static ssize_t mpi_get(void *s, const char *key, void *buf, size_t cap, int timeout_ms)
{
	struct mpi_store *m = s;
	double deadline = now_s() + (timeout_ms > 0 ? timeout_ms : 0) * 1e-3;
	long wait_ns = 100000; /* 0.1 ms, doubling up to 5 ms */

	for (;;) {
		struct entry *e = find(m, key);
		int rc;

		if (e) {
			if (e->len > cap)
				return -ENOSPC;
			memcpy(buf, e->val, e->len);
			return (ssize_t)e->len;
		}
		rc = drain(m);
		if (rc)
			return rc;
		if (find(m, key))
			continue;
		if (now_s() >= deadline)
			return -ETIMEDOUT;
		nanosleep(&(struct timespec){ .tv_nsec = wait_ns }, NULL);
		if (wait_ns < 5000000)
			wait_ns *= 2;
	}
}

static void mpi_destroy(void *s)
{
	struct mpi_store *m = s;
	double deadline = now_s() + 10;
	bool done = false;

	/* Sends of this size complete at once (eager); wait a bounded time for
	 * any that did not, and leak those (the process is about to end). */
	while (!done && now_s() < deadline) {
		int flag = 1;

		for (size_t i = 0; i < m->ntx; i++) {
			int f = 1;

			if (m->tx[i].req != MPI_REQUEST_NULL)
				MPI_Test(&m->tx[i].req, &f, MPI_STATUS_IGNORE);
			flag &= f;
		}
		done = flag;
		if (!done) {
			drain(m);
			nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
		}
	}
	for (size_t i = 0; i < m->ntx && done; i++)
		free(m->tx[i].buf);
	for (size_t i = 0; i < m->n; i++) {
		free(m->e[i].key);
		free(m->e[i].val);
	}
	if (done)
		MPI_Comm_free(&m->comm);
	free(m->tx);
	free(m->e);
	free(m);
}

static const struct gw_store_ops mpi_ops = {
	.set = mpi_set,
	.get = mpi_get,
	.destroy = mpi_destroy,
};

int gw_perf_mpi_store_create(struct gw_store **out)
{
	struct mpi_store *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	if (MPI_Comm_dup(MPI_COMM_WORLD, &m->comm) != MPI_SUCCESS) {
		free(m);
		return -EIO;
	}
	MPI_Comm_rank(m->comm, &m->rank);
	MPI_Comm_size(m->comm, &m->size);
	m->st.ops = &mpi_ops;
	m->st.s = m;
	*out = &m->st;
	return 0;
}
