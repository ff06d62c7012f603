# SPDX-License-Identifier: MIT
"""gradwire.fsdp - FSDP1's reduce-scatter communication hook over gradwire
(FsdpState, fsdp_hook), exported as gradwire.torch.FsdpState and
gradwire.torch.fsdp_hook. Needs torch >= 2.0; importing it does not."""
import time

import torch
import torch.distributed as dist

from . import lib as _lib
from .torch import MAX_LOSSY, State, revoking


FSDP_TORCH = (2, 0)	# FSDP1's reduce-scatter communication hook


def _torch_version():
    """(major, minor) of the running torch; (0, 0) when it cannot be read."""
    try:
        return tuple(int(x) for x in str(torch.__version__).split("+")[0].split(".")[:2])
    except ValueError:
        return (0, 0)


def _need_fsdp_torch():
    if _torch_version() < FSDP_TORCH:
        raise RuntimeError(
            "gradwire.torch.fsdp_hook needs torch >= 2.0 (FullyShardedDataParallel."
            "register_comm_hook with a reduce-scatter hook, and FSDP on CPU with "
            f"gloo); this is torch {torch.__version__}. The DDP hooks (State, hook, "
            "zero_hook) work on this torch")


def _predivide_factor(size):
    """FSDP's gradient pre-divide factor for size ranks (torch's
    DefaultState._get_gradient_predivide_factor(); post-divide: size / it):
    FSDP divides by it before the reduce-scatter and by the rest after, so
    a sum of size gradients neither underflows nor overflows."""
    try:
        from torch.distributed.algorithms._comm_hooks.default_hooks import DefaultState
        return float(DefaultState._get_gradient_predivide_factor(size))
    except (ImportError, AttributeError):
        factor = 1
        while size % factor == 0 and size / factor > factor:
            factor *= 2
        return float(factor)


