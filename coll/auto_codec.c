/* SPDX-License-Identifier: MIT */
/*
 * auto_codec.c - GRADWIRE_CODEC=auto: each link's codec, chosen from what the
 * link measures, and chosen again when that changes (docs/codecs.md, "auto").
 *
 * Who chooses. The receiver of a link, for what it receives. Each rank
 * states its choice (a codec wire id) and its link's rate beside its call
 * check's descriptor (struct coll_auto_say; check.c carries it), so after
 * the check every rank knows every
 * rank's, and a sender encodes what it sends to rank p with p's choice
 * from that call on: both ends switch at the same call boundary. The
 * payload names its codec under the MAC, and the receiver checks it is one
 * of the connection's set (transport/ctx_recv.c).
 *
 * One encoding that reaches several links, the owner's allgather payload
 * (forwarded along the ring), uses the choice of the slowest link: the
 * rank that states the lowest rate, the lowest such rank on a tie (a rank
 * that states no rate yet counts only while none does: then the lowest
 * rank's choice). Every rank computes the same from the same statements,
 * so every replica keeps the same bits (the owner rule holds per call).
 * A hop whose payload is not compressed (`none` chosen, or a link that
 * does not compress) passes the values on exactly, never re-encoded.
 *
 * What a rank measures:
 *  - the rate into it: each lossy call's frames from its lossy group
 *    (the ring's previous rank, or every peer of the direct
 *    reduce-scatter), wire bytes over the time from the first frame's
 *    arrival to the last's (the first frame's bytes left out). When the
 *    codecs' cost on this host would explain that time, the senders were
 *    the bottleneck and the sample only bounds the rate from below (it may
 *    raise the estimate, never lower it); other samples are smoothed, half
 *    the old and half the new. A probe (PROBE_FRAMES exact frames from
 *    each member to its next, received by polling) gives the first value
 *    and a fresh one at every exploration;
 *  - each codec's cost on this host, gw_codec_speed(), once;
 *  - each call's time per value (the data phase, after the check).
 *
 * The rule. A codec's time on a call is predicted as
 *   cpu(k) = values x (encode + decode ns per value)
 *   wire(k) = values x wire bytes per value / rate
 *   T(k) = max(cpu, wire) + OVERLAP_REST x min(cpu, wire)
 * and measured by running it. An exploration runs each codec of the set
 * for one timed call on every link at once, in the set's order on every
 * rank (the codec the links had runs its first, as stated before it began,
 * timed only when they all had the same; a codec's first call on the
 * tensor, cold, is not timed and runs again), all ranks in the same calls
 * (it starts when some rank asks for it in the call check: at the first
 * lossy call, and when a rank's call time per value moved by CHANGE or
 * more, link_changed() below), except codecs the prediction puts at PRUNE
 * times the best or worse (on a slow link, `none`). Then the fastest
 * measured codec is chosen, but compression must pay: a lossy codec only
 * when GAIN faster than a measured `none`. A call where every rank
 * states `none` and owes no residual
 * (COLL_AUTO_ZERO) runs exactly on every rank (coll_auto_exact()). Between
 * explorations the current codec's time keeps being measured, and a switch
 * to another explored codec needs GAIN for STREAK calls in a row, so that
 * the choice does not flap on noise; only while the current codec's time
 * stays within CHANGE of its own at the choice (beyond, the link changed
 * and the others' times are stale: link_changed() explores again).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coll_impl.h"

#define PROBE_FRAMES 4
#define PROBE_VALUES (64u << 10) /* 256 KiB per frame */
#define GAIN 1.15		 /* a switch must be this much faster */
#define STREAK 3		 /* ... for this many calls in a row */
#define CHANGE 2.0		 /* a call time that moved this much */
#define QUIET 8u		 /* calls after a choice before an exploration */
#define PRUNE 6.0		 /* predicted this many times the best: not tried */
#define OVERLAP_REST 0.25	 /* what is left of the smaller part (above) */
#define SENDER_BOUND 1.5	 /* arrivals within 1.5x the codecs' time */

