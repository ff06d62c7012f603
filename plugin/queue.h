/* SPDX-License-Identifier: MIT */
/*
 * queue.h - allreduces run in submission order by a thread of gradwire's
 * own, so the host goes on (a DDP hook returns a future while backward
 * continues). See queue.c.
 */
#ifndef GW_QUEUE_H
#define GW_QUEUE_H

#include <stdint.h>
#include "coll.h"

/* Tickets waiting or running, at most; a done ticket's result is kept until
 * this many later ones are submitted. */
#define GW_QUEUE_MAX 1024

struct gw_queue;

/** gw_queue_create() - a queue over c, with its thread started. */
int gw_queue_create(struct gw_coll *c, struct gw_queue **out);

/**
 * gw_queue_submit() - queue gw_coll_allreduce_id(c, id, buf, n, op, flags).
 * buf must stay valid and untouched until its ticket is done.
 * Return: 0 and *ticket (1, 2, ... in submission order); -ENOBUFS when
 * GW_QUEUE_MAX tickets are waiting or running; -ECANCELED once
 * gw_queue_destroy() has begun.
 */
int gw_queue_submit(struct gw_queue *q, uint32_t id, float *buf, uint64_t n, enum gw_coll_op op,
		    unsigned flags, uint64_t *ticket);

/**
 * gw_queue_wait() - wait up to timeout_ms (< 0: without limit) for ticket.
 * Return: that allreduce's result (0 or -errno; -ECANCELED when the queue
 * was destroyed before it ran); -EAGAIN when it is not done in time;
 * -ENOENT for a ticket never issued or whose result is no longer kept.
 */
int gw_queue_wait(struct gw_queue *q, uint64_t ticket, int timeout_ms);

/**
 * gw_queue_cancel() - tickets not started end with -ECANCELED at once (their
 * waiters return), the running one still finishes, and later submits fail
 * with -ECANCELED. Safe from any thread, beside gw_queue_wait() calls.
 * Accepts NULL.
 */
void gw_queue_cancel(struct gw_queue *q);

/**
 * gw_queue_destroy() - gw_queue_cancel(), then join the thread (after the
 * running allreduce, within the context's timeout) and free. Accepts NULL.
 * No other gw_queue_* call on q may be in progress or follow.
 */
void gw_queue_destroy(struct gw_queue *q);

#endif
