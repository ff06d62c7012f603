/* SPDX-License-Identifier: MIT */
/*
 * fuzz_payload.c - fuzz target: a whole hostile payload (header + section).
 *
 * gw_payload_parse() first; only a header that parses and describes at most
 * 2^20 values gets output buffers (allocated after the size check, as a
 * receiver would). Then gw_payload_decode() and gw_payload_decode_add() run on
 * the same bytes. Checked, beyond "no crash, no out-of-bounds access":
 *   - decode and decode_add accept or reject alike (same return code);
 *   - a rejected payload leaves the output untouched (canary);
 *   - an accepted one: decode_add into -0.0 gives decode's bits, except NaNs
 *     (-0 + v == v exactly, where +0 would turn -0 into +0);
 *   - parse and decode agree: decode never accepts what parse rejected.
 */
#include "gradwire/codec.h"
#include "fuzz_common.h"

#define MAX_N (UINT64_C(1) << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gw_payload p;
	float *y, *acc;
	uint64_t n, bad;
	int rc, rc_add;

	rc = gw_payload_parse(data, size, &p);
	if (rc) {
		FUZZ_CHECK(rc == -EBADMSG || rc == -EPROTONOSUPPORT, "parse: %d", rc);
		/* A header parse rejects must not decode either (n = 0: no output). */
		FUZZ_CHECK(gw_payload_decode(data, size, NULL, 0) != 0,
			   "decode accepted what parse rejected (%d)", rc);
		return 0;
	}
	FUZZ_CHECK(p.n <= GW_MAX_ELEMS && p.ops && p.ops->id == p.id,
		   "parse accepted a bad header");
	FUZZ_CHECK(p.section >= data && p.section + p.section_len == data + size,
		   "section is not the tail of the payload");
	if (p.n > MAX_N)
		return 0;
	n = p.n;
	y = fuzz_alloc(n);
	acc = fuzz_alloc(n);
	fuzz_fill(y, n, FUZZ_CANARY_A);
	fuzz_fill(acc, n, fuzz_bits(-0.0f));

	rc = gw_payload_decode(data, size, y, n);
	rc_add = gw_payload_decode_add(data, size, acc, n);
	FUZZ_CHECK(rc == rc_add, "decode %d but decode_add %d (%s)", rc, rc_add, p.ops->impl);
	if (rc) {
		FUZZ_CHECK(rc == -EBADMSG || rc == -ENOSYS, "decode: %d (%s)", rc, p.ops->impl);
		bad = fuzz_first_not(y, n, FUZZ_CANARY_A);
		FUZZ_CHECK(bad == n, "rejected (%d) but wrote y[%llu] (%s)", rc,
			   (unsigned long long)bad, p.ops->impl);
		bad = fuzz_first_not(acc, n, fuzz_bits(-0.0f));
		FUZZ_CHECK(bad == n, "rejected (%d) but wrote acc[%llu] (%s)", rc,
			   (unsigned long long)bad, p.ops->impl);
	} else {
		bad = fuzz_add_mismatch(y, acc, n);
		FUZZ_CHECK(bad == n, "decode_add differs from decode at %llu: %08x vs %08x (%s)",
			   (unsigned long long)bad, bad < n ? fuzz_bits(y[bad]) : 0,
			   bad < n ? fuzz_bits(acc[bad]) : 0, p.ops->impl);
		/* The non-finite record is delivered as such. */
		if (p.flags & GW_PF_NONFINITE)
			FUZZ_CHECK(fuzz_bits(y[p.nonfinite_index]) == p.nonfinite_bits,
				   "non-finite record not written back");
	}
	free(y);
	free(acc);
	return 0;
}
