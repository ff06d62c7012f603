# SPDX-License-Identifier: MIT
"""checks.py - the one way the Python tests record a result.

check(ok, what) prints "ok" or "FAIL" and the claim; failures holds every
claim that failed, and exit_code() says how the test ends (with a summary
line).
"""
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def exit_code(extra=""):
    print(f"{len(failures)} failure(s){extra}")
    return 1 if failures else 0
