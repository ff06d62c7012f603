# SPDX-License-Identifier: MIT
"""A PyTorch DDP communication hook that allreduces over gradwire.

    import gradwire.torch as gwt
    state = gwt.State(warmup_steps=10)          # after init_process_group()
    model = DDP(model)
    model.register_comm_hook(state, gwt.hook)

Every rank builds its State at the same point (it connects the ranks: a
collective call). The hook averages each gradient bucket with gradwire's ring
allreduce instead of the process group's; each connection uses the codec it
negotiated from GRADWIRE_CODEC (docs/codecs.md).

What travels how, per bucket:
- float32 CPU buckets go through gradwire. When no rank's connection
  compresses (GRADWIRE_CODEC=none everywhere), each bucket is one exact
  allreduce. Otherwise each parameter with at least two
  dimensions and at least min_compress_numel elements is allreduced in
  place with GRADWIRE_LOSSY under its own allreduce_id, so it has error
  feedback (and codec state) of its own; the rest of the bucket (biases,
  norms, small tensors) is gathered into one buffer and allreduced exactly.
  During the first warmup_steps steps the whole bucket goes exactly. The
  library still sends a ring chunk exactly when it is smaller than
  GRADWIRE_MIN_COMPRESS_BYTES.
- Other floating dtypes (float64, float16, bfloat16) on CPU are averaged
  exactly by the process group (gradwire carries float32 only).
- Any other bucket (CUDA, integer) raises TypeError: the hook does not copy
  device memory behind the user's back.

Asynchronous by default, like torch's own hooks: the hook queues the
bucket's allreduces on a gradwire queue (a C thread of the library's own,
one per State, running them in submission order: the order DDP launches
buckets, the same on every rank) and returns a torch.futures.Future at once,
so backward goes on computing the next buckets while this one travels. A
Python thread of the State ("gradwire-hook") waits for each bucket's tickets
(ctypes releases the GIL) and completes its future with the bucket, or with
a gradwire.lib.GradwireError naming the failed peer. No C thread ever calls
into Python: torch 1.13 can hang at exit when a callback needs the GIL on a
thread Python did not create. State.close() (also run at exit for States
still open) cancels what has not started, fails those futures, joins the
thread and closes the connections. State(sync=True) keeps the synchronous
hook: the allreduce runs inside the hook and the future comes back done.

Identifiers given to allreduce_id: a compressible parameter is named by the
order in which the State first saw it (0, 1, ...), not by its bucket: DDP
groups parameters one way for its first step and another after rebuilding
its buckets, and again in a restarted job. Exact parts share EXACT_ID (they
have no residuals). The library gives identifiers its 1024 streams in order of
first use (a codec's own collectives, PowerSGD's factors, take some too) and
residuals are saved per stream, so state_dict() records the order with each
tensor's length and flags, and load_state_dict() replays it (allreduces of
zeros) before loading the residuals. More than MAX_LOSSY compressible
parameters is an error that says to raise min_compress_numel (beyond 1024
identifiers the library would share streams, mixing residuals).

Timeout: the library's waits (connecting, every receive) follow the
process group's timeout (torch's default 30 minutes), so a rank that
evaluates or checkpoints for minutes does not fail the others; a
GRADWIRE_TIMEOUT_MS the user set wins. Like torch's own collectives, a peer
that stays alive but silent is then noticed only after that long.

Rendezvous: through the group's own store (torch 1.13: its namespace in the
default store), under prefix/<the group's global ranks>/<count>, so States
of disjoint groups in one job never share a key.

FSDP1 (torch >= 2.0): FsdpState and fsdp_hook reduce-scatter each flat
parameter's gradient over gradwire, compressed with error feedback, with
FSDP's own averaging (see FsdpState). On an older torch (Debian 12's 1.13)
this module imports as before; FsdpState() and fsdp_hook raise an error
naming the torch they need.

State checkpoint: state_dict() holds this rank's residuals and codec state
(the bytes of residuals_save), the identifiers' order and the step counter;
every rank saves and restores its own.
"""
import atexit
import collections
import datetime
import functools
import hashlib
import logging
import math
import os
import tempfile
import threading
import time
import weakref

import torch
import torch.distributed as dist

from . import lib as _lib
from .store import poll_get, set_marked

__all__ = ["State", "hook", "zero_hook", "FsdpState", "fsdp_hook", "c10d_store_fns",
           "group_timeout_ms", "libuv_missing", "owed"]

