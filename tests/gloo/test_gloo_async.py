#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""test_gloo_async.py - many rounds of concurrent async allreduces over the
GRADWIRE device (the pattern that hung over net: Gloo's two worker threads,
one waiting while the other destroys its buffers and starts the next
allreduce), with every result checked against the sum computed here.

Usage: test_gloo_async.py LIB NPROCS ROUNDS. Exit 77 (skip) without torch or
LIB. A hang ends at the process group's timeout (20 s) as a failure.
"""
import ctypes
import datetime
import os
import sys

from gloo_setup import SKIP, device_lib, free_port

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:  # pragma: no cover
    print(f"SKIP: no torch in {sys.executable}: {e}")
    sys.exit(SKIP)


def data(rank, n, salt):
    # Small integers: float sums are exact in any order.
    g = torch.Generator().manual_seed(1000 * salt + rank)
    return torch.randint(-64, 64, (n,), generator=g).to(torch.float32)


def worker(rank, size, port, lib, rounds):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      GLOO_DEVICE_TRANSPORT="GRADWIRE")
    ctypes.CDLL(lib)
    dist.init_process_group("gloo", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=20))
    want = [sum(data(r, 20000 + i, 100 + i) for r in range(size)) for i in range(6)]
    for k in range(rounds):
        ts = [data(rank, 20000 + i, 100 + i) for i in range(6)]
        works = [dist.all_reduce(t, async_op=True) for t in ts]
        for i, w in enumerate(works):
            w.wait()
            if not torch.equal(ts[i], want[i]):
                raise AssertionError(f"rank {rank} round {k}: allreduce {i} is wrong")
    dist.destroy_process_group()


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    lib = device_lib(sys.argv[1])
    size, rounds = int(sys.argv[2]), int(sys.argv[3])
    mp.start_processes(worker, args=(size, free_port(), lib, rounds), nprocs=size,
                       start_method="spawn")
    print(f"PASS: {rounds} rounds of 6 concurrent async allreduces on {size} ranks "
          f"over {os.environ.get('GRADWIRE_PROVIDER', 'the default provider')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
