#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""test_group.py - the DDP hook and its process group.

    test_group.py timeout      2 processes, about 60 s
    test_group.py subgroups    4 processes

timeout: int8 over the hook, with the process group's default timeout (30
minutes) and GRADWIRE_TIMEOUT_MS unset. Rank 0 sleeps 40 s between two
steps (longer than gradwire's own default of 30 s): both ranks train on
and end with identical replicas. The States report the group's timeout and
leave no GRADWIRE_TIMEOUT_MS behind. The summary: rank 0's close() returns
it (its fields: the codec and provider of the link, raw against wire bytes
and their sums, the time in gradwire, which on rank 1 holds the 40 s it
waited and on rank 0 does not); rank 1 never calls close() and logs its
summary at exit; each rank logs exactly one summary line on the "gradwire"
logger. Then a GRADWIRE_TIMEOUT_MS the user set wins: with 3000, a 10 s
sleep fails the waiting rank within a few seconds.

subgroups: a world of 4 split into the disjoint groups {0, 1} and {2, 3}
(60 s timeout each), each with its own State and DDP model, trained in one
job on data of their own: both train, the replicas are identical within
each group and differ between them, each rank has one link (to its group's
other rank) and the States took the groups' 60 s timeout. Before the
rendezvous keys named the group, both groups wrote the same keys.

Exit 77 when torch is missing. GW_LIB names libgradwire.so.
"""
import datetime
import hashlib
import json
import math
import os
import sys
import tempfile
import time

from checks import check, exit_code, local_providers, require_torch  # noqa: E402 (beside this file)

require_torch()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


ENV = {"GRADWIRE_IFACE": "lo", "GLOO_SOCKET_IFNAME": "lo", "GRADWIRE_LOG": "error",
       "GRADWIRE_CODEC": "int8", "GRADWIRE_MIN_COMPRESS_BYTES": "4K"}
SLEEP_S = 40
SUMMARY_KEYS = {"rank", "size", "ranks", "steps", "timeout_ms", "timeout_source",
                "links", "raw_sent", "wire_sent", "ratio", "connect_s",
                "allreduce_s", "time_s"}
LINK_KEYS = {"global_rank", "codec", "provider", "fell_back", "raw_sent",
             "wire_sent", "raw_recv", "wire_recv", "timeouts", "errors",
             "codec_now", "switches"}


def digest(m):
    h = hashlib.sha256()
    for p in m.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def train(gwt, group, seed, steps, pause=None, marks=None):
    """DDP with the hook over group; pause = (step, seconds): sleep before
    that step; marks["ready"] = when the State was made. (model, State)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                      nn.Linear(256, 8))
    ddp = DDP(m, process_group=group)
    state = gwt.State(process_group=group)
    ddp.register_comm_hook(state, gwt.hook)
    if marks is not None:
        marks["ready"] = time.monotonic()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(seed)
    for step in range(steps):
        if pause and step == pause[0]:
            time.sleep(pause[1])
        x = torch.randn(32, 64, generator=gen)
        opt.zero_grad(set_to_none=True)
        ddp(x).square().mean().backward()
        opt.step()
    return m, state


