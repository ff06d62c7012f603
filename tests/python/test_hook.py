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
  state of the same size, and a State that already reduced tensors in
  another order; a state of another size loads its step counter, and the
  residuals start at zero with a warning; from the same rank number it
  carries what its residuals owed into the tensors' first allreduce;
- timeouts: a State takes its group's (the default group's 30 minutes; a
  new_group's 5 s, which the library then logs as its GRADWIRE_TIMEOUT_MS),
  keeps the first one with a warning while an earlier State is open, and
  yields to a GRADWIRE_TIMEOUT_MS the user set; the variable is not left
  behind;
- the rendezvous prefix's group part ("0,2-4,7"; long lists hashed), and a
  world of one's summary (no links) from close().
Exit 77 when torch is missing. GW_LIB names libgradwire.so.
"""
import datetime
import logging
import os
import sys
import tempfile

from checks import check, exit_code, require_torch  # noqa: E402 (beside this file)

require_torch()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

os.environ.setdefault("GRADWIRE_IFACE", "lo")
import gradwire.torch as gwt  # noqa: E402


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


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append((record.levelname, record.getMessage()))


def stderr_of(fn):
    """fn()'s result and what was written to file descriptor 2 meanwhile
    (the C library's log)."""
    with tempfile.TemporaryFile() as f:
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            out = fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        return out, f.read().decode(errors="replace")


def timeouts():
    for st in list(gwt._open_states):	# the State whose hook raised above
        st.close()
    rec = Records()
    logging.getLogger("gradwire").addHandler(rec)
    logging.getLogger("gradwire").setLevel(logging.INFO)
    var = gwt.TIMEOUT_VAR
    os.environ.pop(var, None)
    g5 = dist.new_group([0], timeout=datetime.timedelta(seconds=5))
    g77 = dist.new_group([0], timeout=datetime.timedelta(seconds=77))
    # torch 1.13 keeps a group's timeout on the group, torch 2.x on its backend.
    check(gwt.group_timeout_ms() == 1800000 and gwt.group_timeout_ms(g5) == 5000
          and gwt.group_timeout_ms(g77) == 77000,
          f"group timeouts (torch {torch.__version__}): default "
          f"{gwt.group_timeout_ms()} ms, new_group's {gwt.group_timeout_ms(g5)} and "
          f"{gwt.group_timeout_ms(g77)} ms")
    a = gwt.State()
    check((a.timeout_ms, a.timeout_source) == (1800000, "process group"),
          f"a State on the default group: {a.timeout_ms} ms ({a.timeout_source})")
    b = gwt.State(process_group=g5)
    warned = [m for lv, m in rec.lines if lv == "WARNING" and "5000 ms" in m]
    check((b.timeout_ms, b.timeout_source) == (1800000, "an earlier context") and warned,
          f"a second State while the first is open keeps {b.timeout_ms} ms "
          f"({b.timeout_source}), warning: {warned[:1]}")
    a.close()
    b.close()
    os.environ["GRADWIRE_LOG"] = "info"
    c, err = stderr_of(lambda: gwt.State(process_group=g5))
    del os.environ["GRADWIRE_LOG"]
    check((c.timeout_ms, c.timeout_source) == (5000, "process group")
          and "GRADWIRE_TIMEOUT_MS=5000" in err,
          f"once closed, the next State's library waits its group's {c.timeout_ms} ms "
          f"({[x for x in err.splitlines() if var in x][:1]})")
    check(var not in os.environ, f"{var} is not left set")
    summary = c.close()
    check(summary["links"] == {} and summary["size"] == 1 and summary["ranks"] == [0]
          and summary["timeout_ms"] == 5000,
          "a world of one's summary: no links, its timeout")
    logged = [m for lv, m in rec.lines if lv == "INFO" and m.startswith("gradwire summary")]
    check(len(logged) == 3 and "no links" in logged[-1],
          f"each close() logged one summary: {logged[-1:]}")
    os.environ[var] = "4000"
    os.environ["GRADWIRE_LOG"] = "info"
    d, err = stderr_of(lambda: gwt.State(process_group=g5))
    del os.environ["GRADWIRE_LOG"]
    check((d.timeout_ms, d.timeout_source) == (4000, var)
          and "GRADWIRE_TIMEOUT_MS=4000" in err,
          f"a {var} the user set wins: {d.timeout_ms} ms ({d.timeout_source})")
    d.close()
    del os.environ[var]
    logging.getLogger("gradwire").removeHandler(rec)
    tag = gwt._ranks_tag
    long = tag(list(range(0, 400, 2)))
    check(tag([0, 1]) == "0-1" and tag([0, 2, 3, 4, 7]) == "0,2-4,7" and tag([5]) == "5"
          and len(long) <= 64 and long.startswith("200r"),
          f"the rendezvous prefix names the group's ranks: 0-1, 0,2-4,7, {long}")


def carried():
    """A state of another size from this rank's number carries what its
    residuals owed (the "owed" vectors): added to the tensor at its first
    allreduce here, once; one of another rank number carries nothing."""
    owed = torch.arange(1, 11, dtype=torch.float32)
    for rank, want in ((0, owed), (1, torch.zeros(10))):
        state = gwt.State()
        sd = state.state_dict()
        state.load_state_dict(dict(sd, rank=rank, size=2, ids=sd["ids"] + [[5, 10, True]],
                                   owed={5: owed.clone()}))
        first, second = torch.zeros(10), torch.zeros(10)
        state._reduce(5, first, True)
        state._reduce(5, second, True)
        check(torch.equal(first, want) and not second.any(),
              f"rank {rank}'s state of 2 ranks on rank 0 of 1: the first allreduce of the "
              f"tensor gets {first[:3].tolist()}..., the second nothing more")
        state.close()


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
    state.step = 3
    big = dict(state.state_dict(), rank=3, size=4, step=7)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("gradwire").addHandler(handler)
    try:
        state.load_state_dict(big)
    finally:
        logging.getLogger("gradwire").removeHandler(handler)
    check(state.step == 7 and any("residuals start at zero" in r.getMessage()
                                  for r in records),
          "a state of another size (rank 3 of 4) loads: its step, residuals "
          "reset with a warning")
    try:
        state.load_state_dict(dict(sd, ids=[[3, 10, False], [5, 10, False]]))
        check(False, "another first-use order accepted")
    except RuntimeError as e:
        check("order" in str(e), "a State that reduced tensors in another order "
              "refuses a checkpoint")
    state.close()
    carried()
    timeouts()
    dist.destroy_process_group()
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
