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
- python3 -m gradwire.store serves a TCPStore in a process of its own: two
  clients meet through it, a client's get that timed out leaves that client
  working, a client process killed after its set leaves
  the key served, SIGTERM stops it (status 0) within seconds, and a port
  in use ends a second one with status 1 and the reason.
Exit 77 when torch is missing. GW_LIB names libgradwire.so.
"""
import datetime
import errno
import os
import signal
import subprocess
import sys
import time

from checks import check, exit_code, require_torch  # noqa: E402 (beside this file)

require_torch()
import torch.distributed as dist  # noqa: E402

os.environ.update({"GRADWIRE_IFACE": "lo", "GRADWIRE_TIMEOUT_MS": "1500",
                   "GRADWIRE_LOG": "error"})
from gradwire import lib as gwlib  # noqa: E402
from gradwire.store import tcp_store  # noqa: E402
from gradwire.torch import c10d_store_fns  # noqa: E402


def store_fns():
    base = dist.HashStore()
    set_fn, get_fn = c10d_store_fns(base, "t/0")
    blob = bytes(range(256)) * 3
    set_fn("gw/a", blob)
    check(get_fn("gw/a", 1000) == blob, "binary value round-trips")
    check(base.num_keys() == 2 and base.get("t/0/gw/a") == blob and
          base.add("t/0/gw/a#set", 0) == 1, "keys (and their set marks) live under the prefix")
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


def client(port):
    """A TCPStore client of 127.0.0.1:port, 10 s timeout."""
    return tcp_store("127.0.0.1", port, is_master=False,
                     timeout=datetime.timedelta(seconds=10))


def start_server(port):
    """python3 -m gradwire.store --port port; (process, its first line)."""
    p = subprocess.Popen([sys.executable, "-m", "gradwire.store", "--port", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p, p.stdout.readline().strip()	# it exits on error: never blocks for long


def standalone_store():
    p, line = start_server(0)
    try:
        ok = line.startswith("gradwire.store: serving on 127.0.0.1:")
        check(ok, f"the store says where it serves: '{line}'")
        if not ok:
            return
        port = int(line.split(":")[2].split()[0])
        a, b = client(port), client(port)
        a.set("k", b"from a")
        check(b.get("k") == b"from a", "two clients meet through it")
        # A key not there in time leaves the client working (a timed-out
        # TCPStore wait() would not: torch 1.13 fails its next call).
        _, get_fn = c10d_store_fns(b, "t")
        set_fn, _ = c10d_store_fns(a, "t")
        missing = get_fn("gw/late", 100)
        set_fn("gw/late", b"late")
        check(missing is None and get_fn("gw/late", 1000) == b"late" and b.get("k") == b"from a",
              "a get that timed out over a TCPStore client: that client still works")
        code = (f"import os, signal, sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
                f"from test_store import client\nclient({port}).set('dead', b'before dying')\n"
                "os.kill(os.getpid(), signal.SIGKILL)\n")
        k = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True)
        check(k.returncode == -signal.SIGKILL and b.get("dead") == b"before dying",
              "a client killed after its set: the key is still served")
        q, qline = start_server(port)
        try:
            err = q.communicate(timeout=60)[1].strip()
        except subprocess.TimeoutExpired:
            q.kill()
            err = "still running"
        check(q.returncode == 1 and f"cannot serve on port {port}" in err,
              f"a second store on its port: status {q.returncode}, '{(err.splitlines() or [''])[-1]}'")
        t = time.monotonic()
        p.send_signal(signal.SIGTERM)
        out = p.communicate(timeout=30)[0]
        dt = time.monotonic() - t
        check(p.returncode == 0 and "stopped (SIGTERM)" in out and dt < 10,
              f"SIGTERM stops it: status {p.returncode} after {dt:.2f} s")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def main():
    store_fns()
    callbacks()
    unknown_variable()
    standalone_store()
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
