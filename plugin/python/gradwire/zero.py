# SPDX-License-Identifier: MIT
"""gradwire.zero - the DDP hook for torch's ZeroRedundancyOptimizer
(zero_hook), exported as gradwire.torch.zero_hook."""
import weakref

import torch

from .torch import hook, revoking


def zero_hook(ddp, zero):
    """A DDP communication hook for ZeroRedundancyOptimizer(overlap_with_ddp=True):

        zero = ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD,
                                       overlap_with_ddp=True, lr=0.1)
        state = gwt.State(sync=True, process_group=zero.process_group)
        ddp.register_comm_hook(state, gwt.zero_hook(ddp, zero))
        # train without calling zero.step(): the hook runs it

    What torch's ddp_zero_hook.hook_with_zero_step() does (which torch 1.13
    refuses on gloo), with gradwire carrying the gradients: each DDP bucket
    belongs to one rank (ZeRO's assignment), and its gradients travel only
    to that rank, compressed once with error feedback (State.reduce_to()),
    where an allreduce hook sends every rank about twice a bucket's bytes.
    After the last bucket each rank steps the optimizer on the buckets it
    owns and the owners broadcast their updated parameters through the
    process group, exactly, so every replica holds the same bits. The
    first steps, while DDP rebuilds its buckets and ZeRO assigns them, are
    allreduced (gwt.hook) and do not update the parameters (as torch's).
    Compressing the gradients does not shrink that broadcast of float32
    parameters: a rank sends about its share of them every step.

    Uses torch 1.13's ddp_zero_hook internals (_hook_with_zero_step_setup,
    _perform_local_step, _broadcast_bucket); needs shard_buckets=False (one
    owner per bucket) and a synchronous State of ZeRO's group.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import ddp_zero_hook as zh
    from torch.distributed.optim.zero_redundancy_optimizer import _OverlapStatus

    if not zero._overlap_with_ddp:
        raise ValueError("gradwire zero hook: construct ZeroRedundancyOptimizer "
                         "with overlap_with_ddp=True")
    ddp_ref = weakref.ref(ddp)

    @revoking
    def zero_fn(state, bucket):
        if state._queue is not None:
            raise ValueError("gradwire zero hook: pass a State(sync=True)")
        info = zero._overlap_info
        if info.status != _OverlapStatus.INITIALIZED:
            # As torch's hook: the setup may end at this bucket (bucket 0
            # of the step after DDP's buckets were seen), and then this
            # bucket is already ZeRO's, else the step misses it.
            zh._hook_with_zero_step_setup(ddp_ref, zero, bucket)
            if info.status != _OverlapStatus.INITIALIZED:
                return hook(state, bucket)
        idx, rank = bucket.index(), zero.global_rank
        owners = info.assigned_ranks_per_bucket[idx]
        if len(owners) != 1:
            raise RuntimeError(f"gradwire zero hook: bucket {idx} has owners "
                               f"{sorted(owners)}; it needs one (shard_buckets=False)")
        owner = next(iter(owners))
        with torch.no_grad():
            buf = state.reduce_to(bucket, owner)
        if rank == owner:
            info.bucket_index_to_bucket[idx] = bucket
        info.bucket_indices_seen.append(idx)
        if idx == len(info.params_per_bucket) - 1:
            for b in range(len(info.params_per_bucket)):
                if rank in info.assigned_ranks_per_bucket[b]:
                    zh._perform_local_step(info.bucket_index_to_bucket[b], zero, rank)
                zh._broadcast_bucket(b, zero)
            info.wait_for_broadcasts()
            info.clear_per_iter_info()
            state._end_step()
        fut = torch.futures.Future()
        fut.set_result(buf)
        return fut

    return zero_fn


# -- FSDP ------------------------------------------------------------------
