/* SPDX-License-Identifier: MIT */
/*
 * test_residual_store.c - the per-(peer, slot) residual store: creation, staged
 * commit and abort (a failed send loses nothing), reshapes, growth,
 * checkpoint files and their corruption, and the zero flags auto's exact
 * path reads (a residual known to be all zeros, per entry and for all).
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "tutil.h"
#include "residual_store.h"

static struct gw_codec codec(const char *spec)
{
	struct gw_codec c;
	char err[128];

	CU_ASSERT_FATAL(gw_codec_parse(spec, &c, err, sizeof(err)) == 0);
	return c;
}

static void test_stage_commit_abort(void)
{
	struct gw_codec c = codec("topk:ratio=0.25");
	struct gw_rstore *rs;
	struct gw_rstore_entry *e, *e2;
	float x[8] = { 1, -8, 2, 7, 3, 6, 4, 5 };
	uint8_t out[512];
	void *scratch = tu_alloc(gw_codec_scratch_size(&c, 8));
	int reshaped;

	CU_ASSERT_EQUAL_FATAL(gw_rstore_create(&rs), 0);
	CU_ASSERT_EQUAL_FATAL(gw_rstore_get(rs, 1, 0, 8, &c, &e, &reshaped), 0);
	CU_ASSERT_EQUAL(reshaped, 0);
	CU_ASSERT_EQUAL(e->res.n, 8);
	CU_ASSERT_EQUAL(e->res.buf[3], 0.0f);

	/* Send 1 fails: the residual stays zero, nothing was lost. */
	CU_ASSERT_EQUAL_FATAL(gw_rstore_stage(e), 0);
	CU_ASSERT(gw_payload_encode(&c, e->state, scratch, x, e->res.buf, e->staged, 8, out,
				    sizeof(out)) > 0);
	e->pending = 1;
	CU_ASSERT_EQUAL(e->staged[0], 1.0f); /* 1 was not sent */
	CU_ASSERT_EQUAL(e->staged[1], 0.0f); /* -8 was */
	gw_rstore_abort(e);
	CU_ASSERT_EQUAL(e->res.buf[0], 0.0f);

	/* The abort gave the staging buffer back: the next send borrows it
	 * (and nothing more is held while no send is pending). */
	CU_ASSERT_PTR_NULL(e->staged);
	CU_ASSERT_EQUAL(gw_rstore_bytes(rs), sizeof(*e) + 2 * 8 * sizeof(float) + e->state_len);

	/* Send 2 completes: the unsent values become the residual. */
	CU_ASSERT_EQUAL_FATAL(gw_rstore_stage(e), 0);
	CU_ASSERT(gw_payload_encode(&c, e->state, scratch, x, e->res.buf, e->staged, 8, out,
				    sizeof(out)) > 0);
	e->pending = 1;
	CU_ASSERT_EQUAL(gw_rstore_get(rs, 1, 0, 4, &c, &e2, &reshaped), -EBUSY);
	gw_rstore_commit(e);
	CU_ASSERT_EQUAL(e->res.buf[0], 1.0f);
	CU_ASSERT_EQUAL(e->res.buf[1], 0.0f);
	CU_ASSERT_EQUAL(e->res.buf[7], 5.0f);
	CU_ASSERT_PTR_NULL(e->staged); /* the old residual is a spare now */

	/* Same key, same shape: the same entry. Another slot: another one. */
	CU_ASSERT_EQUAL(gw_rstore_get(rs, 1, 0, 8, &c, &e2, &reshaped), 0);
	CU_ASSERT_PTR_EQUAL(e2, e);
	CU_ASSERT_EQUAL(gw_rstore_get(rs, 1, 1, 8, &c, &e2, &reshaped), 0);
	CU_ASSERT_PTR_NOT_EQUAL(e2, e);
	CU_ASSERT_EQUAL(gw_rstore_count(rs), 2);

	/* Another shape re-zeroes, counts, says so; never truncates. */
	CU_ASSERT_EQUAL(gw_rstore_get(rs, 1, 0, 4, &c, &e2, &reshaped), 0);
	CU_ASSERT_EQUAL(reshaped, 1);
	CU_ASSERT_EQUAL(e2->res.n, 4);
	CU_ASSERT_EQUAL(e2->res.buf[0], 0.0f);
	CU_ASSERT_EQUAL(gw_rstore_resets(rs), 1);
	gw_rstore_destroy(rs);
	gw_rstore_destroy(NULL);
	free(scratch);
}

