#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""torch-allreduce-bench.py - torch.distributed allreduce timing (gloo backend).

The baseline gradwire is measured against: the stock path a PyTorch user
already has. Each rank is one process; rank, world size and the c10d
store come from the env:// variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), so ranks can run in different network namespaces.
--spawn N starts N local ranks instead (loopback).

  --device tcp       Gloo's own tcp device (GLOO_SOCKET_IFNAME picks the
                     interface)
  --device gradwire  GLOO_DEVICE_TRANSPORT=GRADWIRE, libgradwire_gloo_torch.so
                     loaded first (--lib); GRADWIRE_* variables apply

For each size: warm-up calls, then --iters calls of dist.all_reduce on
float32 ones, each after a barrier; a call's time is the slowest rank's,
and the size's time is the median. Rank 0 prints one JSON line per size:
{"bytes", "time_us", "busbw_gbps", "device", "ranks", "ok"}; "ok" says the
sum was exact (every element equals the world size).
"""
import argparse
import ctypes
import datetime
import json
import os
import socket
import statistics
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:  # pragma: no cover
    print(f"SKIP: no torch in {sys.executable}: {e}")
    sys.exit(77)


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def sizes_of(args):
    out, b = [], parse_size(args.begin)
    while b <= parse_size(args.end):
        out.append(b)
        b *= args.factor
    return out


def run(args):
    if args.device == "gradwire":
        ctypes.CDLL(args.lib, mode=ctypes.RTLD_GLOBAL)
        os.environ["GLOO_DEVICE_TRANSPORT"] = "GRADWIRE"
    # torch 2.4+ starts env://'s store on libuv; Debian's torch 2.6 lacks it.
    os.environ.setdefault("USE_LIBUV", "0")
    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    rank, size = dist.get_rank(), dist.get_world_size()
    for nbytes in sizes_of(args):
        n = max(nbytes // 4, 1)
        t = torch.ones(n)
        for _ in range(args.warmup):
            t.fill_(1.0)
            dist.all_reduce(t)
        times = []
        ok = True
        for _ in range(args.iters):
            t.fill_(1.0)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - t0)
            ok = ok and bool(torch.all(t == float(size)))
        # the slowest rank's time for each call
        tt = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        okt = torch.tensor([0 if ok else 1])
        dist.all_reduce(okt)
        if rank == 0:
            med = statistics.median(tt.tolist())
            busbw = nbytes / med / 1e9 * 2 * (size - 1) / size
            print(json.dumps({"bytes": nbytes, "time_us": round(med * 1e6, 1),
                              "busbw_gbps": round(busbw, 4), "device": args.device,
                              "ranks": size, "ok": int(okt) == 0}), flush=True)
    dist.destroy_process_group()


def spawned(rank, args, port):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(args.spawn),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    run(args)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("tcp", "gradwire"), default="tcp")
    p.add_argument("--lib", default=os.environ.get("GW_GLOO_LIB", ""),
                   help="libgradwire_gloo_torch.so (--device gradwire)")
    p.add_argument("-b", "--begin", default="1M")
    p.add_argument("-e", "--end", default="64M")
    p.add_argument("-f", "--factor", type=int, default=4)
    p.add_argument("-w", "--warmup", type=int, default=2)
    p.add_argument("-i", "--iters", type=int, default=5)
    p.add_argument("--timeout-s", type=int, default=120)
    p.add_argument("--spawn", type=int, default=0,
                   help="start this many local ranks (loopback)")
    args = p.parse_args()
    if args.device == "gradwire" and not os.path.exists(args.lib):
        print(f"SKIP: --device gradwire needs --lib (got '{args.lib}')")
        sys.exit(77)
    torch.set_num_threads(1)
    if args.spawn:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(spawned, args=(args, port), nprocs=args.spawn)
    else:
        run(args)


if __name__ == "__main__":
    main()
