/* SPDX-License-Identifier: MIT */
/*
 * none.c - the identity codec: float32 values as they are.
 *
 * Section: n x f32 (4n bytes), nothing else.
 * With error feedback it sends y = x + r exactly, so the new residual is 0.
 * Non-finite values travel as themselves, so a `none` payload never needs
 * (or carries) the non-finite record: its section already holds them.
 */
#include "codec_impl.h"

static size_t none_bound(const struct gw_codec *c, uint64_t n)
{
	(void)c;
	return (size_t)n * 4;
}

/* y = x (+ res) into o: one pass the compiler vectorizes. */
static void copy_add(const float *x, const float *res, float *o, uint64_t n)
{
	if (!res) {
		if (n)
			memcpy(o, x, (size_t)n * sizeof(float));
		return;
	}
	for (uint64_t i = 0; i < n; i++)
		o[i] = x[i] + res[i];
}

static ssize_t none_encode(const struct gw_codec *c, void *state, void *scratch, const float *x,
			   const float *res, float *res_out, uint64_t n, void *out, size_t cap,
			   struct gw_enc_info *info)
{
	(void)c, (void)state, (void)scratch, (void)info;
	if (!gw_enc_args_ok(x, res, res_out, n))
		return -EINVAL;
	if (cap < none_bound(c, n))
		return -ENOSPC;
	copy_add(x, res, out, n);
	if (res_out)
		memset(res_out, 0, (size_t)n * sizeof(float));
	return (ssize_t)(n * 4);
}

static int none_decode(const void *in, size_t len, uint64_t n, float *y)
{
	if (n > GW_MAX_ELEMS || len != n * 4)
		return -EBADMSG;
	if (n)
		memcpy(y, in, len);
	return 0;
}

static int none_decode_add(const void *in, size_t len, uint64_t n, float *acc)
{
	const uint8_t *b = in;

	if (n > GW_MAX_ELEMS || len != n * 4)
		return -EBADMSG;
	for (uint64_t i = 0; i < n; i++)
		acc[i] += gw_u2f(gw_get32(b + 4 * i));
	return 0;
}

const struct gw_codec_ops gw_none_generic = {
	.size = sizeof(struct gw_codec_ops),
	.name = "none",
	.impl = "none-generic",
	.id = GW_CODEC_NONE,
	.lossy = false,
	.priority = 100,
	.bound = none_bound,
	.encode = none_encode,
	.decode = none_decode,
	.decode_add = none_decode_add,
};
