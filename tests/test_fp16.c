/* SPDX-License-Identifier: MIT */
/* test_fp16.c - PLACEHOLDER until the codec lands. */
#include "tutil.h"
int main(void) { tu_skip("test_fp16: not written yet"); }
