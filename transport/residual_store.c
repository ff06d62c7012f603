/* SPDX-License-Identifier: MIT */
/*
 * residual_store.c - the per-(peer, slot) residual store (residual_store.h).
 *
 * A gw_map of entry pointers keyed by (peer, slot). Entries are heap objects,
 * so pointers handed out stay valid while the map grows.
 *
 * Checkpoint file, little-endian:
 *   "GWRS" | u32 version (1) | u64 entries
 *   entries x { u32 peer | u32 slot | u64 n | u8 codec id | 3 x u8 0 |
 *               u32 state_len (<= 256 MiB) | n x f32 residual | state }
 *   SHA-256 of everything before it (32 bytes)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include "../common/grow.h"
#include "../common/map.h"
#include "residual_store.h"

#define RSTORE_MAGIC 0x53525747u /* "GWRS" */
#define RSTORE_VERSION 1
#define RSTORE_STATE_MAX (1u << 28) /* PowerSGD keeps Q: cols x rank floats */

#define RSTORE_SPARE_MAX 16 /* spare staging buffers kept (a ring has 8 sends in flight) */
#define RSTORE_SPARE_BYTES ((uint64_t)32 << 20) /* ... and their bytes at most */

struct gw_rstore {
	struct gw_map map; /* (peer << 32 | slot) -> struct gw_rstore_entry */
	uint64_t resets;
	struct spare {
		float *buf;
		uint64_t n;
	} spare[RSTORE_SPARE_MAX]; /* oldest first */
	unsigned nspare;
	uint64_t spare_bytes;
	size_t nonzero; /* entries whose committed residual may not be zeros */
};

/* e's committed residual is (zero) or may not be all zeros. */
static void set_zero(struct gw_rstore_entry *e, bool zero)
{
	if (e->zero != zero)
		e->rs->nonzero += zero ? (size_t)-1 : 1;
	e->zero = zero;
}

/* Keep buf (n values) as a spare, dropping the oldest ones while there are
 * too many or they hold too much; one larger than the budget is freed. */
static void spare_put(struct gw_rstore *rs, float *buf, uint64_t n)
{
	uint64_t bytes = n * sizeof(float);

	if (!buf)
		return;
	if (bytes > RSTORE_SPARE_BYTES) {
		free(buf);
		return;
	}
	while (rs->nspare == RSTORE_SPARE_MAX || rs->spare_bytes + bytes > RSTORE_SPARE_BYTES) {
		free(rs->spare[0].buf);
		rs->spare_bytes -= rs->spare[0].n * sizeof(float);
		memmove(rs->spare, rs->spare + 1, (rs->nspare - 1) * sizeof(rs->spare[0]));
		rs->nspare--;
	}
	rs->spare[rs->nspare++] = (struct spare){ buf, n };
	rs->spare_bytes += bytes;
}

/* A spare of exactly n values (the newest), or NULL. */
static float *spare_take(struct gw_rstore *rs, uint64_t n)
{
	for (unsigned i = rs->nspare; i-- > 0;) {
		float *b = rs->spare[i].buf;

		if (rs->spare[i].n != n)
			continue;
		memmove(rs->spare + i, rs->spare + i + 1,
			(rs->nspare - i - 1) * sizeof(rs->spare[0]));
		rs->nspare--;
		rs->spare_bytes -= n * sizeof(float);
		return b;
	}
	return NULL;
}

#define KEY(peer, slot) ((uint64_t)(peer) << 32 | (slot))
#define FOR_EACH(rs, e)                                                                            \
	for (size_t i_ = 0; i_ < (rs)->map.cap; i_++)                                              \
		if (((e) = (rs)->map.e[i_].val) != NULL)

int gw_rstore_create(struct gw_rstore **out)
{
	struct gw_rstore *rs = calloc(1, sizeof(*rs));

	if (!rs)
		return -ENOMEM;
	if (gw_map_init(&rs->map)) {
		free(rs);
		return -ENOMEM;
	}
	*out = rs;
	return 0;
}

static void entry_free(struct gw_rstore_entry *e)
{
	if (!e)
		return;
	gw_residual_fini(&e->res);
	free(e->staged);
	free(e->state);
	free(e);
}