def worker(case, rank, world, folder):
    os.environ.update(ENV)
    if case == "user":
        os.environ["GRADWIRE_TIMEOUT_MS"] = "3000"
    else:
        os.environ.pop("GRADWIRE_TIMEOUT_MS", None)
    import logging
    handler = logging.FileHandler(os.path.join(folder, f"log-{rank}"))
    logging.getLogger("gradwire").addHandler(handler)
    logging.getLogger("gradwire").setLevel(logging.INFO)
    torch.set_num_threads(1)
    pg_args = {}
    if case == "subgroups":
        pg_args["timeout"] = datetime.timedelta(seconds=60)
    dist.init_process_group("gloo", init_method=f"file://{folder}/pg", rank=rank,
                            world_size=world, **pg_args)
    import gradwire.torch as gwt
    res = {"rank": rank}
    if case == "timeout":
        m, st = train(gwt, None, 10 + rank, 6, (3, SLEEP_S) if rank == 0 else None)
        res["env_left"] = os.environ.get("GRADWIRE_TIMEOUT_MS")
        res["timeout"] = [st.timeout_ms, st.timeout_source]
        digests = [None, None]
        dist.all_gather_object(digests, digest(m))
        res["identical"] = digests[0] == digests[1]
        if rank == 0:
            res["summary"] = st.close()
            res["again"] = st.close() is res["summary"]
        else:
            res["summary"] = st.summary()	# and the State stays open: exit closes it
    elif case == "user":
        marks = {}
        try:
            train(gwt, None, 10 + rank, 4, (2, 10) if rank == 0 else None, marks)
            res["error"] = None
        except Exception as e:  # noqa: BLE001 - what DDP raises
            res["error"] = str(e)[:300]
        res["seconds"] = time.monotonic() - marks["ready"]
        st = next(iter(gwt._open_states))
        res["timeout"] = [st.timeout_ms, st.timeout_source]
        st.close()
    elif case == "subgroups":
        a = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=60))
        b = dist.new_group([2, 3], timeout=datetime.timedelta(seconds=60))
        mine = a if rank < 2 else b
        m, st = train(gwt, mine, 100 * (rank // 2) + rank, 20)
        digests = [None] * world
        dist.all_gather_object(digests, digest(m))
        res["digests"] = digests
        res["timeout"] = [st.timeout_ms, st.timeout_source]
        res["summary"] = st.close()
    with open(os.path.join(folder, f"out-{rank}.json"), "w") as f:
        json.dump(res, f)


def run(case, world, limit_s):
    """Run case on world processes; [each rank's result or None], [logs]."""
    folder = tempfile.mkdtemp(prefix="gradwire-group-")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(case, r, world, folder)) for r in range(world)]
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
    check(not hung, f"{case}: all {world} processes ended within {limit_s} s "
          f"({time.monotonic() - t:.1f} s){'; hung: ' + str(hung) if hung else ''}")
    check(all(p.exitcode == 0 for p in procs),
          f"{case}: exit codes {[p.exitcode for p in procs]}")
    out, logs = [], []
    for r in range(world):
        path = os.path.join(folder, f"out-{r}.json")
        out.append(json.load(open(path)) if os.path.exists(path) else None)
        path = os.path.join(folder, f"log-{r}")
        logs.append(open(path).read() if os.path.exists(path) else "")
    if None in out:
        check(False, f"{case}: ranks {[r for r, x in enumerate(out) if x is None]} "
              "wrote no result")
    return out, logs


def check_summary(s, rank, size, ranks, peers):
    """The fields of a summary of group rank rank, as JSON gave them back
    (keys are strings); messages name the global rank."""
    who = f"rank {ranks[rank]}"
    check(set(s) == SUMMARY_KEYS, f"{who}: summary fields {sorted(s)}")
    check(s["rank"] == rank and s["size"] == size and s["ranks"] == ranks,
          f"{who}: summary of rank {s['rank']} of {s['size']}, ranks {s['ranks']}")
    links = s["links"]
    check(sorted(int(p) for p in links) == sorted(peers),
          f"{who}: links to peers {sorted(links)} (want {peers})")
    want, wants = local_providers("shm")
    for p, x in links.items():
        check(set(x) == LINK_KEYS, f"{who}, peer {p}: link fields {sorted(x)}")
        check(x["codec"].split(":")[0] == "int8" and x["provider"] in wants
              and not x["fell_back"] and x["global_rank"] == ranks[int(p)],
              f"{who}, peer {p} (global {x['global_rank']}): {x['codec']} "
              f"over {x['provider']}, fell back {x['fell_back']}")
        # A fixed codec is what the link carries now (cut to the field's
        # 23 characters) and never switches.
        check(x["codec_now"] == x["codec"][:23] and x["switches"] == 0,
              f"{who}, peer {p}: now {x['codec_now']!r}, {x['switches']} switches")
    raw = sum(x["raw_sent"] for x in links.values())
    wire = sum(x["wire_sent"] for x in links.values())
    check(s["raw_sent"] == raw and s["wire_sent"] == wire and wire > 0
          and math.isclose(s["ratio"], raw / wire),
          f"{who}: sent {raw} raw bytes as {wire} wire bytes, ratio {s['ratio']:.2f}")
    check(s["ratio"] > 2.0, f"{who}: int8 sends less on the wire than raw "
          f"({s['ratio']:.2f}x)")
    check(s["connect_s"] > 0 and s["allreduce_s"] > 0
          and math.isclose(s["time_s"], s["connect_s"] + s["allreduce_s"]),
          f"{who}: {s['time_s']:.2f} s in gradwire (connecting "
          f"{s['connect_s']:.2f} s, allreduces {s['allreduce_s']:.2f} s)")


