#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""test_reform.py - context_reform() through the Python package, ranks as
threads over an in-process store (no torch needed):

- epoch 0: two processes new to the job form a context (Context.newcomer);
- epoch 1 counts a third member that never comes: the re-form fails on
  both, every call then raises ENOTCONN, and error() says why;
- epoch 2 forms from the failed epoch's shape, keeps the link (no new
  handshake: its counters go on), and an allreduce sums exactly;
- a frame of another epoch never reaches the caller (the C test `epoch`
  sends one).
"""
import ctypes
import errno
import os
import threading

os.environ.setdefault("GRADWIRE_TIMEOUT_MS", "1500")
from checks import check, exit_code  # noqa: E402 (beside this file)
from gradwire import lib as _lib  # noqa: E402

N = 4096


class Store:
    """A dict with waits: the set/get functions Context takes."""

    def __init__(self):
        self.kv, self.cv = {}, threading.Condition()

    def fns(self, prefix):
        def set_fn(key, val):
            with self.cv:
                self.kv[prefix + key] = val
                self.cv.notify_all()

        def get_fn(key, timeout_ms):
            with self.cv:
                self.cv.wait_for(lambda: prefix + key in self.kv, timeout_ms / 1000)
                return self.kv.get(prefix + key)
        return set_fn, get_fn


def member(lib, store, rank, out):
    ctx = _lib.Context.newcomer(lib)
    got = out[rank] = {}
    ctx.reform(0, rank, 2, [-1, -1], *store.fns("e0/"))
    x = (ctypes.c_float * N)(*[rank + 1.0] * N)
    ctx.allreduce_id(1, ctypes.addressof(x), N, _lib.GRADWIRE_SUM, 0)
    got["e0"] = x[0] == 3.0 and x[N - 1] == 3.0
    got["sent0"] = ctx.stats(1 - rank).frames_sent
    try:
        ctx.reform(1, rank, 3, [0, 1, -1], *store.fns("e1/"))
        got["e1"] = "formed"
    except _lib.GradwireError as e:
        got["e1"] = str(e)
    try:
        ctx.allreduce_id(1, ctypes.addressof(x), N, _lib.GRADWIRE_SUM, 0)
        got["after"] = "ran"
    except _lib.GradwireError as e:
        got["after"] = e.code
    ctx.reform(2, 1 - rank, 2, [1, 0], *store.fns("e2/"))	# renumbered
    got["sent2"] = ctx.stats(rank).frames_sent
    x = (ctypes.c_float * N)(*[10.0 * (rank + 1)] * N)
    ctx.allreduce_id(1, ctypes.addressof(x), N, _lib.GRADWIRE_SUM, 0)
    got["e2"] = all(v == 30.0 for v in x)
    ctx.close()


def main():
    lib = _lib.load()
    store, out = Store(), [None, None]
    errs = []

    def run(r):
        try:
            member(lib, store, r, out)
        except Exception as e:  # noqa: BLE001 - the result to check
            errs.append(f"rank {r}: {e}")

    ts = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    check(not errs and not any(t.is_alive() for t in ts), f"both ranks ran: {errs}")
    for r, got in enumerate(out):
        got = got or {}
        check(got.get("e0") is True, f"rank {r}: epoch 0 formed by newcomers sums exactly")
        check("never joined" in str(got.get("e1")),
              f"rank {r}: epoch 1 without its third member fails: {got.get('e1')}")
        check(got.get("after") == -errno.ENOTCONN,
              f"rank {r}: calls after the failed re-form raise ENOTCONN: {got.get('after')}")
        check(got.get("sent2", 0) >= got.get("sent0", 1) > 0,
              f"rank {r}: epoch 2 kept the link ({got.get('sent0')} frames sent before, "
              f"{got.get('sent2')} after the re-form)")
        check(got.get("e2") is True, f"rank {r}: epoch 2, renumbered, sums exactly")
    return exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