void gw_rstore_destroy(struct gw_rstore *rs)
{
	struct gw_rstore_entry *e;

	if (!rs)
		return;
	FOR_EACH(rs, e)
	entry_free(e);
	for (unsigned i = 0; i < rs->nspare; i++)
		free(rs->spare[i].buf);
	gw_map_fini(&rs->map);
	free(rs);
}

static int any_pending(struct gw_rstore *rs)
{
	struct gw_rstore_entry *e;

	FOR_EACH(rs, e)
	if (e->pending)
		return 1;
	return 0;
}

/* Give e room for n values and state_len bytes of state, all zero. */
static int entry_reshape(struct gw_rstore_entry *e, uint64_t n, size_t state_len, uint8_t id)
{
	uint8_t *state = NULL;
	int rc;

	if (n > SIZE_MAX / sizeof(float) || state_len > RSTORE_STATE_MAX)
		return -EINVAL;
	if (state_len && !(state = calloc(1, state_len)))
		return -ENOMEM;
	rc = gw_residual_prepare(&e->res, n);
	if (rc < 0) {
		free(state);
		return rc;
	}
	gw_residual_reset(&e->res);
	free(e->staged); /* of the old shape (nothing is pending) */
	free(e->state);
	e->staged = NULL;
	e->state = state;
	e->state_len = state_len;
	e->codec_id = id;
	set_zero(e, true);
	return 0;
}

int gw_rstore_get(struct gw_rstore *rs, uint32_t peer, uint32_t slot, uint64_t n,
		  const struct gw_codec *c, struct gw_rstore_entry **out, int *reshaped)
{
	size_t state_len = gw_codec_state_size(c, n);
	struct gw_rstore_entry *e;
	int rc;

	*reshaped = 0;
	if (n > GW_MAX_ELEMS)
		return -EINVAL;
	e = gw_map_get(&rs->map, KEY(peer, slot));
	if (e && e->res.n == n && e->codec_id == c->ops->id && e->state_len == state_len &&
	    (e->res.buf || !n)) {
		*out = e;
		return 0;
	}
	if (e && e->pending)
		return -EBUSY;
	if (e && e->res.n == n && (e->res.buf || !n)) {
		/* Another codec (auto switched): the residual is floats either
		 * way and carries over; only the codec's state starts anew. */
		uint8_t *state = NULL;

		if (state_len > RSTORE_STATE_MAX)
			return -EINVAL;
		if (state_len && !(state = calloc(1, state_len)))
			return -ENOMEM;
		free(e->state);
		e->state = state;
		e->state_len = state_len;
		e->codec_id = c->ops->id;
		*out = e;
		return 0;
	}
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e)
			return -ENOMEM;
		e->rs = rs;
		e->peer = peer;
		e->slot = slot;
		e->zero = true; /* nothing held yet */
		rc = entry_reshape(e, n, state_len, c->ops->id);
		if (!rc)
			rc = gw_map_put(&rs->map, KEY(peer, slot), e);
		if (rc) {
			entry_free(e);
			return rc;
		}
	} else {
		rc = entry_reshape(e, n, state_len, c->ops->id);
		if (rc)
			return rc;
		rs->resets++;
		*reshaped = 1;
	}
	*out = e;
	return 0;
}

bool gw_rstore_zero(struct gw_rstore *rs, uint32_t peer, uint32_t slot, uint64_t n)
{
	const struct gw_rstore_entry *e = gw_map_get(&rs->map, KEY(peer, slot));

	return !e || (e->res.n == n && e->zero && !e->pending);
}

bool gw_rstore_add_to(const struct gw_rstore *rs, uint32_t peer, uint32_t slot, uint64_t n,
		      float *dst)
{
	const struct gw_rstore_entry *e = gw_map_get(&rs->map, KEY(peer, slot));

	if (!e || e->res.n != n || !e->res.buf)
		return false;
	for (uint64_t i = 0; i < n && !e->zero; i++)
		dst[i] += e->res.buf[i];
	return true;
}

bool gw_rstore_all_zero(const struct gw_rstore *rs)
{
	return !rs->nonzero;
}

void gw_rstore_dirty(struct gw_rstore_entry *e)
{
	set_zero(e, false);
}

