/* SPDX-License-Identifier: MIT */
/*
 * netem_tun.c - a lossy, slow, reordering link between two network
 * namespaces, in user space, for kernels without sch_netem (this project's
 * VMs have none, and no tc action that drops at random either).
 *
 *   netem_tun NS_A DEV_A NS_B DEV_B LOSS% DELAY_MS JITTER_MS REORDER% SEED LIFE_S
 *
 * It creates a TUN device DEV_A inside namespace NS_A and DEV_B inside NS_B
 * (the caller gives them addresses and brings them up), prints "ready" on
 * stdout, then forwards every IP packet from one to the other:
 *  - LOSS% of the packets are dropped;
 *  - REORDER% go out at once, the rest after DELAY_MS +- JITTER_MS (uniform),
 *    which reorders them too: what netem's "delay D J loss L reorder R"
 *    does;
 *  - at most QMAX packets wait; a packet beyond that is dropped (a queue's
 *    tail drop).
 * The random draws come from SEED (xorshift), so a run can be repeated.
 * It exits when stdin closes (the test that started it is done or died),
 * on SIGTERM, or after LIFE_S seconds, whichever is first; the devices
 * vanish with it. Leaving (but on SIGTERM) it prints
 * "forwarded N dropped D reordered R unsent U" so a test can see the faults
 * happened (U: packets for a device not up yet, apart from the losses).
 * Exit: 0, or 2 for bad arguments, 3 when a namespace or /dev/net/tun
 * cannot be had (the caller skips and says why).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define QMAX 4096
#define PKT_MAX 2048 /* TUN MTU 1500 */

struct pkt {
	int64_t due_us;
	int to; /* index of the fd it goes out on */
	uint16_t len;
	unsigned char data[PKT_MAX];
};

static struct pkt *q[QMAX]; /* a binary min-heap on due_us */
static int qn;

static int64_t now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static uint64_t rng;
static unsigned long long forwarded, dropped, reordered, unsent;

static double draw(void) /* uniform in [0, 1) */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / (double)(UINT64_C(1) << 53);
}