class FsdpState(State):
    """The state of fsdp_hook, the compressed gradient hook for FSDP1
    (torch.distributed.fsdp.FullyShardedDataParallel, torch >= 2.0):

        import gradwire.torch as gwt
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        dist.init_process_group("gloo", ...)
        model = FSDP(model, device_id=torch.device("cpu"))
        state = gwt.FsdpState(stats=True)    # every rank, after init_process_group()
        model.register_comm_hook(state, gwt.fsdp_hook)
        ...train as usual; state.close() at the end (or at exit)

    FSDP hands the hook each flat parameter's unsharded gradient (padded to
    a multiple of the size) and an empty shard. The hook divides the
    gradient by FSDP's pre-divide factor, reduce-scatters it through
    gradwire (a sum: each rank's part of rank r's shard travels to rank r
    only, compressed once after the warm-up, with its own error feedback
    per (owner, slot) under the flat parameter's own tensor id), copies
    this rank's shard out and divides it by the post-divide factor: FSDP's
    default hook exactly, so with GRADWIRE_CODEC=none the shards hold what
    FSDP without a hook computes (the same bits on two ranks, where a sum
    of two terms has one order). The optimizer then steps each rank's
    shard, and FSDP gathers parameters exactly: every replica holds the same
    bits. NO_SHARD (the one-argument hook) is an allreduce of the flat
    gradient under its id, with the same factors.

    A flat parameter's id is the order in which this State first saw a
    gradient of its length in a backward pass (the k-th of that length):
    the same on every rank, whatever the addresses. The end of each
    backward pass (an autograd callback the hook queues) ends a step of the
    State: warmup_steps and stats count backward passes.

    Arguments: those of State (sync is always True: FSDP needs the shard
    when the hook returns). min_compress_numel: a flat parameter's padded
    gradient with fewer elements travels exactly. With stats=True,
    last["exact_bytes"] is what FSDP's default reduce-scatter sends from
    this rank ((size - 1) / size * 4 bytes a padded element). Gradients
    in another floating dtype (mixed precision's reduce_dtype) go through
    the process group as FSDP's default hook does; float32 must be on the
    CPU. Raises RuntimeError on torch < 2.0.
    """

    def __init__(self, process_group=None, store=None, prefix="gradwire",
                 library=None, warmup_steps=0, min_compress_numel=1024, stats=False):
        _need_fsdp_torch()
        super().__init__(process_group=process_group, store=store, prefix=prefix,
                         library=library, warmup_steps=warmup_steps,
                         min_compress_numel=min_compress_numel, stats=stats, sync=True)
        self.predivide = _predivide_factor(self.size)
        self.postdivide = self.size / self.predivide
        self._flat_ids = {}	# (padded numel, k-th of it in a backward) -> id
        self._occurs = {}	# padded numel -> gradients of it in this backward
        self._in_backward = False
        self._task = None	# the graph task (backward pass) of _occurs

    def state_dict(self):
        raise NotImplementedError("gradwire FsdpState: checkpoints of the "
                                  "reduce-scatter residuals are not supported yet")

    def load_state_dict(self, sd):
        raise NotImplementedError("gradwire FsdpState: checkpoints of the "
                                  "reduce-scatter residuals are not supported yet")

    def _flat_id(self, n):
        """The tensor id of the k-th padded gradient of n elements in this
        backward pass; queues the end-of-backward callback at the first.
        A backward pass that failed before its end never runs its callback:
        where torch numbers its graph tasks, the next one starts afresh."""
        task = getattr(torch._C, "_current_graph_task_id", lambda: None)()
        if task is not None and task != self._task:
            self._task = task
            self._occurs.clear()
            self._in_backward = False
        if not self._in_backward:
            try:
                torch.autograd.Variable._execution_engine.queue_callback(
                    self._end_backward)
                self._in_backward = True
            except RuntimeError:	# not in a backward pass: one id per length
                self._occurs.clear()
        k = self._occurs.get(n, 0)
        self._occurs[n] = k + 1
        ident = self._flat_ids.get((n, k))
        if ident is None:
            ident = len(self._flat_ids)
            if ident >= MAX_LOSSY:
                raise RuntimeError(f"gradwire fsdp hook: more than {MAX_LOSSY} flat "
                                   "parameters; gradwire keeps 1024 error-feedback "
                                   "streams. Wrap fewer, larger FSDP units")
            self._flat_ids[(n, k)] = ident
        return ident

    def _end_backward(self):
        self._occurs.clear()
        self._in_backward = False
        self._end_step()

    def reduce_flat(self, grad, output=None):
        """FSDP's reduction of one flat parameter's gradient: with output
        (sharded strategies), output = this rank's shard of the average of
        the padded grad (grad.numel() == size * output.numel()); grad is
        left divided and partly reduced. Without (NO_SHARD), grad becomes
        the average in place."""
        if grad.dtype in (torch.float64, torch.float16, torch.bfloat16):
            self._flat_id(grad.numel())	# keep the step count
            if self.predivide > 1:
                grad.div_(self.predivide)
            if output is None:
                dist.all_reduce(grad, group=self.process_group)
                out = grad
            else:
                dist.reduce_scatter_tensor(output, grad, group=self.process_group)
                out = output
            if self.postdivide > 1:
                out.div_(self.postdivide)
            return
        if (grad.device.type != "cpu" or grad.dtype != torch.float32
                or not grad.is_contiguous()):
            raise TypeError(f"gradwire fsdp hook: gradient of {grad.dtype} on "
                            f"{grad.device}; gradwire carries contiguous float32 "
                            "CPU tensors only (FSDP(..., device_id=torch.device('cpu')))")
        n = grad.numel()
        if output is not None and (n != self.size * output.numel()
                                   or not output.is_contiguous()):
            raise RuntimeError(f"gradwire fsdp hook: padded gradient of {n} "
                               f"elements, shard of {output.numel()}, {self.size} ranks")
        ident = self._flat_id(n)
        if self.predivide > 1:
            grad.div_(self.predivide)
        lossy = (self.lossy_links and self.step >= self.warmup_steps
                 and n >= self.min_compress_numel)
        flags = _lib.GRADWIRE_LOSSY if lossy else 0
        if ident not in self._seen:
            self._seen[ident] = (n, lossy)
        t0 = time.monotonic()
        try:
            if output is None:
                self.ctx.allreduce_id(ident, grad.data_ptr(), n, _lib.GRADWIRE_SUM, flags)
                out = grad
                self._exact_bytes += self._ring_bytes(n)
            else:
                chunk = output.numel()
                self.ctx.reduce_scatter(ident, grad.data_ptr(), n, _lib.GRADWIRE_SUM,
                                        flags, counts=[chunk] * self.size)
                output.copy_(grad[self.rank * chunk:(self.rank + 1) * chunk])
                out = output
                self._exact_bytes += 4 * chunk * (self.size - 1)
        finally:
            self._allreduce_s += time.monotonic() - t0
        if self.postdivide > 1:
            out.div_(self.postdivide)


@revoking
def fsdp_hook(state, grad, output=None):
    """FSDP1 communication hook: reduce-scatter the flat gradient grad into
    output (this rank's shard) over gradwire, compressed with error
    feedback, averaged as FSDP's default hook does (see FsdpState):

        state = gwt.FsdpState()
        fsdp_model.register_comm_hook(state, gwt.fsdp_hook)

    Without output (ShardingStrategy.NO_SHARD), grad is averaged in place.
    Raises RuntimeError on torch < 2.0, TypeError for a state that is not
    an FsdpState."""
    _need_fsdp_torch()
    if not isinstance(state, FsdpState):
        raise TypeError("gradwire fsdp hook: the state must be a "
                        f"gradwire.torch.FsdpState, not {type(state).__name__}")
    with torch.no_grad():
        state.reduce_flat(grad, output)
