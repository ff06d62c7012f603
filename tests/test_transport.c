/* SPDX-License-Identifier: MIT */
/*
 * test_transport.c - the transport base over loopback, with forked ranks:
 * rings of 2 and 4 ranks (1 B to 64 MiB, every byte checked), all-to-all
 * with many tags in flight, receive timeouts, sends withdrawn past their
 * deadline, a wait that signals keep interrupting, receives posted in the
 * other order, truncation, a peer killed mid-transfer, forced registration,
 * a connection per direction between ranks of one IP address (counted in
 * /proc), and the shm provider.
 *
 * Everything runs on "lo" (net, or tcp;ofi_rxm: tp_net_provider()) or shm;
 * nothing else is a target.
 * Each rank body returns 0 or a code naming the failed step, so a failure
 * message says which rank failed where.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "tutil.h"
#include "tp_harness.h"
#include "fi_load.h"

#define TCP tp_net_provider()
#define TMO 15000

static struct tp_env tcp_env = { .iface = "lo", .log_level = GW_LOG_WARN, .timeout_ms = TMO };
static struct tp_env shm_env = { .provider = "shm", .log_level = GW_LOG_WARN, .timeout_ms = TMO };
static bool shm_ok;
static char shm_why[256] = "not probed";

static int64_t ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t seed_of(int src, int dst, uint32_t slot, uint32_t seq, size_t len)
{
	return ((uint64_t)src << 56) ^ ((uint64_t)dst << 48) ^ ((uint64_t)slot << 32) ^
	       ((uint64_t)seq << 8) ^ len;
}

/* Rank bodies fail with a code: 10 * step + what (1 post, 2 wait, 3 data). */
#define FAIL(step, what, ...)                                                                      \
	do {                                                                                       \
		fprintf(stderr, "rank %d step %d: ", rank, (step));                                \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fputc('\n', stderr);                                                               \
		code = 10 * (step) + (what);                                                       \
		goto out;                                                                          \
	} while (0)

/* ---- ring: send to the right, receive from the left, together ---------- */

static const size_t ring_sizes[] = { 1, 7, 4096, 1 << 20, 64 << 20 };

/* One full-duplex ring step on tp; 0 or a FAIL code base. */
static int ring_step(struct gw_tp *tp, int rank, int size, uint32_t slot, size_t len, void *sbuf,
		     void *rbuf, int tmo)
{
	int right = (rank + 1) % size, left = (rank - 1 + size) % size;
	struct gw_tp_req req[2];
	size_t bad;
	int ret;

	tp_pattern(sbuf, len, seed_of(rank, right, slot, 0, len));
	memset(rbuf, 0xEE, len);
	ret = gw_tp_irecv(tp, left, slot, 0, rbuf, len, &req[0]);
	if (ret) {
		fprintf(stderr, "rank %d: irecv %zu: %s\n", rank, len, gw_strerror(ret));
		return 1;
	}
	ret = gw_tp_isend(tp, right, slot, 0, sbuf, len, &req[1]);
	if (ret) {
		fprintf(stderr, "rank %d: isend %zu: %s\n", rank, len, gw_strerror(ret));
		gw_tp_wait(tp, &req[0], 1);
		return 1;
	}
	ret = gw_tp_waitall(tp, req, 2, tmo);
	if (ret || req[0].result != (ssize_t)len || req[1].result != (ssize_t)len) {
		fprintf(stderr, "rank %d: ring %zu B: recv %zd send %zd (%s)\n", rank, len,
			req[0].result, req[1].result, gw_strerror(ret));
		return 2;
	}
	bad = tp_mismatch(rbuf, len, seed_of(left, rank, slot, 0, len));
	if (bad) {
		fprintf(stderr, "rank %d: ring %zu B: byte %zu differs\n", rank, len, bad - 1);
		return 3;
	}
	return 0;
}

struct ring_arg {
	const struct tp_env *env;
	bool preregister;
};

static int ring_body(int rank, int size, const char *dir, void *arg)
{
	const struct ring_arg *ra = arg;
	struct gw_store *st;
	struct gw_tp_mr *smr = NULL, *rmr = NULL;
	size_t max = ring_sizes[4];
	char *sbuf = malloc(max), *rbuf = malloc(max);
	int code = 0, err;
	uint64_t regs;
	struct gw_tp *tp = tp_open(ra->env, rank, size, dir, &st, &err);

	if (!tp)
		return err == -ENODATA ? TU_SKIP : 2;
	if (!sbuf || !rbuf)
		FAIL(0, 9, "out of memory");
	if (rank == 0)
		printf("ring %d ranks: provider %s, mr_mode 0x%llx, waits %s, address %s\n", size,
		       gw_tp_provider(tp), (unsigned long long)gw_tp_mr_mode(tp),
		       gw_tp_blocking(tp) ? "block in fi_cq_sread" : "back off",
		       gw_tp_addr_str(tp));
	if (ra->preregister) {
		if (gw_tp_mr_reg(tp, sbuf, max, &smr) || gw_tp_mr_reg(tp, rbuf, max, &rmr))
			FAIL(0, 8, "gw_tp_mr_reg failed");
	}
	regs = gw_tp_mr_count(tp);
	for (size_t i = 0; i < sizeof(ring_sizes) / sizeof(ring_sizes[0]); i++) {
		int64_t t1 = ms();
		int r = ring_step(tp, rank, size, (uint32_t)i, ring_sizes[i], sbuf, rbuf, TMO);

		if (getenv("GW_TEST_VERBOSE"))
			printf("rank %d ring %zu B: %lld ms\n", rank, ring_sizes[i],
			       (long long)(ms() - t1));

		if (r)
			FAIL((int)i + 1, r, "ring of %zu bytes", ring_sizes[i]);
	}
	/* force_mr: per-request registrations, or none with the cache. */
	if (ra->env->force_mr) {
		uint64_t made = gw_tp_mr_count(tp) - regs;

		if (ra->preregister ? made != 0 : made < 10)
			FAIL(7, 7, "%llu registrations for 10 transfers", (unsigned long long)made);
	}
	if (tp_barrier(st, rank, size, "ring-end", TMO))
		FAIL(8, 1, "final barrier");
out:
	gw_tp_mr_dereg(tp, smr);
	gw_tp_mr_dereg(tp, rmr);
	tp_close(tp, st);
	free(sbuf);
	free(rbuf);
	return code;
}

static void expect_codes(const char *what, const int *codes, int size, const int *want)
{
	for (int r = 0; r < size; r++) {
		int w = want ? want[r] : 0;

		if (codes[r] != w)
			printf("\n  %s: rank %d exited %d (want %d)\n", what, r, codes[r], w);
		CU_ASSERT_EQUAL(codes[r], w);
	}
}

