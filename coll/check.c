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
 * 24-byte descriptor of the call on one fixed slot:
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
 * same way, the message saying that the counts differ. The last two bytes
 * are not compared: they carry what each rank states for auto, so that
 * every rank learns every rank's choice at the same call boundary. auto's
 * probe uses the call check's slots from step 1024 on.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "coll_impl.h"

uint32_t coll_stream_of(struct gw_coll *c, uint64_t key)
{
	for (unsigned i = 0; i < c->nstreams; i++)
		if (c->stream_key[i] == key)
			return ID_ALLREDUCE + i;
	if (c->nstreams < GW_COLL_STREAMS) {
		c->stream_key[c->nstreams] = key;
		return ID_ALLREDUCE + c->nstreams++;
	}
	return ID_ALLREDUCE + (uint32_t)(key % GW_COLL_STREAMS);
}

/* The call check's descriptor (see the top of this file). */
struct call_desc {
	uint64_t key, n;
	uint32_t call;
	uint8_t op, lossy;
	uint8_t want, rate; /* auto's (c->au.say, auto_codec.c), not compared */
};
_Static_assert(sizeof(struct call_desc) == 24, "the call descriptor is 24 bytes");

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
 * Every rank learns every rank's descriptor (dissemination: in round k this
 * rank passes what it holds to rank + 2^k; descs[i] is rank - i's), then
 * compares each with rank 0's, so all ranks report the same difference.
 * Return: 0, -EINVAL (a difference: c->errmsg says which), or the
 * transport's error.
 */
int coll_check_call(struct gw_coll *c, uint64_t key, uint64_t n, enum gw_coll_op op, unsigned lossy)
{
	struct call_desc *d;
	int have = 1, round = 0, rc, r0;

	if (!c->descs) {
		c->descs = calloc((size_t)c->size, sizeof(*c->descs));
		if (!c->descs)
			return -ENOMEM;
	}
	d = c->descs;
	d[0] = (struct call_desc){
		.key = key, .n = n, .call = c->calls++, .op = (uint8_t)op, .lossy = lossy != 0
	};
	d[0].want = c->au.say[0]; /* 0 and 0 without auto */
	d[0].rate = c->au.say[1];
	for (int dist = 1; dist < c->size; dist <<= 1, round++) {
		int cnt = dist < c->size - dist ? dist : c->size - dist;

		rc = coll_bytes_step(c, slot_of(ID_CALL, (uint32_t)round),
				     mod(c->rank + dist, c->size), d, mod(c->rank - dist, c->size),
				     d + dist, (size_t)cnt * sizeof(*d));
		if (rc)
			return coll_fail(c, rc, "allreduce (call check)", round);
		have += cnt;
	}
	r0 = c->rank; /* descs[r0] is rank 0's */
	for (int i = 0; i < c->size; i++) {
		const struct call_desc *x = &d[mod(r0 - i, c->size)];

		if (i && (x->key != d[r0].key || x->n != d[r0].n || x->op != d[r0].op ||
			  x->lossy != d[r0].lossy || x->call != d[r0].call)) {
			call_diff(c->errmsg, sizeof(c->errmsg), &d[r0], 0, x, i);
			c->err = -EINVAL;
			gw_log(GW_LOG_ERROR, GW_LOG_ERROR, c->rank, "%s", c->errmsg);
			return -EINVAL;
		}
	}
	if (have != c->size)
		return -EIO;
	for (int i = 0; c->au.on && i < c->size; i++) {
		c->au.want[mod(c->rank - i, c->size)] = d[i].want;
		c->au.rate_of[mod(c->rank - i, c->size)] = d[i].rate;
	}
	return 0;
}
