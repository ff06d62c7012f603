/* SPDX-License-Identifier: MIT */
/* test_int8.c - PLACEHOLDER until the codec lands. */
#include "tutil.h"
int main(void) { tu_skip("test_int8: not written yet"); }