static void run_ring(const struct tp_env *env, int size, bool prereg, const char *what)
{
	struct ring_arg ra = { env, prereg };
	int codes[TP_MAX_RANKS];
	int64_t t0 = ms();

	CU_ASSERT_EQUAL_FATAL(tp_run(size, 40, ring_body, &ra, codes), 0);
	expect_codes(what, codes, size, NULL);
	printf("[%s: %lld ms] ", what, (long long)(ms() - t0));
}

static void test_ring2(void)
{
	run_ring(&tcp_env, 2, false, "ring 2 ranks");
}

static void test_ring4(void)
{
	run_ring(&tcp_env, 4, false, "ring 4 ranks");
}

static void test_force_mr(void)
{
	struct tp_env env = tcp_env;

	env.force_mr = true;
	run_ring(&env, 2, false, "ring force_mr, per request");
	run_ring(&env, 2, true, "ring force_mr, registered buffers");
}

/* ---- a connection per direction ------------------------------------------ */

/* ESTABLISHED TCP sockets of this process (/proc/self/fd against
 * /proc/net/tcp and tcp6), or -1. */
static int established_tcp(void)
{
	static const char *const tabs[] = { "/proc/net/tcp", "/proc/net/tcp6" };
	unsigned long ino[256];
	size_t nino = 0;
	char path[64], link[64], line[512];
	int count = 0;

	for (int fd = 0; fd < 1024 && nino < 256; fd++) {
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		len = readlink(path, link, sizeof(link) - 1);
		if (len <= 0)
			continue;
		link[len] = 0;
		if (sscanf(link, "socket:[%lu]", &ino[nino]) == 1)
			nino++;
	}
	for (size_t t = 0; t < 2; t++) {
		FILE *f = fopen(tabs[t], "r");

		if (!f)
			return -1;
		while (fgets(line, sizeof(line), f)) {
			unsigned long inode;
			unsigned st;

			/* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
			if (sscanf(line, "%*s %*s %*s %x %*s %*s %*s %*s %*s %lu", &st, &inode) !=
				    2 ||
			    st != 1)
				continue;
			for (size_t i = 0; i < nino; i++)
				count += ino[i] == inode;
		}
		fclose(f);
	}
	return count;
}

#define DUPLEX_LEN (1 << 20)

/*
 * Two ranks on lo (one IP address) send each other 1 MiB at once, then
 * count their connections: one per direction (an endpoint sends, another
 * receives), or one for both with one_conn. Returns 0, or 10 * step + what.
 */
static int duplex_body(int rank, int size, const char *dir, void *arg)
{
	const struct tp_env *env = arg;
	int peer = 1 - rank, want = env->one_conn ? 1 : 2, code = 0, err, got;
	char *sbuf = malloc(DUPLEX_LEN), *rbuf = malloc(DUPLEX_LEN);
	struct gw_tp_req rq[2];
	struct gw_store *st;
	struct gw_tp *tp = tp_open(env, rank, size, dir, &st, &err);

	if (!tp) {
		free(sbuf);
		free(rbuf);
		return 2;
	}
	if (!sbuf || !rbuf)
		FAIL(0, 9, "out of memory");
	tp_pattern(sbuf, DUPLEX_LEN, seed_of(rank, peer, 5, 0, DUPLEX_LEN));
	if (gw_tp_irecv(tp, peer, 5, 0, rbuf, DUPLEX_LEN, &rq[0]) ||
	    gw_tp_isend(tp, peer, 5, 0, sbuf, DUPLEX_LEN, &rq[1]))
		FAIL(1, 1, "posting");
	if (gw_tp_waitall(tp, rq, 2, TMO) || rq[0].result != DUPLEX_LEN ||
	    tp_mismatch(rbuf, DUPLEX_LEN, seed_of(peer, rank, 5, 0, DUPLEX_LEN)))
		FAIL(2, 3, "exchange: received %zd bytes", rq[0].result);
	/* Besides the provider's: our liveness socket to the peer (transport/
	 * live.c; the peer's to us waits in our listener's backlog, no fd). */
	got = established_tcp() - 1;
	if (got != want)
		FAIL(3, 3, "%d established TCP connections, want %d", got, want);
	if (tp_barrier(st, rank, size, "duplex-end", TMO))
		FAIL(4, 1, "final barrier");
out:
	tp_close(tp, st);
	free(sbuf);
	free(rbuf);
	return code;
}

/* Ranks that disagree on one_conn fail at start-up, both, with -EPROTO (the
 * peer's address has the other length), rather than hang. */
static int duplex_mixed_body(int rank, int size, const char *dir, void *arg)
{
	struct tp_env env = *(const struct tp_env *)arg;
	struct gw_store *st;
	struct gw_tp *tp;
	int err;

	env.one_conn = rank == 1;
	tp = tp_open(&env, rank, size, dir, &st, &err);
	if (tp) {
		tp_close(tp, st);
		return 11;
	}
	return err == -EPROTO ? 0 : 12;
}

static void test_duplex(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(1000) }, b = a;
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons(1000) }, b6 = a6;
	struct tp_env env = tcp_env;
	int codes[TP_MAX_RANKS];

	/* A connection per direction only between endpoints of one IP. */
	a.sin_addr.s_addr = htonl(0x7f000001);
	b.sin_addr.s_addr = htonl(0x7f000001);
	b.sin_port = htons(2000);
	CU_ASSERT_TRUE(gw_tp_same_ip(&a, &b, sizeof(a), FI_SOCKADDR_IN));
	b.sin_addr.s_addr = htonl(0x0a4d4b02);
	CU_ASSERT_FALSE(gw_tp_same_ip(&a, &b, sizeof(a), FI_SOCKADDR_IN));
	CU_ASSERT_FALSE(gw_tp_same_ip(&a, &a, sizeof(a) - 1, FI_SOCKADDR_IN));
	CU_ASSERT_FALSE(gw_tp_same_ip(&a, &a, sizeof(a), FI_ADDR_STR));
	a6.sin6_addr.s6_addr[15] = 1;
	b6.sin6_addr.s6_addr[15] = 1;
	b6.sin6_port = htons(2000);
	CU_ASSERT_TRUE(gw_tp_same_ip(&a6, &b6, sizeof(a6), FI_SOCKADDR_IN6));
	b6.sin6_addr.s6_addr[0] = 0xfd;
	CU_ASSERT_FALSE(gw_tp_same_ip(&a6, &b6, sizeof(a6), FI_SOCKADDR_IN6));

	CU_ASSERT_EQUAL_FATAL(tp_run(2, 30, duplex_body, &env, codes), 0);
	expect_codes("a connection per direction", codes, 2, NULL);
	env.one_conn = true;
	CU_ASSERT_EQUAL_FATAL(tp_run(2, 30, duplex_body, &env, codes), 0);
	expect_codes("one connection (one_conn)", codes, 2, NULL);
	env.timeout_ms = 3000;
	CU_ASSERT_EQUAL_FATAL(tp_run(2, 30, duplex_mixed_body, &env, codes), 0);
	expect_codes("one_conn on one rank only", codes, 2, NULL);
}

/* ---- all-to-all: many tags from many peers in flight at once ----------- */

#define A2A_SLOTS 3
#define A2A_SEQS 4
#define A2A_LEN 100

static int a2a_body(int rank, int size, const char *dir, void *arg)
{
	const struct tp_env *env = arg;
	size_t n = (size_t)size * A2A_SLOTS * A2A_SEQS;
	struct gw_tp_req *rr = calloc(n, sizeof(*rr)), *sr = calloc(n, sizeof(*sr));
	char(*rbuf)[A2A_LEN] = calloc(n, A2A_LEN), (*sbuf)[A2A_LEN] = calloc(n, A2A_LEN);
	struct gw_store *st;
	int code = 0, err, ret;
	struct gw_tp *tp = tp_open(env, rank, size, dir, &st, &err);

	if (!tp)
		return 2;
	if (!rr || !sr || !rbuf || !sbuf)
		FAIL(0, 9, "out of memory");
	/* Receives first, every peer (self included), all with the same set
	 * of tags: only the source address tells them apart. */
	for (size_t i = 0; i < n; i++) {
		int p = (int)(i / (A2A_SLOTS * A2A_SEQS));
		uint32_t slot = (uint32_t)(i / A2A_SEQS % A2A_SLOTS);
		uint32_t seq = (uint32_t)(i % A2A_SEQS) + 1000;

		ret = gw_tp_irecv(tp, p, slot, seq, rbuf[i], A2A_LEN, &rr[i]);
		if (ret)
			FAIL(1, 1, "irecv %zu: %s", i, gw_strerror(ret));
	}
	/* Sends in reverse order, so arrival order differs from posting. */
	for (size_t k = 0; k < n; k++) {
		size_t i = n - 1 - k;
		int p = (int)(i / (A2A_SLOTS * A2A_SEQS));
		uint32_t slot = (uint32_t)(i / A2A_SEQS % A2A_SLOTS);
		uint32_t seq = (uint32_t)(i % A2A_SEQS) + 1000;
		size_t len = A2A_LEN - (size_t)(i % 7);

		tp_pattern(sbuf[i], len, seed_of(rank, p, slot, seq, len));
		ret = gw_tp_isend(tp, p, slot, seq, sbuf[i], len, &sr[i]);
		if (ret)
			FAIL(2, 1, "isend %zu: %s", i, gw_strerror(ret));
	}
	ret = gw_tp_waitall(tp, sr, n, TMO);
	if (ret)
		FAIL(3, 2, "sends: %s", gw_strerror(ret));
	ret = gw_tp_waitall(tp, rr, n, TMO);
	if (ret)
		FAIL(4, 2, "receives: %s", gw_strerror(ret));
	for (size_t i = 0; i < n; i++) {
		int p = (int)(i / (A2A_SLOTS * A2A_SEQS));
		uint32_t slot = (uint32_t)(i / A2A_SEQS % A2A_SLOTS);
		uint32_t seq = (uint32_t)(i % A2A_SEQS) + 1000;
		/* The sender's length for its message i' to us. */
		size_t si = (size_t)rank * A2A_SLOTS * A2A_SEQS + i % (A2A_SLOTS * A2A_SEQS);
		size_t len = A2A_LEN - si % 7;

		if (rr[i].result != (ssize_t)len ||
		    tp_mismatch(rbuf[i], len, seed_of(p, rank, slot, seq, len)))
			FAIL(5, 3, "message from %d slot %u seq %u: %zd bytes, content %s", p, slot,
			     seq, rr[i].result, rr[i].result == (ssize_t)len ? "wrong" : "-");
	}
	if (tp_barrier(st, rank, size, "a2a-end", TMO))
		FAIL(6, 1, "final barrier");
out:
	tp_close(tp, st);
	free(rr);
	free(sr);
	free(rbuf);
	free(sbuf);
	return code;
}

static void test_alltoall(void)
{
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(4, 30, a2a_body, &tcp_env, codes), 0);
	expect_codes("all-to-all", codes, 4, NULL);
}

