/* SPDX-License-Identifier: MIT */
/*
 * auto_codec.h - GRADWIRE_CODEC=auto (auto_codec.c): the state struct
 * gw_coll holds for it, what a rank states at each call check, and its
 * calls (all of them do nothing without auto).
 */
#ifndef GW_COLL_AUTO_CODEC_H
#define GW_COLL_AUTO_CODEC_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include "gradwire/codec.h"

#define COLL_AUTO_IDS 16	       /* codec wire ids auto keeps costs for */
#define COLL_AUTO_TRIAL 0x40u	       /* a stated choice (id + 1) that is an exploration's trial */
#define COLL_AUTO_ZERO 0x80u	       /* ... by a rank that owes no residual (all zeros) */
#define COLL_AUTO_CODEC(x) ((x)&0x3fu) /* a stated choice's id + 1 */

/*
 * What a rank states for auto at a call check, so that every rank learns
 * every rank's choice at the same call boundary (check.c carries it beside
 * the call's descriptor: struct call_msg).
 */
struct coll_auto_say {
	uint8_t choice; /* codec wire id + 1 (| COLL_AUTO_TRIAL | COLL_AUTO_ZERO), 0 none */
	uint8_t rate;	/* rate class (auto_codec.c) | 0x80 a probe asked for; 0 none */
};

struct coll_auto {
	bool init, on;		     /* looked at; the lossy group's links are auto */
	struct coll_auto_say *heard; /* size: what each rank stated at the last check */
	struct coll_auto_say say;    /* what this rank states at the next one */
	uint8_t ag;		     /* owners' payloads this call (id + 1, 0 default) */
	uint8_t mine;		     /* what this rank states (id + 1): its choice, or
				      * while exploring the codec tried */
	uint8_t chosen, cand;	     /* its choice; another measured faster */
	int streak;		     /* calls cand has been GAIN faster */
	bool probe;		     /* ask for a probe at the next call check */
	int explore;		     /* the next codec of the set to try, or -1 */
	uint32_t epoch;		     /* explorations so far */
	unsigned quiet, nlast;	     /* calls since the last choice; of last[] */
	double last[3];		     /* the last calls' time per value, ns */
	double tau_ref;		     /* the median of the first 3 calls after it */
	double tau_chosen;	     /* what it measured when chosen */
	double rate;		     /* bytes/s into this rank, 0 unknown */
	uint64_t n;		     /* this call's values, */
	uint64_t ref;		     /* the tensor explorations time (its key) */
	bool timed;		     /* this call is of ref: it counts */
	bool exact;		     /* this call runs exactly (coll_auto_exact()) */
	bool same;		     /* every rank with auto stated one codec for it */
	uint32_t warm;		     /* codec ids (bits) that ran on ref on every
				      * link since, and bit COLL_AUTO_IDS: the exact path */
	int64_t t0;		     /* and when its data phase began */
	float *probe_buf;
	uint8_t force[64];		   /* gw_coll_auto_force(): ids, */
	uint32_t nforce, iforce;	   /* their number, the next */
	double tau[COLL_AUTO_IDS];	   /* ns per value, measured per codec */
	uint32_t tau_epoch[COLL_AUTO_IDS]; /* in that exploration */
	int8_t measured[COLL_AUTO_IDS];	   /* gw_codec_speed(): 1 done, -1 failed */
	struct gw_codec_speed speed[COLL_AUTO_IDS];
};

/* Free what a holds (gw_coll_destroy()). */
static inline void coll_auto_fini(struct coll_auto *a)
{
	free(a->heard);
	free(a->probe_buf);
}

struct gw_coll;

/* Look at the lossy group's links once (after coll_decide()). Return: 0, -ENOMEM. */
int coll_auto_init(struct gw_coll *c);
/* After the call check of a lossy call of n values of the tensor key: the
 * owners' codec, and the probe if some rank asked for one. Return: 0 or the
 * probe's error (coll_fail()). */
int coll_auto_begin(struct gw_coll *c, uint64_t key, uint64_t n);
/* Whether this lossy call runs exactly: every rank stated `none` and owes
 * no residual (the same on every rank: the call check's statements). */
bool coll_auto_exact(const struct gw_coll *c);
/* The isend flag for a lossy send to peer (owner: an owner's payload). */
unsigned coll_auto_flag(const struct gw_coll *c, int peer, bool owner);
/* After a lossy call that succeeded: measure, and choose for the next. */
void coll_auto_end(struct gw_coll *c);
/* An exploration begins (every rank at the same call, after the probe). */
void coll_auto_explore(struct coll_auto *a);
/* What a timed call of tau ns per value decides: the next trial, the end
 * of an exploration, a new one asked for, or a switch (tests/test_auto.c
 * feeds it times). */
void coll_auto_timed(struct gw_coll *c, const struct gw_codec *set, int n, double tau);

#endif
