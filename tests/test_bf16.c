/* SPDX-License-Identifier: MIT */
/*
 * test_bf16.c - the bf16 codec: hand-computed conversions, saturation,
 * non-finite values, the residual identity and error bound, malformed
 * sections, and every usable variant against the generic reference.
 * The cases and constants are bf16's own; the tests are test_half.h's.
 */
#include <float.h>
#include <math.h>
#include "test_half.h"

/*
 * Worked by hand: bf16 keeps the upper 16 bits, rounding on the lower 16
 * (0x8000 is the tie). 0x7f7f0000 (0x1.fep127) is the largest finite bf16;
 * from 0x7f7f8000 RNE would give Inf, so that saturates (flagged). Float
 * subnormals stay subnormal (no flush).
 */
static const struct th_hand hand[] = {
	{ 0x3f800000, 0x3f80, 0 },		 /* 1.0 */
	{ 0x00000000, 0x0000, 0 },		 /* +0 */
	{ 0x80000000, 0x8000, 0 },		 /* -0 */
	{ 0x3dcccccd, 0x3dcd, 0 },		 /* 0.1: rounds up */
	{ 0xc0490fdb, 0xc049, 0 },		 /* -pi: rounds down */
	{ 0x3f808000, 0x3f80, 0 },		 /* 1 + 2^-8: tie, even */
	{ 0x3f818000, 0x3f82, 0 },		 /* 1 + 3 * 2^-8: tie, even */
	{ 0x3f808001, 0x3f81, 0 },		 /* just above the tie */
	{ 0x7f7f0000, 0x7f7f, 0 },		 /* largest bf16 */
	{ 0x7f7f7fff, 0x7f7f, 0 },		 /* rounds down to it */
	{ 0x7f7f8000, 0x7f7f, GW_PF_SATURATED }, /* tie to even = Inf */
	{ 0xff7fffff, 0xff7f, GW_PF_SATURATED }, /* -FLT_MAX */
	{ 0x000116c2, 0x0001, 0 },		 /* 1e-40, subnormal */
	{ 0x00008000, 0x0000, 0 },		 /* tie, to 0 */
	{ 0x00018000, 0x0002, 0 },		 /* tie, to 2 */
	{ 0x00008001, 0x0001, 0 },
	{ 0x807fffff, 0x8080, 0 },		 /* up to -FLT_MIN */
	{ 0x7f800000, 0x7f80, GW_PF_NONFINITE }, /* +Inf */
	{ 0xff800000, 0xff80, GW_PF_NONFINITE }, /* -Inf */
	{ 0x7f800001, 0x7fc0, GW_PF_NONFINITE }, /* sNaN: quieted */
	{ 0xffa00000, 0xffe0, GW_PF_NONFINITE }, /* sign and payload kept */
	{ 0x7fffffff, 0x7fff, GW_PF_NONFINITE },
};

/* bf16 -> float bits from the fields (finite h only). */
static uint32_t decoded_bits(uint16_t h)
{
	int e = (h >> 7) & 0xff, m = h & 0x7f;
	double v = e ? ldexp(128 + m, e - 134) : ldexp(m, -133);

	return gw_f2u((float)(h & 0x8000 ? -v : v));
}

static const struct th_dec dec_cases[] = {
	{ 0x3f80, 0x3f800000 }, { 0x0000, 0x00000000 }, { 0x8000, 0x80000000 },
	{ 0x0001, 0x00010000 }, { 0x7f7f, 0x7f7f0000 }, { 0xff7f, 0xff7f0000 },
	{ 0x7f80, 0x7f800000 }, { 0xff80, 0xff800000 }, { 0x7fc0, 0x7fc00000 },
	{ 0xff81, 0xff810000 }, /* exact: even a signalling NaN is kept */
};

/* fill(): half of these land in [0x7f7f0000, 0x7f7fffff]: half of those saturate. */
static float big(float v)
{
	return gw_u2f(0x7f7f0000u | (gw_f2u(v) & 0x8000ffffu));
}

static const struct th_fmt fmt = {
	.name = "bf16",
	.generic = "bf16-generic",
	.id = GW_CODEC_BF16,
	.hand = hand,
	.nhand = sizeof(hand) / sizeof(hand[0]),
	.dec = dec_cases,
	.ndec = sizeof(dec_cases) / sizeof(dec_cases[0]),
	.decoded_bits = decoded_bits,
	.big = big,
	.tiny = 1e-39f,
	.tiemask = 0xffffu,
	.tiebit = 0x8000u,
	.mant_bits = 7,
	.min_ulp = 0x1p-133,
	.sat_from = 0x1.ffp127f,
	.maxv = 0x1.fep127f,
	.big_sat = FLT_MAX,
};

int main(void)
{
	return th_main(&fmt);
}
