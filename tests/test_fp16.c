/* SPDX-License-Identifier: MIT */
/*
 * test_fp16.c - the fp16 codec: hand-computed conversions, saturation,
 * non-finite values, the residual identity and error bound, malformed
 * sections, and every usable variant against the generic reference.
 * The cases and constants are fp16's own; the tests are test_half.h's.
 */
#include <math.h>
#include "test_half.h"

/*
 * Worked by hand: 65504 = 0x477fe000 is the largest binary16; from 65520
 * (0x477ff000) RNE would give Inf, so that saturates (flagged), while
 * 0x477fefff (65519.996) still rounds to 65504. Subnormals are units of
 * 2^-24: 2^-25 and 3 * 2^-25 are ties (to 0 and 2, the even ones), 1e-7 is
 * 1.68 units -> 2, 1e-8 is 0.17 units -> 0.
 */
static const struct th_hand hand[] = {
	{ 0x3f800000, 0x3c00, 0 },		 /* 1.0 */
	{ 0x00000000, 0x0000, 0 },		 /* +0 */
	{ 0x80000000, 0x8000, 0 },		 /* -0 */
	{ 0x3dcccccd, 0x2e66, 0 },		 /* 0.1 */
	{ 0xc0490fdb, 0xc248, 0 },		 /* -pi */
	{ 0x3f801000, 0x3c00, 0 },		 /* 1 + 2^-11: tie, even */
	{ 0x3f803000, 0x3c02, 0 },		 /* 1 + 3 * 2^-11: tie, even */
	{ 0x3f801001, 0x3c01, 0 },		 /* just above the tie */
	{ 0x477fe000, 0x7bff, 0 },		 /* 65504 */
	{ 0x477feffe, 0x7bff, 0 },		 /* 65519.99 */
	{ 0x477fefff, 0x7bff, 0 },		 /* largest float < 65520 */
	{ 0x477ff000, 0x7bff, GW_PF_SATURATED }, /* 65520 */
	{ 0xc788b800, 0xfbff, GW_PF_SATURATED }, /* -70000 */
	{ 0x7f7fffff, 0x7bff, GW_PF_SATURATED }, /* FLT_MAX */
	{ 0x38800000, 0x0400, 0 },		 /* 2^-14, smallest normal */
	{ 0x387fc000, 0x03ff, 0 },		 /* 1023 * 2^-24 */
	{ 0x387fe000, 0x0400, 0 },		 /* 1023.5 units: tie, up */
	{ 0x33800000, 0x0001, 0 },		 /* 2^-24 */
	{ 0x33000000, 0x0000, 0 },		 /* 2^-25: tie, to 0 */
	{ 0xb3000001, 0x8001, 0 },		 /* -(2^-25 + a bit) */
	{ 0x33c00000, 0x0002, 0 },		 /* 3 * 2^-25: tie, to 2 */
	{ 0x33d6bf95, 0x0002, 0 },		 /* 1e-7 */
	{ 0x322bcc77, 0x0000, 0 },		 /* 1e-8 */
	{ 0x00000001, 0x0000, 0 },		 /* float subnormal */
	{ 0x7f800000, 0x7c00, GW_PF_NONFINITE }, /* +Inf */
	{ 0xff800000, 0xfc00, GW_PF_NONFINITE }, /* -Inf */
	{ 0x7fc00000, 0x7e00, GW_PF_NONFINITE }, /* qNaN */
	{ 0xff800001, 0xfe00, GW_PF_NONFINITE }, /* sNaN: quieted, sign kept */
	{ 0x7fa02000, 0x7f01, GW_PF_NONFINITE }, /* payload's top bits kept */
	{ 0xffffffff, 0xffff, GW_PF_NONFINITE },
};

/* binary16 -> float bits from the fields (finite h only). */
static uint32_t decoded_bits(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);

	return gw_f2u((float)(h & 0x8000 ? -v : v));
}

static const struct th_dec dec_cases[] = {
	{ 0x3c00, 0x3f800000 }, { 0x0000, 0x00000000 }, { 0x8000, 0x80000000 },
	{ 0x0001, 0x33800000 }, { 0x8001, 0xb3800000 }, { 0x03ff, 0x387fc000 },
	{ 0x0400, 0x38800000 }, { 0x7bff, 0x477fe000 }, { 0xfbff, 0xc77fe000 },
	{ 0x7c00, 0x7f800000 }, { 0xfc00, 0xff800000 }, { 0x7e00, 0x7fc00000 },
	{ 0x7c01, 0x7fc02000 }, /* signalling NaN comes back quiet */
	{ 0xfd00, 0xffe00000 },
};

/* fill(): many of these land beyond 65520 and saturate. */
static float big(float v)
{
	return v * 3e5f;
}

static const struct th_fmt fmt = {
	.name = "fp16",
	.generic = "fp16-generic",
	.id = GW_CODEC_FP16,
	.hand = hand,
	.nhand = sizeof(hand) / sizeof(hand[0]),
	.dec = dec_cases,
	.ndec = sizeof(dec_cases) / sizeof(dec_cases[0]),
	.decoded_bits = decoded_bits,
	.big = big,
	.tiny = 1e-6f,
	.tiemask = 0x1fffu,
	.tiebit = 0x1000u,
	.mant_bits = 10,
	.min_ulp = 0x1p-24,
	.sat_from = 65520.0f,
	.maxv = 65504.0f,
	.big_sat = 70000.0f,
};

int main(void)
{
	return th_main(&fmt);
}
