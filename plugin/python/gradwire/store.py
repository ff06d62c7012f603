# SPDX-License-Identifier: MIT
"""python3 -m gradwire.store - a rendezvous store in a process of its own.

Serves torch's TCPStore until SIGTERM or SIGINT, so that no trainer holds
the job's store: any of them may die, the first one started included, and
the others still meet through it. Trainers reach it as a client, e.g.

    python3 -m gradwire.store --port 29400 &          # on one host
    store = torch.distributed.TCPStore("storehost", 29400, is_master=False)
    torch.distributed.init_process_group("gloo", store=store, rank=r, world_size=n)

--port 0 takes a free port. The first line on stdout says where it serves:
"gradwire.store: serving on HOST:PORT (pid N)"; then it waits. torch's
TCPStore listens on every interface of the host on that port; --host is
the name clients reach it by (default: 127.0.0.1), which the store's own
client connects through too, so it must name this host. On a torch built
without libuv whose store asks for it (Debian's 2.6) it asks for none.
Errors (a port in use, no torch) end it with status 1 and one line saying
why.
"""
import argparse
import datetime
import os
import signal
import sys
import time

# Beside each key that poll_get() waits for, a counter its writer adds to
# after the set (set_marked()).
SET_MARK = "#set"
POLL_MAX_S = 0.02


def set_marked(store, key, value):
    """store.set(key, value), then mark it set for poll_get()."""
    store.set(key, value)
    store.add(key + SET_MARK, 1)


def poll_get(store, key, timeout_s):
    """The value of key (bytes) once a process has set it with set_marked(),
    or None after timeout_s. It polls the key's mark with add(mark, 0),
    which answers at once, and then gets the key. Not wait(keys, timeout):
    a TCPStore client whose wait() timed out is out of step with its server
    (the answer comes later, to the next call; torch 1.13 then fails every
    call on that client with "Socket Timeout"), and one client serves a
    process's whole job. Not compare_set() either: called often beside
    another Python thread, it crashed torch 1.13 (SIGSEGV)."""
    end, pause = time.monotonic() + timeout_s, 0.001
    while True:
        if int(store.add(key + SET_MARK, 0)) > 0:
            return store.get(key)
        left = end - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(pause, left))
        pause = min(2 * pause, POLL_MAX_S)


def tcp_store(host, port, **kw):
    """torch's TCPStore(host, port, None, **kw); on a torch built without
    libuv whose store asks for it (Debian 13's), the same with
    use_libuv=False. For the store's server and its clients alike."""
    import torch.distributed as dist

    try:
        return dist.TCPStore(host, port, None, **kw)
    except RuntimeError as e:
        if "libuv" not in str(e):
            raise
        return dist.TCPStore(host, port, None, use_libuv=False, **kw)


def serve(host, port, timeout_s):
    """Start the store (the caller keeps the object alive); it and its port."""
    store = tcp_store(host, port, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=timeout_s))
    return store, store.port


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m gradwire.store", description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, required=True, help="TCP port (0: a free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="the name clients reach it by; it must name this host (127.0.0.1)")
    p.add_argument("--timeout-s", type=float, default=300.0,
                   help="the store's timeout for its own operations (300)")
    a = p.parse_args(argv)
    if not 0 <= a.port <= 65535:
        p.error(f"--port {a.port}: not a TCP port")
    # Blocked before the store's threads start, so they inherit it: the two
    # signals wait for sigwait() below, wherever they are delivered.
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    try:
        store, port = serve(a.host, a.port, a.timeout_s)
    except ImportError as e:
        print(f"gradwire.store: PyTorch is needed ({e}); Debian: apt-get install "
              "python3-torch", file=sys.stderr)
        return 1
    except (RuntimeError, OSError) as e:
        print(f"gradwire.store: cannot serve on port {a.port}: {e}", file=sys.stderr)
        return 1
    print(f"gradwire.store: serving on {a.host}:{port} (pid {os.getpid()})",
          flush=True)
    got = signal.sigwait(stop)
    del store
    print(f"gradwire.store: stopped ({signal.Signals(got).name})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
