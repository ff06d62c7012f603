/* SPDX-License-Identifier: MIT */
/*
 * residual.c - gw_coll_residual_sum(): what this rank owes a tensor, as one
 * vector over the tensor, for a caller that moves it to a context of other
 * members (gradwire.elastic, on a membership change).
 *
 * A lossy allreduce leaves a residual per (peer, slot), each over one
 * segment of the tensor: the segments this rank encoded in the
 * reduce-scatter (the ring's, towards next, or the direct one's, towards
 * each chunk's owner) and those of the chunk it owns, encoded once for the
 * allgather. Between them they cover every value once, so their sum over
 * the tensor is what this rank's sends still owe the sum: error feedback
 * adds a residual to the values of its segment at the next call. Where the
 * vector goes into another context's next call, added to this rank's
 * values, it enters the sum exactly as it would have here, whichever
 * members and chunks that context has: that is the re-slicing.
 */
#include <errno.h>
#include <string.h>
#include "coll_impl.h"

/* Add (peer, slot)'s residual over segment j of chunk k into out. */
static void add_segment(struct gw_coll *c, const struct ring *g, int peer, uint32_t slot, int k,
			uint32_t j, float *out)
{
	uint64_t off, cnt = ring_seg_span(g, k, j, &off);

	if (cnt)
		gw_ctx_residual_add_to(c->ctx, peer, slot, cnt, out + off);
}

int gw_coll_residual_sum(struct gw_coll *c, uint32_t id, float *out, uint64_t n)
{
	const struct coll_group *w;
	uint32_t stream, last;
	struct ring g;
	int me, size;

	if (!c || (n && !out) || n > GW_MAX_ELEMS)
		return -EINVAL;
	if (n)
		memset(out, 0, (size_t)n * sizeof(float));
	stream = coll_stream_find(c, KEY_ID | id);
	/* A tensor beyond the streams shares one (coll_stream_of()), whose
	 * residuals another tensor may have left: what it owes is unknown. */
	if (!stream && c->nstreams == GW_COLL_STREAMS)
		return -ENOSPC;
	/* No lossy call of the tensor yet, or none that compressed. */
	if (!stream || c->size == 1 || !n || !c->agreed || !c->lossy_links)
		return 0;
	if (c->lr.on || coll_hier_for(c, GW_CTX_LOSSY, "allreduce"))
		return -ENOTSUP; /* residuals of another shape (lowrank.c, hier.c) */
	w = &c->world;
	me = w->me;
	size = w->size;
	/* The segments as the allreduce cuts them (coll_sum(): delta 0). */
	coll_ring_init(c, &g, w, out, n, NULL, GW_CTX_LOSSY, stream, 0, UINT32_C(1) << STEP_BITS);
	last = (uint32_t)(size - 1) * g.nseg;
	for (uint32_t j = 0; j < g.nseg; j++) {
		for (int d = 1; d < size; d++) {
			if (c->hier.direct) /* member me + d's chunk, to it (direct.c) */
				add_segment(c, &g, group_peer(w, d), slot_of(stream, j),
					    mod(me + d + 1, size), j, out);
			else /* ring step d - 1: chunk me - d + 1, to next (ring.c) */
				add_segment(c, &g, g.next,
					    slot_of(stream, (uint32_t)(d - 1) * g.nseg + j),
					    mod(me - d + 1, size), j, out);
		}
		/* The owner's allgather hop: its chunk me + 1, to next. */
		add_segment(c, &g, g.next, slot_of(stream, last + j), mod(me + 1, size), j, out);
	}
	return 0;
}
