"""One optimizer step that survives running out of memory and refuses non-finite updates.

Out of memory (see train/oom.py for the ladder): the step's tensors are released (outside the `except` block, so the
traceback does not keep them alive) and the same batch is retried once; if it fails again it is split into
micro-batches whose gradients are accumulated with weights len(part) / len(batch), so the effective batch, the loss
being minimised and the learning dynamics stay the same; the smaller micro-batch is kept for the rest of the run. At
micro-batch 1 activation checkpointing is switched on, then the optimizer state moves to the host. Only then does it
stop, saying what would fit.

Non-finite: a batch whose loss or gradient norm is NaN or inf takes no optimizer step (weights and optimizer state
stay as they were); `step` returns None and keeps the numbers in `last_bad` for the caller to log and count.
"""

from __future__ import annotations

import dataclasses
import logging

import torch

from foxhunt.data.dataset.batch import Batch
from foxhunt.errors import ResourceError
from foxhunt.model.loss import quantile_loss, scale_weight
from foxhunt.train import faults
from foxhunt.train.oom import OOM_ERRORS, is_oom, release_memory, rung
from foxhunt.train.optim import AdamW, HostAdamW
from foxhunt.train.precision import autocast, grad_scaler
from foxhunt.train.telemetry import MemoryTracker

log = logging.getLogger("foxhunt.train")

# Share of training samples whose series code is replaced by 0 ("unknown series"), so that the unknown-series
# embedding is trained and forecasting a symbol never seen in training falls back to a pooled model.
UNKNOWN_SERIES_RATE = 0.05

WHAT_WOULD_FIT = (
    "what would fit: a shorter --encoder-length or a smaller --hidden-size (activations grow with both), or a larger "
    "--memory-budget or a device with more free memory"
)

def mask_series(batch: Batch, rate: float, shard: tuple[int, int] | None = None) -> Batch:
    """Replace the series code (static categorical 0) by 0 = unknown for a random share of the samples. `shard`
    (offset, global size): the batch is one rank's part of a global batch; the draw is the global batch's, sliced,
    so every rank masks the windows a single process would."""
    if rate <= 0 or batch.static_cat.shape[1] == 0:
        return batch
    offset, n = shard or (0, len(batch))
    drop = torch.rand(n)[offset : offset + len(batch)] < rate  # (B,)
    codes = batch.static_cat.clone()
    codes[:, 0] = torch.where(drop, torch.zeros_like(codes[:, 0]), codes[:, 0])
    return dataclasses.replace(batch, static_cat=codes)


def rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The CPU generator's state and, on CUDA, the device's: a step retried after an OOM draws the same dropout."""
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def set_rng_state(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


class TrainStepper:
    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: AdamW | HostAdamW,
        quantiles: torch.Tensor,  # (Q,) on the device
        grad_clip: float,
        device: torch.device,
        tracker: MemoryTracker,
        micro_batch: int | None = None,
        precision: str = "32",
        loss_weight: str = "none",
    ):
        self.model, self.optimizer, self.quantiles = model, optimizer, quantiles
        self.grad_clip, self.device, self.tracker = grad_clip, device, tracker
        self.micro_batch = micro_batch  # None: the whole batch at once
        self.precision = precision
        self.loss_weight = loss_weight  # "scale": each sample's loss times its target scale (model/loss.py)
        self.scaler = grad_scaler(device, precision)  # float16 only
        self.recoveries = 0  # rungs climbed (retries included)
        self.largest_ok = 0  # the largest micro-batch that completed a step in this process
        self.last_bad: tuple[float, float] | None = None  # (loss, grad norm) of the last non-finite step

    # -- the step ----------------------------------------------------------------------------------------------------
    def step(self, batch: Batch, global_step: int, epoch: int,
             shard: tuple[int, int] | None = None) -> torch.Tensor | None:
        """Forward, backward and update on one (host) batch; returns the batch's mean loss as a 0-d device tensor,
        or None when the loss or the gradient norm was not finite and no update was made."""
        batch = mask_series(batch, UNKNOWN_SERIES_RATE, shard)  # drawn once, so a retried step sees the same batch
        rng = rng_state(self.device)  # a retry draws the same dropout masks as the failed attempt
        attempt = 0
        while True:
            failed_at = None
            try:
                return self._step(batch, global_step)
            except OOM_ERRORS as e:
                if not is_oom(e):
                    raise
                failed_at = min(self.micro_batch or len(batch), len(batch))
            attempt += 1  # the except block has ended: the failed attempt's tensors can be freed now
            self._climb(failed_at, len(batch), global_step, epoch, first=attempt == 1)
            set_rng_state(rng, self.device)

    def _step(self, batch: Batch, global_step: int) -> torch.Tensor | None:
        # one reference for all micro-batches: the same loss as the whole batch
        return self._update(self._backward(batch, global_step, len(batch), batch.target_scale.mean()))

    def _backward(self, batch: Batch, global_step: int, n: int, ref: torch.Tensor) -> torch.Tensor:
        """Gradients of this batch's part of the mean loss over `n` windows (n > len(batch) when the batch is one
        rank's shard), accumulated over micro-batches; returns that part of the loss (0-d, on the device)."""
        self.optimizer.zero_grad(set_to_none=True)
        size = max(1, min(self.micro_batch or n, len(batch)))
        total = torch.zeros((), device=self.device)
        poison = faults.at("train", global_step) == "nan"  # test hook (FOXHUNT_FAULT_INJECT)
        for start in range(0, len(batch), size):
            part = batch.slice(start, start + size).to(self.device, non_blocking=True)
            with autocast(self.device, self.precision):
                out = self.model(part)
            weight = scale_weight(part.target_scale, ref.to(self.device)) if self.loss_weight == "scale" else None
            loss = quantile_loss(out.quantiles, part.target, self.quantiles, weight) * (len(part) / n)  # fp32
            if poison:
                loss = loss * float("nan")
            del out
            (loss if self.scaler is None else self.scaler.scale(loss)).backward()
            total += loss.detach()
            del loss, part
        self.largest_ok = max(self.largest_ok, size)
        return total

    def _update(self, total: torch.Tensor) -> torch.Tensor | None:
        """Clip and apply the gradients of a batch whose loss is `total`, unless the loss or the gradient norm is
        not finite."""
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients
        params = [p for p in self.model.parameters() if p.grad is not None]
        if self.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip)
        else:
            norm = total_norm([p.grad for p in params])
        finite = torch.isfinite(total)
        if self.scaler is None:  # under a float16 scaler an inf gradient is an expected overflow, skipped by it
            finite &= torch.isfinite(norm)
        if not bool(finite):  # one sync a step: the update must not run on a non-finite batch
            self.last_bad = (float(total), float(norm))
            self.optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None:
                self.scaler.update()  # lowers the scale; unscale_ was called, so update must follow
            return None
        if self.scaler is None:
            self.optimizer.step()
        else:
            self.scaler.step(self.optimizer)  # skipped when the scaled gradients overflowed
            self.scaler.update()
        return total

    # -- the out-of-memory ladder ------------------------------------------------------------------------------------
    def _climb(self, failed: int, batch_size: int, global_step: int, epoch: int, first: bool) -> None:
        """Take the next rung after an OOM at micro-batch `failed` (of `batch_size`); ResourceError when none is
        left."""
        self.optimizer.zero_grad(set_to_none=True)
        release_memory(self.device)
        self.recoveries += 1
        where = f"out of memory in training step {global_step} (micro-batch {failed} of batch {batch_size})"

        def note(phase: str, what: str) -> None:
            rung(self.tracker, phase, f"{where}: {what}", epoch, global_step)

        if first:
            note("oom_retry", "released caches; retrying the same batch once")
        elif failed > 1:
            self.micro_batch = max(1, failed // 2)
            note("oom_split", f"repeating it as micro-batches of {self.micro_batch} with accumulated gradients "
                              f"(effective batch {batch_size} unchanged); keeping micro-batch {self.micro_batch} for "
                              "the rest of the run")
        elif self.enable_checkpointing():
            note("oom_checkpointing", "switched activation checkpointing on (activations recomputed in backward; "
                                      "same outputs and gradients)")
        elif self.optimizer_to_host():
            note("oom_optimizer_to_host", "moved the optimizer state (AdamW moments) to host memory (same update)")
        else:
            rung(self.tracker, "oom_stop", f"{where}: no rung left", epoch, global_step)
            raise ResourceError(self.stop_message(global_step))

    def enable_checkpointing(self) -> bool:
        """Switch the model's activation checkpointing on; False when it is on already (or the model has none)."""
        if getattr(self.model, "activation_checkpointing", True):
            return False
        self.model.activation_checkpointing = True
        return True

    def optimizer_to_host(self) -> bool:
        """Move AdamW's state to host memory (HostAdamW); False when it is there already, when the device is the
        host (CPU), or under a float16 gradient scaler (which cannot unscale the host copy's gradients)."""
        if not isinstance(self.optimizer, AdamW) or self.scaler is not None or self.device.type == "cpu":
            return False
        self.optimizer = HostAdamW.from_device(self.optimizer)
        release_memory(self.device)
        return True

    def stop_message(self, global_step: int) -> str:
        tried = ["a retry", "micro-batches down to 1"]
        if getattr(self.model, "activation_checkpointing", False):
            tried.append("--activation-checkpointing")
        if isinstance(self.optimizer, HostAdamW):
            tried.append("--optimizer-state cpu")
        elif self.device.type == "cpu":
            tried.append("--optimizer-state cpu (on CPU the optimizer state is in host memory already)")
        largest = (f"; the largest micro-batch that completed a step in this run was {self.largest_ok}"
                   if self.largest_ok else "; no step completed in this run")
        return (f"a single training sample does not fit in memory: step {global_step} ran out of memory after "
                f"{', '.join(tried)}{largest}; {WHAT_WOULD_FIT}")


def total_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all gradients as one vector. `torch.nn.utils.get_total_norm` is new in torch 2.6 while foxhunt
    allows torch>=2.4: where it is missing, the same norm of the per-tensor norms (equal to float rounding)."""
    get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)
    if get_total_norm is not None:
        return get_total_norm(grads)
    if not grads:
        return torch.tensor(0.0)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