static void test_codec_change_and_growth(void)
{
	struct gw_codec a = codec("int8:rounding=stochastic"), b = codec("fp16");
	struct gw_rstore *rs;
	struct gw_rstore_entry *e;
	int reshaped;

	CU_ASSERT_EQUAL_FATAL(gw_rstore_create(&rs), 0);
	CU_ASSERT_EQUAL(gw_rstore_get(rs, 0, 0, 16, &a, &e, &reshaped), 0);
	CU_ASSERT_EQUAL(e->state_len, gw_codec_state_size(&a, 16));
	e->res.buf[2] = 3;
	e->state[0] = 7;
	/* Another codec (auto switched): the residual carries over, the codec's
	 * state starts anew, and nothing counts as a reset. */
	CU_ASSERT_EQUAL(gw_rstore_get(rs, 0, 0, 16, &b, &e, &reshaped), 0);
	CU_ASSERT_EQUAL(reshaped, 0);
	CU_ASSERT_EQUAL(e->res.buf[2], 3.0f);
	CU_ASSERT_EQUAL(e->codec_id, b.ops->id);
	CU_ASSERT_EQUAL(e->state_len, gw_codec_state_size(&b, 16));
	CU_ASSERT_EQUAL(gw_rstore_resets(rs), 0);
	CU_ASSERT_EQUAL(gw_rstore_get(rs, 0, 0, 16, &a, &e, &reshaped), 0);
	CU_ASSERT_EQUAL(e->res.buf[2], 3.0f);
	CU_ASSERT_TRUE(e->state_len == 0 || e->state[0] == 0);
	for (uint32_t p = 0; p < 40; p++) /* grow past several doublings */
		for (uint32_t s = 0; s < 10; s++)
			CU_ASSERT_EQUAL(gw_rstore_get(rs, p, s, p + s, &b, &e, &reshaped), 0);
	CU_ASSERT_EQUAL(gw_rstore_count(rs), 400);
	CU_ASSERT_EQUAL(gw_rstore_get(rs, 39, 9, 48, &b, &e, &reshaped), 0);
	CU_ASSERT_EQUAL(reshaped, 0);
	CU_ASSERT_EQUAL(e->peer, 39);
	CU_ASSERT_EQUAL(e->slot, 9);
	gw_rstore_destroy(rs);
}

static void test_checkpoint(void)
{
	struct gw_codec c = codec("randomk:ratio=0.5");
	struct gw_rstore *rs, *rs2;
	struct gw_rstore_entry *e;
	char path[] = "/tmp/gw-rs-XXXXXX";
	int fd = mkstemp(path), reshaped;
	long size;
	FILE *f;
	uint8_t *bytes;

	CU_ASSERT_FATAL(fd >= 0);
	close(fd);
	CU_ASSERT_EQUAL_FATAL(gw_rstore_create(&rs), 0);
	CU_ASSERT_EQUAL_FATAL(gw_rstore_create(&rs2), 0);
	for (uint32_t p = 0; p < 3; p++) {
		CU_ASSERT_EQUAL(gw_rstore_get(rs, p, 7, 100 + p, &c, &e, &reshaped), 0);
		CU_ASSERT_FATAL(e->state_len >= 8); /* randomk's step counter */
		for (uint32_t i = 0; i < 100 + p; i++)
			e->res.buf[i] = (float)(p * 1000 + i);
		e->state[0] = (uint8_t)(p + 1); /* a step counter */
	}
	CU_ASSERT_EQUAL(gw_rstore_save(rs, path), 0);
	CU_ASSERT_EQUAL(gw_rstore_load(rs2, path), 0);
	CU_ASSERT_EQUAL(gw_rstore_count(rs2), 3);
	CU_ASSERT_EQUAL(gw_rstore_get(rs2, 2, 7, 102, &c, &e, &reshaped), 0);
	CU_ASSERT_EQUAL(reshaped, 0);
	CU_ASSERT_EQUAL(e->res.buf[101], 2101.0f);
	CU_ASSERT_EQUAL(e->state[0], 3);
	/* A loaded entry stages and commits through its new store. */
	CU_ASSERT_PTR_EQUAL(e->rs, rs2);
	CU_ASSERT_EQUAL(gw_rstore_stage(e), 0);
	e->staged[101] = 7.0f;
	e->pending = 1;
	gw_rstore_commit(e);
	CU_ASSERT_EQUAL(e->res.buf[101], 7.0f);

	/* Every flipped byte and every truncation is refused, all or nothing. */
	f = fopen(path, "rb");
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fseek(f, 0, SEEK_SET);
	bytes = malloc((size_t)size);
	CU_ASSERT_EQUAL(fread(bytes, 1, (size_t)size, f), (size_t)size);
	fclose(f);
	for (long i = 0; i < size; i += 13) {
		bytes[i] ^= 0x20;
		f = fopen(path, "wb");
		fwrite(bytes, 1, (size_t)size, f);
		fclose(f);
		CU_ASSERT_EQUAL(gw_rstore_load(rs2, path), -EBADMSG);
		bytes[i] ^= 0x20;
	}
	f = fopen(path, "wb");
	fwrite(bytes, 1, (size_t)size - 1, f);
	fclose(f);
	CU_ASSERT_EQUAL(gw_rstore_load(rs2, path), -EBADMSG);
	CU_ASSERT_EQUAL(gw_rstore_count(rs2), 3); /* untouched */
	free(bytes);

	gw_rstore_reset(rs2);
	CU_ASSERT_EQUAL(gw_rstore_get(rs2, 2, 7, 102, &c, &e, &reshaped), 0);
	CU_ASSERT_EQUAL(e->res.buf[101], 0.0f);
	CU_ASSERT_EQUAL(e->state[0], 0);
	unlink(path);
	CU_ASSERT_EQUAL(gw_rstore_load(rs2, path), -ENOENT);
	gw_rstore_destroy(rs);
	gw_rstore_destroy(rs2);
}