static void push(struct pkt *p)
{
	int i = qn++;

	while (i > 0 && q[(i - 1) / 2]->due_us > p->due_us) {
		q[i] = q[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	q[i] = p;
}

static struct pkt *pop(void)
{
	struct pkt *top = q[0], *last = q[--qn];
	int i = 0;

	for (;;) {
		int c = 2 * i + 1;

		if (c >= qn)
			break;
		if (c + 1 < qn && q[c + 1]->due_us < q[c]->due_us)
			c++;
		if (q[c]->due_us >= last->due_us)
			break;
		q[i] = q[c];
		i = c;
	}
	if (qn)
		q[i] = last;
	return top;
}

/* A TUN device named dev inside namespace ns; its fd, or -1. */
static int tun_in(const char *ns, const char *dev)
{
	char path[128];
	struct ifreq ifr;
	int nsfd, fd;

	snprintf(path, sizeof(path), "/run/netns/%s", ns);
	nsfd = open(path, O_RDONLY);
	if (nsfd < 0 || setns(nsfd, CLONE_NEWNET)) {
		fprintf(stderr, "netem_tun: namespace %s: %s\n", ns, strerror(errno));
		return -1;
	}
	close(nsfd);
	fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK);
	if (fd < 0) {
		fprintf(stderr, "netem_tun: /dev/net/tun: %s\n", strerror(errno));
		return -1;
	}
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
	snprintf(ifr.ifr_name, IFNAMSIZ, "%s", dev);
	if (ioctl(fd, TUNSETIFF, &ifr)) {
		fprintf(stderr, "netem_tun: TUNSETIFF %s in %s: %s\n", dev, ns, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

struct link {
	int fd[2];
	double loss, reorder;
	int64_t delay_us, jitter_us, end_us;
};

/* Read what waits on fd[k]; drop, or queue it for the other side. */
static int take(const struct link *l, int k, struct pkt **spare)
{
	for (int burst = 0; burst < 64; burst++) {
		struct pkt *p = *spare ? *spare : malloc(sizeof(*p));
		ssize_t n;

		if (!p)
			return -1;
		*spare = p;
		n = read(l->fd[k], p->data, sizeof(p->data));
		if (n <= 0)
			return 0;
		if (draw() < l->loss || qn == QMAX) {
			dropped++; /* p stays the spare */
			continue;
		}
		p->len = (uint16_t)n;
		p->to = !k;
		p->due_us = now_us();
		if (draw() >= l->reorder)
			p->due_us += l->delay_us + (int64_t)((2 * draw() - 1) * l->jitter_us);
		else
			reordered++;
		*spare = NULL;
		push(p);
	}
	return 0;
}

/* Forward until stdin closes, the lifetime ends, or a device goes. */
static void run(const struct link *l, struct pkt **spare)
{
	while (now_us() < l->end_us) {
		struct pollfd pf[3] = {
			{ .fd = l->fd[0], .events = POLLIN },
			{ .fd = l->fd[1], .events = POLLIN },
			{ .fd = 0, .events = POLLIN },
		};
		int64_t t = now_us();
		int wait_ms = 100;

		while (qn && q[0]->due_us <= t) {
			struct pkt *p = pop();

			/* A full device queue drops it, as a wire would, and so
			 * does a device not up yet (EIO): the caller brings the
			 * two up one after the other, and the first may speak
			 * (IPv6) before the second is up, later on a busy host. */
			if (write(l->fd[p->to], p->data, p->len) < 0) {
				if (errno != EAGAIN && errno != EIO) {
					free(p);
					return; /* the device is gone */
				}
				unsent++; /* not a loss the test counts */
			} else {
				forwarded++;
			}
			free(*spare);
			*spare = p;
		}
		if (qn)
			wait_ms = (int)((q[0]->due_us - t + 999) / 1000);
		if (poll(pf, 3, wait_ms) < 0 && errno != EINTR)
			return;
		if (pf[2].revents)
			return; /* stdin closed or readable: the caller is done */
		for (int k = 0; k < 2; k++)
			if ((pf[k].revents & POLLIN) && take(l, k, spare))
				return;
	}
}

/* run(), then free every packet still held. */
static void forward(const struct link *l)
{
	struct pkt *spare = NULL;

	run(l, &spare);
	free(spare);
	while (qn)
		free(pop());
}

int main(int argc, char **argv)
{
	struct link l;

	if (argc != 11 || atoi(argv[10]) <= 0) {
		fprintf(stderr, "usage: netem_tun NS_A DEV_A NS_B DEV_B LOSS%% DELAY_MS "
				"JITTER_MS REORDER%% SEED LIFE_S\n");
		return 2;
	}
	l.loss = atof(argv[5]) / 100;
	l.delay_us = (int64_t)(atof(argv[6]) * 1000);
	l.jitter_us = (int64_t)(atof(argv[7]) * 1000);
	l.reorder = atof(argv[8]) / 100;
	rng = strtoull(argv[9], NULL, 0) | 1;
	l.end_us = now_us() + (int64_t)atoi(argv[10]) * 1000000;
	if (l.jitter_us > l.delay_us)
		return 2;
	l.fd[0] = tun_in(argv[1], argv[2]);
	l.fd[1] = l.fd[0] < 0 ? -1 : tun_in(argv[3], argv[4]);
	if (l.fd[1] < 0)
		return 3;
	printf("ready\n");
	fflush(stdout);
	forward(&l);
	printf("forwarded %llu dropped %llu reordered %llu unsent %llu\n", forwarded, dropped,
	       reordered, unsent);
	fflush(stdout); /* before any exit-time check (LeakSanitizer) can end us */
	return 0;
}