int gw_rstore_stage(struct gw_rstore_entry *e)
{
	if (e->staged || !e->res.n)
		return 0;
	e->staged = spare_take(e->rs, e->res.n);
	if (!e->staged)
		e->staged = gw_alloc_lines((size_t)e->res.n * sizeof(float));
	return e->staged ? 0 : -ENOMEM;
}

void gw_rstore_commit(struct gw_rstore_entry *e)
{
	float *t = e->res.buf;

	if (!e->pending)
		return;
	e->res.buf = e->staged;
	e->staged = NULL;
	e->pending = 0;
	set_zero(e, e->staged_zero);
	spare_put(e->rs, t, e->res.n);
}

void gw_rstore_abort(struct gw_rstore_entry *e)
{
	if (!e->pending)
		return;
	e->pending = 0;
	spare_put(e->rs, e->staged, e->res.n);
	e->staged = NULL;
}

void gw_rstore_reset(struct gw_rstore *rs)
{
	struct gw_rstore_entry *e;

	FOR_EACH(rs, e)
	{
		gw_residual_reset(&e->res);
		set_zero(e, true);
		if (e->state_len)
			memset(e->state, 0, e->state_len);
	}
}

uint64_t gw_rstore_bytes(const struct gw_rstore *rs)
{
	const struct gw_rstore_entry *e;
	uint64_t b = 0;

	FOR_EACH(rs, e)
	b += sizeof(*e) + e->res.n * sizeof(float) * (e->staged ? 2 : 1) + e->state_len;
	for (unsigned i = 0; i < rs->nspare; i++)
		b += rs->spare[i].n * sizeof(float);
	return b;
}

size_t gw_rstore_count(const struct gw_rstore *rs)
{
	return rs->map.count;
}

uint64_t gw_rstore_resets(const struct gw_rstore *rs)
{
	return rs->resets;
}

/* ---- checkpoint files ---------------------------------------------------- */

/* A checkpoint file being written: every byte also goes into its SHA-256;
 * the first error sticks and later writes do nothing. */
struct ckpt_writer {
	FILE *f;
	EVP_MD_CTX *md;
	int err;
};

static void ckpt_write(struct ckpt_writer *w, const void *p, size_t len)
{
	if (w->err || !len)
		return;
	if (fwrite(p, 1, len, w->f) != len || !EVP_DigestUpdate(w->md, p, len))
		w->err = -EIO;
}

int gw_rstore_save(const struct gw_rstore *rs, const char *path)
{
	struct ckpt_writer w = { 0 };
	uint8_t sum[32];
	char tmp[4096];
	uint32_t u32;
	uint64_t u64;
	int rc;

	struct gw_rstore_entry *e;

	if (any_pending((struct gw_rstore *)rs))
		return -EBUSY;
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	w.f = fopen(tmp, "wb");
	if (!w.f)
		return -errno;
	w.md = EVP_MD_CTX_new();
	if (!w.md || !EVP_DigestInit_ex(w.md, EVP_sha256(), NULL))
		w.err = -ENOMEM;
	u32 = RSTORE_MAGIC;
	ckpt_write(&w, &u32, 4);
	u32 = RSTORE_VERSION;
	ckpt_write(&w, &u32, 4);
	u64 = rs->map.count;
	ckpt_write(&w, &u64, 8);
	FOR_EACH(rs, e)
	{
		uint8_t id[4] = { 0 };

		id[0] = e->codec_id;
		ckpt_write(&w, &e->peer, 4);
		ckpt_write(&w, &e->slot, 4);
		ckpt_write(&w, &e->res.n, 8);
		ckpt_write(&w, id, 4);
		u32 = (uint32_t)e->state_len;
		ckpt_write(&w, &u32, 4);
		ckpt_write(&w, e->res.buf, (size_t)e->res.n * sizeof(float));
		ckpt_write(&w, e->state, e->state_len);
	}
	if (!w.err && !EVP_DigestFinal_ex(w.md, sum, NULL))
		w.err = -EIO;
	if (!w.err && fwrite(sum, 1, 32, w.f) != 32)
		w.err = -EIO;
	EVP_MD_CTX_free(w.md);
	rc = fclose(w.f) ? -EIO : w.err;
	if (!rc && rename(tmp, path))
		rc = -errno;
	if (rc)
		remove(tmp);
	return rc;
}

