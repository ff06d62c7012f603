# SPDX-License-Identifier: MIT
"""checks.py - the one way the Python tests record a result.

check(ok, what) prints "ok" or "FAIL" and the claim; failures holds every
claim that failed, and exit_code() says how the test ends (with a summary
line). require_torch() ends a test that needs PyTorch with SKIP, saying why,
when this Python has none.
"""
import importlib
import os
import sys

SKIP = 77  # the exit status meson counts as "skipped"
failures = []


def require_torch(module="torch.distributed"):
    """Exit SKIP (meson's "skipped"), saying why, unless module imports."""
    try:
        importlib.import_module(module)
    except ImportError as e:
        print(f"SKIP: PyTorch is not installed for {sys.executable} ({e}); "
              "Debian: apt-get install python3-torch")
        sys.exit(SKIP)


def local_providers(default):
    """The provider names that GRADWIRE_PROVIDER_LOCAL (else default) lets
    the ranks of this host use: its value, or for main the default network
    provider, libfabric's native TCP one (net before 1.18, tcp after)."""
    want = os.environ.get("GRADWIRE_PROVIDER_LOCAL", default)
    return want, {"net", "tcp"} if want == "main" else {want}


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def exit_code(extra=""):
    print(f"{len(failures)} failure(s){extra}")
    return 1 if failures else 0