_Static_assert(PROBE_FRAMES <= (1u << STEP_BITS), "the probe's frames fit its slots");

#define alog(c, lvl, ...) gw_log(gw_ctx_log_level((c)->ctx), (lvl), (c)->rank, __VA_ARGS__)

/* The group whose links may compress (hier.c decided it). */
static const struct coll_group *lossy_group(const struct gw_coll *c)
{
	return c->hier.on ? &c->hier.cross : &c->world;
}

/* The set of the first auto connection of the lossy group, or 0. */
static int auto_set(const struct gw_coll *c, const struct gw_codec **set)
{
	const struct coll_group *g = lossy_group(c);

	for (int d = 1; d < g->size; d++) {
		int n = gw_ctx_codec_set(c->ctx, group_peer(g, d), set);

		if (n)
			return n;
	}
	return 0;
}

/* The cost of codec k on this host, measured once; NULL if it failed. */
static const struct gw_codec_speed *speed_of(struct gw_coll *c, const struct gw_codec *k)
{
	struct coll_auto *a = &c->au;
	unsigned id = k->ops->id;

	if (id >= COLL_AUTO_IDS)
		return NULL;
	if (!a->measured[id]) {
		a->measured[id] = gw_codec_speed(k, 0, &a->speed[id]) ? -1 : 1;
		alog(c, GW_LOG_DEBUG, "auto: %s costs %.2f + %.2f ns per value, %.3f wire bytes",
		     k->ops->name, a->speed[id].enc_ns, a->speed[id].dec_ns, a->speed[id].bpv);
	}
	return a->measured[id] > 0 ? &a->speed[id] : NULL;
}

/* The rate class stated in the call check: 4 log2(bytes/s / 1e6) + 64,
 * 1..127 (18 KB/s to 55 GB/s); 0: not measured. */
static uint8_t rate_class(double rate)
{
	double q;

	if (rate <= 0)
		return 0;
	q = floor(4.0 * log2(rate / 1e6) + 64.5);
	return (uint8_t)(q < 1 ? 1 : q > 127 ? 127 : q);
}

/* Update what this rank states at the next call check (c->au.say). */
static void update_statement(struct gw_coll *c)
{
	struct coll_auto *a = &c->au;

	a->say.choice = (uint8_t)(a->mine | (gw_ctx_residuals_zero(c->ctx) ? COLL_AUTO_ZERO : 0));
	/* Forced (gw_coll_auto_force()): no rate, so that the schedules alone
	 * decide the owners' codec too, whatever the timings. */
	a->say.rate = (uint8_t)((a->nforce ? 0 : rate_class(a->rate)) | (a->probe ? 0x80u : 0));
}

int coll_auto_init(struct gw_coll *c)
{
	const struct gw_codec *set;
	struct coll_auto *a = &c->au;

	if (a->init)
		return 0;
	a->init = true;
	a->on = auto_set(c, &set) > 0;
	if (!a->on)
		return 0;
	a->heard = calloc((size_t)c->size, sizeof(*a->heard));
	a->probe_buf = calloc(2 * PROBE_VALUES, sizeof(float));
	if (!a->heard || !a->probe_buf)
		return -ENOMEM;
	a->probe = !a->nforce;
	a->explore = -1;
	update_statement(c);
	return 0;
}

/* Forget what arrived so far on every link (before a probe or a call). */
static void flows_reset(struct gw_coll *c)
{
	struct gw_ctx_flow f;

	for (int p = 0; p < c->size; p++)
		if (p != c->rank)
			gw_ctx_flow_take(c->ctx, p, &f);
}