log = logging.getLogger("gradwire")
_generations = {}	# (prefix, group tag) -> States made so far
TIMEOUT_VAR = "GRADWIRE_TIMEOUT_MS"
TIMEOUT_MAX_MS = 86400000	# the variable's bound in plugin/config.c
_lib_loaded = None	# (source, value) of the timeout the hook had the library load
EXACT_ID = 1 << 31  # allreduce_id of every bucket's exact part
ZERO_SLOT = 1 << 20  # the ZeRO hook's point-to-point slots: ZERO_SLOT + bucket
STATE_VERSION = 2   # state_dict()'s; 2: EXACT_ID's stream comes first
MAX_LOSSY = 1021    # gradwire's 1024 allreduce streams (coll/coll.h), less
                    # EXACT_ID and PowerSGD's two factor streams


def c10d_store_fns(store, prefix):
    """(set_fn, get_fn) for gradwire.lib.Context.create over a c10d store.

    Keys live under prefix + "/" (dist.PrefixStore), each with a mark that
    set_fn adds and get_fn polls (gradwire.store.poll_get(): never
    store.wait() with a timeout, which leaves a TCPStore client unusable
    once it expires), so a key that does
    not appear in time returns None (-ETIMEDOUT for the library) instead of
    blocking for the store's own timeout, and the store serves on.
    """
    pstore = dist.PrefixStore(prefix, store)

    def set_fn(key, value):
        set_marked(pstore, key, value)

    def get_fn(key, timeout_ms):
        return poll_get(pstore, key, max(1, timeout_ms) / 1000)

    return set_fn, get_fn


def _group(process_group):
    """The ProcessGroup object itself (None: the default group)."""
    if process_group is None:
        return dist.distributed_c10d._get_default_group()
    return process_group


def group_timeout_ms(process_group=None):
    """The process group's timeout in milliseconds (None: the default group).

    It is the timeout= given to init_process_group() or new_group() (torch's
    default: 30 minutes). torch has no public getter. torch 1.13 keeps it on
    the group (group.options._timeout); torch 2.x on the group's backend
    for the CPU (group._get_backend(cpu).options._timeout). This reads
    whichever the running torch has; a group with neither (a debug wrapper,
    another backend) counts as torch's default,
    dist.distributed_c10d.default_pg_timeout. Clamped to what
    GRADWIRE_TIMEOUT_MS accepts (1 ms to 24 h).
    """
    pg = _group(process_group)
    t = getattr(getattr(pg, "options", None), "_timeout", None)
    if not isinstance(t, datetime.timedelta) and hasattr(pg, "_get_backend"):
        try:
            backend = pg._get_backend(torch.device("cpu"))
        except (RuntimeError, ValueError):
            backend = None
        t = getattr(getattr(backend, "options", None), "_timeout", None)
    if not isinstance(t, datetime.timedelta):
        t = dist.distributed_c10d.default_pg_timeout
    return max(1, min(TIMEOUT_MAX_MS, int(t.total_seconds() * 1000)))


_libuv_missing = None


def libuv_missing():
    """Whether this torch's TCPStore asks for libuv by default but was built
    without it (Debian's torch 2.6). An env://, tcp:// or torchrun start then
    fails with "use_libuv was requested but PyTorch was build without libuv
    support" unless USE_LIBUV=0 is set, or use_libuv=False passed to a
    TCPStore. gradwire changes neither behind the user's back: a script
    checks this and sets one itself (examples/ddp_train.py does).

    The answer comes from starting a store on a free loopback port once.
    """
    global _libuv_missing
    if _libuv_missing is None:
        try:
            dist.TCPStore("127.0.0.1", 0, 1, True, use_libuv=True)
            _libuv_missing = False
        except TypeError:  # a torch without use_libuv: no libuv default either
            _libuv_missing = False
        except RuntimeError as e:
            if "libuv" not in str(e):
                raise
            _libuv_missing = True
    return _libuv_missing