/* ---- timeout: a receive nobody answers ---------------------------------- */

#define SHORT_TMO 300

static int timeout_body(int rank, int size, const char *dir, void *arg)
{
	const struct tp_env *env = arg;
	struct gw_store *st;
	char buf[4096], sbuf[4096];
	int code = 0, err;
	struct gw_tp *tp = tp_open(env, rank, size, dir, &st, &err);

	if (!tp)
		return 2;
	if (rank == 1) {
		struct gw_tp_req req;
		int64_t t0 = ms(), dt;
		ssize_t r;

		if (gw_tp_irecv(tp, 0, 7, 0, buf, sizeof(buf), &req))
			FAIL(1, 1, "irecv");
		r = gw_tp_wait(tp, &req, SHORT_TMO);
		dt = ms() - t0;
		if (r != -ETIMEDOUT)
			FAIL(1, 2, "wait returned %zd, not -ETIMEDOUT", r);
		if (dt < SHORT_TMO - 5 || dt > SHORT_TMO + 700)
			FAIL(1, 3, "timed out after %lld ms (asked %d)", (long long)dt, SHORT_TMO);
		printf("receive timed out after %lld ms (timeout %d ms)\n", (long long)dt,
		       SHORT_TMO);
		/* A request already waited for is not waited for twice. */
		if (gw_tp_wait(tp, &req, 10) != -EINVAL)
			FAIL(1, 4, "second wait of a finished request");
	}
	if (tp_barrier(st, rank, size, "timed-out", TMO))
		FAIL(2, 1, "barrier");
	/* Still usable: the same tag now, then a ring step. The cancelled
	 * receive must not swallow the message. */
	if (rank == 0) {
		tp_pattern(sbuf, 100, 77);
		if (gw_tp_send(tp, 1, 7, 0, sbuf, 100) != 100)
			FAIL(3, 2, "send after the timeout");
	} else {
		ssize_t r = gw_tp_recv(tp, 0, 7, 0, buf, sizeof(buf));

		if (r != 100 || tp_mismatch(buf, 100, 77))
			FAIL(3, 3, "receive after the timeout: %zd", r);
	}
	if (ring_step(tp, rank, size, 8, sizeof(buf), sbuf, buf, TMO))
		FAIL(4, 2, "ring after the timeout");
	if (tp_barrier(st, rank, size, "end", TMO))
		FAIL(5, 1, "final barrier");
out:
	tp_close(tp, st);
	return code;
}

static void test_timeout(void)
{
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(2, 20, timeout_body, &tcp_env, codes), 0);
	expect_codes("timeout", codes, 2, NULL);
}

/* ---- sends past their deadline: withdrawn together ------------------------ */

#define LATE_SENDS 8
#define LATE_LEN (4u << 20)

