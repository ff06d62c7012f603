/* SPDX-License-Identifier: MIT */
/* bf16_avx512.c - STUB: to be replaced by the real implementation. */
#include "codec_impl.h"

static size_t stub_bound(const struct gw_codec *c, uint64_t n) { (void)c; return (size_t)n * 4; }
static ssize_t stub_encode(const struct gw_codec *c, void *st, void *sc, const float *x,
			   const float *r, float *ro, uint64_t n, void *o, size_t cap,
			   struct gw_enc_info *i)
{ (void)c; (void)st; (void)sc; (void)x; (void)r; (void)ro; (void)n; (void)o; (void)cap; (void)i; return -ENOSYS; }
static int stub_decode(const void *in, size_t len, uint64_t n, float *y)
{ (void)in; (void)len; (void)n; (void)y; return -ENOSYS; }
static bool probe(void) { return gw_cpu_avx512(); }

const struct gw_codec_ops gw_bf16_avx512 = {
	GW_OPS_SIZE, .name = "bf16", .impl = "bf16-avx512", .id = GW_CODEC_BF16, .lossy = true,
	.priority = 200, .cpu_ok = probe,
	.bound = stub_bound, .encode = stub_encode, .decode = stub_decode, .decode_add = stub_decode,
};
