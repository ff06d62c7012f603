/* SPDX-License-Identifier: MIT */
/*
 * codec.h - the gradwire codec ABI.
 *
 * A codec turns n float32 values into bytes and back. Codecs are registered in
 * one table (codec/registry.c) as `const struct gw_codec_ops`; several
 * implementations of the same codec (generic C, AVX2, AVX-512) share its name
 * and wire id and differ in priority and CPU probe. The generic one is the
 * reference: every variant produces identical bytes.
 *
 * Codecs never allocate and do no I/O. The caller owns every buffer: the
 * output (sized by bound()), a persistent per-stream state (state_size(),
 * zeroed by the caller once) and a scratch area (scratch_size()).
 *
 * Error feedback: encode() takes the residual r of the previous step and
 * encodes y = x + r; it writes the new residual y - decode(payload) to
 * res_out, which may alias res. Pass res = res_out = NULL to encode x alone.
 * A residual never holds a non-finite value.
 *
 * A payload on the wire is a header (see gw_payload_*) and a codec "section":
 * the codec's own parameters followed by its data, little-endian. Decoders
 * treat the section as hostile and check every length and index before they
 * write a byte of output.
 */
#ifndef GRADWIRE_CODEC_H
#define GRADWIRE_CODEC_H

#include <stdbool.h>
#include "gradwire/gradwire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pinned wire ids: never renumbered, never reused. */
enum gw_codec_id {
	GW_CODEC_NONE = 0,
	GW_CODEC_TOPK = 1,
	GW_CODEC_RANDOMK = 2,
	GW_CODEC_FP16 = 3,
	GW_CODEC_BF16 = 4,
	GW_CODEC_INT8 = 5,
	GW_CODEC_ONEBIT = 6,
	GW_CODEC_POWERSGD = 7,
	GW_CODEC_ID_MAX = 255,
};

enum gw_rounding {
	GW_ROUND_NEAREST = 0,	 /* round to nearest, ties to even */
	GW_ROUND_STOCHASTIC = 1, /* unbiased, from a counter-based generator */
};

/* Largest tensor a payload may describe (elements). */
#define GW_MAX_ELEMS (UINT64_C(1) << 40)

/* Payload flags (header byte 3). */
#define GW_PF_NONFINITE                                                                            \
	0x01u		      /* input held NaN/Inf; a record follows the header                   \
			       * (never set by `none`) */
#define GW_PF_SATURATED 0x02u /* finite values beyond the format's range were clamped */
#define GW_PF_KNOWN (GW_PF_NONFINITE | GW_PF_SATURATED)

/**
 * struct gw_codec_params - parsed parameters of one configured codec.
 * Which fields matter depends on the codec; gw_codec_parse() fills them all
 * from the codec's defaults, then from the spec string.
 */
struct gw_codec_params {
	double ratio;	   /* topk, randomk: fraction of elements sent, (0, 1] */
	uint32_t bucket;   /* int8, onebit: elements per scale */
	uint32_t rounding; /* int8: enum gw_rounding */
	uint32_t rank;	   /* powersgd */
	uint32_t reserved;
	uint64_t seed; /* randomk, stochastic rounding, powersgd: base seed */
	/* Appended (the struct is ABI: fields are only ever added at the end). */
	double min_factor; /* powersgd: least size saving, else uncompressed */
	uint32_t warmup;   /* powersgd: first steps sent uncompressed */
	uint32_t reserved2;
	uint64_t cols; /* powersgd: matrix columns (0: near-square rule) */
};

struct gw_codec_ops;

/** struct gw_codec - a configured codec: an implementation and its parameters. */
struct gw_codec {
	const struct gw_codec_ops *ops;
	struct gw_codec_params p;
};

/**
 * struct gw_enc_info - what encode() learned besides the bytes it wrote.
 * @flags:           GW_PF_* (the codec sets NONFINITE and SATURATED).
 * @nonfinite_index: index of the first non-finite y[i] (if NONFINITE).
 * @nonfinite_bits:  its float32 bit pattern.
 */
struct gw_enc_info {
	uint32_t flags;
	uint32_t nonfinite_bits;
	uint64_t nonfinite_index;
};