def _follow_timeout(lib, group_ms):
    """Have the library wait group_ms (its GRADWIRE_TIMEOUT_MS) unless the
    user set that variable; (the milliseconds in force, where they come from).

    The library reads its variables once, at init(), from the process
    environment, and has no timeout per context (include/gradwire/plugin.h).
    So the hook sets the variable for the length of init() and removes it
    again (child processes do not inherit it, and a later State still sees
    only what the user set). A library loaded earlier with another value is
    finalized and loaded again when no context is open; otherwise it keeps
    its value, with a warning.
    """
    global _lib_loaded
    user = os.environ.get(TIMEOUT_VAR)
    want = (TIMEOUT_VAR, user) if user is not None else ("process group", group_ms)
    if lib.inited and _lib_loaded != want:
        if lib.finalize() < 0:	# -EBUSY: a context is open
            have = int(_lib_loaded[1] if _lib_loaded else user or 30000)
            log.warning("gradwire: this State's timeout would be %s ms (%s), but the "
                        "library keeps %d ms while a context opened earlier is open "
                        "(one timeout per process); close that State first, or set "
                        "%s before the first one", want[1], want[0], have, TIMEOUT_VAR)
            return have, "an earlier context"
    if not lib.inited:
        if user is None:
            os.environ[TIMEOUT_VAR] = str(group_ms)
        try:
            lib.init()	# rejects a user's value that is not a number
        finally:
            if user is None:
                del os.environ[TIMEOUT_VAR]
        _lib_loaded = want
    return int(want[1]), want[0]


def _ranks_tag(ranks):
    """The group's global ranks as a short key part: "0-3", "0,2,5-7"; a
    long list becomes its length and a hash."""
    runs, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        runs.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    tag = ",".join(runs)
    if len(tag) > 64:
        tag = f"{len(ranks)}r" + hashlib.sha256(tag.encode()).hexdigest()[:16]
    return tag


def _group_ranks(pg):
    """The group's members, in the global numbering, by group rank."""
    c10d = dist.distributed_c10d
    if hasattr(c10d, "get_process_group_ranks"):	# torch 1.13
        return list(c10d.get_process_group_ranks(pg))
    return [dist.get_global_rank(pg, r) for r in range(pg.size())]


def _group_store(pg):
    """The group's own c10d store, as far as torch 1.13 has one.

    torch 1.13 builds a group's backend over PrefixStore(<group name>, the
    default store) and keeps no reference to that PrefixStore; it records
    the store it wrapped (_pg_map) and the name (_pg_names). This rebuilds
    the same namespace (the hook's keys stay apart from the backend's under
    their own prefix). Without those records: the default store.
    """
    c10d = dist.distributed_c10d
    base = getattr(c10d, "_pg_map", {}).get(pg, (None, None))[1]
    name = getattr(c10d, "_pg_names", {}).get(pg)
    if base is None or name is None:
        return c10d._get_default_store()
    return dist.PrefixStore(name, base)


def owed(ctx, ident, n):
    """What this rank's residuals in ctx owe tensor ident of n values, as a
    float32 tensor (Context.residual_sum); GradwireError under PowerSGD or
    the hierarchical allreduce (residuals of another shape)."""
    v = torch.zeros(n, dtype=torch.float32)
    ctx.residual_sum(ident, v.data_ptr(), n)
    return v


