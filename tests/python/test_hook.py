#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""test_hook.py - the DDP hook's edges, in one process (a world of one).

- float64 buckets are averaged by the process group, exactly: the gradients
  are those of the model without DDP;
- float32 buckets with exact and compressible parameters are written back
  in place, unchanged on one rank (a wrong layout would scramble them);
- more than 31 compressible parameters stops with an error that names
  min_compress_numel, and raising it lets the same model train;
- the step counter and warm-up; load_state_dict() refuses another rank's
  state, and a State that already reduced tensors in another order.
Exit 77 when torch is missing. GW_LIB names libgradwire.so.
"""
import os
import sys
import tempfile

SKIP = 77  # the exit status meson counts as "skipped"

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError as e:
    print(f"SKIP: PyTorch is not installed for {sys.executable} ({e})")
    sys.exit(SKIP)

os.environ.setdefault("GRADWIRE_IFACE", "lo")
import gradwire.torch as gwt  # noqa: E402
from checks import check, exit_code  # noqa: E402


def grads_match(model_fn, dtype, **state_args):
    """DDP+hook gradients equal plain autograd's, on one rank."""
    torch.manual_seed(0)
    plain = model_fn().to(dtype)
    torch.manual_seed(0)
    inner = model_fn().to(dtype)
    ddp = DDP(inner)
    state = gwt.State(**state_args)
    # A world of one has no link that compresses, so every bucket would go
    # whole: take the per-parameter path a compressing job takes.
    state.lossy_links = True
    ddp.register_comm_hook(state, gwt.hook)
    x = torch.randn(16, 32, dtype=dtype)
    for _ in range(3):      # DDP rebuilds its buckets after the first step
        for m in (plain, ddp):
            for p in m.parameters():
                p.grad = None
            m(x).square().mean().backward()
    same = all(torch.equal(a.grad, b.grad)
               for a, b in zip(plain.parameters(), inner.parameters()))
    steps = state.step
    state.close()
    return same, steps


def mlp():
    return nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.ReLU(),
                         nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))


def deep(width=48, depth=gwt.MAX_LOSSY + 10):
    layers = [nn.Linear(32, width)]
    for _ in range(depth):
        layers += [nn.ReLU(), nn.Linear(width, width)]
    return nn.Sequential(*layers, nn.Linear(width, 1))


def main():
    folder = tempfile.mkdtemp(prefix="gradwire-hook-")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + folder + "/pg",
                            rank=0, world_size=1)
    same, steps = grads_match(mlp, torch.float64)
    check(same, "float64 buckets: gradients as without DDP (process group path)")
    same, steps = grads_match(mlp, torch.float32, min_compress_numel=64)
    check(same and steps == 3, "float32 bucket, exact and compressible parts: "
          f"gradients in place, {steps} steps counted")
    try:
        grads_match(deep, torch.float32, min_compress_numel=1024)
        check(False, f"{gwt.MAX_LOSSY + 11} compressible parameters: no error")
    except RuntimeError as e:
        check("min_compress_numel" in str(e),
              f"{gwt.MAX_LOSSY + 11} compressible parameters: " +
              str(e).splitlines()[0])
    same, _ = grads_match(deep, torch.float32, min_compress_numel=4096)
    check(same, "the same model with min_compress_numel above its matrices")

    state = gwt.State()
    sd = state.state_dict()
    check(sd["step"] == 0 and sd["ids"] == [[gwt.EXACT_ID, 1, False]] and sd["rank"] == 0,
          f"a fresh State's state_dict: only the links' agreement ({sd['ids']})")
    try:
        state.load_state_dict(dict(sd, version=1))
        check(False, "a version 1 state accepted")
    except ValueError as e:
        check("version 1" in str(e), f"a version 1 state refused: {e}")
    try:
        state.load_state_dict(dict(sd, rank=1))
        check(False, "another rank's state accepted")
    except ValueError as e:
        check("rank 1" in str(e), f"another rank's state refused: {e}")
    state._seen = {5: (10, False)}
    try:
        state.load_state_dict(dict(sd, ids=[[3, 10, False], [5, 10, False]]))
        check(False, "another first-use order accepted")
    except RuntimeError as e:
        check("order" in str(e), "a State that reduced tensors in another order "
              "refuses a checkpoint")
    state.close()
    dist.destroy_process_group()
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
