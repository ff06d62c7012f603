#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""test_fsdp.py - gradwire.torch.fsdp_hook: FSDP1 (FullyShardedDataParallel) on CPU.

Two processes (torch.multiprocessing spawn, gloo over lo, gradwire over lo)
train gradwire.synthetic's MLP wrapped in FSDP (FULL_SHARD, one FSDP unit
per Linear: three flat parameters) for STEPS steps of SGD, three ways:
  torch  FSDP without a hook (gloo's reduce-scatter);
  none   fsdp_hook with GRADWIRE_CODEC=none;
  int8   fsdp_hook with GRADWIRE_CODEC=int8;
  noshard  ShardingStrategy.NO_SHARD, fsdp_hook (an allreduce) with none.
gradwire reads GRADWIRE_CODEC once per process, so torch and none share
one pair of processes with noshard, and int8 has its own.
Checks: the full parameters (summon_full_params) are bit-identical on both
ranks after every step, every way; none's are bit-identical to torch's
after every step (two ranks: FSDP's pre-divide by 2, then a sum of two
terms, has one rounding whatever the order), and so are noshard's; int8's final loss is close to
torch's and its parameters within REL_TOL of torch's (over how far those
moved from the start, L2); the
hook's flat parameters got three ids; int8 sends at most 0.35x the bytes
of FSDP's reduce-scatter ((size - 1) / size * 4 bytes an element).

On torch < 2.0 (Debian 12's 1.13): gradwire.torch still imports, and
FsdpState() and fsdp_hook raise an error naming torch 2.0; then exit 77.
GW_LIB names libgradwire.so.
"""
import datetime
import json
import os
import sys
import tempfile
import warnings

from checks import SKIP, check, exit_code, failures, require_torch  # noqa: E402

require_torch("torch.distributed")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402

import synthetic  # noqa: E402 (tests/python, beside this file)

STEPS = 20
# int8 (with error feedback) against exact averaging after STEPS steps, in
# L2 over how far FSDP's parameters moved from the start: each step's
# gradient is off by its quantization error (under 1% of each block's
# largest value), which error feedback sends on the step after, so the
# parameters differ by about one step's error, not by STEPS of them
# (measured 0.0025 on torch 2.6; a shard summed into the wrong place, or
# a residual applied to another flat parameter, lands far above).
REL_TOL = 0.02
ENV = {"GRADWIRE_IFACE": "lo", "GLOO_SOCKET_IFNAME": "lo", "GRADWIRE_LOG": "warn",
       "GRADWIRE_MIN_COMPRESS_BYTES": "4K"}


def old_torch():
    """torch < 2.0: the import works, the FSDP hook says which torch it needs."""
    import gradwire.torch as gwt
    check(hasattr(gwt, "State") and hasattr(gwt, "hook"),
          f"gradwire.torch imports on torch {torch.__version__} (the DDP hook)")
    for what, fn in (("FsdpState()", gwt.FsdpState),
                     ("fsdp_hook()", lambda: gwt.fsdp_hook(None, torch.zeros(4),
                                                           torch.zeros(2)))):
        try:
            fn()
            msg = None
        except RuntimeError as e:
            msg = str(e)
        check(msg is not None and "torch >= 2.0" in msg and torch.__version__ in msg,
              f"{what} on torch {torch.__version__} raises naming torch 2.0 ({msg})")
    if failures:
        return exit_code()
    print(f"SKIP: FSDP1's reduce-scatter hook on CPU needs torch >= 2.0; this is "
          f"torch {torch.__version__} ({sys.executable})")
    return SKIP


def full_params(model):
    """The full flat parameters, the same on every rank (a collective)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    with FSDP.summon_full_params(model):
        return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def train(rank, world, kind):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    import gradwire.torch as gwt

    teacher = synthetic._teacher()
    eval_x, eval_y = synthetic._batch(torch.Generator().manual_seed(99), teacher, 1024)
    gen = torch.Generator().manual_seed(1000 + rank)
    torch.manual_seed(0)
    # NO_SHARD is deprecated (a FutureWarning), and still FSDP1's.
    warnings.filterwarnings("ignore", message="The `NO_SHARD` sharding strategy")
    strategy = ShardingStrategy.NO_SHARD if kind == "noshard" else ShardingStrategy.FULL_SHARD
    model = FSDP(synthetic.make_model(), device_id=torch.device("cpu"),
                 auto_wrap_policy=ModuleWrapPolicy({nn.Linear}), sharding_strategy=strategy)
    state = None
    if kind != "torch":
        state = gwt.FsdpState(stats=True)
        model.register_comm_hook(state, gwt.fsdp_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    init = full_params(model).tolist()
    losses, digests, identical, wire, exact = [], [], [], [], []
    for _ in range(STEPS):
        x, y = synthetic._batch(gen, teacher, 64)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if state:
            wire.append(state.last["wire_bytes"])
            exact.append(state.last["exact_bytes"])
        full = full_params(model)
        d = synthetic.hashlib.sha256(full.numpy().tobytes()).hexdigest()
        every = [None] * world
        dist.all_gather_object(every, d)
        identical.append(len(set(every)) == 1)
        digests.append(d)
    with torch.no_grad():
        final = nn.functional.mse_loss(model(eval_x), eval_y).item()
    res = {"losses": losses, "digests": digests, "identical": identical,
           "final": final, "params": full_params(model).tolist(), "init": init,
           "wire": wire, "exact": exact,
           "codecs": state.codecs if state else {},
           "ids": len(state._flat_ids) if state else 0,
           "steps": state.step if state else 0}
    if state:
        state.close()
    return res


def worker(rank, world, folder, codec, kinds):
    for k, v in ENV.items():
        os.environ[k] = v
    os.environ["GRADWIRE_CODEC"] = codec
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + os.path.join(folder, "pg"),
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    out = {kind: train(rank, world, kind) for kind in kinds}
    dist.destroy_process_group()
    with open(os.path.join(folder, f"result-{rank}.json"), "w") as f:
        json.dump(out, f)


def spawn(world, codec, kinds):
    with tempfile.TemporaryDirectory(prefix="gw-fsdp-") as folder:
        mp.start_processes(worker, args=(world, folder, codec, kinds), nprocs=world,
                           join=True, start_method="spawn")
        res = []
        for r in range(world):
            with open(os.path.join(folder, f"result-{r}.json")) as f:
                res.append(json.load(f))
    return res


def main():
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    if version < (2, 0):
        return old_torch()
    world = 2
    a = spawn(world, "none", ("torch", "none", "noshard"))
    b = spawn(world, "int8", ("int8",))
    res = [{**x, **y} for x, y in zip(a, b)]
    t, n, q = res[0]["torch"], res[0]["none"], res[0]["int8"]
    for kind in ("torch", "none", "int8", "noshard"):
        check(all(all(r[kind]["identical"]) for r in res),
              f"{kind}: full parameters bit-identical on both ranks after every step")
    check(all(c.startswith("none") for r in res for c in r["none"]["codecs"].values()),
          f"none: the links negotiated none ({n['codecs']})")
    check(all(c.startswith("int8") for r in res for c in r["int8"]["codecs"].values()),
          f"int8: the links negotiated int8 ({q['codecs']})")
    check(n["ids"] == 3 and q["ids"] == 3,
          f"one tensor id per flat parameter: {n['ids']}, {q['ids']} (want 3)")
    check(n["steps"] == STEPS and q["steps"] == STEPS,
          f"the State counted {q['steps']} backward passes (want {STEPS})")
    same = [x == y for x, y in zip(t["digests"], n["digests"])]
    check(all(same), f"none: parameters bit-identical to FSDP without a hook after "
          f"every step ({sum(same)} of {STEPS})")
    same = [x == y for x, y in zip(t["digests"], res[0]["noshard"]["digests"])]
    check(all(same) and res[0]["noshard"]["ids"] == 3,
          f"noshard: parameters bit-identical to FSDP's (FULL_SHARD, no hook) after every "
          f"step ({sum(same)} of {STEPS}), {res[0]['noshard']['ids']} ids")
    tp, qp = torch.tensor(t["params"]), torch.tensor(q["params"])
    moved = (tp - torch.tensor(t["init"])).norm()
    rel = ((qp - tp).norm() / moved).item()
    check(t["init"] == q["init"] and 0 < rel < REL_TOL,
          f"int8: parameters within {REL_TOL} of FSDP's, relative to how far FSDP's "
          f"moved, and not equal (L2: {rel:.5f})")
    check(q["final"] < 0.5 * q["losses"][0],
          f"int8: final loss {q['final']:.4f} far below the first {q['losses'][0]:.4f}")
    check(abs(q["final"] - t["final"]) <= 0.05 * t["final"] + 1e-4,
          f"int8: final loss {q['final']:.5f} within 5% of FSDP's {t['final']:.5f} "
          f"(none {n['final']:.5f})")
    fsdp_bytes = sum(sum(r["int8"]["exact"]) for r in res)
    expect = world * STEPS * 4 * sum(-(-k // world) * (world - 1)
                                     for k in (32 * 256 + 256, 256 * 256 + 256, 257))
    check(fsdp_bytes == expect, f"exact_bytes is FSDP's reduce-scatter: {fsdp_bytes} "
          f"(want {expect})")
    qb = sum(sum(r["int8"]["wire"]) for r in res)
    nb = sum(sum(r["none"]["wire"]) for r in res)
    check(0 < qb <= 0.35 * fsdp_bytes,
          f"int8: {qb / STEPS / world:.0f} bytes a step a rank, {qb / fsdp_bytes:.3f}x "
          f"FSDP's reduce-scatter ({fsdp_bytes / STEPS / world:.0f}; none: "
          f"{nb / STEPS / world:.0f})")
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