/* What arrived from the lossy group since the last take, as one flow. */
static void flows_take(struct gw_coll *c, struct gw_ctx_flow *sum)
{
	const struct coll_group *g = lossy_group(c);

	memset(sum, 0, sizeof(*sum));
	for (int d = 1; d < g->size; d++) {
		struct gw_ctx_flow f;

		gw_ctx_flow_take(c->ctx, group_peer(g, d), &f);
		if (!f.frames)
			continue;
		if (!sum->frames || f.t_first < sum->t_first) {
			sum->t_first = f.t_first;
			sum->first_bytes = f.first_bytes;
		}
		sum->t_last = f.t_last > sum->t_last ? f.t_last : sum->t_last;
		sum->frames += f.frames;
		sum->bytes += f.bytes;
		for (int i = 0; i < GW_FLOW_CODECS; i++)
			sum->values[i] += f.values[i];
	}
}

/* Wait for r[0..n) by polling, so that each arrival is timed when it
 * happens (a sleeping wait wakes late on providers without a wait
 * object); past the context's timeout, the ordinary wait decides. */
static int poll_all(struct gw_coll *c, struct gw_ctx_req *r, int n)
{
	int64_t deadline = gw_now_ms() + 2000;
	int done = 0;

	while (done < n && gw_now_ms() < deadline) {
		int rc = gw_ctx_test(c->ctx, &r[done]);

		if (rc < 0)
			break;
		done += rc;
	}
	return gw_ctx_waitall(c->ctx, r, (size_t)n);
}

/* The probe: PROBE_FRAMES exact frames to the next member of the lossy
 * group, as many from the previous, timed on arrival. */
static int probe_rate(struct gw_coll *c)
{
	const struct coll_group *g = lossy_group(c);
	float *out = c->au.probe_buf, *in = out + PROBE_VALUES;
	struct gw_ctx_req r[2 * PROBE_FRAMES];
	struct gw_ctx_flow f;
	int rc = 0, k = 0;

	flows_reset(c);
	for (unsigned i = 0; i < PROBE_FRAMES && !rc; i++) {
		uint32_t slot = slot_of(ID_AUTO_PROBE, i);

		rc = gw_ctx_irecv(c->ctx, group_peer(g, -1), slot, in, PROBE_VALUES, 0, &r[k]);
		k += !rc;
	}
	for (unsigned i = 0; i < PROBE_FRAMES && !rc; i++) {
		uint32_t slot = slot_of(ID_AUTO_PROBE, i);

		rc = gw_ctx_isend(c->ctx, group_peer(g, 1), slot, out, PROBE_VALUES, 0, &r[k]);
		k += !rc;
	}
	if (!rc)
		rc = poll_all(c, r, k);
	else
		for (int i = 0; i < k; i++)
			gw_ctx_abort(c->ctx, &r[i]);
	if (rc)
		return coll_fail(c, rc, "allreduce (auto's probe)", 0);
	gw_ctx_flow_take(c->ctx, group_peer(g, -1), &f);
	if (f.frames > 1 && f.t_last > f.t_first)
		c->au.rate =
			(double)(f.bytes - f.first_bytes) * 1e9 / (double)(f.t_last - f.t_first);
	alog(c, GW_LOG_DEBUG, "auto: probe from rank %d: %llu frames in %.3f ms: %.1f MB/s",
	     group_peer(g, -1), (unsigned long long)f.frames, (double)(f.t_last - f.t_first) * 1e-6,
	     c->au.rate / 1e6);
	return 0;
}

/* Put the codec each link carries now into the statistics. */
static void record_link_codecs(struct gw_coll *c)
{
	const struct coll_group *g = lossy_group(c);

	for (int d = 1; d < g->size; d++) {
		int p = group_peer(g, d);

		/* Trials show but are no switch; a choice outside this link's
		 * set leaves it the connection's default (ctx_send.c). */
		unsigned w = c->au.heard[p].choice, trial = w & COLL_AUTO_TRIAL;

		if (COLL_AUTO_CODEC(w) &&
		    gw_ctx_link_codec(c->ctx, p, COLL_AUTO_CODEC(w) - 1u, trial) == -ENOENT)
			gw_ctx_link_codec(c->ctx, p, gw_ctx_codec(c->ctx, p)->ops->id, trial);
	}
}

void coll_auto_explore(struct coll_auto *a)
{
	a->probe = false;
	a->explore = 0;
	a->epoch++;
}

