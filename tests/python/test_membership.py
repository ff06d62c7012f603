#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""test_membership.py - agreement on each epoch's members through a TCPStore
(gradwire.membership), with threads as the members, each with a client of
its own. Every member must end with the same decision:

- epoch 0: four members in rank order;
- one death: the three survivors agree at once (they know who is gone);
- two deaths at once: the two survivors agree;
- a death nobody saw (a member that never asks): the others wait settle_s,
  then agree without it;
- a member that dies during the re-form (it asked, then left): the
  decision has it, and the next re-form leaves it out;
- a joiner registered during a failure is in the decision, after the
  survivors, and its join() returns that epoch;
- a member that asks too late gets NotAMember; below min_size every member
  gets BelowFloor.
Exit 77 when torch is missing.
"""
import datetime
import sys
import threading
import time

from checks import check, exit_code, require_torch  # noqa: E402 (beside this file)

require_torch()

from gradwire.membership import BelowFloor, Membership, NotAMember  # noqa: E402
from gradwire.store import tcp_store  # noqa: E402

SETTLE_S = 0.5


def store(port=0, master=False):
    kw = {"wait_for_workers": False} if master else {}
    return tcp_store("127.0.0.1", port, is_master=master,
                     timeout=datetime.timedelta(seconds=3), **kw)


def each(port, fns):
    """Run fns[i](Membership of uid i) on threads; their results (or the
    exception each raised), in order."""
    out = [None] * len(fns)

    def run(i, fn):
        try:
            out[i] = fn(store(port))
        except Exception as e:  # noqa: BLE001 - the result to check
            out[i] = e

    ts = [threading.Thread(target=run, args=(i, f)) for i, f in enumerate(fns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    return out


def main():
    server = store(master=True)
    port = server.port
    ms = {}

    def member(uid, job, **kw):
        def make(store):
            m = Membership(store, uid, job=job, settle_s=SETTLE_S, **kw)
            ms[(job, uid)] = m
            return m
        return make

    def first(job, n, **kw):
        return each(port, [lambda s, r=r: member(f"u{r}", job, **kw)(s).start(r, n)
                           for r in range(n)])

    got = first("a", 4)
    check(all(g == (0, ["u0", "u1", "u2", "u3"]) for g in got), f"epoch 0: {got[0]}")

    def reform(job, uids, gone):
        return each(port, [lambda s, u=u: (setattr(ms[(job, u)], "store", s),
                                           ms[(job, u)].reform(gone))[1] for u in uids])

    got = reform("a", ["u0", "u2", "u3"], {"u1"})
    check(all(g == (1, ["u0", "u2", "u3"]) for g in got), f"one death: all agree on {got[0]}")
    got = reform("a", ["u0", "u3"], {"u2"})
    check(all(g == (2, ["u0", "u3"]) for g in got), f"another death: {got[0]}")

    first("b", 4)
    got = reform("b", ["u0", "u3"], {"u1", "u2"})
    check(all(g == (1, ["u0", "u3"]) for g in got), f"two deaths at once: {got[0]}")

    first("c", 4)
    got = reform("c", ["u0", "u1", "u2"], set())	# u3 died, nobody saw it
    check(all(g == (1, ["u0", "u1", "u2"]) for g in got),
          f"a death nobody saw: agreed after settle_s without it: {got[0]}")

    first("d", 3)
    # u2 asks to be in epoch 1, then dies: the decision has it ...
    got = reform("d", ["u0", "u1", "u2"], set())
    check(all(g == (1, ["u0", "u1", "u2"]) for g in got), "a death during the re-form: "
          f"the decision still has it ({got[0]})")
    got = reform("d", ["u0", "u1"], {"u2"})	# ... its context fails: re-form again
    check(all(g == (2, ["u0", "u1"]) for g in got), f"... the next re-form leaves it out: {got[0]}")

    first("e", 3)
    joiner = Membership(store(port), "j0", job="e", settle_s=SETTLE_S, timeout_s=10)
    k = int(joiner.store.add(joiner._key("joiners"), 0))
    check(ms[("e", "u0")].pending_joiners() == 0 and k == 0, "no joiner waits yet")
    jout = []
    jt = threading.Thread(target=lambda: jout.append(joiner.join()))
    jt.start()
    deadline = time.monotonic() + 10
    while ms[("e", "u0")].pending_joiners() < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    got = reform("e", ["u0", "u2"], {"u1"})	# a joiner during a failure
    jt.join(15)
    want = (1, ["u0", "u2", "j0"])
    check(all(g == want for g in got) and jout == [want],
          f"a joiner during a failure: admitted after the survivors {got[0]}, join() {jout}")
    check(ms[("e", "u0")].pending_joiners() == 0, "no joiner waits once admitted")

    first("f", 3)
    got = reform("f", ["u0", "u1"], {"u2"})
    late = each(port, [lambda s: (setattr(ms[("f", "u2")], "store", s),
                                  ms[("f", "u2")].reform(set()))[1]])
    check(isinstance(late[0], NotAMember), f"a member that asks too late: {late[0]}")

    first("g", 3, min_size=3)
    got = reform("g", ["u0", "u1"], {"u2"})
    check(all(isinstance(g, BelowFloor) for g in got), f"below min_size: {got[0]}")
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
