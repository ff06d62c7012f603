# SPDX-License-Identifier: MIT
"""A small synthetic DDP job over loopback: the tests and scripts/demo-ddp.

Task: regression onto a fixed random "teacher" network plus noise, learnt by
an MLP student (32 -> 256 -> 256 -> 1: two weight matrices of 8K and 64K
floats travel lossy, biases and the 256-float output row exactly). Every rank
draws its own fresh batches from its own seeded generator; the loss reported
at the end is the mean squared error on a fixed evaluation set, the same on
every rank. Everything is seeded, so a run is repeatable.

run() starts `world` processes (torch.multiprocessing, spawn) that meet
through a FileStore in a fresh folder (gloo process group); they train with
each configuration in turn (a fresh model, DDP and hook State each) and
write a JSON result; run() returns them, or raises on failure or timeout. Launching this way needs no torchrun (Debian's fails in torch 1.13).
"""
import datetime
import faulthandler
import hashlib
import json
import os
import shutil
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

IN, HID = 32, 256


def make_model():
    return nn.Sequential(nn.Linear(IN, HID), nn.ReLU(), nn.Linear(HID, HID),
                         nn.ReLU(), nn.Linear(HID, 1))


def _teacher():
    g = torch.Generator().manual_seed(1234)
    w1 = torch.randn(IN, 64, generator=g) / IN ** 0.5
    w2 = torch.randn(64, 1, generator=g) / 8.0
    return lambda x: torch.tanh(x @ w1) @ w2 * 3.0


def _batch(gen, teacher, n):
    x = torch.randn(n, IN, generator=gen)
    return x, teacher(x) + 0.05 * torch.randn(n, 1, generator=gen)


def params_digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _worker(rank, world, folder, cfgs, timeout):
    out = os.path.join(folder, f"result-{rank}.json")
    # A hang shows where: every thread's stack shortly before the parent
    # gives up.
    faulthandler.dump_traceback_later(max(1, timeout - 5), exit=True)
    try:
        for cfg in cfgs:
            for k, v in cfg.get("env", {}).items():
                os.environ[k] = v
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method="file://" +
                                os.path.join(folder, "pg"), rank=rank,
                                world_size=world,
                                timeout=datetime.timedelta(seconds=60))
        res = {"runs": [_train(rank, world, folder, cfg) for cfg in cfgs]}
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 (reported to the parent)
        import traceback
        res = {"error": f"rank {rank}: {e!r}\n{traceback.format_exc()}"}
    with open(out + ".tmp", "w") as f:
        json.dump(res, f)
    os.replace(out + ".tmp", out)
    faulthandler.cancel_dump_traceback_later()
    if "error" in res:
        raise SystemExit(1)
    # A normal exit (interpreter teardown included): a hook that leaves a
    # callback needing the GIL would hang here, and the parent would say so.