/* A checkpoint file read into memory: -EBADMSG for a read past its end. */
struct ckpt_reader {
	const uint8_t *p;
	size_t left;
};

static int ckpt_read(struct ckpt_reader *r, void *out, size_t len)
{
	if (r->left < len)
		return -EBADMSG;
	if (len) /* out may be NULL for an empty state */
		memcpy(out, r->p, len);
	r->p += len;
	r->left -= len;
	return 0;
}

int gw_rstore_load(struct gw_rstore *rs, const char *path)
{
	struct gw_rstore *fresh = NULL;
	uint8_t *buf = NULL, sum[32];
	struct ckpt_reader r;
	uint32_t magic, version;
	uint64_t count;
	long size;
	FILE *f;
	int rc;

	if (any_pending(rs))
		return -EBUSY;
	f = fopen(path, "rb");
	if (!f)
		return -errno;
	rc = -EIO;
	if (fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		goto out;
	rc = -EBADMSG;
	if (size < 16 + 32)
		goto out;
	rc = -ENOMEM;
	buf = malloc((size_t)size); /* bounded by the file, not its contents */
	if (!buf)
		goto out;
	rc = -EIO;
	if (fread(buf, 1, (size_t)size, f) != (size_t)size)
		goto out;
	rc = -EBADMSG;
	if (!EVP_Digest(buf, (size_t)size - 32, sum, NULL, EVP_sha256(), NULL) ||
	    memcmp(sum, buf + size - 32, 32))
		goto out;
	r.p = buf;
	r.left = (size_t)size - 32;
	if (ckpt_read(&r, &magic, 4) || ckpt_read(&r, &version, 4) || ckpt_read(&r, &count, 8) ||
	    magic != RSTORE_MAGIC || version != RSTORE_VERSION || count > r.left / 24)
		goto out;
	rc = gw_rstore_create(&fresh);
	if (rc)
		goto out;
	for (uint64_t i = 0; i < count; i++) {
		struct gw_rstore_entry *e;
		struct gw_codec c;
		uint32_t peer, slot, state_len;
		uint8_t id[4];
		uint64_t n;
		int reshaped;

		rc = -EBADMSG;
		if (ckpt_read(&r, &peer, 4) || ckpt_read(&r, &slot, 4) || ckpt_read(&r, &n, 8) ||
		    ckpt_read(&r, id, 4) || ckpt_read(&r, &state_len, 4) || id[1] || id[2] ||
		    id[3] || n > GW_MAX_ELEMS || n > r.left / sizeof(float) ||
		    state_len > RSTORE_STATE_MAX || !gw_codec_find_id(id[0]))
			goto out;
		gw_codec_init(&c, gw_codec_find_id(id[0]));
		if (gw_codec_state_size(&c, n) != state_len ||
		    gw_map_get(&fresh->map, KEY(peer, slot))) /* a duplicate */
			goto out;
		rc = gw_rstore_get(fresh, peer, slot, n, &c, &e, &reshaped);
		if (rc)
			goto out;
		rc = -EBADMSG;
		set_zero(e, false);
		if (ckpt_read(&r, e->res.buf, (size_t)n * sizeof(float)) ||
		    ckpt_read(&r, e->state, state_len))
			goto out;
		for (uint64_t j = 0; j < n; j++) { /* residuals are finite */
			uint32_t bits;

			memcpy(&bits, &e->res.buf[j], 4);
			if ((bits & 0x7f800000u) == 0x7f800000u)
				goto out;
		}
	}
	rc = r.left ? -EBADMSG : 0;
	if (!rc) { /* swap the contents in: all or nothing */
		struct gw_rstore t = *rs;
		struct gw_rstore_entry *e;

		*rs = *fresh;
		rs->resets = t.resets;
		*fresh = t;
		FOR_EACH(rs, e) /* the entries now belong to rs */
		e->rs = rs;
	}
out:
	gw_rstore_destroy(fresh);
	free(buf);
	fclose(f);
	return rc;
}