/* Types of a spec-string parameter. */
enum gw_param_type {
	GW_PARAM_F64,  /* decimal number within [min, max]; min excluded if min_open */
	GW_PARAM_U32,  /* whole number within [min, max] */
	GW_PARAM_U64,  /* whole number within [min, max] */
	GW_PARAM_ENUM, /* one of names[], stored as its index (u32) */
};

/** struct gw_param_desc - one key a codec accepts in its spec string. */
struct gw_param_desc {
	const char *key;
	enum gw_param_type type;
	size_t offset; /* offsetof(struct gw_codec_params, field) */
	double min, max;
	bool min_open;
	double def;
	const char *const *names; /* GW_PARAM_ENUM: NULL-terminated */
	const char *help;
};

/**
 * struct gw_codec_ops - one codec implementation.
 *
 * Mandatory: size, name, impl, priority, bound, encode, decode, decode_add.
 * Optional: cpu_ok (NULL: runs anywhere), params, state_size, scratch_size
 * (NULL: none needed). New members are only ever appended.
 */
struct gw_codec_ops {
	/** @size: sizeof(struct gw_codec_ops) the codec was built with. */
	size_t size;
	/** @name: what peers negotiate ("topk"). */
	const char *name;
	/** @impl: this implementation ("topk-avx512"); unique in the table. */
	const char *impl;
	/** @id: pinned wire id (enum gw_codec_id). */
	uint8_t id;
	/** @lossy: false only for codecs that reproduce their input exactly. */
	bool lossy;
	/** @priority: the usable implementation with the highest one is chosen. */
	int priority;
	/** @cpu_ok: true when this CPU can run the implementation. */
	bool (*cpu_ok)(void);
	/** @params: NULL-key-terminated list of spec keys, or NULL. */
	const struct gw_param_desc *params;

	/** @state_size: bytes of persistent per-stream state for n values. */
	size_t (*state_size)(const struct gw_codec *c, uint64_t n);
	/** @scratch_size: bytes of scratch encode() needs for n values. */
	size_t (*scratch_size)(const struct gw_codec *c, uint64_t n);
	/** @bound: largest section encode() can write for n values. */
	size_t (*bound)(const struct gw_codec *c, uint64_t n);

	/**
	 * @encode: write the section for y = x (+ res) into out.
	 * @state: state_size() bytes, zeroed before the first call of a stream.
	 * @scratch: scratch_size() bytes, contents undefined.
	 * @res, @res_out: residual in and out (both NULL or both set; may alias).
	 * Return: bytes written (<= bound()), or -ENOSPC when cap is too small,
	 * -EINVAL on bad arguments.
	 */
	ssize_t (*encode)(const struct gw_codec *c, void *state, void *scratch, const float *x,
			  const float *res, float *res_out, uint64_t n, void *out, size_t cap,
			  struct gw_enc_info *info);
	/**
	 * @decode: parse a hostile section describing n values into y[0..n).
	 * Return: 0, or -EBADMSG when the section is malformed (y untouched).
	 */
	int (*decode)(const void *in, size_t len, uint64_t n, float *y);
	/** @decode_add: like decode, but acc[i] += value (fused reduction). */
	int (*decode_add)(const void *in, size_t len, uint64_t n, float *acc);
};

/* ---- registry ---------------------------------------------------------- */

/** gw_codec_count() - number of implementations in the table. */
GW_API size_t gw_codec_count(void);
/** gw_codec_at() - implementation i of the table (for walking it), or NULL. */
GW_API const struct gw_codec_ops *gw_codec_at(size_t i);
/** gw_codec_find() - best usable implementation of a codec name, or NULL. */
GW_API const struct gw_codec_ops *gw_codec_find(const char *name);
/** gw_codec_find_id() - best usable implementation of a wire id, or NULL. */
GW_API const struct gw_codec_ops *gw_codec_find_id(unsigned id);
/** gw_codec_find_impl() - an implementation by its impl name, or NULL. */
GW_API const struct gw_codec_ops *gw_codec_find_impl(const char *impl);
/**
 * gw_codec_generic() - the reference implementation of ops' codec: the usable
 * one of lowest priority with the same id.
 */
