# SPDX-License-Identifier: MIT
"""gradwire.elastic - data-parallel training that goes on when a rank dies
or a new one joins, with no service beyond the store (Elastic).

Each epoch (gradwire.membership) has a gradwire context of its own over its
members, created under the store prefix "<job>/ctx/e<epoch>". The trainer
reduces the gradients itself after backward() (no DDP, no process group):
one flat allreduce with the lossy codec and error feedback, and one exact
allreduce of a flag, "a joiner waits", so every member re-forms at the same
step. When a call fails (a rank died, or revoked), every survivor:
  1. drops the step: it does not step its optimizer;
  2. agrees on the next epoch's members (Membership.reform(), the failed
     rank named by the error as gone);
  3. re-forms its context over them (Context.reform()): links to the other
     survivors stay, with their codecs; newcomers connect;
  4. takes the state of the member furthest on (the lowest rank of them):
     parameters, optimizer state and step counter, broadcast exactly over
     gradwire (MAC-covered when a key is set) and checked by its SHA-256.
A survivor whose allreduce completed before the others' failed holds the
full average of the old members and has stepped: the others adopt that
step rather than it going back. So no replica goes back, nobody applies a
partial average, and the replicas are identical after every re-form. A
joiner does 3 and 4 after join().

Error feedback follows a change. Before it re-forms its context, a member
takes what its residuals owe the gradients as one vector over them
(Context.residual_sum()) and adds it to its gradients at the first step of
the next epoch: it enters the new members' sum as it would have entered
the old one, whatever the new chunks and owners (that is the re-slicing;
coll/residual.c). A joiner owes nothing. What is lost: a departed rank's
residual (one rank's compression error for one step, about), and, in the
dropped step, the part of a survivor's residual that its segments already
sent had taken with them (at most the same again).

A process killed after an epoch was decided with it, before it connected
(a joiner, or a member dying during a re-form), would keep the others
waiting for its address until the library's timeout. While they wait for
a member, they watch its heartbeat (Membership.beat()): silent for dead_s,
it is gone, the epoch fails to form, and the next leaves it out.
"""
import errno
import hashlib
import io
import re
import time
import uuid

import torch

from . import lib as _lib
from .membership import Membership, NotAMember
from .torch import c10d_store_fns, owed

GRAD_ID, FLAG_ID = 1, 2
# Errors of a connection the members refuse: another MAC key, no codec in common.
REFUSALS = (-errno.EKEYREJECTED, -errno.ENOPROTOOPT)


class Refused(RuntimeError):
    """This joiner cannot connect to the members (another MAC key, or no
    codec in common): it is left out, and the job goes on without it."""


