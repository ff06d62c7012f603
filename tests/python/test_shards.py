#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""test_shards.py - Context.reduce_scatter() and allgather_f32() with the
shards given as counts per rank (gradwire.lib), 2 processes, int8 links.

- counts [0, n]: rank 0's shard is empty, rank 1 holds the whole sum;
  [613, 387] with the average: each rank its own part, exact;
  shard_bounds(n, counts=...) names those parts;
- allgather_f32 with the same counts: every rank ends with both parts,
  exactly; with GRADWIRE_LOSSY within int8's error, the replicas identical;
- a lossy reduce-scatter given counts: within int8's error;
- counts that do not sum to n: ValueError before any call;
- ranks that pass different counts: both raise GradwireError, its text
  saying the counts differ.
Needs no PyTorch. GW_LIB names libgradwire.so.
"""
import ctypes
import json
import math
import multiprocessing as mp
import os
import sys
import tempfile
import time

from checks import check, exit_code  # noqa: E402 (beside this file)

ENV = {"GRADWIRE_IFACE": "lo", "GRADWIRE_TIMEOUT_MS": "8000", "GRADWIRE_LOG": "error",
       "GRADWIRE_CODEC": "int8", "GRADWIRE_MIN_COMPRESS_BYTES": "64"}
N = 1000
WORLD = 2


def data(rank, n=N):
    """Rank's values: small integers, so that sums of them are exact."""
    return [float((rank + 1) * (i % 97) - 40) for i in range(n)]


def total(n=N):
    return [sum(data(r, n)[i] for r in range(WORLD)) for i in range(n)]


def rel_err(got, want):
    e = sum((a - b) ** 2 for a, b in zip(got, want))
    t = sum(b * b for b in want)
    return math.sqrt(e / t) if t else math.sqrt(e)


def worker(rank, folder):
    os.environ.update(ENV)
    from gradwire import lib as gwlib
    res = {"rank": rank}
    ctx = gwlib.Context.create_file(gwlib.load(), rank, WORLD, folder + "/store")
    buf = (ctypes.c_float * N)()
    want = total()

    def fill():
        buf[:] = data(rank)

    fill()
    ctx.reduce_scatter(1, buf, N, gwlib.GRADWIRE_SUM, counts=[0, N])
    off, cnt = ctx.shard_bounds(N, counts=[0, N])
    res["empty"] = [off, cnt, list(buf[off:off + cnt]) == want[off:off + cnt]]

    fill()
    ctx.reduce_scatter(2, buf, N, gwlib.GRADWIRE_AVG, counts=[613, 387])
    off, cnt = ctx.shard_bounds(N, counts=[613, 387])
    res["uneven"] = [off, cnt, list(buf[off:off + cnt]) == [w / 2 for w in want[off:off + cnt]]]

    gathered = []
    for flags in (0, gwlib.GRADWIRE_LOSSY):
        buf[:] = [float(rank)] * N
        mine = data(rank)
        buf[off:off + cnt] = mine[off:off + cnt]
        ctx.allgather_f32(3 + flags, buf, N, flags, counts=[613, 387])
        parts = [data(r)[slice(*((0, 613) if r == 0 else (613, N)))] for r in range(WORLD)]
        gathered.append(rel_err(list(buf), parts[0] + parts[1]))
        res[f"gather_bits_{flags}"] = bytes(buf).hex()
    res["gather_err"] = gathered

    fill()
    ctx.reduce_scatter(5, buf, N, gwlib.GRADWIRE_SUM, gwlib.GRADWIRE_LOSSY, counts=[700, 300])
    off, cnt = ctx.shard_bounds(N, counts=[700, 300])
    res["lossy_err"] = rel_err(list(buf[off:off + cnt]), want[off:off + cnt])

    try:
        ctx.reduce_scatter(6, buf, N, counts=[1, 2])
        res["bad_sum"] = "no error"
    except ValueError as e:
        res["bad_sum"] = str(e)

    try:
        ctx.reduce_scatter(7, buf, N, counts=[500, 500] if rank == 0 else [400, 600])
        res["differ"] = "no error"
    except gwlib.GradwireError as e:
        res["differ"] = str(e)
    ctx.close()
    with open(os.path.join(folder, f"out-{rank}.json"), "w") as f:
        json.dump(res, f)


def main():
    folder = tempfile.mkdtemp(prefix="gradwire-shards-")
    os.mkdir(folder + "/store")
    procs = [mp.get_context("spawn").Process(target=worker, args=(r, folder))
             for r in range(WORLD)]
    t = time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.join(max(0.1, 60 - (time.monotonic() - t)))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    check(all(p.exitcode == 0 for p in procs), f"exit codes {[p.exitcode for p in procs]}")
    out = []
    for r in range(WORLD):
        path = os.path.join(folder, f"out-{r}.json")
        out.append(json.load(open(path)) if os.path.exists(path) else None)
    if None in out:
        check(False, "every rank wrote its result")
        return exit_code()
    for o in out:
        r = o["rank"]
        check(o["empty"] == [0, 0 if r == 0 else N, True],
              f"rank {r}: counts [0, {N}]: shard {o['empty'][:2]}, exact")
        check(o["uneven"] == [0 if r == 0 else 613, 613 if r == 0 else 387, True],
              f"rank {r}: counts [613, 387], average: shard {o['uneven'][:2]}, exact")
        check(o["gather_err"][0] == 0 and o["gather_err"][1] < 0.02,
              f"rank {r}: allgather by counts: exact {o['gather_err'][0]}, "
              f"lossy rel err {o['gather_err'][1]:.4f}")
        check(o["lossy_err"] < 0.02, f"rank {r}: lossy reduce-scatter by counts: "
              f"rel err {o['lossy_err']:.4f}")
        check("summing to 1000" in o["bad_sum"], f"rank {r}: bad counts: {o['bad_sum']}")
        check("counts per rank differ" in o["differ"],
              f"rank {r}: different counts: {o['differ'][:160]}")
    check(out[0]["gather_bits_1"] == out[1]["gather_bits_1"],
          "lossy allgather by counts: replicas identical")
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