/*
 * Rank 0 posts LATE_SENDS sends of 4 MiB that rank 1 does not receive yet
 * and waits for them all with a short timeout. The provider cannot take
 * back a send already on the socket, so at the deadline each is cancelled
 * and drained, at most 500 ms: all of them together, not one after another
 * (which took LATE_SENDS x 500 ms). Then rank 1 receives everything: the
 * abandoned sends still deliver every byte.
 */
static int late_body(int rank, int size, const char *dir, void *arg)
{
	const struct tp_env *env = arg;
	struct gw_tp_req req[LATE_SENDS];
	struct gw_store *st;
	uint8_t *buf = tu_alloc((size_t)LATE_SENDS * LATE_LEN);
	int code = 0, err, late = 0;
	struct gw_tp *tp = tp_open(env, rank, size, dir, &st, &err);

	if (!tp)
		return 2;
	/* Connected both ways first: rank 1 makes no progress calls below. */
	if (ring_step(tp, rank, size, 20, 4096, buf, buf + 4096, TMO))
		FAIL(1, 4, "first exchange");
	if (rank == 0) {
		int64_t t0, dt;

		for (int i = 0; i < LATE_SENDS; i++) {
			tp_pattern(buf + (size_t)i * LATE_LEN, LATE_LEN, 40 + (unsigned)i);
			if (gw_tp_isend(tp, 1, 21, (uint32_t)i, buf + (size_t)i * LATE_LEN,
					LATE_LEN, &req[i]))
				FAIL(1, 1, "isend %d", i);
		}
		t0 = ms();
		gw_tp_waitall(tp, req, LATE_SENDS, SHORT_TMO);
		dt = ms() - t0;
		for (int i = 0; i < LATE_SENDS; i++)
			late += req[i].result < 0;
		printf("%d of %d sends late, all withdrawn %lld ms after the wait began "
		       "(timeout %d ms) ",
		       late, LATE_SENDS, (long long)dt, SHORT_TMO);
		if (!late)
			printf("(the provider took them all: nothing to show) ");
		if (dt > SHORT_TMO + 500 + 700)
			FAIL(1, 2, "%d late sends took %lld ms to withdraw", late, (long long)dt);
	}
	if (tp_barrier(st, rank, size, "late", TMO))
		FAIL(2, 1, "barrier");
	if (rank == 1) {
		for (int i = 0; i < LATE_SENDS; i++) {
			uint8_t *b = buf + (size_t)i * LATE_LEN;
			ssize_t r = gw_tp_recv(tp, 0, 21, (uint32_t)i, b, LATE_LEN);

			if (r != (ssize_t)LATE_LEN || tp_mismatch(b, LATE_LEN, 40 + (unsigned)i))
				FAIL(3, 3, "late send %d: %zd", i, r);
		}
	}
	/* Rank 0 moves its abandoned sends until rank 1 has them all. */
	if (rank == 1 && gw_store_set(st, "late-got", "1", 1))
		FAIL(4, 1, "store set");
	for (int64_t end = ms() + TMO; rank == 0;) {
		char got;

		if (gw_store_get(st, "late-got", &got, 1, 1) == 1)
			break;
		if (ms() > end)
			FAIL(4, 2, "rank 1 did not get the late sends");
		gw_tp_progress(tp, 10);
	}
out:
	tp_close(tp, st);
	free(buf);
	return code;
}

static void test_late_sends(void)
{
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(2, 40, late_body, &tcp_env, codes), 0);
	expect_codes("late sends", codes, 2, NULL);
}

/* ---- a signal during a wait ---------------------------------------------- */

#define SIG_DELAY_MS 300
#define SIG_LEN 4096

static volatile sig_atomic_t sig_seen;

static void on_usr1(int s)
{
	(void)s;
	sig_seen++;
}

struct pester {
	pthread_t target;
	atomic_bool stop;
};

/* Signal the waiting thread every 2 ms until told to stop. */
static void *pester_main(void *arg)
{
	struct pester *p = arg;
	struct timespec nap = { 0, 2 * 1000000L };

	while (!atomic_load(&p->stop)) {
		pthread_kill(p->target, SIGUSR1);
		nanosleep(&nap, NULL);
	}
	return NULL;
}

/*
 * Rank 1 waits for a message that rank 0 sends SIG_DELAY_MS later, while a
 * thread of its own signals it every 2 ms through a handler without
 * SA_RESTART (a host's SIGCHLD or profiling handler, a debugger attaching):
 * fi_cq_sread() then returns EINTR, which must not end the wait.
 */
static int signal_body(int rank, int size, const char *dir, void *arg)
{
	const struct tp_env *env = arg;
	struct gw_store *st;
	char buf[SIG_LEN];
	int code = 0, err;
	struct gw_tp *tp = tp_open(env, rank, size, dir, &st, &err);

	if (!tp)
		return 2;
	if (rank == 0) {
		struct timespec nap = { 0, SIG_DELAY_MS * 1000000L };

		nanosleep(&nap, NULL);
		tp_pattern(buf, SIG_LEN, 91);
		if (gw_tp_send(tp, 1, 11, 0, buf, SIG_LEN) != SIG_LEN)
			FAIL(1, 2, "send");
	} else {
		struct sigaction sa;
		struct pester p = { pthread_self(), false };
		pthread_t th;
		ssize_t r;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGUSR1, &sa, NULL) || pthread_create(&th, NULL, pester_main, &p))
			FAIL(1, 9, "sigaction / pthread_create");
		memset(buf, 0xEE, SIG_LEN);
		r = gw_tp_recv(tp, 0, 11, 0, buf, SIG_LEN);
		atomic_store(&p.stop, true);
		pthread_join(th, NULL);
		printf("receive while signalled %d times: %zd\n", (int)sig_seen, r);
		if (r != SIG_LEN)
			FAIL(1, 2, "receive while signalled: %zd (%s)", r,
			     gw_strerror((int)(r < 0 ? r : 0)));
		if (tp_mismatch(buf, SIG_LEN, 91))
			FAIL(1, 3, "receive while signalled: wrong bytes");
		if (sig_seen < 10)
			FAIL(1, 4, "only %d signals arrived during the wait", (int)sig_seen);
	}
	if (tp_barrier(st, rank, size, "signalled", TMO))
		FAIL(2, 1, "barrier");
out:
	tp_close(tp, st);
	return code;
}

static void test_signal_wait(void)
{
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(2, 20, signal_body, &tcp_env, codes), 0);
	expect_codes("signal during a wait", codes, 2, NULL);
}

/* ---- receives posted in the other order ------------------------------------ */

#define HELD_LEN (64 << 10)
#define HELD_MS 500

/*
 * Rank 0 sends slot 21, then slot 22; rank 1 posts only slot 22's receive,
 * polls it for HELD_MS, then posts slot 21's. Both must arrive whole. What
 * happens meanwhile is the provider's: libfabric 1.17's net stops reading
 * the connection at the 64 KiB message nobody has a receive for, so slot
 * 22 waits for slot 21's receive (transport.h, "Ordering"); tcp;ofi_rxm
 * holds the early message and delivers slot 22 at once. Printed, not
 * asserted: it is a property of the provider, not of gradwire.
 */
