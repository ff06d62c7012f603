/* SPDX-License-Identifier: MIT */
/*
 * residual_store.h - error-feedback state per (peer, slot).
 *
 * Each entry owns the committed residual and the codec's per-stream state
 * (step counters). A send borrows a staging buffer for the residual it will
 * leave behind (gw_rstore_stage()); gw_rstore_commit() swaps it in when the send
 * completed, gw_rstore_abort() drops it, so a failed send loses no gradient
 * mass. Either way the spare buffer goes back to the store's few spares
 * (RSTORE_SPARE_MAX, by exact length), so staging costs memory only for the
 * sends in flight, not a second copy of every residual.
 */
#ifndef GW_RESIDUAL_STORE_H
#define GW_RESIDUAL_STORE_H

#include <stdbool.h>
#include <stdint.h>
#include "gradwire/codec.h"

struct gw_rstore;

struct gw_rstore_entry {
	struct gw_rstore *rs; /* the store, for its spare buffers */
	uint32_t peer, slot;
	struct gw_residual res; /* committed */
	float *staged;		/* res.n values: what the pending send leaves
				 * (NULL unless gw_rstore_stage() lent one) */
	uint8_t *state;		/* codec state, state_len bytes */
	size_t state_len;
	uint8_t codec_id; /* the codec the state belongs to */
	int pending;	  /* a staged residual awaits commit or abort */
	bool zero;	  /* the committed residual is all zeros */
	bool staged_zero; /* ... and the staged one will be */
};

int gw_rstore_create(struct gw_rstore **out);
void gw_rstore_destroy(struct gw_rstore *rs);

/**
 * gw_rstore_get() - the entry of (peer, slot), shaped for n values of codec c.
 * Created zeroed on first use. A different n re-zeroes the residual and the
 * state, counts a reset and says so through *reshaped, never truncating. A
 * different codec with the same n (GRADWIRE_CODEC=auto switched) keeps the
 * residual, floats whatever the codec, and starts the codec's state at zero.
 * An entry with a pending send cannot be reshaped (-EBUSY).
 * Return: 0, -ENOMEM, -EBUSY, -EINVAL.
 */
int gw_rstore_get(struct gw_rstore *rs, uint32_t peer, uint32_t slot, uint64_t n,
		  const struct gw_codec *c, struct gw_rstore_entry **e, int *reshaped);

/**
 * gw_rstore_zero() - whether a send of n values on (peer, slot) would carry
 * a residual of zeros only: no entry yet, or one of n values whose committed
 * residual is all zeros (a `none` send left it so) and no send pending.
 */
bool gw_rstore_zero(struct gw_rstore *rs, uint32_t peer, uint32_t slot, uint64_t n);

/**
 * gw_rstore_add_to() - add the committed residual of (peer, slot) into
 * dst[0..n) when it holds n values (a send in flight leaves it as it was
 * before that send). Return: whether there was one of n values.
 */
bool gw_rstore_add_to(const struct gw_rstore *rs, uint32_t peer, uint32_t slot, uint64_t n,
		      float *dst);

/** gw_rstore_all_zero() - whether every entry's committed residual is zeros. */
bool gw_rstore_all_zero(const struct gw_rstore *rs);

/** gw_rstore_dirty() - e's residual is written outside the store (own entries). */
void gw_rstore_dirty(struct gw_rstore_entry *e);

/**
 * gw_rstore_stage() - lend e a staging buffer of e->res.n values (a spare of
 * that length, or a new one) unless it holds one. Return: 0 or -ENOMEM.
 */
int gw_rstore_stage(struct gw_rstore_entry *e);

/** gw_rstore_commit() - the send completed: the staged residual becomes
 * current (all zeros when the sender set e->staged_zero). */
void gw_rstore_commit(struct gw_rstore_entry *e);
/** gw_rstore_abort() - the send failed: keep the old residual. */
void gw_rstore_abort(struct gw_rstore_entry *e);

/** gw_rstore_reset() - zero every residual and codec state (shapes kept). */
void gw_rstore_reset(struct gw_rstore *rs);

/** gw_rstore_bytes() - heap bytes the entries hold (residuals, staging, state). */
uint64_t gw_rstore_bytes(const struct gw_rstore *rs);

/** gw_rstore_count() - entries; gw_rstore_resets() - reshapes seen so far. */
size_t gw_rstore_count(const struct gw_rstore *rs);
uint64_t gw_rstore_resets(const struct gw_rstore *rs);

/**
 * gw_rstore_save() / gw_rstore_load() - checkpoint every entry to a file and back.
 * The file is checked like network input (magic, version, lengths, a SHA-256
 * over the contents); loading replaces all entries, or none on error.
 * Return: 0, -errno, -EBADMSG (corrupt), -EBUSY (a send is pending).
 */
int gw_rstore_save(const struct gw_rstore *rs, const char *path);
int gw_rstore_load(struct gw_rstore *rs, const char *path);

#endif