GW_API const struct gw_codec_ops *gw_codec_generic(const struct gw_codec_ops *ops);

/**
 * gw_codec_table_check() - validate a codec table.
 * Rejects a NULL entry, a wrong size, a missing mandatory op (-EINVAL), a
 * duplicate impl name, or one wire id under two names (-EEXIST).
 */
GW_API int gw_codec_table_check(const struct gw_codec_ops *const *tab, size_t n, char *err,
				size_t errlen);

/**
 * gw_codec_parse() - parse a spec such as "topk:ratio=0.01" or
 * "int8:bucket=512,rounding=stochastic" into a configured codec.
 * An unknown codec, unknown key, repeated key or out-of-range value is
 * -EINVAL with a message in err; nothing is defaulted silently.
 */
GW_API int gw_codec_parse(const char *spec, struct gw_codec *c, char *err, size_t errlen);

/**
 * gw_codec_list_parse() - parse a preference list such as
 * "topk:ratio=0.01,int8:bucket=256,rounding=stochastic,none": after a comma,
 * a token holding '=' is another key of the codec before it, anything else
 * starts the next codec. A codec named twice is an error.
 * Return: the number of codecs (1..max), or -EINVAL with a message in err.
 */
GW_API int gw_codec_list_parse(const char *list, struct gw_codec *out, int max, char *err,
			       size_t errlen);

/* What plain GRADWIRE_CODEC=auto may choose from: codecs whose error stays
 * within fp16's and int8's class (docs/codecs.md, "auto"). */
#define GW_CODEC_AUTO_DEFAULT "int8,fp16,bf16,none"

/**
 * gw_codec_auto_list() - the list of an auto spec: "auto" gives
 * GW_CODEC_AUTO_DEFAULT, "auto:<list>" gives <list>; anything else is not
 * auto and gives NULL. The list still has to pass gw_codec_list_parse().
 */
GW_API const char *gw_codec_auto_list(const char *spec);

/**
 * gw_codec_init() - configure ops with its default parameters.
 */
GW_API void gw_codec_init(struct gw_codec *c, const struct gw_codec_ops *ops);

/**
 * gw_codec_format() - write c back as a spec string (all its parameters).
 * Return: length written (excluding NUL), or -ENOSPC.
 */
GW_API ssize_t gw_codec_format(const struct gw_codec *c, char *buf, size_t len);

/* Sizes that ops may leave NULL, resolved. */
GW_API size_t gw_codec_state_size(const struct gw_codec *c, uint64_t n);
GW_API size_t gw_codec_scratch_size(const struct gw_codec *c, uint64_t n);

/* ---- payload: header + section ----------------------------------------- */

/*
 * Payload layout, little-endian (docs/wire-format.md):
 *
 *  0      1      2      3      4             8                16
 *  +------+------+------+------+-------------+----------------+
 *  | ver  | id   | dtype| flags| reserved=0  | n (u64)        |
 *  +------+------+------+------+-------------+----------------+
 * 16                       24
 *  | section length (u64)  |
 *  +-----------------------+
 *  [flags & NONFINITE: index u64 | value bits u32 | reserved u32 = 16 bytes]
 *  section: exactly `section length` bytes, nothing after it.
 */
#define GW_PAYLOAD_VERSION 1
#define GW_PAYLOAD_HDR 24
#define GW_PAYLOAD_NONFINITE_REC 16
#define GW_DTYPE_F32 1

/** struct gw_payload - a parsed (checked) payload header. */
struct gw_payload {
	uint8_t version, id, dtype, flags;
	uint64_t n;
	uint64_t nonfinite_index;
	uint32_t nonfinite_bits;
	const uint8_t *section;
	size_t section_len;
	const struct gw_codec_ops *ops; /* decoder for id */
};

/** gw_payload_bound() - largest payload gw_payload_encode() writes for n. */
GW_API size_t gw_payload_bound(const struct gw_codec *c, uint64_t n);

/**
 * gw_payload_encode() - encode x (+ res) as a complete payload.
 * Arguments as for gw_codec_ops.encode. Return: bytes written, or -errno.
 */
GW_API ssize_t gw_payload_encode(const struct gw_codec *c, void *state, void *scratch,
				 const float *x, const float *res, float *res_out, uint64_t n,
				 void *out, size_t cap);

