/* SPDX-License-Identifier: MIT */
/*
 * queue.c - a FIFO of allreduces and the one thread that runs them.
 *
 * Why. A DDP communication hook must return at once, with a future, so that
 * backward keeps computing the next buckets while earlier ones travel. The
 * collectives are blocking and must not overlap on one context, so the
 * hook's buckets go into this queue and one thread of gradwire's own runs
 * them in submission order: the order DDP launches them, the same on every
 * rank, which is what keeps the ranks' calls (and per-peer residuals) in
 * step.
 *
 * State. ops[] is a ring of GW_QUEUE_MAX entries; ticket t lives in
 * ops[(t - 1) % GW_QUEUE_MAX]. Three counters, under mu, only grow:
 * issued (the last ticket handed out) >= started >= done. Tickets in
 * (done, issued] are waiting or running; (issued - GW_QUEUE_MAX, done] keep
 * their results. Once stop is set (gw_queue_cancel), the tickets after
 * `started` have ended with -ECANCELED and nothing new starts. The worker
 * sleeps on `work` when started == issued; waiters sleep on `finished`. The
 * worker never holds mu while it runs an allreduce.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include "queue.h"

struct op {
	uint32_t id;
	float *buf;
	uint64_t n;
	enum gw_coll_op op;
	unsigned flags;
	int rc;
};

struct gw_queue {
	struct gw_coll *coll;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t work;	 /* a ticket was issued, or stop */
	pthread_cond_t finished; /* done grew */
	uint64_t issued, started, done;
	bool stop;
	struct op ops[GW_QUEUE_MAX];
};

static struct op *op_of(struct gw_queue *q, uint64_t t)
{
	return &q->ops[(t - 1) % GW_QUEUE_MAX];
}

/* Ticket t has its result: it ran, or it was cancelled before it started. */
static bool over(const struct gw_queue *q, uint64_t t)
{
	return t <= q->done || (q->stop && t > q->started);
}

/* Under mu: every ticket not started ends now with -ECANCELED. */
static void cancel_waiting(struct gw_queue *q)
{
	for (uint64_t t = q->started + 1; t <= q->issued; t++)
		op_of(q, t)->rc = -ECANCELED;
	pthread_cond_broadcast(&q->finished);
}

static void *worker(void *arg)
{
	struct gw_queue *q = arg;

	pthread_mutex_lock(&q->mu);
	for (;;) {
		struct op *o;
		int rc;

		while (!q->stop && q->started == q->issued)
			pthread_cond_wait(&q->work, &q->mu);
		if (q->stop)
			break; /* gw_queue_cancel() ended the rest */
		o = op_of(q, ++q->started);
		pthread_mutex_unlock(&q->mu);
		rc = gw_coll_allreduce_id(q->coll, o->id, o->buf, o->n, o->op, o->flags);
		pthread_mutex_lock(&q->mu);
		o->rc = rc;
		q->done++;
		pthread_cond_broadcast(&q->finished);
	}
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

int gw_queue_create(struct gw_coll *c, struct gw_queue **out)
{
	struct gw_queue *q;
	pthread_condattr_t ca;
	int rc;

	if (!c || !out)
		return -EINVAL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->coll = c;
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->work, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&q->finished, &ca);
	pthread_condattr_destroy(&ca);
	rc = -pthread_create(&q->thread, NULL, worker, q);
	if (rc) {
		pthread_cond_destroy(&q->finished);
		pthread_cond_destroy(&q->work);
		pthread_mutex_destroy(&q->mu);
		free(q);
		return rc;
	}
	*out = q;
	return 0;
}

int gw_queue_submit(struct gw_queue *q, uint32_t id, float *buf, uint64_t n, enum gw_coll_op op,
		    unsigned flags, uint64_t *ticket)
{
	int rc = 0;

	if (!q || !ticket || (!buf && n))
		return -EINVAL;
	pthread_mutex_lock(&q->mu);
	if (q->stop) {
		rc = -ECANCELED;
	} else if (q->issued - q->done >= GW_QUEUE_MAX) {
		rc = -ENOBUFS;
	} else {
		*op_of(q, ++q->issued) = (struct op){ id, buf, n, op, flags, 0 };
		*ticket = q->issued;
		pthread_cond_signal(&q->work);
	}
	pthread_mutex_unlock(&q->mu);
	return rc;
}

int gw_queue_wait(struct gw_queue *q, uint64_t ticket, int timeout_ms)
{
	struct timespec end;
	int rc = 0;

	if (!q)
		return -EINVAL;
	clock_gettime(CLOCK_MONOTONIC, &end);
	if (timeout_ms >= 0) {
		end.tv_sec += timeout_ms / 1000;
		end.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
		if (end.tv_nsec >= 1000000000) {
			end.tv_sec++;
			end.tv_nsec -= 1000000000;
		}
	}
	pthread_mutex_lock(&q->mu);
	if (!ticket || ticket > q->issued || q->issued - ticket >= GW_QUEUE_MAX) {
		pthread_mutex_unlock(&q->mu);
		return -ENOENT;
	}
	while (!over(q, ticket) && rc != ETIMEDOUT) {
		if (timeout_ms < 0)
			pthread_cond_wait(&q->finished, &q->mu);
		else
			rc = pthread_cond_timedwait(&q->finished, &q->mu, &end);
	}
	rc = over(q, ticket) ? op_of(q, ticket)->rc : -EAGAIN;
	pthread_mutex_unlock(&q->mu);
	return rc;
}

void gw_queue_cancel(struct gw_queue *q)
{
	if (!q)
		return;
	pthread_mutex_lock(&q->mu);
	if (!q->stop) {
		q->stop = true;
		cancel_waiting(q);
		pthread_cond_signal(&q->work);
	}
	pthread_mutex_unlock(&q->mu);
}

void gw_queue_destroy(struct gw_queue *q)
{
	if (!q)
		return;
	gw_queue_cancel(q);
	pthread_join(q->thread, NULL);
	pthread_cond_destroy(&q->finished);
	pthread_cond_destroy(&q->work);
	pthread_mutex_destroy(&q->mu);
	free(q);
}