/* A send through e that completes; zero: what e->staged_zero says. */
static void send_through(struct gw_rstore_entry *e, bool zero)
{
	CU_ASSERT_EQUAL_FATAL(gw_rstore_stage(e), 0);
	e->pending = 1;
	e->staged_zero = zero;
	gw_rstore_commit(e);
}

static void test_zero(void)
{
	struct gw_codec c = codec("int8");
	struct gw_rstore *rs;
	struct gw_rstore_entry *e, *f;
	int reshaped;

	CU_ASSERT_EQUAL_FATAL(gw_rstore_create(&rs), 0);
	CU_ASSERT(gw_rstore_all_zero(rs));
	CU_ASSERT(gw_rstore_zero(rs, 1, 0, 8)); /* no entry: nothing owed */
	CU_ASSERT_EQUAL_FATAL(gw_rstore_get(rs, 1, 0, 8, &c, &e, &reshaped), 0);
	CU_ASSERT_EQUAL_FATAL(gw_rstore_get(rs, 2, 0, 8, &c, &f, &reshaped), 0);
	CU_ASSERT(gw_rstore_zero(rs, 1, 0, 8));
	CU_ASSERT(!gw_rstore_zero(rs, 1, 0, 4)); /* another shape: not this residual */
	CU_ASSERT(gw_rstore_all_zero(rs));

	/* A lossy send leaves a residual; a pending one may. */
	send_through(e, false);
	CU_ASSERT(!gw_rstore_zero(rs, 1, 0, 8));
	CU_ASSERT(gw_rstore_zero(rs, 2, 0, 8));
	CU_ASSERT(!gw_rstore_all_zero(rs));
	CU_ASSERT_EQUAL_FATAL(gw_rstore_stage(e), 0);
	e->pending = 1;
	e->staged_zero = true;
	CU_ASSERT(!gw_rstore_zero(rs, 1, 0, 8));
	gw_rstore_abort(e); /* the old residual stays, and owes */
	CU_ASSERT(!gw_rstore_zero(rs, 1, 0, 8));
	CU_ASSERT(!gw_rstore_all_zero(rs));
	send_through(e, true); /* `none` sent it all */
	CU_ASSERT(gw_rstore_zero(rs, 1, 0, 8));
	CU_ASSERT(gw_rstore_all_zero(rs));

	/* Two owing; a reshape re-zeroes one, a reset both; written outside. */
	send_through(e, false);
	send_through(f, false);
	CU_ASSERT_EQUAL_FATAL(gw_rstore_get(rs, 1, 0, 4, &c, &e, &reshaped), 0);
	CU_ASSERT_EQUAL(reshaped, 1);
	CU_ASSERT(gw_rstore_zero(rs, 1, 0, 4));
	CU_ASSERT(!gw_rstore_all_zero(rs));
	gw_rstore_reset(rs);
	CU_ASSERT(gw_rstore_zero(rs, 2, 0, 8));
	CU_ASSERT(gw_rstore_all_zero(rs));
	gw_rstore_dirty(f);
	CU_ASSERT(!gw_rstore_zero(rs, 2, 0, 8));
	CU_ASSERT(!gw_rstore_all_zero(rs));
	gw_rstore_destroy(rs);
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "staged residual: commit and abort", test_stage_commit_abort },
		{ "codec change, growth", test_codec_change_and_growth },
		{ "checkpoint save/load, corruption, reset", test_checkpoint },
		{ "zero flags: what a send leaves, reshapes, resets", test_zero },
		CU_TEST_INFO_NULL,
	};
	return tu_run("residual_store", tests);
}