def test_timeout():
    out, logs = run("timeout", 2, SLEEP_S + 150)
    if None in out:
        return
    for r, x in enumerate(out):
        check(x["identical"], f"rank {r}: replicas identical after rank 0 slept {SLEEP_S} s")
        check(x["timeout"] == [1800000, "process group"],
              f"rank {r}: the State took the group's timeout: {x['timeout']}")
        check(x["env_left"] is None, f"rank {r}: GRADWIRE_TIMEOUT_MS not left set "
              f"({x['env_left']!r})")
        s = x["summary"]
        check_summary(s, r, 2, [0, 1], [1 - r])
        check(s["steps"] == 6, f"rank {r}: {s['steps']} steps in the summary")
        lines = [y for y in logs[r].splitlines() if y.startswith("gradwire summary")]
        check(len(lines) == 1 and f"rank {r} of 2" in lines[0] and "int8" in lines[0]
              and "s in gradwire" in lines[0],
              f"rank {r}: one summary logged ({'at exit' if r else 'by close()'}): "
              f"{lines}")
    check(out[0]["again"], "rank 0: a second close() returns the same summary")
    s0, s1 = out[0]["summary"], out[1]["summary"]
    check(s1["allreduce_s"] >= SLEEP_S - 5,
          f"rank 1 waited for the sleeping rank in gradwire: {s1['allreduce_s']:.1f} s")
    check(s0["allreduce_s"] < SLEEP_S / 2,
          f"rank 0's sleep is not gradwire's time: {s0['allreduce_s']:.1f} s")


def test_user_timeout():
    out, _ = run("user", 2, 90)
    if None in out:
        return
    for r, x in enumerate(out):
        check(x["timeout"] == [3000, "GRADWIRE_TIMEOUT_MS"],
              f"rank {r}: the user's GRADWIRE_TIMEOUT_MS wins: {x['timeout']}")
    e = out[1]["error"] or ""
    check("timed out" in e and "rank 0" in e,
          f"rank 1 fails while rank 0 sleeps 10 s: {e[:200]}")
    check(out[1]["seconds"] < 8, f"... {out[1]['seconds']:.1f} s after its State connected")


def test_subgroups():
    out, _ = run("subgroups", 4, 240)
    if None in out:
        return
    d = out[0]["digests"]
    check(d[0] == d[1] and d[2] == d[3], "replicas identical within each group")
    check(d[0] != d[2], "the groups trained models of their own")
    for r, x in enumerate(out):
        check(x["digests"] == d, f"rank {r} saw the same digests")
        check(x["timeout"] == [60000, "process group"],
              f"rank {r}: the State took its group's 60 s timeout: {x['timeout']}")
        ranks = [0, 1] if r < 2 else [2, 3]
        check_summary(x["summary"], r % 2, 2, ranks, [1 - r % 2])


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("timeout", "subgroups"):
        print(__doc__)
        return 2
    t = time.monotonic()
    if sys.argv[1] == "timeout":
        test_timeout()
        test_user_timeout()
    else:
        test_subgroups()
    return exit_code(f", {time.monotonic() - t:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