class State:
    """The hook's state: a gradwire context, the step counter, statistics.

    Arguments (all optional):
    process_group: the group whose ranks take part (default: the world). Its
        rank and size are gradwire's, and its timeout (group_timeout_ms())
        is the library's GRADWIRE_TIMEOUT_MS unless the user set that.
    store: a c10d store for the rendezvous (default: the group's own).
    prefix: key prefix in that store; the group's global ranks and a count
        of the States this process made for them are appended
        ("gradwire/0-3/0"), so States made in the same order on every rank
        of a group meet, and States of other groups never collide.
    library: path of libgradwire.so (default: GW_LIB, the build folder next
        to this package, then the system's library path).
    warmup_steps: steps during which every bucket travels exactly.
    min_compress_numel: parameters smaller than this travel exactly (so do
        one-dimensional ones, whatever their size).
    sync: run each bucket's allreduce inside the hook and return a completed
        future (no overlap with backward); default False (asynchronous).
    stats: record per-step statistics in self.last and self.history (one
        dict a step, of what this rank sent to its peers: raw_bytes, the
        tensor bytes in its frames; wire_bytes, the frames' bytes;
        exact_bytes, what an exact ring allreduce of the same buckets would
        send; ratio = exact_bytes / wire_bytes, the compression (for
        PowerSGD the frames carry the factors, so raw_bytes is small too);
        lossy, whether the warm-up was over).

    close() (or the exit, for a State left open) returns summary(), this
    rank's account of the State, and logs it at info on the "gradwire"
    logger (Python logging).
    """

    def __init__(self, process_group=None, store=None, prefix="gradwire",
                 library=None, warmup_steps=0, min_compress_numel=1024,
                 stats=False, sync=False):
        if not dist.is_initialized():
            raise RuntimeError("gradwire.torch.State: call "
                               "torch.distributed.init_process_group() first")
        self.process_group = process_group
        pg = _group(process_group)
        self.rank = dist.get_rank(process_group)
        self.size = dist.get_world_size(process_group)
        self.group_ranks = _group_ranks(pg)
        self.warmup_steps = int(warmup_steps)
        self.min_compress_numel = int(min_compress_numel)
        self.step = 0
        self.want_stats = bool(stats)
        self.history = []
        self.last = None
        self._totals = (0, 0)
        self._layouts = {}
        self._lossy_ids = {}	# parameter address -> allreduce_id
        self._seen = {}		# allreduce_id -> (n, lossy), first-use order
        self._owed = {}		# allreduce_id -> residual vector carried in (load_state_dict)
        self._queue = None	# the asynchronous hook's, made below
        self._exact_bytes = 0
        self._summary = None
        self._connect_s = 0.0	# wall time in gradwire: connecting,
        self._allreduce_s = 0.0	# and with allreduces called or queued
        self.lib = _lib.load(library)
        self.timeout_ms, self.timeout_source = _follow_timeout(
            self.lib, group_timeout_ms(pg))
        if store is None:
            store = _group_store(pg)
        tag = _ranks_tag(self.group_ranks)
        gen = _generations.get((prefix, tag), 0)
        _generations[(prefix, tag)] = gen + 1
        set_fn, get_fn = c10d_store_fns(store, f"{prefix}/{tag}/{gen}")
        t0 = time.monotonic()
        self.ctx = _lib.Context.create(self.lib, self.rank, self.size,
                                       set_fn, get_fn)
        self._connect_s = time.monotonic() - t0
        _open_states.add(self)
        self.providers = {p: self.ctx.stats(p).provider.decode()
                          for p in range(self.size) if p != self.rank}
        self.codecs = {p: self.ctx.stats(p).codec.decode()
                       for p in range(self.size) if p != self.rank}
        # Whether any rank's link compresses, agreed by all (an exact
        # allreduce of the count of such links, before any bucket): when
        # none does, a bucket is one exact allreduce instead of one per
        # compressible parameter (fewer calls, no gather of the rest). It is
        # EXACT_ID's first use, so checkpoints record it (see _replay()).
        links = torch.tensor([float(sum(c.split(":")[0] != "none"
                                        for c in self.codecs.values()))])
        self._reduce(EXACT_ID, links, False)
        self.lossy_links = links.item() > 0
        self._totals = self._totals_now()	# the handshake is not a step's
        self._exact_bytes = 0
        self.sync = bool(sync)
        if not self.sync:
            self._queue = self.ctx.queue()
            self._jobs = collections.deque()
            self._cv = threading.Condition()
            self._closing = False
            self._thread = threading.Thread(target=self._completer, daemon=True,
                                            name="gradwire-hook")
            self._thread.start()

    # -- checkpoints -------------------------------------------------------
    def state_dict(self):
        """This rank's residuals and codec state (opaque bytes), the
        identifiers' first-use order and the step counter."""
        self.drain()
        fd, path = tempfile.mkstemp(prefix="gradwire-res-")
        os.close(fd)
        try:
            self.ctx.residuals_save(path)
            with open(path, "rb") as f:
                blob = f.read()
        finally:
            os.unlink(path)
        return {"version": STATE_VERSION, "rank": self.rank, "size": self.size,
                "step": self.step, "residuals": blob, "owed": self._owed_now(),
                "ids": [[i, n, lossy] for i, (n, lossy) in self._seen.items()]}

    def _owed_now(self):
        """Per lossy tensor, what this rank's residuals owe it as one vector
        (Context.residual_sum): what a job of another size can carry."""
        out = {}
        for ident, (n, lossy) in self._seen.items():
            if not lossy or not n:
                continue
            try:
                v = owed(self.ctx, ident, n)
            except _lib.GradwireError:	# PowerSGD's, the hierarchical allreduce's
                return {}
            if v.any():
                out[ident] = v
        return out

    def load_state_dict(self, sd):
        """Restore what state_dict() returned on the same rank of a job of the
        same size. Collective: every rank calls it at the same point, before
        the hook has reduced anything other than in the checkpoint's order.

        From a job of another size (any of its ranks' states) the step
        counter and the tensors' order are restored. The residuals belong to
        chunks and peers of the old size: what they owed each tensor, as one
        vector, is added to the tensor at its first allreduce here, when the
        state is this rank's number's (each old rank's is added once). A
        state of another rank number starts at zero, with a warning: what is
        lost is that rank's compression error not yet sent, about one step's."""
        if sd.get("version") != STATE_VERSION:
            raise ValueError(f"gradwire state version {sd.get('version')!r}, this "
                             f"State's is {STATE_VERSION}: its tensors took "
                             "their residual streams in another order")
        resized = sd["size"] != self.size
        if sd["rank"] != self.rank and not resized:
            raise ValueError(f"gradwire state of rank {sd['rank']} of "
                             f"{sd['size']} loaded on rank {self.rank} of "
                             f"{self.size}")
        self._replay([tuple(x) for x in sd["ids"]])
        self.drain()
        if resized:
            self.ctx.residuals_reset()
            if sd["rank"] == self.rank and sd.get("owed") is not None:
                self._owed = dict(sd["owed"])
                log.info("gradwire: a state of %d ranks loaded on rank %d of %d: what its "
                         "residuals owed %d tensors is added at their first allreduce",
                         sd["size"], self.rank, self.size, len(self._owed))
            else:
                log.warning("gradwire: rank %d's state of %d ranks loaded on rank %d of "
                            "%d: the residuals start at zero (the compression error it "
                            "had not sent, about one step's, is lost)", sd["rank"],
                            sd["size"], self.rank, self.size)
        else:
            fd, path = tempfile.mkstemp(prefix="gradwire-res-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(sd["residuals"])
                self.ctx.residuals_load(path)
            finally:
                os.unlink(path)
        self.step = int(sd["step"])
        self._totals = self._totals_now()	# nor is the replay
        self._exact_bytes = 0

    # -- statistics --------------------------------------------------------
    def _totals_now(self):
        raw = wire = 0
        for p in range(self.size):
            if p != self.rank:
                s = self.ctx.stats(p)
                raw += s.raw_sent
                wire += s.wire_sent
        return raw, wire

    def _end_step(self):
        if self.want_stats:
            raw, wire = self._totals_now()
            d_raw, d_wire = raw - self._totals[0], wire - self._totals[1]
            self._totals = (raw, wire)
            self.last = {"step": self.step, "raw_bytes": d_raw,
                         "wire_bytes": d_wire, "exact_bytes": self._exact_bytes,
                         "ratio": (self._exact_bytes / d_wire if d_wire
                                   else float("nan")),
                         "lossy": self.step >= self.warmup_steps}
            self.history.append(self.last)
        self._exact_bytes = 0
        self.step += 1

    def summary(self):
        """This rank's account of the State so far, a dict:

        rank, size, ranks (the group's global ranks), steps, timeout_ms and
        timeout_source ("process group", GRADWIRE_TIMEOUT_MS, ...);
        links: {peer's group rank: {global_rank, codec, provider, fell_back,
            raw_sent, wire_sent, raw_recv, wire_recv, timeouts, errors,
            codec_now, switches}}, where with GRADWIRE_CODEC=auto codec
            is the set ("auto:int8,...") and codec_now what the link to
            that peer carries now, switches how often it changed,
            the library's counters of each connection (raw: tensor bytes in
            frames; wire: the frames' bytes, handshake and agreement
            included);
        raw_sent, wire_sent: their sums; ratio = raw_sent / wire_sent;
        connect_s: wall time creating the context (rendezvous, handshakes);
        allreduce_s: wall time with this State's allreduces in gradwire:
            inside the calls (sync), or from a bucket's first wait to its
            last ticket done (async: the queue runs one bucket at a time, so
            these spans do not overlap); it includes waiting for slower
            ranks;
        time_s: connect_s + allreduce_s.
        After close(), the summary close() made.
        """
        if self._summary is not None:
            return self._summary
        links = {}
        for p in range(self.size):
            if p == self.rank:
                continue
            s = self.ctx.stats(p)
            links[p] = {"global_rank": self.group_ranks[p],
                        "codec": s.codec.decode(errors="replace"),
                        "provider": s.provider.decode(errors="replace"),
                        "fell_back": bool(s.fell_back),
                        "raw_sent": s.raw_sent, "wire_sent": s.wire_sent,
                        "raw_recv": s.raw_recv, "wire_recv": s.wire_recv,
                        "timeouts": s.timeouts, "errors": s.errors,
                        "codec_now": s.codec_now.decode(errors="replace"),
                        "switches": s.switches}
        raw = sum(x["raw_sent"] for x in links.values())
        wire = sum(x["wire_sent"] for x in links.values())
        return {"rank": self.rank, "size": self.size, "ranks": list(self.group_ranks),
                "steps": self.step, "timeout_ms": self.timeout_ms,
                "timeout_source": self.timeout_source, "links": links,
                "raw_sent": raw, "wire_sent": wire,
                "ratio": raw / wire if wire else float("nan"),
                "connect_s": self._connect_s, "allreduce_s": self._allreduce_s,
                "time_s": self._connect_s + self._allreduce_s}

    def revoke(self, reason):
        """End this State's context on every rank: each other rank's pending
        and later gradwire calls fail within a second, naming this rank and
        reason, instead of waiting out the timeout. The hooks call it when
        they raise; call it where the training loop fails on one rank only.
        close() is still needed."""
        if getattr(self, "ctx", None) is not None:
            self.ctx.revoke(reason)

    def close(self):
        """Close the connections (the hook must not run afterwards). Buckets
        not yet sent fail their futures (ECANCELED); one in flight finishes
        first (within the timeout). Returns summary() and logs it at info
        (logger "gradwire"), once; later calls return the same dict."""
        if getattr(self, "_queue", None) is not None:
            with self._cv:
                self._closing = True
                self._cv.notify_all()
            self._queue.cancel()
            self._thread.join()
            self._queue.close()
            self._queue = None
        _open_states.discard(self)
        if getattr(self, "ctx", None) is not None and self.ctx.h:
            try:
                self._summary = self.summary()
                log.info("%s", _summary_line(self._summary))
            finally:
                self.ctx.close()
        return getattr(self, "_summary", None)

    # -- the asynchronous path ---------------------------------------------
    def drain(self):
        """Wait until every bucket handed to the hook is done (futures
        completed). A no-op for a synchronous State."""
        if self._queue is None:
            return
        with self._cv:
            self._cv.wait_for(lambda: not self._jobs and not self._busy)

    _busy = False

    def _completer(self):
        """The "gradwire-hook" thread: completes each bucket's future once its
        tickets are done, in submission order."""
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._jobs or self._closing)
                if not self._jobs:
                    return
                fut, buf, tickets, finish, last = self._jobs.popleft()
                self._busy = True
            try:
                t0 = time.monotonic()
                try:
                    for t in tickets:
                        self._queue.wait(t)
                finally:
                    self._allreduce_s += time.monotonic() - t0
                if finish:
                    finish()
                if last:
                    self._end_step()
                fut.set_result(buf)
            except Exception as e:  # noqa: BLE001 - the future carries it
                fut.set_exception(e)
            with self._cv:
                self._busy = False
                self._cv.notify_all()

    # -- the bucket --------------------------------------------------------
    def _layout(self, bucket):
        """[(offset, numel, lossy id or None)] of the bucket's parameters.

        DDP lays a bucket out in one order (and grouping) for its first step
        and rebuilds its buckets in gradient-ready order after it, and again
        after a restart. Residuals must follow parameters, not positions, so
        each compressible parameter is its own tensor for gradwire, named by
        the order in which this State first saw it (the same on every rank
        and on every fresh DDP model).
        """
        params = bucket.parameters()
        key = tuple(p.data_ptr() for p in params)
        got = self._layouts.get(bucket.index())
        if got and got[0] == key:
            return got[1]
        segs, off = [], 0
        for p in params:
            n = p.numel()
            ident = None
            if p.dim() >= 2 and n >= self.min_compress_numel:
                ident = self._lossy_ids.get(p.data_ptr())
                if ident is None:
                    ident = len(self._lossy_ids)
                    if ident >= MAX_LOSSY:
                        raise RuntimeError(
                            f"gradwire hook: more than {MAX_LOSSY} compressible "
                            "parameters; gradwire keeps 1024 error-feedback "
                            "streams. Raise min_compress_numel (now "
                            f"{self.min_compress_numel}) so that only the "
                            "largest parameters are compressed")
                    self._lossy_ids[p.data_ptr()] = ident
            segs.append((off, n, ident))
            off += n
        if off != bucket.buffer().numel():
            raise RuntimeError(f"gradwire hook: bucket {bucket.index()} has "
                               f"{bucket.buffer().numel()} elements, its "
                               f"parameters {off}")
        self._layouts[bucket.index()] = (key, segs)
        return segs

    def _reduce(self, ident, t, lossy, tickets=None):
        if not t.numel():
            return
        if ident not in self._seen:
            self._seen[ident] = (t.numel(), bool(lossy))
        owed = self._owed.pop(ident, None)
        if owed is not None and owed.numel() == t.numel():
            t.add_(owed)	# what a job of another size owed it (load_state_dict)
        self._exact_bytes += self._ring_bytes(t.numel())
        flags = _lib.GRADWIRE_LOSSY if lossy else 0
        if self._queue is None or tickets is None:
            if self._queue is not None:
                self.drain()	# a synchronous call must not overlap the queue's
            t0 = time.monotonic()
            try:
                if self._queue is not None:
                    t_ = self._queue.submit(ident, t.data_ptr(), t.numel(),
                                            _lib.GRADWIRE_AVG, flags)
                    self._queue.wait(t_)
                else:
                    self.ctx.allreduce_id(ident, t.data_ptr(), t.numel(),
                                          _lib.GRADWIRE_AVG, flags)
            finally:
                self._allreduce_s += time.monotonic() - t0
            return
        tickets.append(self._queue.submit(ident, t.data_ptr(), t.numel(),
                                          _lib.GRADWIRE_AVG, flags))

    def _ring_bytes(self, n):
        """Bytes this rank sends in an exact ring allreduce of n floats:
        every chunk but (rank + 1) in the reduce-scatter, every chunk but
        (rank + 2) in the allgather (coll/coll.c)."""
        if self.size == 1:
            return 0
        q, rem = divmod(n, self.size)

        def chunk(k):
            return q + (k % self.size < rem)

        return 4 * (2 * n - chunk(self.rank + 1) - chunk(self.rank + 2))

    def _replay(self, order):
        """Name the tensors to the library in a saved first-use order.

        gradwire gives each tensor identifier a stream (and so the slots its
        residuals and codec state are saved under) in the order of first
        use, and a codec's own collectives (PowerSGD's factors) take
        streams of their own at the first lossy call. A restored context
        must allocate them in the same order, so each identifier not yet
        used here gets one allreduce of zeros of its first length, with its
        first flags (all ranks do the same). residuals_load() then replaces
        whatever these left in the residual store.
        """
        done = [i for i in self._seen]
        if [i for i, _, _ in order[:len(done)]] != done:
            raise RuntimeError("gradwire: load_state_dict() on a State that "
                               f"already reduced tensors {done} in another "
                               "order than the checkpoint's "
                               f"{[i for i, _, _ in order]}")
        for ident, n, lossy in order[len(done):]:
            self._reduce(ident, torch.zeros(n), lossy)

    def reduce_bucket(self, bucket, tickets=None):
        """Average the bucket in place. With tickets (a list), the gradwire
        allreduces are only queued (their tickets appended); then the
        return is (buf, finish): finish() completes the bucket once they are
        done. Without, they run now and the return is (buf, None)."""
        buf = bucket.buffer()
        if buf.device.type != "cpu":
            raise TypeError(f"gradwire hook: bucket on {buf.device}; gradwire "
                            "carries host (CPU) memory only")
        if buf.dtype in (torch.float64, torch.float16, torch.bfloat16):
            dist.all_reduce(buf, group=self.process_group)
            buf.div_(self.size)
            return buf, None
        if buf.dtype != torch.float32:
            raise TypeError(f"gradwire hook: bucket of {buf.dtype}; only "
                            "floating-point gradients are supported")
        if not buf.is_contiguous():
            raise RuntimeError("gradwire hook: bucket buffer is not contiguous")
        segs = self._layout(bucket)
        if (self.step < self.warmup_steps or not self.lossy_links
                or all(s[2] is None for s in segs)):
            self._reduce(EXACT_ID, buf, False, tickets)
            return buf, None
        exact = [buf[o:o + n] for o, n, ident in segs if ident is None]
        finish = None
        if exact:
            flat = torch.cat(exact)	# kept alive by finish until it is done
            self._reduce(EXACT_ID, flat, False, tickets)

            def finish():
                pos = 0
                for view in exact:
                    view.copy_(flat[pos:pos + view.numel()])
                    pos += view.numel()
            if tickets is None:
                finish()
                finish = None
        for o, n, ident in segs:	# in place: a parameter is contiguous
            if ident is not None:
                self._reduce(ident, buf[o:o + n], True, tickets)
        return buf, finish

    def reduce_to(self, bucket, owner):
        """Average the bucket on owner only (the ZeRO hook): every other
        rank sends its bucket once, compressed after the warm-up (error
        feedback per (owner, slot)), and owner adds what arrives to its own
        gradients, in rank order from owner + 1, then divides by the size.
        The other ranks' buffers keep their own gradients. Synchronous."""
        buf = bucket.buffer()
        if buf.device.type != "cpu" or buf.dtype != torch.float32 or not buf.is_contiguous():
            raise TypeError(f"gradwire zero hook: bucket of {buf.dtype} on {buf.device}; "
                            "it carries contiguous float32 CPU buckets only")
        n, slot = buf.numel(), ZERO_SLOT + bucket.index()
        lossy = self.step >= self.warmup_steps and self.lossy_links
        t0 = time.monotonic()
        try:
            if self.rank == owner:
                for i in range(1, self.size):
                    self.ctx.recv((owner + i) % self.size, slot, buf.data_ptr(), n,
                                  _lib.GRADWIRE_ADD)
                buf.div_(self.size)
            else:
                self.ctx.send(owner, slot, buf.data_ptr(), n,
                              _lib.GRADWIRE_LOSSY if lossy else 0)
        finally:
            self._allreduce_s += time.monotonic() - t0
        self._exact_bytes += self._ring_bytes(n)
        return buf

    def _submit(self, bucket):
        """The asynchronous hook's body: queue the bucket; its future."""
        fut = torch.futures.Future()
        tickets = []
        with torch.no_grad():
            buf, finish = self.reduce_bucket(bucket, tickets)
        with self._cv:
            if self._closing:
                raise RuntimeError("gradwire hook: the State is closed")
            self._jobs.append((fut, buf, tickets, finish, bucket.is_last()))
            self._cv.notify_all()
        return fut


