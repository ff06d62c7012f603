# SPDX-License-Identifier: MIT
"""ctypes view of gradwire_plugin_v1 (include/gradwire/plugin.h).

The table only grows by appending: Library checks table.size covers every
member this module calls, and version == 1. Every C member returns 0 or a
negative errno; the wrappers here raise GradwireError with strerror()'s text
and the error message the library wrote, if any.

Store callbacks (struct gradwire_store) are Python functions called by the
library from inside context_create(); Context.create keeps them referenced
until that call returns (the library copies the struct and never calls the
store afterwards).
"""
import ctypes
import ctypes.util
import errno
import os

GRADWIRE_PLUGIN_VERSION = 1
GRADWIRE_LOSSY = 0x1
GRADWIRE_ADD = 0x2
GRADWIRE_SUM = 0
GRADWIRE_AVG = 1

_c_ssize_t = ctypes.c_ssize_t
_ctx_p = ctypes.c_void_p

STORE_SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p,
                             ctypes.c_void_p, ctypes.c_size_t)
STORE_GET = ctypes.CFUNCTYPE(_c_ssize_t, ctypes.c_void_p, ctypes.c_char_p,
                             ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


class Store(ctypes.Structure):
    """struct gradwire_store."""
    _fields_ = [("size", ctypes.c_size_t), ("set", STORE_SET),
                ("get", STORE_GET), ("arg", ctypes.c_void_p)]


class Stats(ctypes.Structure):
    """struct gradwire_stats (frozen for v1)."""
    _fields_ = [("codec", ctypes.c_char * 128), ("mac", ctypes.c_char * 32),
                ("fell_back", ctypes.c_uint32), ("reserved0", ctypes.c_uint32),
                ("frames_sent", ctypes.c_uint64), ("frames_recv", ctypes.c_uint64),
                ("raw_sent", ctypes.c_uint64), ("wire_sent", ctypes.c_uint64),
                ("raw_recv", ctypes.c_uint64), ("wire_recv", ctypes.c_uint64),
                ("mac_failures", ctypes.c_uint64), ("rejected", ctypes.c_uint64),
                ("timeouts", ctypes.c_uint64), ("errors", ctypes.c_uint64),
                ("residual_resets", ctypes.c_uint64),
                ("provider", ctypes.c_char * 32),
                ("codec_now", ctypes.c_char * 24),
                ("switches", ctypes.c_uint64)]


_F = ctypes.CFUNCTYPE
_i, _u32, _u64 = ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64
_cp, _vp, _sz = ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t
_fp = ctypes.POINTER(ctypes.c_float)


class PluginV1(ctypes.Structure):
    """struct gradwire_plugin_v1, member for member."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("version", ctypes.c_uint),
        ("init", _F(_i, _cp, _sz)),
        ("context_create", _F(_i, _i, _i, ctypes.POINTER(Store),
                              ctypes.POINTER(_ctx_p), _cp, _sz)),
        ("context_create_file", _F(_i, _i, _i, _cp, ctypes.POINTER(_ctx_p),
                                   _cp, _sz)),
        ("context_destroy", _F(None, _ctx_p)),
        ("send", _F(_i, _ctx_p, _i, _u32, _fp, _u64, ctypes.c_uint)),
        ("recv", _F(_i, _ctx_p, _i, _u32, _fp, _u64, ctypes.c_uint)),
        ("send_bytes", _F(_i, _ctx_p, _i, _u32, _vp, _sz)),
        ("recv_bytes", _F(_i, _ctx_p, _i, _u32, _vp, _sz)),
        ("allreduce", _F(_i, _ctx_p, _vp, _u64, _i, ctypes.c_uint)),
        ("allgather", _F(_i, _ctx_p, _vp, _vp, _sz)),
        ("broadcast", _F(_i, _ctx_p, _i, _vp, _sz)),
        ("barrier", _F(_i, _ctx_p)),
        ("stats", _F(_i, _ctx_p, _i, ctypes.POINTER(Stats))),
        ("residuals_save", _F(_i, _ctx_p, _cp)),
        ("residuals_load", _F(_i, _ctx_p, _cp)),
        ("residuals_reset", _F(None, _ctx_p)),
        ("finalize", _F(_i)),
        ("strerror", _F(_cp, _i)),
        ("allreduce_id", _F(_i, _ctx_p, _u32, _vp, _u64, _i, ctypes.c_uint)),
        ("queue_create", _F(_i, _ctx_p, ctypes.POINTER(_vp))),
        ("queue_submit", _F(_i, _vp, _u32, _vp, _u64, _i, ctypes.c_uint,
                            ctypes.POINTER(_u64))),
        ("queue_wait", _F(_i, _vp, _u64, _i)),
        ("queue_destroy", _F(None, _vp)),
        ("queue_cancel", _F(None, _vp)),
        ("error", _F(_cp, _ctx_p)),
        ("reduce_scatter", _F(_i, _ctx_p, _u32, _vp, _u64, _i, ctypes.c_uint)),
        ("allgather_f32", _F(_i, _ctx_p, _u32, _vp, _u64, ctypes.c_uint)),
        ("reduce_scatter_counts", _F(_i, _ctx_p, _u32, _vp, _u64,
                                     ctypes.POINTER(_u64), _i, ctypes.c_uint)),
        ("allgather_f32_counts", _F(_i, _ctx_p, _u32, _vp, _u64,
                                    ctypes.POINTER(_u64), ctypes.c_uint)),
        ("revoke", _F(None, _ctx_p, _cp)),
        ("residual_sum", _F(_i, _ctx_p, _u32, _fp, _u64)),
        ("context_reform", _F(_i, ctypes.POINTER(_ctx_p), _u32, _i, _i,
                              ctypes.POINTER(ctypes.c_int), ctypes.POINTER(Store),
                              _cp, _sz)),
    ]


class GradwireError(RuntimeError):
    """A gradwire call failed; .code is the negative errno it returned."""

    def __init__(self, what, code, detail=""):
        self.code = code
        super().__init__(f"gradwire: {what}: {detail + ' ' if detail else ''}"
                         f"({code}: {errno.errorcode.get(-code, '?')})")


def _candidates():
    """Where to look for libgradwire.so, in order: GW_LIB; the library
    `meson install` put beside this package (gradwire/_install.py, generated
    at install, holds its folder relative to the package's); the build
    folder of a source tree (plugin/python/gradwire -> build/); the system's
    library path."""
    env = os.environ.get("GW_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    try:
        from . import _install
    except ImportError:  # the source tree: no installed library to point at
        _install = None
    if _install is not None:
        out.append(os.path.normpath(os.path.join(here, _install.LIBDIR,
                                                 _install.SONAME)))
    root = os.path.normpath(os.path.join(here, "..", "..", ".."))
    out.append(os.path.join(root, "build", "libgradwire.so"))
    found = ctypes.util.find_library("gradwire")
    if found:
        out.append(found)
    out.append("libgradwire.so.0")
    return out


class Library:
    """libgradwire.so loaded with its table checked; init() done once."""

    def __init__(self, path=None):
        paths = [path] if path else _candidates()
        errors = []
        for p in paths:
            if p != "libgradwire.so.0" and "/" in p and not os.path.exists(p):
                errors.append(f"{p}: no such file")
                continue
            try:
                self.dll = ctypes.CDLL(p, mode=os.RTLD_NOW | os.RTLD_LOCAL)
                self.path = p
                break
            except OSError as e:
                errors.append(str(e))
        else:
            raise OSError("gradwire: cannot load libgradwire.so (pass its path, "
                          "or set GW_LIB): " + "; ".join(errors))
        table = PluginV1.in_dll(self.dll, "gradwire_plugin_v1")
        if table.version != GRADWIRE_PLUGIN_VERSION:
            raise OSError(f"gradwire: {self.path}: table version {table.version}, "
                          f"expected {GRADWIRE_PLUGIN_VERSION}")
        if table.size < ctypes.sizeof(PluginV1):
            raise OSError(f"gradwire: {self.path}: table of {table.size} bytes is "
                          f"older than this package ({ctypes.sizeof(PluginV1)})")
        self.t = table
        self._inited = False

    def strerror(self, rc):
        return self.t.strerror(rc).decode(errors="replace")

    def check(self, what, rc, err=None):
        if rc < 0:
            detail = err.value.decode(errors="replace") if err is not None else ""
            raise GradwireError(what, rc, detail or self.strerror(rc))
        return rc

    def init(self):
        """Load the GRADWIRE_* variables (once per process)."""
        if not self._inited:
            err = ctypes.create_string_buffer(512)
            self.check("init", self.t.init(err, len(err)), err)
            self._inited = True

    @property
    def inited(self):
        """Whether init() has loaded the GRADWIRE_* variables."""
        return self._inited

    def finalize(self):
        """Forget the loaded variables, so the next init() reads them again.
        0, or -EBUSY (returned) while a context is open."""
        rc = self.t.finalize()
        if rc == 0:
            self._inited = False
        return rc

    def codec_available(self, name):
        """True when the library has a usable codec of this name (gw_codec_find)."""
        find = self.dll.gw_codec_find
        find.restype = ctypes.c_void_p
        find.argtypes = [ctypes.c_char_p]
        return bool(find(name.encode()))


_default = None


def load(path=None):
    """The process's Library (loaded on first use; path only then)."""
    global _default
    if _default is None:
        _default = Library(path)
    elif path and os.path.realpath(path) != os.path.realpath(_default.path):
        raise OSError(f"gradwire: {_default.path} is already loaded, not {path}")
    return _default


def shard_bounds(n, size, rank, counts=None):
    """(offset, count) of rank's shard of n values over size ranks: the
    allreduce's chunks, which reduce_scatter() and allgather_f32() use, or
    with counts (one per rank, summing to n) counts[rank] values after the
    counts of the ranks before it."""
    if counts is not None:
        counts = _check_counts(n, size, counts)
        return sum(counts[:rank]), counts[rank]
    q, rem = divmod(n, size)
    return rank * q + min(rank, rem), q + (1 if rank < rem else 0)


def _check_counts(n, size, counts):
    """counts as a list of ints: one per rank, none negative, summing to n
    (ValueError otherwise)."""
    counts = [int(k) for k in counts]
    if len(counts) != size or min(counts) < 0 or sum(counts) != n:
        raise ValueError(f"gradwire: counts {counts} must give each of {size} ranks "
                         f"a count >= 0, summing to {n}")
    return counts


def _counts_arg(n, size, counts):
    """A uint64_t[size] of counts for the C table, or None for the chunk rule."""
    if counts is None:
        return None
    return (_u64 * size)(*_check_counts(n, size, counts))


def _host_store(set_fn, get_fn):
    """struct gradwire_store over two Python functions, what must stay
    referenced while the library may call them, and the list their
    exceptions go to."""
    failure = []

    def c_set(_arg, key, val, n):
        try:
            set_fn(key.decode(), ctypes.string_at(val, n))
            return 0
        except Exception as e:  # noqa: BLE001 (report, never unwind into C)
            failure.append(f"store set {key.decode()!r}: {e}")
            return -errno.EIO

    def c_get(_arg, key, buf, cap, timeout_ms):
        try:
            v = get_fn(key.decode(), max(0, timeout_ms))
            if v is None:
                return -errno.ETIMEDOUT
            if len(v) > cap:
                return -errno.ENOSPC
            ctypes.memmove(buf, v, len(v))
            return len(v)
        except Exception as e:  # noqa: BLE001
            failure.append(f"store get {key.decode()!r}: {e}")
            return -errno.EIO

    cset, cget = STORE_SET(c_set), STORE_GET(c_get)
    return Store(ctypes.sizeof(Store), cset, cget, None), (cset, cget), failure


def _say_failures(rc, err, failure):
    """Add what the store's functions raised to the library's message."""
    if rc < 0 and failure:
        err.value = (err.value.decode(errors="replace") + " [" +
                     "; ".join(failure) + "]").encode()[:511]


class Context:
    """A gradwire context (struct gradwire_context *): connections + collectives."""

    def __init__(self, lib, handle, rank, size):
        self.lib, self.h, self.rank, self.size = lib, handle, rank, size

    @classmethod
    def create(cls, lib, rank, size, set_fn, get_fn):
        """context_create() over a host store given as two Python functions:

        set_fn(key: str, value: bytes) -> None
        get_fn(key: str, timeout_ms: int) -> bytes, or None when the key did
            not appear in time.
        Exceptions become -EIO for the library, which then fails the call.
        """
        lib.init()
        store, keep, failure = _host_store(set_fn, get_fn)
        out = _ctx_p()
        err = ctypes.create_string_buffer(512)
        rc = lib.t.context_create(rank, size, ctypes.byref(store), ctypes.byref(out),
                                  err, len(err))
        _say_failures(rc, err, failure)
        del keep
        lib.check("context_create", rc, err)
        return cls(lib, out, rank, size)

    def reform(self, epoch, rank, size, old_ranks, set_fn, get_fn):
        """context_reform(): move this context to the members of epoch
        (rank of size; old_ranks[r], new rank r's rank in the last epoch,
        or -1 for a process new to the job), over a store of the epoch's
        own (set_fn/get_fn as in create()). A process new to the job calls
        it on Context.newcomer(lib). On failure (GradwireError) the context
        takes only another reform() or close()."""
        lib = self.lib
        store, keep, failure = _host_store(set_fn, get_fn)
        h = self.h if self.h else _ctx_p()
        old = (ctypes.c_int * size)(*old_ranks)
        err = ctypes.create_string_buffer(512)
        rc = lib.t.context_reform(ctypes.byref(h), epoch, rank, size, old,
                                  ctypes.byref(store), err, len(err))
        self.h, self.rank, self.size = h, rank, size
        _say_failures(rc, err, failure)
        del keep
        lib.check(f"context_reform to epoch {epoch}", rc, err)

    @classmethod
    def newcomer(cls, lib):
        """A context not formed yet, for reform() by a process new to the job."""
        lib.init()
        return cls(lib, None, -1, 0)

    @classmethod
    def create_file(cls, lib, rank, size, folder):
        """context_create_file(): rendezvous through a shared folder."""
        lib.init()
        out = _ctx_p()
        err = ctypes.create_string_buffer(512)
        lib.check("context_create_file",
                  lib.t.context_create_file(rank, size, folder.encode(),
                                            ctypes.byref(out), err, len(err)), err)
        return cls(lib, out, rank, size)

    def _check(self, what, rc):
        """Raise GradwireError for rc < 0 with what the failed call said
        (error(): which ranks, which peer, what differed), else strerror's
        text."""
        if rc < 0:
            raise GradwireError(what, rc, self.error() or self.lib.strerror(rc))

    def _live(self):
        if not self.h:
            raise GradwireError("context", -errno.EBADF, "already closed")
        return self.h

    def allreduce_id(self, ident, ptr, n, op=GRADWIRE_AVG, flags=0):
        """In-place allreduce of n float32 at address ptr, as tensor ident."""
        self._check(f"allreduce of tensor {ident} ({n} floats)",
                    self.lib.t.allreduce_id(self._live(), ident, ptr, n, op, flags))

    def send(self, peer, slot, ptr, n, flags=0):
        """Send n float32 at ptr to peer on slot (< GRADWIRE_SLOT_MAX); returns
        once the frame has left. GRADWIRE_LOSSY: the link's codec may carry
        it, with error feedback per (peer, slot)."""
        self._check(f"send to rank {peer} on slot {slot} ({n} floats)",
                    self.lib.t.send(self._live(), peer, slot, ctypes.cast(ptr, _fp), n, flags))

    def recv(self, peer, slot, ptr, n, flags=0):
        """Receive n float32 from peer on slot into ptr (GRADWIRE_ADD: add
        them to what is there)."""
        self._check(f"receive from rank {peer} on slot {slot} ({n} floats)",
                    self.lib.t.recv(self._live(), peer, slot, ctypes.cast(ptr, _fp), n, flags))

    def reduce_scatter(self, ident, ptr, n, op=GRADWIRE_AVG, flags=0, counts=None):
        """Reduce-scatter of n float32 at ptr, as tensor ident: this rank's
        shard (shard_bounds()) ends with the sum or average over the ranks;
        the rest is left undefined. GRADWIRE_LOSSY: each part compressed
        once, on its way to its owner. counts: the shards as counts per
        rank (one per rank, summing to n, zeros allowed; the same on every
        rank, or every rank fails saying the counts differ); None: the
        allreduce's chunks."""
        c = _counts_arg(n, self.size, counts)
        what = f"reduce-scatter of tensor {ident} ({n} floats)"
        if c is None:
            self._check(what, self.lib.t.reduce_scatter(self._live(), ident, ptr, n, op,
                                                         flags))
        else:
            self._check(what, self.lib.t.reduce_scatter_counts(self._live(), ident, ptr, n,
                                                               c, op, flags))

    def allgather_f32(self, ident, ptr, n, flags=0, counts=None):
        """Every rank's shard (shard_bounds()) of n float32 at ptr, to every
        rank, as tensor ident. GRADWIRE_LOSSY: each owner encodes its shard
        once and every rank, the owner included, keeps the decoded bits.
        counts: as for reduce_scatter()."""
        c = _counts_arg(n, self.size, counts)
        what = f"allgather of tensor {ident} ({n} floats)"
        if c is None:
            self._check(what, self.lib.t.allgather_f32(self._live(), ident, ptr, n, flags))
        else:
            self._check(what, self.lib.t.allgather_f32_counts(self._live(), ident, ptr, n,
                                                              c, flags))

    def shard_bounds(self, n, rank=None, counts=None):
        """(offset, count) of rank's shard of n values (default: this
        rank), by the allreduce's chunks or the counts given."""
        return shard_bounds(n, self.size, self.rank if rank is None else rank, counts)

    def error(self):
        """What the first failed collective said (names the ranks), or ""."""
        if not self.h:
            return ""
        e = self.lib.t.error(self.h)
        return e.decode(errors="replace") if e else ""

    def revoke(self, reason):
        """End this context for good, here and on every peer: their pending
        and later calls fail within a second, naming this rank and reason
        (cut to 255 bytes). Safe from any thread; a no-op once closed."""
        if self.h:
            self.lib.t.revoke(self.h, str(reason).encode(errors="replace")[:255])

    def residual_sum(self, ident, ptr, n):
        """What this rank's error feedback owes tensor ident (of
        allreduce_id), as n float32 written at ptr: its residuals, each over
        its segment, summed. Added to this rank's values at a later
        allreduce of the tensor, here or in a context of other members, it
        enters the sum as the residuals would have here. GradwireError
        under PowerSGD or the hierarchical allreduce (ENOTSUP), and for a
        tensor that shares a stream, past the 1,024 (ENOSPC)."""
        self._check(f"residual sum of tensor {ident} ({n} floats)",
                    self.lib.t.residual_sum(self._live(), ident, ctypes.cast(ptr, _fp), n))

    def queue(self):
        """A Queue of allreduces run by a gradwire thread (queue_create)."""
        out = _vp()
        self.lib.check("queue_create", self.lib.t.queue_create(self._live(), ctypes.byref(out)))
        return Queue(self, out)

    def allgather(self, send, recv, nbytes):
        self.lib.check("allgather", self.lib.t.allgather(self._live(), send, recv, nbytes))

    def broadcast(self, root, ptr, nbytes):
        """root's nbytes at address ptr to every rank, exactly."""
        self._check(f"broadcast of {nbytes} bytes from rank {root}",
                    self.lib.t.broadcast(self._live(), root, ptr, nbytes))

    def barrier(self):
        self.lib.check("barrier", self.lib.t.barrier(self._live()))

    def stats(self, peer):
        s = Stats()
        self.lib.check(f"stats of peer {peer}",
                       self.lib.t.stats(self._live(), peer, ctypes.byref(s)))
        return s

    def residuals_save(self, path):
        self.lib.check("residuals_save",
                       self.lib.t.residuals_save(self._live(), os.fsencode(path)))

    def residuals_load(self, path):
        self.lib.check("residuals_load",
                       self.lib.t.residuals_load(self._live(), os.fsencode(path)))

    def residuals_reset(self):
        self.lib.t.residuals_reset(self._live())

    def close(self):
        if self.h:
            self.lib.t.context_destroy(self.h)
            self.h = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter teardown)
            pass


class Queue:
    """Allreduces run in submission order by a thread of gradwire's own
    (struct gradwire_queue). The context takes no other call but stats()
    and error() while the queue is open; close it before the context."""

    def __init__(self, ctx, handle):
        self.ctx, self.h = ctx, handle

    def submit(self, ident, ptr, n, op=GRADWIRE_AVG, flags=0):
        """Queue an in-place allreduce of n float32 at ptr; its ticket. The
        memory must stay alive and untouched until wait(ticket) returns."""
        if not self.h:
            raise GradwireError("queue", -errno.EBADF, "already closed")
        t = _u64()
        self.ctx.lib.check(f"queue_submit of tensor {ident} ({n} floats)",
                           self.ctx.lib.t.queue_submit(self.h, ident, ptr, n, op, flags,
                                                       ctypes.byref(t)))
        return t.value

    def wait(self, ticket, timeout_ms=-1):
        """0 once the ticket's allreduce is done; GradwireError when it failed
        (its text names the peer), -EAGAIN (returned) when not done in time."""
        if not self.h:
            raise GradwireError("queue", -errno.EBADF, "already closed")
        rc = self.ctx.lib.t.queue_wait(self.h, ticket, timeout_ms)
        if rc == -errno.EAGAIN:
            return rc
        if rc < 0:
            raise GradwireError("allreduce", rc, self.ctx.error() or self.ctx.lib.strerror(rc))
        return 0

    def cancel(self):
        """Tickets not started end with ECANCELED now; safe beside wait()."""
        if self.h:
            self.ctx.lib.t.queue_cancel(self.h)

    def close(self):
        """cancel(), then wait for the running allreduce and free. No other
        call on this queue may be in progress."""
        if self.h:
            self.ctx.lib.t.queue_destroy(self.h)
            self.h = None
