/* SPDX-License-Identifier: MIT */
/* test_bf16.c - PLACEHOLDER until the codec lands. */
#include "tutil.h"
int main(void) { tu_skip("test_bf16: not written yet"); }