static int held_body(int rank, int size, const char *dir, void *arg)
{
	const struct tp_env *env = arg;
	struct gw_store *st;
	int code = 0, err;
	char *buf = malloc(2 * (size_t)HELD_LEN);
	struct gw_tp_req req[2];
	struct gw_tp *tp = tp_open(env, rank, size, dir, &st, &err);

	if (!tp) {
		free(buf);
		return 2;
	}
	if (!buf)
		FAIL(0, 9, "out of memory");
	if (rank == 0) {
		for (int i = 0; i < 2; i++) {
			tp_pattern(buf + i * HELD_LEN, HELD_LEN, 210 + i);
			if (gw_tp_isend(tp, 1, 21 + i, 0, buf + i * HELD_LEN, HELD_LEN, &req[i]))
				FAIL(1, 1, "isend slot %d", 21 + i);
		}
		if (gw_tp_waitall(tp, req, 2, TMO))
			FAIL(1, 2, "sends");
	} else {
		int64_t t0;
		int early = 0;

		memset(buf, 0xEE, 2 * (size_t)HELD_LEN);
		if (gw_tp_irecv(tp, 0, 22, 0, buf + HELD_LEN, HELD_LEN, &req[1]))
			FAIL(1, 1, "irecv slot 22");
		for (t0 = ms(); !early && ms() - t0 < HELD_MS;) {
			early = gw_tp_test(tp, &req[1]);
			if (early < 0)
				FAIL(1, 2, "test slot 22: %s", gw_strerror(early));
			if (!early)
				gw_tp_progress(tp, 1);
		}
		printf("%s: slot 22 %s before slot 21's receive was posted\n", gw_tp_provider(tp),
		       early ? "arrived" : "did not arrive");
		if (gw_tp_irecv(tp, 0, 21, 0, buf, HELD_LEN, &req[0]))
			FAIL(2, 1, "irecv slot 21");
		if (gw_tp_waitall(tp, req, 2, TMO) || req[0].result != HELD_LEN ||
		    req[1].result != HELD_LEN)
			FAIL(2, 2, "receives: %zd %zd", req[0].result, req[1].result);
		for (int i = 0; i < 2; i++)
			if (tp_mismatch(buf + i * HELD_LEN, HELD_LEN, 210 + i))
				FAIL(2, 3, "slot %d: wrong bytes", 21 + i);
	}
	if (tp_barrier(st, rank, size, "held-end", TMO))
		FAIL(3, 1, "final barrier");
out:
	tp_close(tp, st);
	free(buf);
	return code;
}

static void test_held(void)
{
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(2, 20, held_body, &tcp_env, codes), 0);
	expect_codes("receives in the other order", codes, 2, NULL);
}

/* ---- a slow receiver: the sender runs far ahead --------------------------- */

#define SLOW_MSGS 24
#define SLOW_LEN (256 << 10)

/*
 * Rank 0 posts SLOW_MSGS sends of 256 KiB at once (6 MiB in flight) and
 * waits for them all; rank 1 posts one receive at a time and sleeps 20 ms
 * before each, so most messages arrive before their receive exists and
 * the provider must hold them (or stop reading the socket) without losing
 * or reordering a byte. With a provider that progresses by itself, that
 * happens while rank 1 sleeps.
 */
static int slow_body(int rank, int size, const char *dir, void *arg)
{
	const struct tp_env *env = arg;
	struct gw_store *st;
	int code = 0, err;
	char *buf = malloc((size_t)SLOW_MSGS * SLOW_LEN);
	struct gw_tp_req req[SLOW_MSGS];
	struct gw_tp *tp = tp_open(env, rank, size, dir, &st, &err);

	if (!tp) {
		free(buf);
		return 2;
	}
	if (!buf)
		FAIL(0, 9, "out of memory");
	if (rank == 0) {
		for (int i = 0; i < SLOW_MSGS; i++) {
			char *p = buf + (size_t)i * SLOW_LEN;

			tp_pattern(p, SLOW_LEN, seed_of(0, 1, 9, (uint32_t)i, SLOW_LEN));
			if (gw_tp_isend(tp, 1, 9, (uint32_t)i, p, SLOW_LEN, &req[i]))
				FAIL(1, 1, "isend %d", i);
		}
		if (gw_tp_waitall(tp, req, SLOW_MSGS, TMO))
			FAIL(1, 2, "sends to the slow receiver");
	} else {
		struct timespec nap = { 0, 20 * 1000000L };

		for (int i = 0; i < SLOW_MSGS; i++) {
			ssize_t r;

			nanosleep(&nap, NULL);
			memset(buf, 0xEE, SLOW_LEN);
			r = gw_tp_recv(tp, 0, 9, (uint32_t)i, buf, SLOW_LEN);
			if (r != SLOW_LEN)
				FAIL(2, 2, "receive %d: %zd", i, r);
			if (tp_mismatch(buf, SLOW_LEN, seed_of(0, 1, 9, (uint32_t)i, SLOW_LEN)))
				FAIL(2, 3, "receive %d: wrong bytes", i);
		}
	}
	if (tp_barrier(st, rank, size, "slow-end", TMO))
		FAIL(3, 1, "final barrier");
out:
	tp_close(tp, st);
	free(buf);
	return code;
}

static void test_slow_receiver(void)
{
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(2, 30, slow_body, &tcp_env, codes), 0);
	expect_codes("slow receiver", codes, 2, NULL);
}

/* ---- a sender that leaves at once ------------------------------------------ */

/*
 * Rank 0 sends a small message (seq 0), then 1 MiB (seq 1), and destroys its
 * context as soon as both sends complete. Rank 1 receives seq 1 first, so
 * the small one arrives before its receive exists and the provider holds
 * it; rank 1 posts that receive only 300 ms later. It must still arrive: a
 * send that completed is never lost because its sender left. (libfabric
 * 1.17's net provider drops a held message when its connection closes;
 * gw_tp_destroy() lingers until its peers are leaving too.)
 */
static int leave_body(int rank, int size, const char *dir, void *arg)
{
	const struct tp_env *env = arg;
	struct gw_store *st;
	int code = 0, err;
	size_t lens[2] = { 100, 1 << 20 };
	char *buf = malloc(lens[1]);
	struct gw_tp *tp = tp_open(env, rank, size, dir, &st, &err);

	if (!tp) {
		free(buf);
		return 2;
	}
	if (!buf)
		FAIL(0, 9, "out of memory");
	for (int k = 0; k < 2; k++) {
		int i = rank == 0 ? k : 1 - k; /* rank 1 takes the later one first */
		uint64_t seed = seed_of(0, 1, 11, (uint32_t)i, lens[i]);

		if (rank == 0) {
			tp_pattern(buf, lens[i], seed);
			if (gw_tp_send(tp, 1, 11, (uint32_t)i, buf, lens[i]) != (ssize_t)lens[i])
				FAIL(1, 2, "send %d", i);
		} else {
			struct timespec nap = { 0, 300 * 1000000L };
			ssize_t r;

			if (k == 1)
				nanosleep(&nap, NULL);
			memset(buf, 0xEE, lens[i]);
			r = gw_tp_recv(tp, 0, 11, (uint32_t)i, buf, lens[i]);
			if (r != (ssize_t)lens[i] || tp_mismatch(buf, lens[i], seed))
				FAIL(2, 3, "message %d after its sender left: %zd", i, r);
		}
	}
out:
	tp_close(tp, st);
	free(buf);
	return code;
}

