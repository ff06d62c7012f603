#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""test_elastic.py CASE - examples/elastic_train.py over a store of its own
(python3 -m gradwire.store), int8.

CASE "one": 3 ranks, one kill and one join:

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

CASE "churn": 4 ranks with BALLAST_MB of state beside the model, then:
two ranks killed at once; a joiner started, and rank 0 (the first started,
the root of the joiner's healing transfer) killed as soon as the joiner
says it is in the new epoch: during that transfer; then two joiners and,
0-1 s later (at random: the seed is printed, GW_ELASTIC_SEED repeats a
run), the last first member killed: during their admission, the re-form
or the transfer. The three
joiners end at step STEPS together, with the same parameters; params_sha
is the same in every line printed for a step (the killed ranks' last lines
aside), and each process prints its steps in increasing order.
CASE "refuse": 2 ranks with GRADWIRE_MAC=required and GRADWIRE_CODEC_FALLBACK=0;
a joiner with another key, then one with no codec in common (fp16 against
int8): each exits 3
saying the members refuse it and why, and the two ranks go on to step STEPS
with the same parameters.
CASE "silent": 3 ranks with --dead-s 2 and GRADWIRE_TIMEOUT_MS=60000; a
joiner that registers and never connects (the test writes its uid in the
store, as a joiner killed before it connected would have): the members
admit it, wait for its address, find its heartbeat silent and re-form
without it, each saying so, and pause for less than 10 s (not the 60 s
timeout); they end at step STEPS with the same parameters.
Exit 77 when torch is missing. GW_LIB names libgradwire.so.
"""
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

from checks import check, exit_code, require_torch  # noqa: E402 (beside this file)

require_torch()

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "elastic_train.py")
STEPS, KILL_AT, LIMIT_S, BALLAST_MB = 1000, 10, 150, 64


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


class Job:
    """The store, the processes of examples/elastic_train.py and their output."""

    def __init__(self, folder, env):
        self.folder, self.env, self.procs, self.killed = folder, env, {}, set()
        self.args = ()
        self.store = subprocess.Popen([sys.executable, "-m", "gradwire.store", "--port", "0"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env)
        first = self.store.stdout.readline()
        self.port = first.split("127.0.0.1:")[1].split()[0] if "127.0.0.1:" in first else ""
        check(bool(self.port), f"the store serves: {first.strip()}")

    def start(self, name, *args, **env):
        self.procs[name] = subprocess.Popen(
            [sys.executable, EXAMPLE, "--store", f"127.0.0.1:{self.port}", "--steps",
             str(STEPS), "--settle-s", "1", *self.args, *args],
            stdout=open(self.path("out", name), "w"),
            stderr=open(self.path("err", name), "w"), env=dict(self.env, **env))

    def kill(self, *names):
        for n in names:
            self.procs[n].send_signal(signal.SIGKILL)
            self.killed.add(n)
        return time.time()

    def path(self, kind, name):
        return os.path.join(self.folder, f"{kind}-{name}")

    def out(self, name):
        return lines(self.path("out", name))

    def reached(self, name, step, limit_s=LIMIT_S):
        ok = wait_for(lambda: any(x["step"] >= step for x in self.out(name)), limit_s)
        check(ok, f"{name} reached step {step}")
        return ok

    def finish(self, live):
        """Wait for the live processes; check exit codes, order, params_sha."""
        for n in live:
            try:
                self.procs[n].wait(LIMIT_S)
            except subprocess.TimeoutExpired:
                pass
        codes = {n: self.procs[n].poll() for n in live}
        check(all(c == 0 for c in codes.values()), f"exit codes {codes}")
        by_step, ends = {}, {}
        for n in self.procs:
            got = self.out(n)
            steps = [x["step"] for x in got]
            check(steps == sorted(set(steps)), f"{n}: {len(steps)} steps, in order")
            # A killed rank's last step may have completed there only, and
            # been done again without it.
            for x in got[:-1] if n in self.killed else got:
                by_step.setdefault(x["step"], set()).add(x["params_sha"])
            if got and n in live:
                ends[n] = got[-1]
        split = [s for s, shas in by_step.items() if len(shas) != 1]
        check(not split, f"params_sha identical at every step ({len(by_step)} steps; "
              f"differing at {split[:5]})")
        world = len(live)
        check(len(ends) == world and
              all(e["step"] == STEPS and e["world"] == world for e in ends.values())
              and len({e["params_sha"] for e in ends.values()}) == 1,
              f"{sorted(live)} end at step {STEPS} with {world} ranks and the same "
              f"parameters: {[(n, e['step'], e['world'], e['epoch']) for n, e in ends.items()]}")

    def log(self, name):
        with open(self.path("err", name)) as f:
            return f.read()

    def carried(self, name):
        """The epochs and L1 norms of the error feedback name carried."""
        return [(int(e), float(v)) for e, v in
                re.findall(r"carried error feedback into epoch (\d+): (\S+) \(L1\)",
                           self.log(name))]

    def close(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
        self.store.send_signal(signal.SIGTERM)
        self.store.wait(10)
        for n in self.procs:
            if os.path.exists(self.path("err", n)):
                with open(self.path("err", n)) as f:
                    tail = f.read().splitlines()[-6:]
                print("\n".join(f"     {n}: {x}" for x in tail))


def one(job):
    for r in range(3):
        job.start(f"r{r}", "--rank", str(r), "--world", "3")
    if not job.reached("r1", KILL_AT):
        return
    t_kill = job.kill("r1")
    ok = wait_for(lambda: all(any(x["world"] == 2 for x in job.out(n))
                              for n in ("r0", "r2")), 60)
    resumed = min((x["t"] for n in ("r0", "r2") for x in job.out(n) if x["world"] == 2),
                  default=float("nan"))
    check(ok, f"the survivors go on with 2 ranks, {resumed - t_kill:.2f} s after the kill")
    job.start("join", "--join")
    job.finish({"r0", "r2", "join"})
    # Error feedback follows each change: a survivor adds what its
    # residuals owed (non-zero under int8) at the first step of the epoch
    # after the kill and of the one after the join; the joiner owes nothing.
    for n in ("r0", "r2", "join"):
        got = job.carried(n)
        check(len(got) >= (0 if n == "join" else 2) and (n != "join" or not got)
              and all(v > 0 for _, v in got),
              f"{n} carried its residuals into epochs {[e for e, _ in got]} "
              f"(L1 {[v for _, v in got]})")


def churn(job):
    seed = int(os.environ.get("GW_ELASTIC_SEED", time.time_ns() % 1000000))
    rng = random.Random(seed)
    print(f"     seed {seed} (GW_ELASTIC_SEED repeats it)", flush=True)
    job.args = ("--ballast-mb", str(BALLAST_MB))
    for r in range(4):
        job.start(f"r{r}", "--rank", str(r), "--world", "4")
    if not job.reached("r3", KILL_AT):
        return
    job.kill("r1", "r2")	# two at once
    if not job.reached("r3", KILL_AT + 10):
        return
    job.start("j1", "--join")
    ok = wait_for(lambda: re.search(r"epoch \d+: rank", job.log("j1")), 60)
    job.kill("r0")		# the root of j1's healing transfer, during it
    check(ok, "j1 admitted, rank 0 killed then")
    if not job.reached("j1", KILL_AT + 20):
        return
    check("failed to form" in job.log("r3") or "failed to form" in job.log("j1"),
          "the kill landed while the epoch formed (a member says it failed to form)")
    job.start("j2", "--join")
    job.start("j3", "--join")
    time.sleep(rng.uniform(0, 1))
    job.kill("r3")		# the last first member, while two come in
    job.finish({"j1", "j2", "j3"})


def refuse(job):
    keys = {}
    for k in ("a", "b"):
        keys[k] = job.path("key", k)
        fd = os.open(keys[k], os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, os.urandom(32))
        os.close(fd)
    job.env.update(GRADWIRE_MAC="required", GRADWIRE_MAC_KEY_FILE=keys["a"],
                   GRADWIRE_CODEC_FALLBACK="0")
    for r in range(2):
        job.start(f"r{r}", "--rank", str(r), "--world", "2")
    at = KILL_AT
    for name, env, why in (("jk", {"GRADWIRE_MAC_KEY_FILE": keys["b"]}, "keys"),
                           ("jc", {"GRADWIRE_CODEC": "fp16"}, "no common codec")):
        if not job.reached("r1", at):
            return
        t = time.monotonic()
        job.start(name, "--join", **env)
        try:
            code = job.procs[name].wait(60)
        except subprocess.TimeoutExpired:
            code = None
        said = [x for x in job.log(name).splitlines() if "refuse" in x]
        check(code == 3 and said and why in said[-1],
              f"a joiner with {'another MAC key' if name == 'jk' else 'no codec in common'} "
              f"exits 3 in {time.monotonic() - t:.1f} s: {said[-1][:160] if said else code}")
        at = max(x["step"] for x in job.out("r1")) + 10
    job.finish({"r0", "r1"})
    t = [x["t"] for x in job.out("r0")]
    gap = max((b - a for a, b in zip(t, t[1:])), default=0)
    check(gap < 10, f"the members' longest pause between steps: {gap:.2f} s (each refusal "
          "costs one re-form)")


def silent(job):
    import datetime
    from gradwire.store import tcp_store
    job.args = ("--dead-s", "2")
    job.env["GRADWIRE_TIMEOUT_MS"] = "60000"
    for r in range(3):
        job.start(f"r{r}", "--rank", str(r), "--world", "3")
    if not job.reached("r2", KILL_AT):
        return
    store = tcp_store("127.0.0.1", int(job.port), is_master=False,
                      timeout=datetime.timedelta(seconds=30))
    k = store.add("elastic/m/joiners", 1)	# a joiner that never connects
    store.set(f"elastic/m/joiner/{k}", "ghost")
    job.finish({"r0", "r1", "r2"})
    for n in ("r0", "r1", "r2"):
        check("(ghost) has sent no heartbeat" in job.log(n), f"{n} found the joiner silent")
    t = [x["t"] for x in job.out("r0")]
    gap = max((b - a for a, b in zip(t, t[1:])), default=0)
    check(gap < 10, f"the members' longest pause between steps: {gap:.2f} s (dead_s 2 s; "
          "the library's timeout 60 s)")


def main():
    case = sys.argv[1] if len(sys.argv) > 1 else "one"
    folder = subprocess.run(["mktemp", "-d", "/tmp/gradwire-elastic-XXXXXX"],
                            capture_output=True, text=True, check=True).stdout.strip()
    env = dict(os.environ, GRADWIRE_CODEC="int8", GRADWIRE_IFACE="lo", FI_TCP_IFACE="lo",
               FI_NET_IFACE="lo", GRADWIRE_LOG="error", GRADWIRE_PROVIDER_LOCAL="main")
    job = Job(folder, env)
    try:
        if job.port:
            {"one": one, "churn": churn, "refuse": refuse, "silent": silent}[case](job)
    finally:
        job.close()
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
