"""Telling an out-of-memory error from other errors, and logging each rung of the out-of-memory ladder.

The ladder, at every site that runs the model (training step, validation, prediction, memory probe):
1. release the caches and retry the same batch once (an OOM is often transient: fragmentation, caches, another
   process on the card);
2. split the batch: micro-batches with accumulated gradients (training) or a halved batch (inference), down to 1;
3. at size 1: activation checkpointing (training), then the optimizer state moved to the host (training, and the
   validation inside a training run, whose optimizer state sits beside the weights);
4. stop only then, saying what would fit.
Each rung keeps the maths the same (same effective batch, same loss), and each is one `[MEMORY]` record with its
reason, so a run's memory.jsonl says exactly what was done to it.
"""

from __future__ import annotations

import gc
import logging

import torch

from foxhunt.train.telemetry import MemoryTracker

log = logging.getLogger("foxhunt.train")

# What an allocation failure says where torch raises a plain RuntimeError instead of torch.OutOfMemoryError: the CPU
# allocator ("DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes") and some CUDA paths that
# report the driver's error code.
_OOM_MESSAGES = ("can't allocate memory", "CUDA out of memory", "CUDA error: out of memory")


def is_oom(exc: BaseException) -> bool:
    """True for an allocation failure on any device; False for every other error (those must propagate)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    if isinstance(exc, MemoryError):  # a host allocation outside torch (numpy, Python) under the same limit
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in _OOM_MESSAGES)


OOM_ERRORS = (RuntimeError, MemoryError)  # catch these, then re-raise unless is_oom


def release_memory(device: torch.device) -> None:
    """Free what the failed attempt left: collect cycles (the traceback's frames are gone once the except block has
    ended) and hand cached CUDA blocks back, so the retry starts from the live tensors only."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def rung(tracker: MemoryTracker | None, phase: str, reason: str, epoch: int | None = None,
         batch: int | None = None) -> None:
    """Log one rung of the ladder: a `[MEMORY]` record (phase, reason) in the log and memory.jsonl, or a `[MEMORY]`
    warning where no tracker runs (prediction)."""
    if tracker is not None:
        tracker.record(phase, epoch=epoch, batch=batch, reason=reason)
    else:
        log.warning("[MEMORY] phase=%s reason=%r", phase, reason)