def _mb(n):
    return f"{n / 1e6:.2f} MB"


def _summary_line(s):
    """State.summary() as one line for the log."""
    groups = {}
    for p, x in sorted(s["links"].items()):
        codec = x["codec"]
        if codec.startswith("auto"):  # what the link carries now, and how often it changed
            codec = f"{codec} now {x['codec_now'] or '-'} ({x['switches']} switches)"
        key = (codec, x["provider"], x["fell_back"])
        groups.setdefault(key, []).append(str(p))
    links = []
    for (codec, provider, fell_back), peers in groups.items():
        who = (f"peer {peers[0]}" if len(peers) == 1 else
               f"peers {', '.join(peers)}" if len(peers) <= 4 else
               f"{len(peers)} peers")
        links.append(f"{who} {codec or '?'} over {provider or '?'}" +
                     (" (no common codec: fell back to none)" if fell_back else ""))
    ratio = "" if math.isnan(s["ratio"]) else f" ({s['ratio']:.2f}x)"
    return (f"gradwire summary: rank {s['rank']} of {s['size']} (global ranks "
            f"{_ranks_tag(s['ranks'])}), {s['steps']} steps; "
            f"{'; '.join(links) or 'no links'}; sent {_mb(s['raw_sent'])} of "
            f"tensors as {_mb(s['wire_sent'])} on the wire{ratio}; "
            f"{s['time_s']:.2f} s in gradwire (connecting {s['connect_s']:.2f} s, "
            f"allreduces {s['allreduce_s']:.2f} s); timeout {s['timeout_ms']} ms "
            f"({s['timeout_source']})")