/* Every rank stated `none` and owes no residual: the call can run exactly,
 * the same bits without error feedback's passes (computed alike on every
 * rank from the call check's statements). */
static bool all_none(const struct coll_auto *a, int size)
{
	for (int r = 0; r < size; r++) {
		unsigned w = a->heard[r].choice;

		if (COLL_AUTO_CODEC(w) != GW_CODEC_NONE + 1u || !(w & COLL_AUTO_ZERO))
			return false;
	}
	return true;
}

/* Every rank that has auto stated the same codec: every link runs it. */
static bool one_codec(const struct coll_auto *a, int size)
{
	unsigned first = 0;

	for (int r = 0; r < size; r++) {
		unsigned id = COLL_AUTO_CODEC(a->heard[r].choice);

		if (id && first && id != first)
			return false;
		first = id ? id : first;
	}
	return true;
}

int coll_auto_begin(struct gw_coll *c, uint64_t key, uint64_t n)
{
	struct coll_auto *a = &c->au;
	int slow = -1, rc;
	bool probe_asked = false;

	if (!a->on)
		return 0;
	for (int r = 0; r < c->size; r++) {
		unsigned q = a->heard[r].rate & 0x7fu;

		probe_asked |= (a->heard[r].rate & 0x80u) != 0;
		if (!COLL_AUTO_CODEC(a->heard[r].choice))
			continue;
		/* The lowest stated rate; a rank stating none counts only while
		 * no rank states one (then the lowest rank's choice). */
		if (slow < 0 ||
		    (q && (!(a->heard[slow].rate & 0x7fu) || q < (a->heard[slow].rate & 0x7fu))))
			slow = r;
	}
	a->ag = slow < 0 ? 0 : (uint8_t)COLL_AUTO_CODEC(a->heard[slow].choice);
	a->exact = all_none(a, c->size);
	a->same = one_codec(a, c->size);
	if (probe_asked) { /* every rank saw the same: all explore from here */
		rc = probe_rate(c);
		if (rc)
			return rc;
		coll_auto_explore(a);
		a->warm = a->ref == key ? a->warm : 0;
		a->ref = key; /* the same on every rank (the call check) */
	}
	flows_reset(c);
	record_link_codecs(c);
	update_statement(c);
	a->n = n;
	a->timed = key == a->ref;
	a->t0 = gw_now_ns();
	return 0;
}

int gw_coll_auto_force(struct gw_coll *c, const uint8_t *ids, size_t n)
{
	struct coll_auto *a;

	if (!c || n > sizeof(c->au.force) || (n && !ids))
		return -EINVAL;
	a = &c->au;
	memcpy(a->force, ids, n);
	a->nforce = (uint32_t)n;
	a->iforce = 0;
	if (n) {
		a->probe = false;
		a->explore = -1;
		a->mine = (uint8_t)(ids[a->iforce++ % n] + 1u);
	}
	update_statement(c);
	return 0;
}

unsigned coll_auto_flag(const struct gw_coll *c, int peer, bool owner)
{
	unsigned id;

	if (!c->au.on)
		return 0;
	id = owner ? c->au.ag : COLL_AUTO_CODEC(c->au.heard[peer].choice);
	return id ? GW_CTX_CODEC(id - 1) : 0;
}

bool coll_auto_exact(const struct gw_coll *c)
{
	return c->au.on && c->au.exact;
}

/* Predicted seconds for v values of k at rate bytes/s; < 0: no figures. */
static double predict_time(struct gw_coll *c, const struct gw_codec *k, double v, double rate)
{
	const struct gw_codec_speed *s = speed_of(c, k);
	double cpu, wire;

	if (!s || rate <= 0)
		return -1;
	cpu = v * (s->enc_ns + s->dec_ns) * 1e-9;
	wire = v * s->bpv / rate;
	return cpu > wire ? cpu + OVERLAP_REST * wire : wire + OVERLAP_REST * cpu;
}

