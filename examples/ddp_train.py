#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""ddp_train.py - PyTorch DDP training whose gradients travel over gradwire.

Launch it like any env:// job, one process per rank (on each host):

    MASTER_ADDR=host0 MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 python3 ddp_train.py --codec int8
    MASTER_ADDR=host0 MASTER_PORT=29500 WORLD_SIZE=2 RANK=1 python3 ddp_train.py --codec int8

or let it start N processes on this host itself:

    python3 ddp_train.py --spawn 2 --codec int8 --steps 50

With --fsdp (torch >= 2.0) the model is FSDP1's instead (FullyShardedDataParallel
on the CPU, one unit per Linear) and gradwire reduce-scatters its gradients
(gradwire.torch.fsdp_hook): each rank's part of a shard goes to the shard's
owner only, compressed once.

The only gradwire lines are marked "gradwire:". The model is a small MLP
learning a synthetic classification task, so the script needs no dataset.
Rank 0 prints the loss, the step time and the bytes this rank put on the
wire per step (the link's, after compression) against what an exact ring
allreduce would send (--fsdp: FSDP's own reduce-scatter).
"""
import argparse
import datetime
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import gradwire.torch as gwt


def dataset(n=8192, features=256, classes=10):
    """The same synthetic data on every rank: points labelled by a fixed
    random linear map (each rank trains on its own shard of it)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=g)
    y = (x @ torch.randn(features, classes, generator=g)).argmax(dim=1)
    return TensorDataset(x, y)


def train(args):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # gradwire reads its GRADWIRE_* variables when the first State is made.
    os.environ["GRADWIRE_CODEC"] = args.codec
    torch.set_num_threads(1)
    # torch 2.4+ starts env://'s store on libuv, which Debian's torch lacks.
    if "USE_LIBUV" not in os.environ and gwt.libuv_missing():
        os.environ["USE_LIBUV"] = "0"
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(minutes=30))

    torch.manual_seed(0)  # the same initial weights on every rank
    net = nn.Sequential(nn.Linear(256, 512), nn.ReLU(),
                        nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    if args.fsdp:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        model = FSDP(net, device_id=torch.device("cpu"),
                     auto_wrap_policy=ModuleWrapPolicy({nn.Linear}))
        # gradwire: connect the ranks, then let it reduce-scatter FSDP's gradients.
        state = gwt.FsdpState(warmup_steps=args.warmup, stats=True)
        model.register_comm_hook(state, gwt.fsdp_hook)
    else:
        model = DDP(net)
        # gradwire: connect the ranks, then let it allreduce DDP's gradient buckets.
        state = gwt.State(warmup_steps=args.warmup, stats=True)
        model.register_comm_hook(state, gwt.hook)
    exact_name = "FSDP's reduce-scatter" if args.fsdp else "exact ring"

    data = dataset()
    loader = DataLoader(data, batch_size=args.batch,
                        sampler=DistributedSampler(data, world, rank, seed=0))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if rank == 0:
        print(f"{world} ranks, codec {args.codec} (links negotiated "
              f"{sorted(set(state.codecs.values()))}), {args.steps} steps", flush=True)

    step, times, wire, exact = 0, [], [], []
    epoch = 0
    while step < args.steps:
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            t = time.perf_counter()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()  # DDP (FSDP) calls the hook on each bucket (flat parameter)
            opt.step()
            times.append(time.perf_counter() - t)
            wire.append(state.last["wire_bytes"])  # gradwire: this step's bytes
            exact.append(state.last["exact_bytes"])
            if rank == 0 and (step % args.log_every == 0 or step == args.steps - 1):
                print(f"step {step:4d}  loss {loss.item():.4f}  {times[-1] * 1e3:7.1f} ms  "
                      f"{wire[-1]:>9} bytes sent ({exact_name}: {exact[-1]})", flush=True)
            step += 1
            if step == args.steps:
                break
        epoch += 1

    if rank == 0:
        later = slice(min(args.warmup, len(times) - 1), None)  # after warm-up
        n = len(times[later])
        print(f"mean over steps {later.start}-{len(times) - 1}: "
              f"{sum(times[later]) / n * 1e3:.1f} ms a step, "
              f"{sum(wire[later]) / n:.0f} bytes a step on the wire, "
              f"{sum(exact[later]) / max(1, sum(wire[later])):.2f}x less than {exact_name}",
              flush=True)
    state.close()  # gradwire: close its connections
    dist.destroy_process_group()


def spawned(rank, world, args):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
    train(args)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--codec", default=os.environ.get("GRADWIRE_CODEC", "int8"),
                   help="GRADWIRE_CODEC: none, fp16, bf16, int8, topk:ratio=0.01, "
                        "powersgd:rank=4, ... (default: $GRADWIRE_CODEC, else int8)")
    p.add_argument("--steps", type=int, default=100, help="training steps (100)")
    p.add_argument("--warmup", type=int, default=0,
                   help="first steps sent exactly, before compressing (0)")
    p.add_argument("--fsdp", action="store_true",
                   help="train with FSDP1 and gradwire's fsdp hook (torch >= 2.0)")
    p.add_argument("--batch", type=int, default=64, help="batch size per rank (64)")
    p.add_argument("--log-every", type=int, default=10, help="print every N steps (10)")
    p.add_argument("--spawn", type=int, metavar="N",
                   help="start N ranks on this host (over 127.0.0.1) instead of "
                        "reading RANK and WORLD_SIZE from the environment")
    args = p.parse_args()
    if args.spawn:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if "MASTER_PORT" not in os.environ:
            with socket.socket() as s:  # a free port for the rendezvous
                s.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(s.getsockname()[1])
        mp.spawn(spawned, args=(args.spawn, args), nprocs=args.spawn)
    else:
        train(args)


if __name__ == "__main__":
    main()
