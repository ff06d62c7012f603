/* SPDX-License-Identifier: MIT */
/*
 * fuzz_section.c - fuzz target: one codec's section decoders, all of them.
 *
 * Built once per wire id with -DFUZZ_CODEC=<id> (fuzz_section_none, _topk, ...).
 *
 * Input:  | n: u32 LE (taken mod 2^16) | section bytes ... |
 *
 * The section goes to every implementation of the id that this CPU can run
 * (generic, AVX2, AVX-512), via ops->decode and ops->decode_add directly.
 * Checked, beyond "no crash, no out-of-bounds access":
 *   - all implementations agree: all reject with the same error, or all
 *     accept with identical output bits (the generic one is the reference);
 *   - a rejected section leaves the output untouched (canary), for decode
 *     and decode_add;
 *   - an accepted one writes every element: decoding into two different
 *     canaries gives the same bits;
 *   - decode_add into -0.0 gives decode's bits, except NaNs.
 * Output buffers are exactly n floats, so ASan sees any overrun.
 */
#include "gradwire/codec.h"
#include "fuzz_common.h"

#ifndef FUZZ_CODEC
#error "build with -DFUZZ_CODEC=<wire id>"
#endif

#define MAX_IMPLS 16

static const struct gw_codec_ops *impls[MAX_IMPLS];
static size_t nimpls;

/* Generic (lowest priority) first, so it is the reference. */
static void find_impls(void)
{
	if (nimpls)
		return;
	for (size_t i = 0; i < gw_codec_count(); i++) {
		const struct gw_codec_ops *o = gw_codec_at(i);

		if (o->id != FUZZ_CODEC || (o->cpu_ok && !o->cpu_ok()))
			continue;
		if (nimpls == MAX_IMPLS)
			abort();
		impls[nimpls++] = o;
	}
	for (size_t i = 1; i < nimpls; i++)
		for (size_t j = i; j > 0 && impls[j]->priority < impls[j - 1]->priority; j--) {
			const struct gw_codec_ops *t = impls[j];

			impls[j] = impls[j - 1];
			impls[j - 1] = t;
		}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct gw_codec_ops *ref;
	const uint8_t *sec;
	float *ry, *y, *acc;
	uint32_t n32;
	uint64_t n, bad;
	size_t len;
	int rrc, rc;

	find_impls();
	if (!nimpls || size < 4)
		return 0;
	memcpy(&n32, data, 4);
	n = n32 % (UINT32_C(1) << 16);
	sec = data + 4;
	len = size - 4;
	ref = impls[0];

	ry = fuzz_alloc(n);
	y = fuzz_alloc(n);
	acc = fuzz_alloc(n);

	/* Reference: decode into canary A. */
	fuzz_fill(ry, n, FUZZ_CANARY_A);
	rrc = ref->decode(sec, len, n, ry);
	FUZZ_CHECK(rrc == 0 || rrc == -EBADMSG || rrc == -ENOSYS, "%s: decode %d", ref->impl, rrc);
	if (rrc) {
		bad = fuzz_first_not(ry, n, FUZZ_CANARY_A);
		FUZZ_CHECK(bad == n, "%s rejected (%d) but wrote y[%llu] (n=%llu)", ref->impl, rrc,
			   (unsigned long long)bad, (unsigned long long)n);
	}

	for (size_t k = 0; k < nimpls; k++) {
		const struct gw_codec_ops *o = impls[k];

		/* Decode into canary B: same result as the reference into A. */
		fuzz_fill(y, n, FUZZ_CANARY_B);
		rc = o->decode(sec, len, n, y);
		FUZZ_CHECK(rc == rrc, "%s decode %d but %s decode %d (n=%llu len=%zu)", o->impl, rc,
			   ref->impl, rrc, (unsigned long long)n, len);
		if (rc) {
			bad = fuzz_first_not(y, n, FUZZ_CANARY_B);
			FUZZ_CHECK(bad == n, "%s rejected (%d) but wrote y[%llu]", o->impl, rc,
				   (unsigned long long)bad);
		} else {
			bad = fuzz_first_diff(y, ry, n);
			FUZZ_CHECK(bad == n,
				   "%s y[%llu] = %08x but %s gives %08x "
				   "(unwritten element or implementations disagree)",
				   o->impl, (unsigned long long)bad,
				   bad < n ? fuzz_bits(y[bad]) : 0, ref->impl,
				   bad < n ? fuzz_bits(ry[bad]) : 0);
		}

		/* decode_add into -0.0: same verdict, decode's bits. */
		fuzz_fill(acc, n, fuzz_bits(-0.0f));
		rc = o->decode_add(sec, len, n, acc);
		FUZZ_CHECK(rc == rrc, "%s decode_add %d but decode %d", o->impl, rc, rrc);
		if (rc) {
			bad = fuzz_first_not(acc, n, fuzz_bits(-0.0f));
			FUZZ_CHECK(bad == n, "%s decode_add rejected (%d) but wrote acc[%llu]",
				   o->impl, rc, (unsigned long long)bad);
		} else {
			bad = fuzz_add_mismatch(ry, acc, n);
			FUZZ_CHECK(
				bad == n, "%s decode_add differs from decode at %llu: %08x vs %08x",
				o->impl, (unsigned long long)bad, bad < n ? fuzz_bits(acc[bad]) : 0,
				bad < n ? fuzz_bits(ry[bad]) : 0);
		}
	}
	free(ry);
	free(y);
	free(acc);
	return 0;
}