# States still open; closed at exit so that no thread of theirs outlives the
# interpreter's teardown, and each logs its summary.
_open_states = weakref.WeakSet()


@atexit.register
def _close_at_exit():
    for st in list(_open_states):
        try:
            st.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


def revoking(fn):
    """fn(state, ...), a hook, made to revoke state's context when it
    raises (State.revoke(), naming the exception), so that the other ranks
    fail within a second rather than wait for this one until the timeout."""
    @functools.wraps(fn)
    def hook_or_revoke(state, *args):
        try:
            return fn(state, *args)
        except BaseException as e:
            revoke = getattr(state, "revoke", None)  # not a State: nothing to revoke
            if revoke is not None:
                revoke(f"{fn.__name__} raised {type(e).__name__}: {e}")
            raise
    return hook_or_revoke


@revoking
def hook(state, bucket):
    """DDP communication hook: average bucket over gradwire (see State).
    Returns at once with a future (a synchronous State: a completed one).
    If it raises, the State's context is revoked first (State.revoke())."""
    if state._queue is not None:
        return state._submit(bucket)
    with torch.no_grad():
        out, _ = state.reduce_bucket(bucket)
    if bucket.is_last():
        state._end_step()
    fut = torch.futures.Future()
    fut.set_result(out)
    return fut


# The sharded-training hooks live in modules of their own; gradwire.torch
# is where users find them.
from .zero import zero_hook  # noqa: E402
from .fsdp import FsdpState, fsdp_hook  # noqa: E402
