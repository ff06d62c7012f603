/* SPDX-License-Identifier: MIT */
/* test_residual.c - error-feedback residual objects. */
#include "tutil.h"
#include "codec_impl.h"

static void test_shape(void)
{
	struct gw_residual r;

	gw_residual_init(&r);
	CU_ASSERT_EQUAL(gw_residual_prepare(&r, 0), 0);
	CU_ASSERT_EQUAL(gw_residual_prepare(&r, 10), 1); /* created */
	CU_ASSERT_EQUAL(r.n, 10);
	CU_ASSERT_EQUAL(r.resets, 0);
	for (int i = 0; i < 10; i++) {
		CU_ASSERT_EQUAL(r.buf[i], 0.0f);
		r.buf[i] = (float)i + 1;
	}
	CU_ASSERT_EQUAL(gw_residual_prepare(&r, 10), 0); /* kept */
	CU_ASSERT_EQUAL(r.buf[9], 10.0f);
	CU_ASSERT_EQUAL(gw_residual_prepare(&r, 4), 1); /* re-zeroed, not truncated */
	CU_ASSERT_EQUAL(r.resets, 1);
	for (int i = 0; i < 4; i++)
		CU_ASSERT_EQUAL(r.buf[i], 0.0f);
	r.buf[3] = 5;
	gw_residual_reset(&r);
	CU_ASSERT_EQUAL(r.buf[3], 0.0f);
	CU_ASSERT_EQUAL(r.n, 4);
	CU_ASSERT_EQUAL(gw_residual_prepare(&r, GW_MAX_ELEMS + 1), -EINVAL);
	CU_ASSERT_EQUAL(r.n, 4); /* untouched */
	gw_residual_fini(&r);
	CU_ASSERT_PTR_NULL(r.buf);
	gw_residual_fini(&r); /* twice is harmless */
}

int main(void)
{
	static CU_TestInfo tests[] = {
		{ "shape changes re-zero, never truncate", test_shape },
		CU_TEST_INFO_NULL,
	};
	return tu_run("residual", tests);
}
