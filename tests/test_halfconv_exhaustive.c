/* SPDX-License-Identifier: MIT */
/* test_halfconv_exhaustive.c - PLACEHOLDER until the codec lands. */
#include "tutil.h"
int main(void) { tu_skip("test_halfconv_exhaustive: not written yet"); }
