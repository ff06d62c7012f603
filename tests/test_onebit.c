/* SPDX-License-Identifier: MIT */
/* test_onebit.c - PLACEHOLDER until the codec lands. */
#include "tutil.h"
int main(void) { tu_skip("test_onebit: not written yet"); }
