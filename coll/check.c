/* SPDX-License-Identifier: MIT */
/*
 * check.c - the slot streams of the tensors, and the call check every
 * allreduce, reduce-scatter and float allgather starts with.
 *
 * Streams. A tensor's slots are those of its stream (coll_stream_of(): first
 * come, first served, the same order on every rank; coll_impl.h's slot
 * layout), so each (peer, slot) residual meets the same values at every call.
 *
 * Call check. Every such call starts with a dissemination allgather of a
 * 24-byte message on one fixed slot: the call's descriptor (struct
 * call_desc), then what the rank states for auto beside it (struct
 * coll_auto_say, auto_codec.h):
 *
 *   0 u64 key (the tensor: KEY_ID | id, or its length)   8 u64 n
 *  16 u32 call number (allreduces so far)  20 u8 op  21 u8 lossy
 *  22 u8 auto's choice (codec id + 1 | 0x40 a trial)  23 u8 auto's rate
 *     class | 0x80 probe (auto_codec.c; both 0 without GRADWIRE_CODEC=auto)
 *
 * so ranks that disagree on the tensor (the order of ids), its length, the
 * op or the lossy flag all fail at once, before any data moves, with the
 * same message naming the tensor, both values and the two ranks, instead
 * of a malformed frame on one rank and a timeout on another. A
 * reduce-scatter or float allgather given counts per rank (other than the
 * chunk rule's) sets KEY_CNT in key and puts FNV-1a 64 of its counts in n
 * (they fix the length too), so ranks that pass different counts fail the
 * same way, the message saying that the counts differ. Only the
 * descriptor is compared: auto's two bytes are the caller's, carried to
 * every rank (struct call_msg says why they share the message).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "../common/bytes.h"
#include "coll_impl.h"

uint32_t coll_stream_find(const struct gw_coll *c, uint64_t key)
{
	for (unsigned i = 0; i < c->nstreams; i++)
		if (c->stream_key[i] == key)
			return ID_ALLREDUCE + i;
	return 0;
}

uint32_t coll_stream_of(struct gw_coll *c, uint64_t key)
{
	uint32_t id = coll_stream_find(c, key);

	if (id)
		return id;
	if (c->nstreams < GW_COLL_STREAMS) {
		c->stream_key[c->nstreams] = key;
		return ID_ALLREDUCE + c->nstreams++;
	}
	return ID_ALLREDUCE + (uint32_t)(key % GW_COLL_STREAMS);
}

/* The call check's descriptor: what every rank's call must agree on. */
struct call_desc {
	uint64_t key, n;
	uint32_t call;
	uint8_t op, lossy;
};
#define CALL_DESC_BYTES 22 /* on the wire: the layout at the top of this file */

/*
 * One rank's message in the call check: its descriptor, encoded, and
 * beside it what the rank states for auto. Auto's statement travels here,
 * not in a message of its own, because both ends of every link must switch
 * codec at the same call boundary: every rank must know every rank's
 * choice before the call's data moves, and the check is already the one
 * allgather every rank makes at that boundary; a second would add a round
 * of messages to every call. The check compares only desc.
 */
struct call_msg {
	uint8_t desc[CALL_DESC_BYTES];
	struct coll_auto_say say;
};
_Static_assert(sizeof(struct call_msg) == 24, "the call check's message is 24 bytes");

static void desc_put(uint8_t *p, const struct call_desc *d)
{
	gw_put64(p, d->key);
	gw_put64(p + 8, d->n);
	gw_put32(p + 16, d->call);
	p[20] = d->op;
	p[21] = d->lossy;
}

static void desc_get(struct call_desc *d, const uint8_t *p)
{
	d->key = gw_get64(p);
	d->n = gw_get64(p + 8);
	d->call = gw_get32(p + 16);
	d->op = p[20];
	d->lossy = p[21];
}

static int tensor_name(char *s, size_t len, uint64_t key)
{
	return key & KEY_ID
		       ? snprintf(s, len, "tensor id %llu",
				  (unsigned long long)(key & ~(KEY_ID | KEY_RS | KEY_AG | KEY_CNT)))
		       : snprintf(s, len, "a tensor without id");
}

/* The collective a call check's key belongs to. */
static const char *kind_of(uint64_t key)
{
	return key & KEY_RS ? "reduce-scatter" : key & KEY_AG ? "allgather" : "allreduce";
}

/* "%llu values", or the counts' hash for a call given counts (KEY_CNT). */
static void size_name(char *s, size_t len, const struct call_desc *d)
{
	if (d->key & KEY_CNT)
		snprintf(s, len, "counts per rank, hash %016llx", (unsigned long long)d->n);
	else
		snprintf(s, len, "%llu values", (unsigned long long)d->n);
}

