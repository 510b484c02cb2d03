"""One optimizer step that survives running out of memory.

On an out-of-memory error the step's tensors are released (outside the `except` block, so the traceback does not
keep them alive), the batch is split into micro-batches and the gradients are accumulated with weights
len(part) / len(batch). The effective batch, the loss being minimised and so the learning dynamics stay the same.
The smaller micro-batch is kept for the rest of the run. Only when a single sample does not fit does it stop.
"""

from __future__ import annotations

import dataclasses
import gc
import logging

import torch

from foxhunt.data.batch import Batch
from foxhunt.errors import ResourceError
from foxhunt.model.loss import quantile_loss
from foxhunt.train.faults import FaultInjector
from foxhunt.train.optim import AdamW, HostAdamW
from foxhunt.train.precision import autocast, grad_scaler
from foxhunt.train.telemetry import MemoryTracker

log = logging.getLogger("foxhunt.train")

# Share of training samples whose series code is replaced by 0 ("unknown series"), so that the unknown-series
# embedding is trained and forecasting a symbol never seen in training falls back to a pooled model.
UNKNOWN_SERIES_RATE = 0.05

SINGLE_SAMPLE_ADVICE = (
    "a single training sample does not fit in memory; try a smaller --encoder-length or --hidden-size, "
    "--optimizer-state cpu, --activation-checkpointing, or a larger --memory-budget"
)


def mask_series(batch: Batch, rate: float) -> Batch:
    """Replace the series code (static categorical 0) by 0 = unknown for a random share of the samples."""
    if rate <= 0 or batch.static_cat.shape[1] == 0:
        return batch
    drop = torch.rand(len(batch)) < rate  # (B,)
    codes = batch.static_cat.clone()
    codes[:, 0] = torch.where(drop, torch.zeros_like(codes[:, 0]), codes[:, 0])
    return dataclasses.replace(batch, static_cat=codes)


def release_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


class TrainStepper:
    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: AdamW | HostAdamW,
        quantiles: torch.Tensor,  # (Q,) on the device
        grad_clip: float,
        device: torch.device,
        injector: FaultInjector,
        tracker: MemoryTracker,
        micro_batch: int | None = None,
        precision: str = "32",
    ):
        self.model, self.optimizer, self.quantiles = model, optimizer, quantiles
        self.grad_clip, self.device, self.injector, self.tracker = grad_clip, device, injector, tracker
        self.micro_batch = micro_batch  # None: the whole batch at once
        self.precision = precision
        self.scaler = grad_scaler(device, precision)  # float16 only
        self.recoveries = 0

    def step(self, batch: Batch, global_step: int, epoch: int) -> torch.Tensor:
        """Forward, backward and update on one (host) batch; returns the batch's mean loss as a 0-d device tensor."""
        batch = mask_series(batch, UNKNOWN_SERIES_RATE)  # drawn once, so a retried step sees the same batch
        while True:
            failed_at = None
            try:
                return self._step(batch, global_step)
            except torch.OutOfMemoryError:
                failed_at = self.micro_batch or len(batch)
            self._recover(failed_at, len(batch), global_step, epoch)

    def _step(self, batch: Batch, global_step: int) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        n = len(batch)
        size = min(self.micro_batch or n, n)
        total = torch.zeros((), device=self.device)
        self.injector.check("train", global_step)
        for start in range(0, n, size):
            part = batch.slice(start, start + size).to(self.device, non_blocking=True)
            with autocast(self.device, self.precision):
                out = self.model(part)
            loss = quantile_loss(out.quantiles, part.target, self.quantiles) * (len(part) / n)  # fp32
            del out
            (loss if self.scaler is None else self.scaler.scale(loss)).backward()
            total += loss.detach()
            del loss, part
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients
        if self.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        if self.scaler is None:
            self.optimizer.step()
        else:
            self.scaler.step(self.optimizer)  # skipped when the scaled gradients overflowed
            self.scaler.update()
        return total

    def _recover(self, failed_size: int, batch_size: int, global_step: int, epoch: int) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        release_memory(self.device)
        if failed_size <= 1:
            raise ResourceError(SINGLE_SAMPLE_ADVICE)
        self.micro_batch = max(1, failed_size // 2)
        self.recoveries += 1
        log.warning(
            "[MEMORY] out of memory in training step %d (micro-batch %d); repeating it as micro-batches of %d "
            "with accumulated gradients (effective batch %d unchanged); keeping micro-batch %d for the rest of the run",
            global_step, failed_size, self.micro_batch, batch_size, self.micro_batch,
        )
        self.tracker.record("oom_recovered", epoch=epoch, batch=global_step)
