/* SPDX-License-Identifier: MIT */
/*
 * params.c - the spec-string keys of each codec, shared by all of a codec's
 * implementations so that they accept exactly the same specs.
 */
#include <stddef.h>
#include "codec_impl.h"

#define FIELD(f) offsetof(struct gw_codec_params, f)

static const char *const rounding_names[] = { "nearest", "stochastic", NULL };

const struct gw_param_desc gw_params_topk[] = {
	{ "ratio", GW_PARAM_F64, FIELD(ratio), 0, 1, true, 0.01, NULL,
	  "fraction of elements sent: k = max(1, ceil(ratio * n))" },
	{ .key = NULL },
};

const struct gw_param_desc gw_params_randomk[] = {
	{ "ratio", GW_PARAM_F64, FIELD(ratio), 0, 1, true, 0.01, NULL,
	  "fraction of elements sent: k = max(1, ceil(ratio * n))" },
	{ "seed", GW_PARAM_U64, FIELD(seed), 0, 1.8446744073709552e19, false, 0, NULL,
	  "base seed of the index generator (mixed with a step counter)" },
	{ .key = NULL },
};

const struct gw_param_desc gw_params_int8[] = {
	{ "bucket", GW_PARAM_U32, FIELD(bucket), 1, GW_BUCKET_MAX, false, 512, NULL,
	  "elements that share one scale" },
	{ "rounding", GW_PARAM_ENUM, FIELD(rounding), 0, 1, false, GW_ROUND_NEAREST, rounding_names,
	  "nearest (ties to even) or stochastic (unbiased, reproducible)" },
	{ "seed", GW_PARAM_U64, FIELD(seed), 0, 1.8446744073709552e19, false, 0, NULL,
	  "base seed of stochastic rounding (mixed with a step counter)" },
	{ .key = NULL },
};

const struct gw_param_desc gw_params_onebit[] = {
	{ "bucket", GW_PARAM_U32, FIELD(bucket), 1, GW_BUCKET_MAX, false, 512, NULL,
	  "elements that share one mean-magnitude scale" },
	{ .key = NULL },
};

const struct gw_param_desc gw_params_powersgd[] = {
	{ "rank", GW_PARAM_U32, FIELD(rank), 1, GW_PSGD_RANK_MAX, false, 4, NULL,
	  "rank r of the approximation; r' = min(rows, cols, r)" },
	{ "min_factor", GW_PARAM_F64, FIELD(min_factor), 1, 1e6, false, 2, NULL,
	  "send uncompressed unless n >= min_factor * (rows + cols) * r'" },
	{ "warmup", GW_PARAM_U32, FIELD(warmup), 0, 4294967295.0, false, 0, NULL,
	  "first steps of a stream sent uncompressed" },
	{ "seed", GW_PARAM_U64, FIELD(seed), 0, 1.8446744073709552e19, false, 0, NULL,
	  "seed of the initial Q (the same on both sides)" },
	{ "cols", GW_PARAM_U64, FIELD(cols), 0, 1099511627776.0, false, 0, NULL,
	  "matrix columns, rows = ceil(n / cols); 0: cols = ceil(sqrt(n))" },
	{ .key = NULL },
};
