#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""test_store.py - the rendezvous glue of the Python package, one process.

- c10d_store_fns over a c10d HashStore: binary values round-trip under the
  prefix; a key that never appears returns None after about the timeout
  asked for, not the store's own (long) timeout.
- Context.create's ctypes callbacks, seen from the C library: a store whose
  get never finds the key fails context_create with -ETIMEDOUT; one whose
  values are larger than the library's buffer fails it (-ENOSPC inside);
  one whose set raises fails it with the Python error in the message.
- The library rejects an unknown GRADWIRE_* variable by name.
Exit 77 when torch is missing. GW_LIB names libgradwire.so.
"""
import errno
import os
import subprocess
import sys
import time

from checks import check, exit_code, require_torch  # noqa: E402 (beside this file)

require_torch()
import torch.distributed as dist  # noqa: E402

os.environ.update({"GRADWIRE_IFACE": "lo", "GRADWIRE_TIMEOUT_MS": "1500",
                   "GRADWIRE_LOG": "error"})
from gradwire import lib as gwlib  # noqa: E402
from gradwire.torch import c10d_store_fns  # noqa: E402


def store_fns():
    base = dist.HashStore()
    set_fn, get_fn = c10d_store_fns(base, "t/0")
    blob = bytes(range(256)) * 3
    set_fn("gw/a", blob)
    check(get_fn("gw/a", 1000) == blob, "binary value round-trips")
    check(base.num_keys() == 1 and base.get("t/0/gw/a") == blob, "keys live under the prefix")
    t = time.monotonic()
    got = get_fn("gw/missing", 300)
    dt = time.monotonic() - t
    check(got is None and 0.2 < dt < 5, f"missing key: None after {dt:.2f} s (300 ms asked)")
    check(get_fn("gw/missing", 0) is None, "timeout 0 does not wait forever")


def create_fails(label, set_fn, get_fn, want):
    lib = gwlib.load()
    t = time.monotonic()
    try:
        gwlib.Context.create(lib, 0, 2, set_fn, get_fn)
    except gwlib.GradwireError as e:
        print(f"     {label}: {e} after {time.monotonic() - t:.1f} s")
        return want(e)
    print(f"     {label}: context_create succeeded")
    return False


def callbacks():
    data = {}

    def put(k, v):
        data[k] = v

    check(create_fails("get never finds the key", put, lambda k, ms: data.get(k),
                       lambda e: e.code == -errno.ETIMEDOUT),
          "a key that never appears: -ETIMEDOUT")
    check(create_fails("values too large", put, lambda k, ms: b"x" * (1 << 20),
                       lambda e: e.code == -errno.ENOSPC),
          "a value larger than the buffer: -ENOSPC")

    def bad_set(k, v):
        raise ValueError("store is read-only")

    check(create_fails("set raises", bad_set, lambda k, ms: None,
                       lambda e: "store is read-only" in str(e)),
          "a Python exception in set is reported, not unwound into C")


def unknown_variable():
    code = ("import gradwire.lib as g\n"
            "try:\n    g.load().init()\nexcept g.GradwireError as e:\n"
            "    print(e); raise SystemExit(3)\n")
    env = dict(os.environ, GRADWIRE_CODECS="int8")
    p = subprocess.run([sys.executable, "-c", code], env=env, text=True,
                       capture_output=True, timeout=60)
    print("     " + p.stdout.strip())
    check(p.returncode == 3 and "GRADWIRE_CODECS" in p.stdout,
          "an unknown GRADWIRE_* variable fails init, named")


def main():
    store_fns()
    callbacks()
    unknown_variable()
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
