/* SPDX-License-Identifier: MIT */
/* test_randomk.c - PLACEHOLDER until the codec lands. */
#include "tutil.h"
int main(void) { tu_skip("test_randomk: not written yet"); }
