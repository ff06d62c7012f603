# SPDX-License-Identifier: MIT
"""gradwire.membership - who is in each epoch, agreed through the store.

Every process has a uid of its own (never reused). Epoch 0 is the first
members, in rank order; each later epoch is decided when a failure (or a
waiting joiner) makes the members re-form, with no special trainer: the
store (torch's TCPStore, served by `python3 -m gradwire.store` so that no
trainer holds it) is the only meeting point, and compare_set() makes the
first complete proposal the decision that every member adopts.

Keys, under "<job>/m/":
  init/<rank>          epoch 0: the uid of each first member;
  e<E>/n, e<E>/<k>     the uids that asked to be in epoch E (k = 1..n, in
                       the order add() gave them);
  joiners, joiner/<k>  the uids waiting to join (k = 1..n);
  epoch/<E>            the decision: {"members": [uid, ...] (rank order),
                       "joined": joiners considered so far};
  decided/<E>          the same, written with set() by each member that
                       adopts it (what join() waits for).

A re-form from epoch E (reform()): each survivor asks to be in E + 1 and
waits until every member it does not know to be gone has asked too, or
settle_s has passed (a member that died unseen, or is slow). It then
proposes the members that asked, in their old order, followed by the new
joiners in the order they came, and compare_set() keeps the first proposal.
So the races converge: two deaths at once leave both out; a member that
dies during the re-form is in the decision, and the next re-form (its
context fails) leaves it out; a joiner that arrives during a failure is in
whichever decision comes after its registration; a member that asked too
late finds itself outside the decision (NotAMember) and joins again.
Fewer than min_size members is an error on each of them (BelowFloor).

Heartbeats, under "<job>/m/hb/<uid>": each process adds 1 every HEARTBEAT_S
from a thread of its own, over a store client of its own (beat()). A
process waiting for another to connect to an epoch's context reads that
counter (watch()): one that has not moved for a while is gone (killed
after it was decided, before it connected), and the epoch is re-formed
without it rather than waiting out the library's timeout.
"""
import datetime
import json
import threading
import time

from .store import poll_get, set_marked, tcp_store

__all__ = ["Membership", "NotAMember", "BelowFloor", "HEARTBEAT_S"]

HEARTBEAT_S = 0.25


class NotAMember(RuntimeError):
    """This process is not in the epoch that was decided: join again."""


class BelowFloor(RuntimeError):
    """The epoch decided has fewer than min_size members."""


def _text(v):
    return v.decode() if isinstance(v, (bytes, bytearray)) else v