def _rss():
    """This process's resident set, bytes (/proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _train(rank, world, folder, cfg):
    from torch.nn.parallel import DistributedDataParallel as DDP
    import gradwire.torch as gwt

    steps, lr = cfg.get("steps", 300), cfg.get("lr", 0.1)
    save_at = cfg.get("save_at")
    ddp_args = {k: cfg[k] for k in ("bucket_cap_mb",) if k in cfg}
    teacher = _teacher()
    eval_x, eval_y = _batch(torch.Generator().manual_seed(99), teacher, 1024)
    gen = torch.Generator().manual_seed(1000 + rank)
    torch.manual_seed(0)
    model = make_model()
    ddp = DDP(model, **ddp_args)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=cfg.get("momentum", 0.0))
    state = None

    def pg_hook(_, bucket):
        """A Python hook over the process group's allreduce: what any Python
        comm hook costs in torch, without gradwire."""
        buf = bucket.buffer()
        dist.all_reduce(buf)
        buf.div_(world)
        fut = torch.futures.Future()
        fut.set_result(buf)
        return fut

    def attach(ddp):
        nonlocal state
        if cfg.get("hook", True) == "pg":
            ddp.register_comm_hook(None, pg_hook)
        elif cfg.get("hook", True):
            state = gwt.State(library=cfg.get("library"),
                              warmup_steps=cfg.get("warmup", 0),
                              stats=cfg.get("stats", True),
                              sync=cfg.get("sync", False))
            ddp.register_comm_hook(state, gwt.hook)

    attach(ddp)
    losses, wire, raw, exact, rss = [], [], [], [], []
    t0 = time.monotonic()
    step = 0
    while step < steps:
        if save_at is not None and step == save_at:
            # Checkpoint everything, drop the DDP model, the optimizer and the
            # hook state (its connections), rebuild them and restore.
            ckpt = os.path.join(folder, f"ckpt-{rank}.pt")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "gradwire": state.state_dict() if state else None,
                        "gen": gen.get_state()}, ckpt)
            if state:
                state.close()
            del ddp, opt, state
            state = None
            model = make_model()
            ddp = DDP(model, **ddp_args)
            opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=cfg.get("momentum", 0.0))
            attach(ddp)
            sd = torch.load(ckpt)
            model.load_state_dict(sd["model"])
            opt.load_state_dict(sd["opt"])
            gen.set_state(sd["gen"])
            if state and not cfg.get("drop_residuals"):
                state.load_state_dict(sd["gradwire"])
            elif state:
                state.step = sd["gradwire"]["step"]
            save_at = None
        x, y = _batch(gen, teacher, 64)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if state and state.last:
            wire.append(state.last["wire_bytes"])
            raw.append(state.last["raw_bytes"])
            exact.append(state.last["exact_bytes"])
        if cfg.get("rss"):
            rss.append(_rss())
        step += 1
    elapsed = time.monotonic() - t0
    with torch.no_grad():
        final = nn.functional.mse_loss(model(eval_x), eval_y).item()
    digests = [None] * world
    dist.all_gather_object(digests, params_digest(model))
    res = {"rank": rank, "losses": losses, "final_loss": final,
           "digest": digests[rank], "identical": len(set(digests)) == 1,
           "wire_bytes": wire, "raw_bytes": raw, "exact_bytes": exact,
           "seconds": elapsed, "rss": rss,
           "codecs": state.codecs if state else {},
           "providers": state.providers if state else {},
           "lossy_links": state.lossy_links if state else None,
           "resets": [state.ctx.stats(p).residual_resets for p in range(world) if p != rank] if state else []}
    if state:
        state.close()
    return res


def run(cfgs, world=2, timeout=120):
    """Train with each configuration of cfgs in turn, in the same world
    processes (one process group); [per-rank results] for each, in order.

    A configuration: {"env": {GRADWIRE_*: ...} (set before anything starts:
    gradwire reads its variables once per process, so every configuration
    of one call must agree), "hook": bool (False: the process group's own
    allreduce; "pg": a Python hook over that allreduce), "warmup": steps, "steps": n, "lr": float, "save_at": step or
    None (checkpoint, rebuild and restore there), "drop_residuals": bool,
    "bucket_cap_mb": DDP's, "library": path or None, "rss": bool
    (record the resident set after every step), "stats": bool (the State's
    per-step statistics, default True; their history grows by a dict a
    step), "sync": bool (the synchronous hook)}. A single dict gives a single result list.
    """
    single = isinstance(cfgs, dict)
    if single:
        cfgs = [cfgs]
    folder = tempfile.mkdtemp(prefix="gradwire-ddp-")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(r, world, folder, cfgs, timeout))
             for r in range(world)]
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        for p in procs:
            p.join(max(0.1, deadline - time.monotonic()))
        if any(p.is_alive() for p in procs):
            raise TimeoutError(f"synthetic: {cfgs} did not finish in "
                               f"{timeout} s")
        results = []
        for r in range(world):
            path = os.path.join(folder, f"result-{r}.json")
            if not os.path.exists(path):
                raise RuntimeError(f"rank {r} died (exit code {procs[r].exitcode})")
            with open(path) as f:
                results.append(json.load(f))
        errors = [r["error"] for r in results if "error" in r]
        if errors:
            raise RuntimeError("\n".join(errors))
        runs = [[res["runs"][i] for res in results] for i in range(len(cfgs))]
        return runs[0] if single else runs
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        shutil.rmtree(folder, ignore_errors=True)