static void test_sender_leaves(void)
{
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(2, 30, leave_body, &tcp_env, codes), 0);
	expect_codes("sender leaves", codes, 2, NULL);
}

/* ---- truncation: a message larger than the receive --------------------- */

static int trunc_body(int rank, int size, const char *dir, void *arg)
{
	const struct tp_env *env = arg;
	static const size_t slen[3] = { 4096, 65536, 1 << 20 }, cap[3] = { 1024, 4096, 4096 };
	struct gw_store *st;
	char *sbuf = malloc(1 << 20), *rbuf = malloc(1 << 20);
	int code = 0, err;
	struct gw_tp *tp = tp_open(env, rank, size, dir, &st, &err);

	if (!tp)
		return 2;
	if (!sbuf || !rbuf)
		FAIL(0, 9, "out of memory");
	/* shm 1.17 spins forever inside fi_cq_read() on a truncated CMA
	 * (>= 4 KiB past the eager size) receive: test only its eager case. */
	int cases = env->iface ? 3 : 1;

	for (int i = 0; i < cases; i++) {
		if (rank == 0) {
			ssize_t r;

			tp_pattern(sbuf, slen[i], (uint64_t)i);
			r = gw_tp_send(tp, 1, 20 + (uint32_t)i, 0, sbuf, slen[i]);
			/* The sender may or may not learn of it; it must not hang. */
			printf("send of %zu bytes into a %zu-byte receive: %zd (%s)\n", slen[i],
			       cap[i], r, r < 0 ? gw_strerror((int)r) : "ok");
		} else {
			ssize_t r;

			memset(rbuf, 0, 1 << 20);
			r = gw_tp_recv(tp, 0, 20 + (uint32_t)i, 0, rbuf, cap[i]);
			printf("receive of %zu bytes into %zu: %zd (%s)\n", slen[i], cap[i], r,
			       gw_strerror((int)r));
			/* Eager: FI_ETRUNC. Larger: ofi_rxm 1.17 never
			 * completes the receive, so the deadline must. */
			if (r != -EMSGSIZE && (i == 0 || r != -ETIMEDOUT))
				FAIL(1 + i, 2, "%zu bytes into %zu: got %zd, want an error",
				     slen[i], cap[i], r);
			for (size_t k = cap[i]; k < (1 << 20); k++)
				if (rbuf[k])
					FAIL(1 + i, 3, "wrote past the cap at %zu", k);
		}
		if (tp_barrier(st, rank, size, i == 0 ? "t0" : i == 1 ? "t1" : "t2", TMO))
			FAIL(3, 1, "barrier");
	}
	/* What is promised: an error, nothing past the cap, no hang. Whether
	 * the connection survives is the provider's business: ofi_rxm 1.17
	 * sometimes tears it down after a truncation, even an eager one (seen:
	 * -ENOTCONN on the next send). The frame layer never posts a receive
	 * below a frame's bound, so it never meets this. */
	printf("rank %d: after the truncations the connection %s\n", rank,
	       ring_step(tp, rank, size, 30, 4096, sbuf, rbuf, 1000)
		       ? "is broken (provider behaviour)"
		       : "still works");
	if (tp_barrier(st, rank, size, "end", TMO))
		FAIL(5, 1, "final barrier");
out:
	tp_close(tp, st);
	free(sbuf);
	free(rbuf);
	return code;
}

static void test_truncation(void)
{
	int codes[TP_MAX_RANKS];
	struct tp_env env = tcp_env;

	env.timeout_ms = 1500;
	CU_ASSERT_EQUAL_FATAL(tp_run(2, 20, trunc_body, &env, codes), 0);
	expect_codes("truncation", codes, 2, NULL);
	if (shm_ok) {
		env = shm_env;
		env.timeout_ms = 1500;
		CU_ASSERT_EQUAL_FATAL(tp_run(2, 20, trunc_body, &env, codes), 0);
		expect_codes("truncation (shm)", codes, 2, NULL);
	}
}

/* ---- a peer killed mid-transfer ------------------------------------------ */

#define KILL_TMO 2000
#define BIG (64u << 20)

static int kill_body(int rank, int size, const char *dir, void *arg)
{
	const struct tp_env *env = arg;
	struct gw_store *st;
	char *sbuf = malloc(BIG), *rbuf = malloc(BIG);
	struct gw_tp_req req[2];
	int code = 0, err, ret, ret2;
	int64_t t0, dt;
	struct gw_tp *tp = tp_open(env, rank, size, dir, &st, &err);

	if (!tp)
		return 2;
	if (!sbuf || !rbuf)
		FAIL(0, 9, "out of memory");
	memset(sbuf, 1, BIG);
	if (tp_barrier(st, rank, size, "up", TMO))
		FAIL(1, 1, "barrier");
	if (rank == 2) {
		/* Start sending to rank 1, never receive rank 0's, then die. */
		if (gw_tp_isend(tp, 1, 1, 0, sbuf, BIG, &req[0]))
			FAIL(2, 1, "isend");
		gw_tp_progress(tp, 5);
		raise(SIGKILL);
	}
	/* 0: send 64 MiB to 2 (never received) and wait for 2's reply.
	 * 1: receive 2's 64 MiB and a reply that never comes. */
	/* A post may fail too (ofi_rxm answers FI_EAGAIN until the deadline
	 * once it knows the connection is gone): that is the error then. */
	t0 = ms();
	if (rank == 0)
		ret = gw_tp_isend(tp, 2, 2, 0, sbuf, BIG, &req[0]);
	else
		ret = gw_tp_irecv(tp, 2, 1, 0, rbuf, BIG, &req[0]);
	if (ret)
		req[0].result = ret;
	/* So may the reply's, once this rank saw the connection close. */
	ret2 = gw_tp_irecv(tp, 2, 3, 0, rbuf + (rank == 1 ? 0 : 4096), 4096, &req[1]);
	if (ret2)
		req[1].result = ret2;
	if (!ret && !ret2)
		ret = gw_tp_waitall(tp, req, 2, KILL_TMO);
	else if (!ret) /* only the data is pending */
		ret = gw_tp_waitall(tp, req, 1, KILL_TMO);
	else if (!ret2) /* only the reply is pending */
		gw_tp_waitall(tp, &req[1], 1, KILL_TMO);
	dt = ms() - t0;
	printf("rank %d with a dead peer: %s %zd, reply %zd, after %lld ms\n", rank,
	       rank == 0 ? "send" : "receive", req[0].result, req[1].result, (long long)dt);
	if (ret >= 0 || req[1].result >= 0)
		FAIL(4, 2, "no error from a dead peer");
	if (rank == 0 && req[0].result >= 0)
		FAIL(4, 2, "64 MiB sent to a dead peer");
	if (dt > env->timeout_ms + KILL_TMO + 1500)
		FAIL(4, 3, "took %lld ms", (long long)dt);
	/* The survivors still talk to each other, once both are done with the
	 * dead one (ranks 0 and 1 meet in the store; rank 2 never comes). */
	if (tp_barrier(st, rank, 2, "survivors", 30000))
		FAIL(5, 1, "survivor barrier");
	if (rank == 0) {
		tp_pattern(sbuf, 4096, 5);
		if (gw_tp_send(tp, 1, 9, 0, sbuf, 4096) != 4096)
			FAIL(5, 2, "survivor send");
	} else {
		char buf[4096];

		if (gw_tp_recv(tp, 0, 9, 0, buf, sizeof(buf)) != 4096 || tp_mismatch(buf, 4096, 5))
			FAIL(5, 3, "survivor receive");
	}
out:
	/* Destroy before freeing: an uncancellable send may still hold sbuf. */
	tp_close(tp, st);
	free(sbuf);
	free(rbuf);
	return code;
}

