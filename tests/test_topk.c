/* SPDX-License-Identifier: MIT */
/* test_topk.c - PLACEHOLDER until the codec lands. */
#include "tutil.h"
int main(void) { tu_skip("test_topk: not written yet"); }
