#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""elastic_train.py - training that goes on when a rank dies or joins
(gradwire.elastic.Elastic over a store of its own).

    python3 -m gradwire.store --port 29400 &
    examples/elastic_train.py --store 127.0.0.1:29400 --rank 0 --world 3 --steps 200 &
    examples/elastic_train.py --store 127.0.0.1:29400 --rank 1 --world 3 --steps 200 &
    examples/elastic_train.py --store 127.0.0.1:29400 --rank 2 --world 3 --steps 200 &
    # later, a new process:
    examples/elastic_train.py --store 127.0.0.1:29400 --join --steps 200

One JSON object per completed step on stdout: {"step", "rank", "world",
"epoch", "loss", "params_sha" (SHA-256 of every parameter's bytes after the
step), "t" (time.time() at its end)}. Progress and re-forms go to stderr.
It stops after step --steps (without it, at SIGTERM), and exits 0 on
SIGTERM; a joiner the members refuse (another MAC key, no codec in common)
exits 3 saying why. --plain trains the same without elasticity (DDP with
gradwire's hook), the baseline of the overhead figure. --ballast-mb adds
state that is not trained (a buffer), so a joiner's transfer can be made
large; --compute-ms makes each step take that much longer without using
the CPU, as an accelerator's compute would. The model and data are the
DDP benchmark's MLP shape on a teacher-student task: each rank's batch of
a step is drawn from (seed, step, rank, world), so a step redone after a
re-form takes new data of the new layout.
"""
import argparse
import datetime
import faulthandler
import hashlib
import json
import os
import signal
import sys
import time

# From a source tree, its package; installed, the installed one.
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugin",
                   "python")
if os.path.isdir(os.path.join(SRC, "gradwire")):
    sys.path.insert(0, SRC)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

from gradwire.elastic import Elastic, Refused  # noqa: E402
from gradwire.store import tcp_store  # noqa: E402

IN, OUT, BATCH, HELD_OUT = 64, 10, 32, 8192


def model(ballast_mb=0, seed=0):
    """The MLP; ballast_mb MiB of state beside it (a buffer, not trained),
    which a joiner's healing transfer carries like the rest."""
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(IN, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                      nn.Linear(256, OUT))
    if ballast_mb:
        m.register_buffer("ballast", torch.randn(ballast_mb << 18))
    return m


def batch(step, rank, world, seed=0, n=BATCH):
    g = torch.Generator().manual_seed(1_000_003 * step + 7919 * rank + world + 104_729 * seed)
    x = torch.randn(n, IN, generator=g)
    teacher = torch.Generator().manual_seed(1234)
    w = torch.randn(IN, OUT, generator=teacher)
    return x, (x @ w).argmax(dim=1)


def accuracy(m):
    """The share of HELD_OUT examples (data no step draws) classed right."""
    x, y = batch(-1, -1, -1, n=HELD_OUT)
    with torch.no_grad():
        return float((m(x).argmax(dim=1) == y).float().mean())


def params_sha(m):
    h = hashlib.sha256()
    for p in m.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def store_of(spec, timeout_s):
    host, _, port = spec.rpartition(":")
    return tcp_store(host, int(port), is_master=False,
                     timeout=datetime.timedelta(seconds=timeout_s))


def plain(a, m, opt, stop):
    """The same training without elasticity: DDP with gradwire's hook (its
    default State, which overlaps the wire with backward) over a process
    group of the store, printing the same lines."""
    import gradwire.torch as gwt
    from torch.nn.parallel import DistributedDataParallel as DDP

    store = dist.PrefixStore(f"{a.job}/plain", store_of(a.store, 60))
    dist.init_process_group("gloo", store=store, rank=a.rank, world_size=a.world)
    ddp = DDP(m)
    state = gwt.State()
    ddp.register_comm_hook(state, gwt.hook)
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    while not stop and (a.steps is None or step < a.steps):
        x, y = batch(step, a.rank, a.world, a.seed)
        time.sleep(a.compute_ms / 1000)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        step += 1
        print(json.dumps({"step": step, "rank": a.rank, "world": a.world, "epoch": 0,
                          "loss": float(loss.detach()), "params_sha": params_sha(m),
                          "t": time.time()}), flush=True)
    state.close()
    dist.destroy_process_group()
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", required=True, help="HOST:PORT of the store")
    p.add_argument("--rank", type=int)
    p.add_argument("--world", type=int)
    p.add_argument("--join", action="store_true", help="join a running job")
    p.add_argument("--codec", help="GRADWIRE_CODEC (default: the variable's)")
    p.add_argument("--steps", type=int, help="stop after this step (default: at SIGTERM)")
    p.add_argument("--min-size", type=int, default=1)
    p.add_argument("--job", default="elastic")
    p.add_argument("--settle-s", type=float, default=2.0)
    p.add_argument("--dead-s", type=float, default=5.0,
                   help="a member silent this long while an epoch forms is gone")
    p.add_argument("--seed", type=int, default=0, help="the model's and the data's")
    p.add_argument("--ballast-mb", type=int, default=0,
                   help="MiB of state beside the model (a joiner's transfer; the same on all)")
    p.add_argument("--compute-ms", type=float, default=0,
                   help="sleep this long in each step, as an accelerator's compute would "
                        "take time without taking the CPU (benchmarks on few cores)")
    p.add_argument("--plain", action="store_true",
                   help="no elasticity: DDP with gradwire's hook (the overhead's baseline)")
    a = p.parse_args()
    if a.join == (a.rank is not None) or (a.rank is not None) != (a.world is not None):
        p.error("give --rank R --world N, or --join")
    if a.plain and a.join:
        p.error("--plain runs a fixed set of ranks: no --join")
    if a.codec:
        os.environ["GRADWIRE_CODEC"] = a.codec
    torch.set_num_threads(1)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    faulthandler.enable(all_threads=True)	# a crash prints every thread's stack
    faulthandler.register(signal.SIGUSR1, all_threads=True)	# where a stuck rank is

    def log(msg):
        print(f"elastic[{os.getpid()}]: {msg}", file=sys.stderr, flush=True)

    log(f"torch imported, t {time.time():.3f}")

    m = model(a.ballast_mb, a.seed)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    if a.plain:
        return plain(a, m, opt, stop)
    el = Elastic(m, opt, store_of(a.store, 60), job=a.job, min_size=a.min_size,
                 settle_s=a.settle_s, log=log, dead_s=a.dead_s)
    if a.join:
        try:
            if not el.join(stop=lambda: bool(stop)):
                log("stopped before it was admitted")
                return 0
        except Refused as e:
            log(str(e))
            return 3
    else:
        el.start(a.rank, a.world)
    loss_fn = nn.CrossEntropyLoss()
    while not stop and (a.steps is None or el.step < a.steps):
        step = el.step

        def compute():
            x, y = batch(step, el.rank, el.world, a.seed)
            time.sleep(a.compute_ms / 1000)
            return loss_fn(m(x), y)
        loss = el.train_step(compute)
        if loss is None:
            continue
        print(json.dumps({"step": el.step, "rank": el.rank, "world": el.world,
                          "epoch": el.epoch, "loss": loss, "params_sha": params_sha(m),
                          "t": time.time()}), flush=True)
    log(f"accuracy {accuracy(m):.4f} on {HELD_OUT} held-out examples after step {el.step}")
    el.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
