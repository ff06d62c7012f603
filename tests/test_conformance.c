/* SPDX-License-Identifier: MIT */
#include "tutil.h"
int main(void) { tu_skip("test_conformance: not written yet"); }
