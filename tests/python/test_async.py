#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""test_async.py - the asynchronous DDP hook (gradwire.torch, the default).

Two processes (torch.multiprocessing, gloo and gradwire over lo), int8 with
error feedback, an MLP cut into several DDP buckets:
- overlap: the hook returns futures that are not yet done (a synchronous
  State's are), and the model ends bit-identical to State(sync=True)'s on
  the same data, on both ranks;
- a killed peer: rank 1 SIGKILLs itself after 3 steps; with
  GRADWIRE_TIMEOUT_MS at 60 s rank 0's backward raises an error naming rank
  1 within 2 s of the kill (transport/live.c: its connection closed), and
  its close() and exit follow promptly;
- cancel: with the peer absent, a queued allreduce not yet started ends
  with ECANCELED at once, the running one with a timeout, and close()
  returns within the timeout;
- exit: a process that never calls close() exits 0 at once (the State
  closes at exit);
- an exception in the middle of backward (a hook that raises on one rank):
  both processes end, neither hangs, the other's error names the first;
- an exception inside gradwire's hook on rank 0, which then stays alive
  with its State open (so only the revoke can tell rank 1): with
  GRADWIRE_TIMEOUT_MS at 60 s, rank 1's backward raises within 1 s of the
  exception, naming rank 0 and the exception.
Exit 77 when torch is missing. GW_LIB names libgradwire.so.
"""
import errno
import hashlib
import os
import signal
import sys
import tempfile
import time

from checks import check, exit_code, require_torch  # noqa: E402 (beside this file)

require_torch()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


TIMEOUT_MS = 3000
ENV = {"GRADWIRE_IFACE": "lo", "GLOO_SOCKET_IFNAME": "lo", "GRADWIRE_LOG": "error",
       "GRADWIRE_CODEC": "int8", "GRADWIRE_MIN_COMPRESS_BYTES": "4K",
       "GRADWIRE_TIMEOUT_MS": str(TIMEOUT_MS)}


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 8))


def digest(m):
    h = hashlib.sha256()
    for p in m.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def train(gwt, rank, steps, sync, hook_wrap=None, leave_after=None):
    """DDP training; (digest, [future done at return?], State)."""
    m = model()
    ddp = DDP(m, bucket_cap_mb=0.1)
    state = gwt.State(sync=sync)
    done_at_return = []

    def spy(st, bucket):
        if hook_wrap:
            hook_wrap(st, bucket)
        fut = gwt.hook(st, bucket)
        done_at_return.append(fut.done())
        return fut

    ddp.register_comm_hook(state, spy)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(10 + rank)
    for step in range(steps):
        if leave_after is not None and step == leave_after:
            with open(os.environ["GW_KILL_STAMP"], "w") as f:
                f.write(repr(time.monotonic()))	# one clock for every process
            os.kill(os.getpid(), signal.SIGKILL)	# no close, no goodbye
        x = torch.randn(32, 64, generator=gen)
        opt.zero_grad(set_to_none=True)
        ddp(x).square().mean().backward()
        opt.step()
    return digest(m), done_at_return, state


def worker(case, rank, folder):
    os.environ.update(ENV)
    os.environ["GW_KILL_STAMP"] = os.path.join(folder, "killed")
    if case in ("dead", "revoke"):	# only the liveness socket makes it fast
        os.environ["GRADWIRE_TIMEOUT_MS"] = "60000"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/pg", rank=rank,
                            world_size=2)
    import gradwire.torch as gwt
    from gradwire import lib as gwlib
    out = []

    def say(ok, what):
        out.append(("ok   " if ok else "FAIL ") + " ".join(what.split()))

    if case == "overlap":
        d_sync, done_sync, st = train(gwt, rank, 20, sync=True)
        st.close()
        d_async, done_async, st = train(gwt, rank, 20, sync=False)
        st.close()
        say(all(done_sync), f"sync: {len(done_sync)} futures, all done at return")
        say(not all(done_async), f"async: {done_async.count(False)} of {len(done_async)} "
            "futures still travelling when the hook returned")
        say(d_sync == d_async, "async ends bit-identical to sync after 20 steps")
        out.append("digest " + d_async)
    elif case == "dead":
        if rank == 1:
            train(gwt, rank, 10, sync=False, leave_after=3)
        try:
            train(gwt, rank, 10, sync=False)
            say(False, "rank 1 killed: no error on rank 0")
        except Exception as e:  # noqa: BLE001 - what DDP raises
            t = time.monotonic()
            with open(os.environ["GW_KILL_STAMP"]) as f:
                dt = t - float(f.read())
            say("rank 1" in str(e), f"rank 1 killed: the error names it: {str(e)[:200]}")
            say(dt < 2.0, f"the error came {dt:.2f} s after the kill "
                f"(GRADWIRE_TIMEOUT_MS {os.environ['GRADWIRE_TIMEOUT_MS']})")
        t = time.monotonic()
        for st in list(gwt._open_states):
            st.close()
        say(time.monotonic() - t < (TIMEOUT_MS + 2000) / 1000,
            f"close() after the failure took {time.monotonic() - t:.2f} s")
    elif case == "cancel":
        st = gwt.State(sync=False)
        dist.barrier()
        if rank == 1:
            time.sleep((2 * TIMEOUT_MS + 2000) / 1000)	# absent, then leaves
            st.close()
        else:
            x = torch.ones(4096)
            y = torch.ones(4096)
            t1 = st._queue.submit(5, x.data_ptr(), x.numel())
            t2 = st._queue.submit(6, y.data_ptr(), y.numel())
            time.sleep(0.2)
            t = time.monotonic()
            st._queue.cancel()
            try:
                st._queue.wait(t2)
                say(False, "a cancelled ticket succeeded")
            except gwlib.GradwireError as e:
                say(e.code == -errno.ECANCELED,
                    f"the waiting ticket ends at once ({time.monotonic() - t:.2f} s): {e}")
            try:
                st._queue.wait(t1)
                say(False, "the running ticket succeeded without its peer")
            except gwlib.GradwireError as e:
                say("ETIMEDOUT" in str(e) or "rank 1" in str(e),
                    f"the running ticket fails: {str(e)[:160]}")
            t = time.monotonic()
            st.close()
            say(time.monotonic() - t < (TIMEOUT_MS + 1000) / 1000,
                f"close() took {time.monotonic() - t:.2f} s")
    elif case == "exit":
        train(gwt, rank, 3, sync=False)		# the State stays open
    elif case == "raise":
        calls = [0]

        def boom(st, bucket):
            calls[0] += 1
            if rank == 0 and calls[0] == 5:
                raise ValueError("a user error in the middle of backward")
        try:
            train(gwt, rank, 10, sync=False, hook_wrap=boom)
            say(rank != 0, "the raising hook's rank trained on")
        except Exception as e:  # noqa: BLE001
            say(rank == 0 and "user error" in str(e) or rank == 1 and "rank 0" in str(e),
                f"rank {rank} ends with: {str(e)[:160]}")
    elif case == "revoke":
        stamp = os.path.join(folder, "raised")
        calls = [0]

        def raise_inside(st, bucket):	# gradwire's own hook raises on rank 0
            calls[0] += 1
            if rank == 0 and calls[0] == 5:
                def broken(*_):
                    with open(stamp, "w") as f:
                        f.write(repr(time.monotonic()))
                    raise RuntimeError("injected inside the hook")
                st.reduce_bucket = broken
        try:
            train(gwt, rank, 10, sync=False, hook_wrap=raise_inside)
            say(False, f"rank {rank} trained on")
        except Exception as e:  # noqa: BLE001 - what DDP raises
            t = time.monotonic()
            if rank == 0:
                say("injected" in str(e), f"rank 0 raises its own error: {str(e)[:120]}")
                time.sleep(3)	# alive, State open: only the revoke tells rank 1
            else:
                with open(stamp) as f:
                    dt = t - float(f.read())
                say("rank 0 revoked" in str(e) and "injected inside the hook" in str(e),
                    f"rank 1's error names rank 0 and why: {str(e)[:240]}")
                say(dt < 1.0, f"rank 1 failed {dt:.2f} s after rank 0's hook raised "
                    f"(GRADWIRE_TIMEOUT_MS {os.environ['GRADWIRE_TIMEOUT_MS']})")
        for st in list(gwt._open_states):
            st.close()
    with open(os.path.join(folder, f"out-{rank}"), "w") as f:
        f.write("\n".join(out) + "\n")


def run(case, expect_exit=(0, 0), limit_s=60):
    folder = tempfile.mkdtemp(prefix="gradwire-async-")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(case, r, folder)) for r in range(2)]
    t = time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.join(max(0.1, limit_s - (time.monotonic() - t)))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    check(not hung, f"{case}: both processes ended within {limit_s} s "
          f"({time.monotonic() - t:.1f} s){'; hung: ' + str(hung) if hung else ''}")
    codes = tuple(p.exitcode for p in procs)
    check(all(e is None or c == e for c, e in zip(codes, expect_exit)),
          f"{case}: exit codes {codes}")
    lines = []
    for r in range(2):
        path = os.path.join(folder, f"out-{r}")
        if os.path.exists(path):
            with open(path) as f:
                lines += [f"rank {r}: {x}" for x in f.read().splitlines() if x]
    for x in lines:
        if x.split(": ", 1)[1].startswith("digest"):
            continue
        check(" ok " in x or x.split(": ", 1)[1].startswith("ok"), f"{case}: {x}")
    return lines


def main():
    lines = run("overlap")
    digests = {x.split()[-1] for x in lines if "digest" in x}
    check(len(digests) == 1, "overlap: the two replicas are identical")
    run("dead", expect_exit=(0, -signal.SIGKILL))
    run("cancel")
    run("exit", limit_s=40)
    run("raise", expect_exit=(None, None), limit_s=40)
    run("revoke", limit_s=40)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