/* Take this call's arrivals as a rate sample. */
static void sample_rate(struct gw_coll *c, const struct gw_codec *set, int n)
{
	struct coll_auto *a = &c->au;
	struct gw_ctx_flow f;
	double cpu = 0, span, rate, after;

	flows_take(c, &f);
	for (int i = 0; i < n; i++) {
		const struct gw_codec_speed *s = speed_of(c, &set[i]);
		unsigned id = set[i].ops->id;

		if (id < GW_FLOW_CODECS && s)
			cpu += (double)f.values[id] * (s->enc_ns + s->dec_ns) * 1e-9;
	}
	if (f.frames < 2 || f.t_last <= f.t_first || f.bytes <= f.first_bytes)
		return;
	after = (double)(f.bytes - f.first_bytes);
	span = (double)(f.t_last - f.t_first) * 1e-9;
	rate = after / span;
	if (span < SENDER_BOUND * cpu * after / (double)f.bytes) {
		a->rate = rate > a->rate ? rate : a->rate; /* only a lower bound */
	} else {
		a->rate = a->rate > 0 ? 0.5 * a->rate + 0.5 * rate : rate;
	}
	alog(c, GW_LOG_DEBUG, "auto: %llu frames in %.3f ms (codecs' %.3f ms): %.1f MB/s, now %.1f",
	     (unsigned long long)f.frames, span * 1e3, cpu * 1e3, rate / 1e6, a->rate / 1e6);
}

/* The codec of set predicted fastest, or the first without figures. */
static const struct gw_codec *predicted_best(struct gw_coll *c, const struct gw_codec *set, int n)
{
	const struct gw_codec *best = &set[0];
	double tb = predict_time(c, best, 1e6, c->au.rate);

	for (int i = 1; i < n; i++) {
		double t = predict_time(c, &set[i], 1e6, c->au.rate);

		if (t >= 0 && (tb < 0 || t < tb)) {
			best = &set[i];
			tb = t;
		}
	}
	return best;
}

/* Codec k of set: is it predicted PRUNE times the best or worse? */
static bool predicted_too_slow(struct gw_coll *c, const struct gw_codec *set, int n, int k)
{
	double best = predict_time(c, predicted_best(c, set, n), 1e6, c->au.rate);
	double tk = predict_time(c, &set[k], 1e6, c->au.rate);

	return tk >= 0 && best > 0 && tk >= PRUNE * best;
}

static bool explored(const struct coll_auto *a, unsigned id)
{
	return id < COLL_AUTO_IDS && a->tau_epoch[id] == a->epoch;
}

/* The fastest codec measured in this exploration, or NULL. Compression
 * must pay: a lossy codec wins over a measured `none` only when GAIN
 * faster (on shm or a fast link `none` is as fast, and exact). */
static const struct gw_codec *fastest_explored(const struct coll_auto *a,
					       const struct gw_codec *set, int n)
{
	const struct gw_codec *best = NULL, *none = NULL;

	for (int i = 0; i < n; i++) {
		unsigned id = set[i].ops->id;

		if (!explored(a, id))
			continue;
		if (id == GW_CODEC_NONE)
			none = &set[i];
		if (!best || a->tau[id] < a->tau[best->ops->id])
			best = &set[i];
	}
	if (none && GAIN * a->tau[best->ops->id] > a->tau[GW_CODEC_NONE])
		return none;
	return best;
}

/* Choose k for the link into this rank from the next call on. */
static void choose_codec(struct gw_coll *c, const struct gw_codec *k, const char *why)
{
	struct coll_auto *a = &c->au;
	const char *old = "(first choice)";
	const struct gw_codec *set;
	int n = auto_set(c, &set);
	char times[256] = "";
	size_t len = 0;

	for (int i = 0; i < n; i++) {
		unsigned id = set[i].ops->id;

		if (a->chosen == id + 1u)
			old = set[i].ops->name;
		if (explored(a, id) && len < sizeof(times))
			len += (size_t)snprintf(times + len, sizeof(times) - len, "%s%s %.3f",
						len ? ", " : "", set[i].ops->name, a->tau[id]);
	}
	if (a->chosen != k->ops->id + 1u)
		alog(c, GW_LOG_INFO,
		     "auto: link into rank %d: %s -> %s at %.1f MB/s (%s; ns per value: %s)",
		     c->rank, old, k->ops->name, a->rate / 1e6, why, times);
	a->chosen = (uint8_t)(k->ops->id + 1u);
	a->mine = a->chosen;
	a->streak = 0;
	a->cand = 0;
	a->tau_chosen = a->tau[k->ops->id];
	a->nlast = 0;
	a->quiet = 0;
}