/**
 * gw_payload_head_exact() - the header of the `none` payload of n values
 * whose section is the values' bytes as they are in memory. A `none`
 * payload never carries the non-finite record (its section holds every
 * value as itself), so the header is always GW_PAYLOAD_HDR bytes: sending
 * it followed by the values gives the bytes gw_payload_encode() with `none`
 * writes, without copying them (little-endian hosts).
 * Return: GW_PAYLOAD_HDR, -ENOSPC (cap < GW_PAYLOAD_HDR), -EINVAL, or
 * -EOPNOTSUPP on a big-endian host.
 */
GW_API ssize_t gw_payload_head_exact(uint64_t n, void *out, size_t cap);
/**
 * gw_payload_parse() - check a hostile payload's header.
 * Return: 0, -EBADMSG (malformed), or -EPROTONOSUPPORT (unknown version or
 * codec this build cannot decode).
 */
GW_API int gw_payload_parse(const void *buf, size_t len, struct gw_payload *p);

/**
 * gw_payload_decode() - decode a hostile payload into y[0..n).
 * The payload must describe exactly n values. y is untouched on error.
 * Return: 0, -EBADMSG, -EPROTONOSUPPORT.
 */
GW_API int gw_payload_decode(const void *buf, size_t len, float *y, uint64_t n);

/** gw_payload_decode_add() - like gw_payload_decode(), but acc[i] += value. */
GW_API int gw_payload_decode_add(const void *buf, size_t len, float *acc, uint64_t n);

/* ---- measuring a codec -------------------------------------------------- */

/** struct gw_codec_speed - what one codec costs on this host (gw_codec_speed()). */
struct gw_codec_speed {
	double enc_ns; /* ns per value: gw_payload_encode() with error feedback */
	double dec_ns; /* ns per value: decode and add into an accumulator */
	double bpv;    /* wire bytes per value of the payload (header included) */
};

/**
 * gw_codec_speed() - measure c on this host on n values (0: 256K) of the codec
 * bench's data: median of 5 interleaved runs each of encode (with residual)
 * and decode-add. Never cached here (the caller keeps it).
 *
 * Encode is gw_payload_encode() with a fresh stream's state, scratch and a
 * residual, as the transport sends; decode-add is gw_payload_decode_add(), as
 * the transport receives (the registry's best decoder for c's wire id). One
 * untimed warm-up round comes first, so the timed rounds are a stream's steps
 * 2 to 6: a powersgd whose warmup parameter exceeds 1 is measured (partly)
 * in its uncompressed form. Small n (below some thousands) gives noisy
 * figures. Takes some milliseconds at the default n; out is written only on
 * success.
 * Return: 0, -EINVAL (c, c->ops or out NULL, n > GW_MAX_ELEMS, or an
 * implementation this CPU cannot run), -ENOMEM, or the codec's error (from
 * its encode or decode, e.g. -EINVAL for parameters it rejects).
 */
GW_API int gw_codec_speed(const struct gw_codec *c, uint64_t n, struct gw_codec_speed *out);

/* ---- residuals ---------------------------------------------------------- */

/**
 * struct gw_residual - an error-feedback residual owned by the caller.
 * @buf: n values (NULL while n == 0).
 * @n: its shape, as the number of values.
 * @resets: how often a shape change re-zeroed it.
 */
struct gw_residual {
	float *buf;
	uint64_t n;
	uint64_t resets;
};

GW_API void gw_residual_init(struct gw_residual *r);
GW_API void gw_residual_fini(struct gw_residual *r);
/**
 * gw_residual_prepare() - make r hold n values.
 * A residual of another shape is re-zeroed (never truncated) and counted.
 * Return: 0 when r already had n values, 1 when it was (re)created zeroed,
 * -ENOMEM, or -EINVAL for n > GW_MAX_ELEMS.
 */
GW_API int gw_residual_prepare(struct gw_residual *r, uint64_t n);
/** gw_residual_reset() - zero r, keeping its shape. */
GW_API void gw_residual_reset(struct gw_residual *r);

#ifdef __cplusplus
}
#endif
#endif