/* Why rank ra's call a and rank rb's call b cannot be one call. */
static void call_diff(char *m, size_t len, const struct call_desc *a, int ra,
		      const struct call_desc *b, int rb)
{
	const char *ka = kind_of(a->key), *kb = kind_of(b->key);
	char ta[32], tb[32], na[40], nb[40];

	tensor_name(ta, sizeof(ta), a->key);
	tensor_name(tb, sizeof(tb), b->key);
	size_name(na, sizeof(na), a);
	size_name(nb, sizeof(nb), b);
	if (ka != kb)
		snprintf(m, len,
			 "call #%u: rank %d calls %s of %s (%s), rank %d %s of %s "
			 "(%s): the ranks call different collectives, or in "
			 "different orders",
			 a->call, ra, ka, ta, na, rb, kb, tb, nb);
	else if (((a->key ^ b->key) & ~KEY_CNT) && ((a->key | b->key) & KEY_ID))
		snprintf(m, len,
			 "%s #%u: rank %d reduces %s (%s), "
			 "rank %d %s (%s): the ranks call %s on "
			 "different tensors or in different orders",
			 ka, a->call, ra, ta, na, rb, tb, nb, ka);
	else if (((a->key | b->key) & KEY_CNT) && (a->key != b->key || a->n != b->n))
		snprintf(m, len,
			 "%s #%u of %s: the counts per rank differ: rank %d passes %s, "
			 "rank %d %s",
			 ka, a->call, ta, ra, a->key & KEY_CNT ? na : "the chunk rule's counts", rb,
			 b->key & KEY_CNT ? nb : "the chunk rule's counts");
	else if (a->n != b->n)
		snprintf(m, len, "%s #%u of %s: rank %d passes %llu values, rank %d passes %llu",
			 ka, a->call, ta, ra, (unsigned long long)a->n, rb,
			 (unsigned long long)b->n);
	else if (a->call != b->call)
		snprintf(m, len,
			 "%s of %s: rank %d is at call #%u, rank %d "
			 "at #%u (a rank skipped or repeated a collective)",
			 ka, ta, ra, a->call, rb, b->call);
	else if (a->op != b->op)
		snprintf(m, len, "%s #%u of %s: rank %d asks for %s, rank %d for %s", ka, a->call,
			 ta, ra, a->op ? "avg" : "sum", rb, b->op ? "avg" : "sum");
	else
		snprintf(m, len,
			 "%s #%u of %s: rank %d %s lossy compression "
			 "(GRADWIRE_LOSSY), rank %d %s",
			 ka, a->call, ta, ra, a->lossy ? "allows" : "does not allow", rb,
			 b->lossy ? "does" : "does not");
}

/*
 * Every rank learns every rank's message (dissemination: in round k this
 * rank passes what it holds to rank + 2^k; msgs[i] is rank - i's), then
 * compares each descriptor with rank 0's, so all ranks report the same
 * difference. Return: 0, -EINVAL (a difference: c->errmsg says which), or
 * the transport's error.
 */
int coll_check_call(struct gw_coll *c, uint64_t key, uint64_t n, enum gw_coll_op op, unsigned lossy,
		    const struct coll_auto_say *say, struct coll_auto_say *heard)
{
	struct call_desc d0, x;
	struct call_msg *m;
	int have = 1, round = 0, rc, r0;

	if (!c->msgs) {
		c->msgs = calloc((size_t)c->size, sizeof(*c->msgs));
		if (!c->msgs)
			return -ENOMEM;
	}
	m = c->msgs;
	d0 = (struct call_desc){
		.key = key, .n = n, .call = c->calls++, .op = (uint8_t)op, .lossy = lossy != 0
	};
	desc_put(m[0].desc, &d0);
	m[0].say = say ? *say : (struct coll_auto_say){ 0 };
	for (int dist = 1; dist < c->size; dist <<= 1, round++) {
		int cnt = dist < c->size - dist ? dist : c->size - dist;

		rc = coll_bytes_step(c, slot_of(ID_CALL, (uint32_t)round),
				     mod(c->rank + dist, c->size), m, mod(c->rank - dist, c->size),
				     m + dist, (size_t)cnt * sizeof(*m));
		if (rc)
			return coll_fail(c, rc, "allreduce (call check)", round);
		have += cnt;
	}
	r0 = c->rank; /* msgs[r0] is rank 0's */
	desc_get(&d0, m[r0].desc);
	for (int i = 1; i < c->size; i++) {
		desc_get(&x, m[mod(r0 - i, c->size)].desc);
		if (x.key != d0.key || x.n != d0.n || x.op != d0.op || x.lossy != d0.lossy ||
		    x.call != d0.call) {
			call_diff(c->errmsg, sizeof(c->errmsg), &d0, 0, &x, i);
			c->err = -EINVAL;
			gw_log(GW_LOG_ERROR, GW_LOG_ERROR, c->rank, "%s", c->errmsg);
			coll_revoke(c);
			return -EINVAL;
		}
	}
	if (have != c->size)
		return -EIO;
	for (int i = 0; heard && i < c->size; i++)
		heard[mod(c->rank - i, c->size)] = m[i].say;
	return 0;
}