/* An exploration's next call: the next codec of set not yet timed in it
 * and not predicted too slow, or the end of it (the fastest measured). */
static void explore_next(struct gw_coll *c, const struct gw_codec *set, int n)
{
	struct coll_auto *a = &c->au;
	const struct gw_codec *best;
	unsigned cur;

	while (a->explore < n) {
		unsigned id = set[a->explore].ops->id;

		/* The exploration's first call ran the codec the link had (what
		 * was stated before it began): timed already, not tried again. */
		if (explored(a, id)) {
			a->explore++;
			continue;
		}
		if (!predicted_too_slow(c, set, n, a->explore))
			break;
		alog(c, GW_LOG_DEBUG, "auto: %s not tried: predicted %.1fx the best or worse",
		     set[a->explore].ops->name, PRUNE);
		a->explore++;
	}
	if (a->explore < n) {
		a->mine = (uint8_t)((set[a->explore++].ops->id + 1u) | COLL_AUTO_TRIAL);
		return;
	}
	a->explore = -1;
	a->quiet = 0;
	a->nlast = 0;
	best = fastest_explored(a, set, n);
	cur = a->chosen ? a->chosen - 1u : 0;
	/* The choice it had stays unless another was GAIN faster (noise), or
	 * it compresses and `none` won (compression did not pay). */
	if (best && a->chosen && explored(a, cur) &&
	    (best->ops->id != GW_CODEC_NONE || cur == GW_CODEC_NONE) &&
	    a->tau[cur] < GAIN * a->tau[best->ops->id]) {
		a->mine = a->chosen;
		a->tau_chosen = a->tau[cur];
		a->streak = 0;
		a->cand = 0;
		return;
	}
	if (best) {
		choose_codec(c, best, "measured each");
	} else if (a->chosen) { /* no trial timed: the ranks' pruning differed */
		a->mine = a->chosen;
	} else {
		choose_codec(c, predicted_best(c, set, n), "predicted, no trial timed");
	}
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

/* Has the link changed since the last choice? Single calls are noisy on a
 * shared machine, so the median time per value of the last 3 calls is
 * compared, by CHANGE or more:
 *  - the first 3 after a choice against what the exploration measured for
 *    the chosen codec (a link that changed during the exploration left its
 *    choice measured at the old rate);
 *  - later ones against those first 3, not within QUIET calls of the choice;
 * and, at once, 3 calls in a row each CHANGE squared away from them (a
 * link that changed by a factor of 20 should not wait for QUIET). The rate
 * alone is no sign: its samples under one codec and another differ where
 * the senders bound them. */
static bool link_changed(struct coll_auto *a, double tau, double explored)
{
	double m[3], big = CHANGE * CHANGE;

	a->last[a->nlast++ % 3] = tau;
	if (a->nlast > 3) { /* all of the last 3, once tau_ref is set */
		double lo = a->last[0], hi = a->last[0];

		for (int i = 1; i < 3; i++) {
			lo = a->last[i] < lo ? a->last[i] : lo;
			hi = a->last[i] > hi ? a->last[i] : hi;
		}
		if (lo >= big * a->tau_ref || hi * big <= a->tau_ref)
			return true;
	}
	if (a->nlast < 3)
		return false;
	memcpy(m, a->last, sizeof(m));
	qsort(m, 3, sizeof(m[0]), cmp_double);
	if (a->nlast == 3) {
		a->tau_ref = m[1];
		return explored > 0 && (m[1] > CHANGE * explored || m[1] * CHANGE < explored);
	}
	return a->quiet >= QUIET && (m[1] > CHANGE * a->tau_ref || m[1] * CHANGE < a->tau_ref);
}

void coll_auto_timed(struct gw_coll *c, const struct gw_codec *set, int n, double tau)
{
	struct coll_auto *a = &c->au;
	const struct gw_codec *best;
	double cur;

	if (a->mine && COLL_AUTO_CODEC(a->mine) - 1u < COLL_AUTO_IDS) { /* what this call ran */
		unsigned id = COLL_AUTO_CODEC(a->mine) - 1u;
		uint32_t bit = a->exact ? 1u << COLL_AUTO_IDS : 1u << id;
		bool cold = !(a->warm & bit);

		/* A trial is a call with every link running the codec: the
		 * call's time is bound by its slowest link, so a call whose
		 * links ran different codecs (an exploration's first, when the
		 * ranks had chosen differently) times none of them. A codec's
		 * first call on every link of the tensor (or the exact path's)
		 * grows and faults in its buffers: not its time, it runs again.
		 * Both are known alike on every rank (the call check), so their
		 * trials stay in step. */
		if (a->same)
			a->warm |= bit;
		if (a->explore < 0) {
			a->tau[id] =
				a->tau_epoch[id] == a->epoch ? 0.5 * a->tau[id] + 0.5 * tau : tau;
			a->tau_epoch[id] = a->epoch;
		} else if (a->same && cold) {
			return;
		} else if (a->same) {
			a->tau[id] = tau;
			a->tau_epoch[id] = a->epoch;
			alog(c, GW_LOG_DEBUG, "auto: trial of %s: %.3f ns per value",
			     gw_codec_find_id(id)->name, tau);
		}
	}
	if (a->explore >= 0) {
		explore_next(c, set, n);
		return;
	}
	a->quiet++;
	if (link_changed(a, tau, a->tau_chosen)) {
		alog(c, GW_LOG_INFO,
		     "auto: link into rank %d changed (%.1f MB/s, %.3f ns per value against "
		     "%.3f): trying each codec again",
		     c->rank, a->rate / 1e6, tau, a->tau_ref);
		a->probe = true;
		return;
	}
	/* The other codecs' times were measured on the link as it was. When
	 * the chosen one's moved CHANGE from its own then, the link changed
	 * and they are stale: no switch on them (link_changed() explores again). */
	best = fastest_explored(a, set, n);
	cur = a->chosen ? a->tau[a->chosen - 1] : 0;
	if (!best || !a->chosen || best->ops->id + 1u == a->chosen ||
	    cur < GAIN * a->tau[best->ops->id] || cur > CHANGE * a->tau_chosen ||
	    cur * CHANGE < a->tau_chosen) {
		a->streak = 0;
		return;
	}
	if (a->cand != best->ops->id + 1u) {
		a->cand = (uint8_t)(best->ops->id + 1u);
		a->streak = 0;
	}
	if (++a->streak >= STREAK)
		choose_codec(c, best, "measured faster");
}

static void time_and_choose(struct gw_coll *c)
{
	struct coll_auto *a = &c->au;
	const struct gw_codec *set;
	int n = auto_set(c, &set);
	double tau;

	if (!a->on || !n || !a->n)
		return;
	tau = (double)(gw_now_ns() - a->t0) / (double)a->n;
	sample_rate(c, set, n);
	if (a->nforce) { /* gw_coll_auto_force() */
		a->mine = (uint8_t)(a->force[a->iforce++ % a->nforce] + 1u);
		return;
	}
	/* Only calls of the tensor the exploration began with are timed and
	 * move it on: a host's tensors differ in size (DDP's buckets), and a
	 * time per value is only comparable on one. The others keep what this
	 * rank states (a trial spans the calls up to the next of that tensor). */
	if (a->timed)
		coll_auto_timed(c, set, n, tau);
}

void coll_auto_end(struct gw_coll *c)
{
	if (c->au.on) {
		time_and_choose(c);
		update_statement(c);
	}
}