static void test_killed_peer(void)
{
	static const int want[3] = { 0, 0, 128 + SIGKILL };
	int codes[TP_MAX_RANKS];
	struct tp_env env = tcp_env;

	env.timeout_ms = 5000;
	CU_ASSERT_EQUAL_FATAL(tp_run(3, 20, kill_body, &env, codes), 0);
	expect_codes("killed peer", codes, 3, want);
}

/* ---- store ------------------------------------------------------------------ */

static int store_body(int rank, int size, const char *dir, void *arg)
{
	struct gw_store *st;
	char buf[64];
	int code = 0;
	ssize_t r;
	int64_t t0;

	(void)size;
	(void)arg;
	if (gw_store_file_create(dir, &st))
		return 2;
	if (rank == 0) {
		/* Keys that would collide if merely sanitised. */
		if (gw_store_set(st, "a/b", "slash", 5) || gw_store_set(st, "a_b", "under", 5) ||
		    gw_store_set(st, "a%2Fb", "percent", 7) || gw_store_set(st, "../x", "dots", 4))
			FAIL(1, 1, "set");
		if (gw_store_set(st, "a/b", "SLASH!", 6))
			FAIL(1, 2, "replace");
		if (gw_store_set(st, "ready", "", 0))
			FAIL(1, 2, "ready");
	}
	/* An empty value is a value; rank 1 reads after "ready". */
	if (gw_store_get(st, "ready", buf, sizeof(buf), 5000) != 0)
		FAIL(2, 1, "ready");
	r = gw_store_get(st, "a/b", buf, sizeof(buf), 5000);
	if (r != 6 || memcmp(buf, "SLASH!", 6))
		FAIL(2, 3, "a/b: %zd", r);
	r = gw_store_get(st, "a_b", buf, sizeof(buf), 5000);
	if (r != 5 || memcmp(buf, "under", 5))
		FAIL(2, 3, "a_b: %zd", r);
	r = gw_store_get(st, "a%2Fb", buf, sizeof(buf), 5000);
	if (r != 7 || memcmp(buf, "percent", 7))
		FAIL(2, 3, "a%%2Fb: %zd", r);
	r = gw_store_get(st, "../x", buf, sizeof(buf), 5000);
	if (r != 4)
		FAIL(2, 3, "../x: %zd", r);
	if (gw_store_get(st, "a/b", buf, 3, 100) != -ENOSPC)
		FAIL(3, 3, "a value larger than cap");
	t0 = ms();
	r = gw_store_get(st, "never", buf, sizeof(buf), 150);
	if (r != -ETIMEDOUT || ms() - t0 < 140 || ms() - t0 > 600)
		FAIL(4, 3, "missing key: %zd after %lld ms", r, (long long)(ms() - t0));
out:
	gw_store_destroy(st);
	return code;
}

static void test_store(void)
{
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(2, 10, store_body, NULL, codes), 0);
	expect_codes("store", codes, 2, NULL);
	CU_ASSERT_EQUAL(gw_store_file_create("/nonexistent/dir", &(struct gw_store *){ NULL }),
			-ENOENT);
	gw_store_destroy(NULL);
	gw_tp_destroy(NULL);
}

/* ---- shm ------------------------------------------------------------------- */

static void test_shm(void)
{
	if (!shm_ok) {
		printf("\n  shm skipped: %s ", shm_why);
		return;
	}
	run_ring(&shm_env, 2, false, "ring shm 2 ranks");
}

/* ---- bad arguments -------------------------------------------------------- */

static int args_body(int rank, int size, const char *dir, void *arg)
{
	const struct tp_env *env = arg;
	struct gw_store *st;
	struct gw_tp_req req;
	char b[8];
	int code = 0, err;
	struct gw_tp *tp = tp_open(env, rank, size, dir, &st, &err);

	if (!tp)
		return 2;
	if (gw_tp_isend(tp, 1, 0, 0, b, 8, &req) != -EINVAL ||
	    gw_tp_isend(tp, -1, 0, 0, b, 8, &req) != -EINVAL ||
	    gw_tp_irecv(tp, 0, GW_TP_SLOT_MAX + 1, 0, b, 8, &req) != -EINVAL ||
	    gw_tp_isend_kind(tp, 0, 0, 0, 0, b, 8, &req) != -EINVAL ||
	    gw_tp_irecv(tp, 0, 0, 0, NULL, 8, &req) != -EINVAL)
		FAIL(1, 1, "bad arguments accepted");
	if (gw_tp_wait(tp, &req, 10) != -EINVAL)
		FAIL(1, 2, "waiting for a request never posted");
	if (gw_tp_tag(GW_TP_KIND_CTRL, 5, 9) != ((UINT64_C(2) << 60) | (UINT64_C(5) << 32) | 9))
		FAIL(2, 1, "tag layout");
	/* A rank sends to itself; a zero-length message works. */
	if (gw_tp_isend(tp, 0, GW_TP_SLOT_MAX, UINT32_MAX, b, 0, &req) ||
	    gw_tp_recv(tp, 0, GW_TP_SLOT_MAX, UINT32_MAX, b, 8) != 0 ||
	    gw_tp_wait(tp, &req, TMO) != 0)
		FAIL(3, 2, "self send of 0 bytes");
out:
	tp_close(tp, st);
	/* Every fi_info the context took is back (LeakSanitizer skips them). */
	if (!code && gw_fi_info_held() != 0) {
		fprintf(stderr, "rank %d: %d fi_info lists not freed\n", rank, gw_fi_info_held());
		code = 41;
	}
	return code;
}