class Membership:
    """This process's view of the member sets: .epoch, .members (uids in
    rank order), .rank (this uid's index). store needs set, get (waits for
    the key up to the store's timeout), add and compare_set, as torch's
    TCPStore has."""

    POLL_S = 0.02
    JOIN_POLL_S = 0.25	# a waiting joiner looks at stop() this often

    def __init__(self, store, uid, job="gw", settle_s=2.0, min_size=1, timeout_s=60.0):
        self.store, self.uid, self.job = store, str(uid), job
        self.settle_s, self.min_size, self.timeout_s = settle_s, min_size, timeout_s
        self.epoch, self.members, self.joined = -1, [], 0
        self._stop_beat = None

    @property
    def rank(self):
        return self.members.index(self.uid)

    def _key(self, *parts):
        return "/".join((self.job, "m") + tuple(str(p) for p in parts))

    def _decide(self, epoch, members, joined):
        """compare_set() the proposal; adopt whatever decision won."""
        want = json.dumps({"members": members, "joined": joined})
        won = _text(self.store.compare_set(self._key("epoch", epoch), "", want))
        # Published again with set(): a waiting get() is woken by set()
        # but, in torch 1.13's TCPStore, not by compare_set().
        set_marked(self.store, self._key("decided", epoch), won)
        return self._adopt(epoch, json.loads(won))

    def _adopt(self, epoch, won):
        if self.uid not in won["members"]:
            raise NotAMember(f"gradwire: epoch {epoch} was decided without {self.uid} "
                             f"({len(won['members'])} members): join again")
        self.epoch, self.members, self.joined = epoch, won["members"], won["joined"]
        if len(self.members) < self.min_size:
            raise BelowFloor(f"gradwire: epoch {epoch} has {len(self.members)} members, "
                             f"fewer than min_size {self.min_size}")
        return epoch, list(self.members)

    def start(self, rank, world):
        """Epoch 0: the first world members, rank from 0 to world - 1.
        Return (0, members)."""
        self.store.set(self._key("init", rank), self.uid)
        members = [_text(self.store.get(self._key("init", r))) for r in range(world)]
        return self._decide(0, members, 0)

    def beat(self):
        """Start this process's heartbeat (once). The thread has a store
        client of its own (a TCPStore at the store's host and port),
        so it never waits behind a call of the main thread. Return whether
        it beats: False over a store without host and port."""
        if self._stop_beat is not None:
            return True
        host, port = getattr(self.store, "host", None), getattr(self.store, "port", None)
        if host is None or port is None:
            return False
        client = tcp_store(host, port, is_master=False,
                           timeout=datetime.timedelta(seconds=self.timeout_s))
        key, stop = self._key("hb", self.uid), threading.Event()
        client.add(key, 1)

        def run():
            while not stop.wait(HEARTBEAT_S):
                try:
                    client.add(key, 1)
                except RuntimeError:	# the store is gone: nothing to tell
                    return
        threading.Thread(target=run, name="gradwire-heartbeat", daemon=True).start()
        self._stop_beat = stop
        return True

    def stop_beat(self):
        if self._stop_beat is not None:
            self._stop_beat.set()

    def watch(self, uid):
        """A Watch on uid's heartbeat."""
        return Watch(self.store, self._key("hb", uid))

    def _listed(self, counter, item, start=0):
        """The uids under counter's keys start + 1 .. its count."""
        n = int(self.store.add(counter, 0))
        return [_text(self.store.get(f"{item}/{k}")) for k in range(start + 1, n + 1)], n

    def reform(self, gone=()):
        """Re-form after a failure in this epoch: gone are the uids known to
        have left (they are not waited for). Return (epoch, members) of the
        next epoch; NotAMember, BelowFloor as above."""
        nxt = self.epoch + 1
        counter, item = self._key(f"e{nxt}", "n"), self._key(f"e{nxt}")
        k = int(self.store.add(counter, 1))
        self.store.set(f"{item}/{k}", self.uid)
        gone = set(gone)
        wanted = {m for m in self.members if m not in gone}
        deadline = time.monotonic() + self.settle_s
        while True:
            asked, _ = self._listed(counter, item)
            if wanted <= set(asked) or time.monotonic() >= deadline:
                break
            time.sleep(self.POLL_S)
        old = set(self.members)
        stay = [m for m in self.members if m in set(asked)]
        joiners, n = self._listed(self._key("joiners"), self._key("joiner"), self.joined)
        new = [j for j in dict.fromkeys(joiners) if j not in old]
        return self._decide(nxt, stay + new, n)

    def join(self, stop=None):
        """Wait, as a new process, to be admitted by a re-form (the members
        re-form when they see joiners waiting: pending_joiners()). Return
        (epoch, members); None once stop() says so (a signal came); after
        timeout_s, TimeoutError."""
        k = int(self.store.add(self._key("joiners"), 1))
        self.store.set(self._key("joiner", k), self.uid)
        deadline = time.monotonic() + self.timeout_s
        epoch = 0
        while time.monotonic() < deadline:
            if stop is not None and stop():
                return None
            # Short polls: the deadline holds, and a signal's handler runs.
            got = poll_get(self.store, self._key("decided", epoch), self.JOIN_POLL_S)
            if got is None:	# not decided yet
                continue
            won = json.loads(_text(got))
            if self.uid in won["members"]:
                return self._adopt(epoch, won)
            epoch += 1
        raise TimeoutError(f"gradwire: {self.uid} not admitted within {self.timeout_s} s")

    def pending_joiners(self):
        """How many joiners wait beyond those this epoch considered."""
        return int(self.store.add(self._key("joiners"), 0)) - self.joined


class Watch:
    """One process's heartbeat as another sees it: silent() is how long its
    counter has not moved, counted from the first look (a process that
    never beat is silent from then on)."""

    def __init__(self, store, key):
        self.store, self.key, self.last, self.since = store, key, None, time.monotonic()

    def silent(self):
        v, now = int(self.store.add(self.key, 0)), time.monotonic()
        if v != self.last:
            self.last, self.since = v, now
        return now - self.since