class Elastic:
    """Train model with optimizer over the members of each epoch.

        el = Elastic(model, opt, store, min_size=2)
        el.start(rank, world)          # or el.join() for a new process
        while el.step < steps:
            loss = el.train_step(lambda: loss_of(el.step, el.rank, el.world))

    store: a torch Store (a TCPStore served by `python3 -m gradwire.store`);
    lossy: whether the gradients may take the codec (GRADWIRE_CODEC);
    dead_s: a member that others wait for while an epoch forms, and whose
        heartbeat has not moved for this long, is gone (heartbeats need a
        TCPStore; over another store only the library's timeout applies).
    """

    WATCH_S = 0.25	# while an epoch forms, heartbeats are read this often

    def __init__(self, model, optimizer, store, job="gw", uid=None, min_size=1,
                 settle_s=2.0, lossy=True, log=None, dead_s=5.0):
        self.model, self.opt, self.store, self.job = model, optimizer, store, job
        self.lossy = lossy
        self.log = log or (lambda msg: None)
        self.lib = _lib.load()
        self.lib.init()
        self.m = Membership(store, uid or uuid.uuid4().hex, job=job, settle_s=settle_s,
                            min_size=min_size)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.ctx, self.step, self.reforms = None, 0, 0
        self.shape = []	# the members (uids) of the context's last epoch
        self.fresh = False	# a joiner not yet in a formed epoch
        self.owed = None	# error feedback carried into the next epoch
        self.dead_s, self.silent = dead_s, set()	# uids found silent while forming
        self.beats = self.m.beat()

    @property
    def rank(self):
        return self.m.rank

    @property
    def world(self):
        return len(self.m.members)

    @property
    def epoch(self):
        return self.m.epoch

    # -- membership ----------------------------------------------------------
    def start(self, rank, world):
        """As one of the first world members: epoch 0, then one state for all."""
        self.m.start(rank, world)
        self._enter()

    def join(self, stop=None):
        """As a new process: wait to be admitted, then take the members'
        state. Return False, not admitted, once stop() says so."""
        self.fresh = True
        if self.m.join(stop) is None:
            self.m.stop_beat()
            return False
        self._enter()
        return True

    def _enter(self):
        """Connect the epoch's context and heal; a member lost on the way
        (killed before or during the state's transfer) makes the members
        re-form without it, as after a failed step."""
        try:
            self._connect()
            self._heal()
            self.fresh = False
        except _lib.GradwireError as e:
            self._failed_to_form(e)
            self._reform(self._gone(e))

    def _failed_to_form(self, e):
        """Log why an epoch did not form; a joiner the members' connections
        refuse (another MAC key, no codec in common) gives up: Refused. The
        members re-form without it (it does not join again)."""
        self.log(f"epoch {self.epoch} failed to form: {str(e)[:300]}")
        if self.fresh and e.code in REFUSALS:
            self._close()
            raise Refused(f"gradwire elastic: the members refuse this joiner: {e}") from e

    def _connect(self):
        """Re-form the context over the epoch's members (context_reform):
        links between members of its last epoch stay, newcomers connect. A
        process without one comes in new; a failure leaves the context in
        this epoch's shape, for the next re-form."""
        set_fn, get_fn = c10d_store_fns(self.store, f"{self.job}/ctx/e{self.epoch}")
        members = list(self.m.members)
        if self.ctx is None:
            self.ctx, self.shape = _lib.Context.newcomer(self.lib), []
        old = [self.shape.index(u) if u in self.shape else -1 for u in members]
        self.shape = members
        self.ctx.reform(self.epoch, self.rank, self.world, old, set_fn,
                        self._watching(get_fn))
        kept = sum(1 for r, o in enumerate(old) if o >= 0 and r != self.rank)
        self.log(f"epoch {self.epoch}: rank {self.rank} of {self.world}"
                 f"{f', {kept} links kept' if kept else ''}")

    def _watching(self, get_fn):
        """get_fn, but a wait for a member's key (the library's keys end in
        the rank that publishes them) gives up once that member's heartbeat
        has been still for dead_s: it is gone (self.silent), and the
        library reports the key as never published."""
        if not self.beats:
            return get_fn
        members = list(self.m.members)

        def get(key, timeout_ms):
            tail = key.rsplit("/", 1)[-1]
            who = int(tail) if tail.isdigit() and int(tail) < len(members) else self.rank
            if who == self.rank:
                return get_fn(key, timeout_ms)
            t0 = time.monotonic()
            watch, end, said = self.m.watch(members[who]), t0 + timeout_ms / 1000, False
            while True:
                left = end - time.monotonic()
                v = get_fn(key, max(1, int(min(left, self.WATCH_S) * 1000)))
                if v is not None or left <= self.WATCH_S:
                    return v
                if not said and time.monotonic() - t0 > 1.0:
                    said = True
                    self.log(f"epoch {self.epoch}: rank {self.rank} waits for rank {who}'s "
                             f"{key.rsplit('/', 2)[-2]} ({members[who]})")
                if watch.silent() >= self.dead_s:
                    self.silent.add(members[who])
                    self.log(f"epoch {self.epoch}: rank {who} ({members[who]}) has sent no "
                             f"heartbeat for {self.dead_s:g} s: gone")
                    return None
        return get

    def _owe(self):
        """Keep what the context's residuals owe (self.owed): a re-form
        drops them."""
        if self.ctx is None or not self.lossy:
            return
        try:
            v = owed(self.ctx, GRAD_ID, sum(p.numel() for p in self.params))
        except _lib.GradwireError as e:	# residuals of another shape
            if e.code != -errno.ENOTCONN:	# not formed: nothing owed
                self.log(f"residuals not carried: {e}")
        else:	# zeros: no lossy call in this epoch (nothing owed)
            if v.any():
                self.owed = v if self.owed is None else self.owed + v

    def _close(self):
        """Close the context, keeping what its residuals owe."""
        if self.ctx is None:
            return
        self._owe()
        self.ctx.close()
        self.ctx, self.shape = None, []

    def _state_bytes(self):
        buf = io.BytesIO()
        torch.save({"model": self.model.state_dict(), "opt": self.opt.state_dict(),
                    "step": self.step}, buf)
        return buf.getvalue()

    def _heal(self):
        """Every member takes the state of the member furthest on (the
        lowest rank among them): exact broadcast, hash-checked. A survivor
        whose last allreduce completed before the failure holds the full
        average of the old members, so nobody goes back and nobody applies
        a partial average."""
        steps = torch.zeros(self.world, dtype=torch.int64)
        mine = torch.tensor([self.step], dtype=torch.int64)
        self.ctx.allgather(mine.data_ptr(), steps.data_ptr(), 8)
        root = int(torch.argmax(steps))	# the first of the furthest
        head = torch.zeros(40, dtype=torch.uint8)	# length, then SHA-256
        if self.rank == root:
            blob = bytearray(self._state_bytes())
            data = torch.frombuffer(blob, dtype=torch.uint8)
            head[:8] = torch.tensor(list(len(blob).to_bytes(8, "little")), dtype=torch.uint8)
            head[8:] = torch.tensor(list(hashlib.sha256(blob).digest()), dtype=torch.uint8)
        self.ctx.broadcast(root, head.data_ptr(), head.numel())
        n = int.from_bytes(bytes(head[:8].tolist()), "little")
        if self.rank != root:
            data = torch.empty(n, dtype=torch.uint8)
        t = time.monotonic()
        self.ctx.broadcast(root, data.data_ptr(), n)
        t = time.monotonic() - t
        if self.rank != root:
            self.log(f"state of {n} bytes from rank {root} in {t:.3f} s "
                     f"({n / max(t, 1e-9) / 1e6:.1f} MB/s)")
            got = bytes(data.numpy())
            if hashlib.sha256(got).digest() != bytes(head[8:].tolist()):
                raise RuntimeError(f"gradwire elastic: the state from rank {root} of epoch "
                                   f"{self.epoch} does not match its SHA-256")
            sd = torch.load(io.BytesIO(got))
            self.model.load_state_dict(sd["model"])
            self.opt.load_state_dict(sd["opt"])
            self.step = int(sd["step"])

    def _reform(self, gone=(), tries=5):
        """Re-form, connect and heal; a member lost on the way (a death
        during the re-form: its context never comes up) makes it again,
        without that one. A member left out (it asked too late) joins."""
        gone = set(gone)
        for _ in range(tries):
            self._owe()
            try:
                self.m.reform(gone)
            except NotAMember as e:
                self.log(f"{e}: joining")
                self._close()	# it comes in new
                self.m.join()
            self.reforms += 1
            try:
                self._connect()
                self._heal()
                self.fresh = False
                return
            except _lib.GradwireError as e:
                self._failed_to_form(e)
                gone = self._gone(e)
        raise RuntimeError(f"gradwire elastic: no epoch formed in {tries} tries")

    def _gone(self, err):
        """The uid of the rank an error names (gone or revoked), if any, and
        those found silent while the epoch formed."""
        gone, self.silent = self.silent, set()
        hit = re.search(r"rank (\d+) (?:is gone|revoked)", str(err)) or \
            re.search(r"rank (\d+)", str(err))
        if hit and int(hit.group(1)) < self.world and int(hit.group(1)) != self.rank:
            gone.add(self.m.members[int(hit.group(1))])
        return gone

    # -- one step ------------------------------------------------------------
    def _reduce(self):
        """Average the gradients over the members (one flat, lossy
        allreduce); whether a joiner waits, by an exact sum of flags."""
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in self.params]).contiguous()
        if self.owed is not None:	# what the last epoch's residuals owed
            flat += self.owed
            self.log(f"carried error feedback into epoch {self.epoch}: "
                     f"{float(self.owed.abs().sum()):.4g} (L1)")
            self.owed = None	# in this call's values; its residuals hold it after
        flags = _lib.GRADWIRE_LOSSY if self.lossy else 0
        self.ctx.allreduce_id(GRAD_ID, flat.data_ptr(), flat.numel(), _lib.GRADWIRE_AVG, flags)
        waiting = torch.tensor([1.0 if self.m.pending_joiners() > 0 else 0.0])
        self.ctx.allreduce_id(FLAG_ID, waiting.data_ptr(), 1, _lib.GRADWIRE_SUM, 0)
        off = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.copy_(flat[off:off + n].view_as(p))
            off += n
        return waiting.item() > 0

    def train_step(self, loss_fn):
        """loss_fn() computes this rank's loss for self.step (its data from
        self.step, self.rank and self.world). Backward, reduce, step. Return
        the loss, or None when the step was dropped (the members re-formed;
        call again: self.step says which step is next)."""
        self.opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        t = time.monotonic()
        try:
            joiner = self._reduce()
        except _lib.GradwireError as e:
            self.log(f"step {self.step} dropped: {str(e)[:200]}")
            self._reform(self._gone(e))
            self.log(f"re-formed in {time.monotonic() - t:.2f} s")
            return None
        self.opt.step()
        self.step += 1
        if joiner:
            self._reform()
        return float(loss.detach())

    def close(self):
        self._close()
        self.m.stop_beat()
