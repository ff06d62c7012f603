#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""test_elastic.py - examples/elastic_train.py with 3 ranks, one kill and
one join, over a store of its own (python3 -m gradwire.store), int8:

- rank 1 is SIGKILLed once it has printed step KILL_AT; ranks 0 and 2 go on
  in a new epoch of 2 ranks without restarting;
- a joiner started then is admitted: the last steps run with 3 ranks;
- params_sha is the same in every line printed for a step, whichever rank
  and epoch printed it (the replicas stay identical; the killed rank's last
  line aside), each process prints its steps in increasing order (none
  goes back), and the three live processes end at step STEPS with the same
  parameters and exit 0;
- the survivors carry what their residuals owed into the epoch after the
  kill and the one after the join (elastic.py), the joiner nothing.
Exit 77 when torch is missing. GW_LIB names libgradwire.so.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

from checks import check, exit_code, require_torch  # noqa: E402 (beside this file)

require_torch()

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "elastic_train.py")
STEPS, KILL_AT, LIMIT_S = 1000, 10, 150


def lines(path):
    out = []
    with open(path) as f:
        for x in f:
            try:
                out.append(json.loads(x))
            except ValueError:
                pass
    return out


def wait_for(cond, limit_s):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def main():
    folder = subprocess.run(["mktemp", "-d", "/tmp/gradwire-elastic-XXXXXX"],
                            capture_output=True, text=True, check=True).stdout.strip()
    env = dict(os.environ, GRADWIRE_CODEC="int8", GRADWIRE_IFACE="lo", FI_TCP_IFACE="lo",
               FI_NET_IFACE="lo", GRADWIRE_LOG="error", GRADWIRE_PROVIDER_LOCAL="main")
    store = subprocess.Popen([sys.executable, "-m", "gradwire.store", "--port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    procs = {}
    try:
        first = store.stdout.readline()
        port = first.split("127.0.0.1:")[1].split()[0] if "127.0.0.1:" in first else ""
        check(bool(port), f"the store serves: {first.strip()}")
        if not port:
            return exit_code()

        def start(name, *args):
            procs[name] = subprocess.Popen(
                [sys.executable, EXAMPLE, "--store", f"127.0.0.1:{port}", "--steps",
                 str(STEPS), "--settle-s", "1", *args],
                stdout=open(os.path.join(folder, f"out-{name}"), "w"),
                stderr=open(os.path.join(folder, f"err-{name}"), "w"), env=env)
        for r in range(3):
            start(f"r{r}", "--rank", str(r), "--world", "3")
        out = {n: os.path.join(folder, f"out-{n}") for n in ("r0", "r1", "r2", "join")}
        ok = wait_for(lambda: any(x["step"] >= KILL_AT for x in lines(out["r1"])), LIMIT_S)
        check(ok, f"rank 1 reached step {KILL_AT}")
        procs["r1"].send_signal(signal.SIGKILL)
        t_kill = time.time()
        ok = wait_for(lambda: all(any(x["world"] == 2 for x in lines(out[n]))
                                  for n in ("r0", "r2")), 60)
        resumed = min((x["t"] for n in ("r0", "r2") for x in lines(out[n]) if x["world"] == 2),
                      default=float("nan"))
        check(ok, f"the survivors go on with 2 ranks, {resumed - t_kill:.2f} s after the kill")
        start("join", "--join")
        for n in ("r0", "r2", "join"):
            try:
                procs[n].wait(LIMIT_S)
            except subprocess.TimeoutExpired:
                pass
        codes = {n: procs[n].poll() for n in ("r0", "r2", "join")}
        check(codes == {"r0": 0, "r2": 0, "join": 0}, f"exit codes {codes}")
        # Error feedback follows each change: a survivor adds what its
        # residuals owed (non-zero under int8) at the first step of the
        # epoch after the kill and of the one after the join; the joiner
        # owes nothing.
        for n in ("r0", "r2", "join"):
            with open(os.path.join(folder, f"err-{n}")) as f:
                carried = re.findall(r"carried error feedback into epoch (\d+): (\S+) \(L1\)",
                                     f.read())
            want = 0 if n == "join" else 2
            check(len(carried) >= want and (n != "join" or not carried)
                  and all(float(v) > 0 for _, v in carried),
                  f"{n} carried its residuals into epochs {[int(e) for e, _ in carried]}"
                  f" (L1 {[float(v) for _, v in carried]})")
        by_step, ends = {}, {}
        for n in ("r0", "r1", "r2", "join"):
            got = lines(out[n])
            steps = [x["step"] for x in got]
            check(steps == sorted(set(steps)), f"{n}: {len(steps)} steps, in order")
            # The killed rank's last step may have completed there only, and
            # been done again without it.
            for x in got[:-1] if n == "r1" else got:
                by_step.setdefault(x["step"], set()).add(x["params_sha"])
            if got and n != "r1":
                ends[n] = got[-1]
        split = [s for s, shas in by_step.items() if len(shas) != 1]
        check(not split, f"params_sha identical at every step ({len(by_step)} steps; "
              f"differing at {split[:5]})")
        check(len(ends) == 3 and all(e["step"] == STEPS and e["world"] == 3 for e in ends.values())
              and len({e["params_sha"] for e in ends.values()}) == 1,
              f"all three end at step {STEPS} with 3 ranks and the same parameters: "
              f"{[(n, e['step'], e['world'], e['epoch']) for n, e in ends.items()]}")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
        store.send_signal(signal.SIGTERM)
        store.wait(10)
        for n in ("r0", "r2", "join"):
            path = os.path.join(folder, f"err-{n}")
            if os.path.exists(path):
                with open(path) as f:
                    tail = f.read().splitlines()[-6:]
                print("\n".join(f"     {n}: {x}" for x in tail))
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