/* The interface rule (iface.c) on made-up lists, as fi_getinfo() orders
 * them: loopback and bridges only when peers are all on this host, or when
 * nothing else is there; a named one binds. */
static void test_iface_pick(void)
{
	static const char *const host[] = { "lo", "docker0", "br-5f2e", "eth0", "ib0" };
	static const char *const bridges[] = { "lo", "virbr0", "veth12ab", "docker0" };
	static const char *const only_lo[] = { "lo" };
	static const char *const odd[] = { "lo:1", "flannel.1", "cni0", "loop0", NULL };
	const char *why;

	CU_ASSERT_EQUAL(gw_tp_iface_kind("lo"), GW_IFACE_LOOPBACK);
	CU_ASSERT_EQUAL(gw_tp_iface_kind("lo:1"), GW_IFACE_LOOPBACK);
	CU_ASSERT_EQUAL(gw_tp_iface_kind("loop0"), GW_IFACE_PLAIN);
	CU_ASSERT_EQUAL(gw_tp_iface_kind("eth0"), GW_IFACE_PLAIN);
	CU_ASSERT_EQUAL(gw_tp_iface_kind("mlx5_0"), GW_IFACE_PLAIN);
	for (size_t i = 0; i < 5; i++)
		CU_ASSERT_EQUAL(gw_tp_iface_kind(((const char *[]){ "docker0", "br-5f2e", "virbr0",
								    "veth12ab", "cni0" })[i]),
				GW_IFACE_VIRTUAL);

	/* Peers on other hosts: the first plain one. */
	CU_ASSERT_EQUAL(gw_tp_iface_pick(host, 5, NULL, true, &why), 3);
	CU_ASSERT_PTR_NOT_NULL(strstr(why, "neither loopback nor a bridge"));
	/* All on this host: the provider's first, loopback too. */
	CU_ASSERT_EQUAL(gw_tp_iface_pick(host, 5, NULL, false, &why), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(why, "every peer is on this host"));
	/* Named: that one, even loopback or a bridge with remote peers. */
	CU_ASSERT_EQUAL(gw_tp_iface_pick(host, 5, "lo", true, &why), 0);
	CU_ASSERT_STRING_EQUAL(why, "named by GRADWIRE_IFACE");
	CU_ASSERT_EQUAL(gw_tp_iface_pick(host, 5, "docker0", true, &why), 1);
	CU_ASSERT_EQUAL(gw_tp_iface_pick(host, 5, "eth1", true, &why), -1);
	CU_ASSERT_EQUAL(gw_tp_iface_pick(host, 5, "eth", true, &why), -1); /* exact only */
	/* Nothing plain: the first bridge, then loopback, saying so. */
	CU_ASSERT_EQUAL(gw_tp_iface_pick(bridges, 4, NULL, true, &why), 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(why, "a bridge or virtual interface"));
	CU_ASSERT_EQUAL(gw_tp_iface_pick(only_lo, 1, NULL, true, &why), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(why, "reaches only this host"));
	/* Aliases of lo are loopback; "loop0" and a nameless domain are not. */
	CU_ASSERT_EQUAL(gw_tp_iface_pick(odd, 5, NULL, true, &why), 3);
	CU_ASSERT_EQUAL(gw_tp_iface_pick(odd, 3, NULL, true, &why), 1);
	CU_ASSERT_EQUAL(gw_tp_iface_pick(host, 0, NULL, true, &why), -1);
}

static void test_args(void)
{
	int codes[TP_MAX_RANKS];

	CU_ASSERT_EQUAL_FATAL(tp_run(1, 10, args_body, &tcp_env, codes), 0);
	expect_codes("arguments", codes, 1, NULL);
	/* An interface that does not exist is an error, not a fall-back. */
	struct tp_env bad = tcp_env;

	bad.iface = "gw-no-such-if0";
	bad.log_level = -1;
	CU_ASSERT_EQUAL_FATAL(tp_run(1, 10, args_body, &bad, codes), 0);
	CU_ASSERT_EQUAL(codes[0], 2);
}

/* ---- probes (in children: the parent never initialises libfabric) ------ */

static int probe_body(int rank, int size, const char *dir, void *arg)
{
	const struct tp_env *env = arg;
	struct gw_store *st;
	char b[16] = "probe", c[16];
	int err;
	struct gw_tp *tp = tp_open(env, rank, size, dir, &st, &err);

	if (!tp)
		return err == -ENODATA ? TU_SKIP : 3;
	if (gw_tp_isend(tp, 0, 1, 1, b, sizeof(b), &(struct gw_tp_req){ 0 }) ||
	    gw_tp_recv(tp, 0, 1, 1, c, sizeof(c)) != sizeof(b))
		err = 4;
	tp_close(tp, st);
	return err;
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "file store: atomic, injective keys, timeouts", test_store },
		{ "arguments, tag layout, self send, no interface fall-back", test_args },
		{ "interface choice: loopback and bridges last for other hosts", test_iface_pick },
		{ "ring of 2 ranks, 1 B to 64 MiB", test_ring2 },
		{ "ring of 4 ranks, 1 B to 64 MiB", test_ring4 },
		{ "one IP: a connection per direction, or one with one_conn", test_duplex },
		{ "all-to-all, 48 tags in flight per rank", test_alltoall },
		{ "receive timeout, then still usable", test_timeout },
		{ "a signal during a wait does not end it", test_signal_wait },
		{ "sends past their deadline: withdrawn together, delivered", test_late_sends },
		{ "slow receiver: 24 sends ahead of their receives", test_slow_receiver },
		{ "receives posted in the other order: both arrive", test_held },
		{ "a sender that leaves at once loses nothing", test_sender_leaves },
		{ "truncation is an error", test_truncation },
		{ "killed peer: errors, no hang", test_killed_peer },
		{ "force_mr: registration path", test_force_mr },
		{ "shm provider", test_shm },
		CU_TEST_INFO_NULL,
	};
	struct tp_env quiet;
	int codes[1];

	tp_pin_loopback();
	tcp_env.provider = TCP;
	quiet = tcp_env;
	quiet.log_level = GW_LOG_INFO;
	if (tp_run(1, 20, probe_body, &quiet, codes) || codes[0] != 0) {
		char why[128];

		snprintf(why, sizeof(why), "libfabric %s on lo unusable here (probe exit %d)", TCP,
			 codes[0]);
		tu_skip(why);
	}
	quiet = shm_env;
	quiet.log_level = GW_LOG_INFO;
	if (tp_run(1, 20, probe_body, &quiet, codes) == 0 && codes[0] == 0)
		shm_ok = true;
	else
		snprintf(shm_why, sizeof(shm_why), "fi_getinfo/open of shm failed (probe exit %d)",
			 codes[0]);
	return tu_run("transport", tests);
}
