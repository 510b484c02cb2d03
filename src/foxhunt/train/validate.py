"""Validation with flat memory, however many batches there are.

Nothing computed for a batch outlives it on the device: the loss and q-risk are running sums moved to the host as a
few numbers per batch. An out-of-memory error climbs the ladder of train/oom.py (retry, halve the batch, optimizer
state to the host) and repeats only the failed batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from foxhunt.data.baselines.forecasts import training_quantiles
from foxhunt.data.dataset.batch import Batch
from foxhunt.data.dataset.fit_rows import series_rows
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.dataset.windows import WindowedData
from foxhunt.errors import ResourceError
from foxhunt.model.loss import pinball
from foxhunt.train import faults
from foxhunt.train.distributed import SINGLE, Dist
from foxhunt.train.oom import OOM_ERRORS, is_oom, release_memory, rung
from foxhunt.train.step import WHAT_WOULD_FIT
from foxhunt.train.telemetry import MemoryTracker

Predictor = Callable[[Batch], torch.Tensor]  # batch on device -> (B, D, Q) quantiles in scaled target space


@dataclass
class ValResult:
    loss: float  # the training loss on validation: mean scaled pinball, weighted as --loss-weight weighs training
    qrisk: dict[float, float]  # TFT paper q-risk per quantile, on the target's own scale
    n_samples: int
    batch_size: int  # the validation batch size in force at the end (smaller after an OOM)


class ValSums:
    """Running sums on the host: O(Q) memory whatever the number of batches."""

    def __init__(self, n_q: int, loss_weight: str = "none"):
        self.loss_weight = loss_weight
        self.pinball_scaled = torch.zeros(n_q, dtype=torch.float64)
        self.pinball_raw = torch.zeros(n_q, dtype=torch.float64)
        self.abs_raw = 0.0
        self.scale_sum = 0.0  # target scale summed over (sample, horizon) pairs
        self.count = 0  # (sample, horizon) pairs

    def add(self, batch: Batch, pred: torch.Tensor, quantiles: torch.Tensor) -> None:
        scaled = pinball(pred, batch.target, quantiles)  # (B, D, Q)
        raw_pred, raw_y = batch.unscale(pred), batch.unscale(batch.target)  # (B, D, Q), (B, D)
        raw = pinball(raw_pred, raw_y, quantiles)
        self.pinball_scaled += scaled.double().sum(dim=(0, 1)).cpu()
        self.pinball_raw += raw.double().sum(dim=(0, 1)).cpu()
        self.abs_raw += float(raw_y.double().abs().sum())
        self.scale_sum += float(batch.target_scale.double().sum()) * raw_y.shape[1]
        self.count += raw_y.numel()

    def all_reduce(self, dist: Dist) -> None:
        """Sum every rank's sums (each rank validated its own windows), so the result is the single-process one."""
        if not dist.active:
            return
        n_q = len(self.pinball_scaled)
        flat = dist.all_sum(torch.cat([self.pinball_scaled, self.pinball_raw,
                                       torch.tensor([self.abs_raw, self.scale_sum, self.count],
                                                    dtype=torch.float64)]))
        self.pinball_scaled, self.pinball_raw = flat[:n_q], flat[n_q : 2 * n_q]
        self.abs_raw, self.scale_sum, self.count = float(flat[-3]), float(flat[-2]), int(flat[-1])

    def result(self, quantiles: list[float], batch_size: int) -> ValResult:
        n = max(1, self.count)
        if self.loss_weight == "scale":
            # each sample's scaled pinball times its scale over the mean scale (model/loss.py `scale_weight`): the
            # raw-unit pinball over the mean scale, so that early stopping picks the epoch by what training minimized
            loss = float(self.pinball_raw.sum() / (max(self.scale_sum, 1e-300) * len(quantiles)))
        else:
            loss = float(self.pinball_scaled.sum() / (n * len(quantiles)))
        denom = self.abs_raw if self.abs_raw > 0 else float("nan")
        qrisk = {q: float(2.0 * s / denom) for q, s in zip(quantiles, self.pinball_raw.tolist(), strict=True)}
        return ValResult(loss, qrisk, self.count, batch_size)


@dataclass(frozen=True)
class InTraining:
    """What validation inside a training run adds: the tracker and epoch its memory records and rungs go to, the
    ladder's last rung (`optimizer_to_host` moves the optimizer state off the device and returns False when it
    cannot) and the ranks whose sums are added. The default, outside a run: none of them."""

    tracker: MemoryTracker | None = None
    epoch: int | None = None
    optimizer_to_host: Callable[[], bool] | None = None
    dist: Dist = SINGLE


def validate(
    predictor: Predictor,
    windows: WindowedData,
    ids: torch.Tensor,
    batch_size: int,
    quantiles: list[float],
    device: torch.device,
    loss_weight: str = "none",
    training: InTraining = InTraining(),
) -> ValResult:
    """Mean loss and q-risk of `predictor` over the windows `ids`, with the out-of-memory ladder (train/oom.py):
    retry a failed batch once, then halve the batch down to 1, then (inside a training run) `optimizer_to_host`;
    then stop. Activation checkpointing is no rung here: inference keeps no activations for a backward pass. Under
    torchrun `ids` are this rank's share and the sums are added over the ranks at the end (the one collective here,
    which every rank reaches whatever its own out-of-memory rungs were)."""
    tracker, epoch, optimizer_to_host = training.tracker, training.epoch, training.optimizer_to_host
    q = torch.tensor(quantiles, dtype=torch.float32, device=device)
    sums = ValSums(len(quantiles), loss_weight)
    cursor, index, attempt, largest = 0, 0, 0, 0
    tried: list[str] = []
    with torch.inference_mode():
        while cursor < len(ids):
            size = min(batch_size, len(ids) - cursor)
            failed = False
            try:
                faults.at("val", index + 1)
                batch = windows.batch(ids[cursor : cursor + size]).to(device, non_blocking=True)
                sums.add(batch, predictor(batch), q)
                del batch
            except OOM_ERRORS as e:
                if not is_oom(e):
                    raise
                failed = True
            if failed:  # outside the except block: the failed batch's tensors are free to go
                attempt += 1
                release_memory(device)
                where = f"out of memory in validation batch {index + 1} (batch size {size})"
                if attempt == 1:
                    rung(tracker, "oom_retry", f"{where}: released caches; retrying the same batch once", epoch,
                         index + 1)
                    tried.append("a retry")
                elif size > 1:
                    batch_size = max(1, size // 2)
                    rung(tracker, "oom_halve", f"{where}: repeating it with batch size {batch_size}", epoch, index + 1)
                    if "batches halved down to 1" not in tried:
                        tried.append("batches halved down to 1")
                elif optimizer_to_host is not None and optimizer_to_host():
                    rung(tracker, "oom_optimizer_to_host", f"{where}: moved the optimizer state (AdamW moments) to "
                         "host memory (same update)", epoch, index + 1)
                    tried.append("the optimizer state in host memory")
                else:
                    rung(tracker, "oom_stop", f"{where}: no rung left", epoch, index + 1)
                    fitted = (f"the largest validation batch that fitted in this run was {largest}" if largest
                              else "no validation batch fitted in this run")
                    raise ResourceError(f"a single validation sample does not fit in memory: batch {index + 1} ran "
                                        f"out of memory after {', '.join(dict.fromkeys(tried))}; {fitted}; "
                                        f"{WHAT_WOULD_FIT}")
                continue
            largest = max(largest, size)
            attempt = 0
            cursor += size
            index += 1
            if tracker is not None:
                tracker.maybe_record("val_batch", epoch, index)
    sums.all_reduce(training.dist)
    return sums.result(quantiles, batch_size)


class TrainingQuantiles:
    """The baseline training reads its losses against: per series, the quantiles of its training target, the same at
    every step. It is the forecast `foxhunt evaluate`, `backtest` and train's final line call training_quantiles,
    from the same two definitions: the series' fitting bars before the cut (data/dataset/fit_rows.py: every real bar
    with a finite target, the first encoder_length bars included) and their quantiles
    (data/baselines/forecasts.training_quantiles: linear interpolation, float64), so the console's two figures of it
    agree. A series with no fitting bars (it starts after the cut) takes the quantiles of every series' fitting bars
    pooled: training needs a forecast at every window, where evaluate's comparison leaves such a series out.

    Memory: one series' target at a time, float64 (8 bytes a bar, twice while its quantiles are taken), the same
    reads the final line makes for its baselines; the table is (S, Q).
    """

    def __init__(self, data: PreparedData, cut: int, quantiles: list[float]):
        q = np.asarray(quantiles, dtype=np.float64)
        n_series = len(data.windows.series_names)
        table = np.full((n_series, len(q)), np.nan)  # (S, Q)
        for s in range(n_series):  # a handful of series
            rows, _ = series_rows(data, s, cut)
            if rows is not None:
                table[s] = training_quantiles(rows.target[rows.train_mask], q, 1)[0]
        unfitted = np.flatnonzero(np.isnan(table).any(axis=1))
        if len(unfitted):
            fitted = [r.target[r.train_mask] for s in range(n_series) if (r := series_rows(data, s, cut)[0])]
            table[unfitted] = training_quantiles(np.concatenate(fitted) if fitted else np.empty(0), q, 1)[0]
        self.table = torch.from_numpy(table).float()  # (S, Q)
        self.windows = data.windows

    def __call__(self, batch: Batch) -> torch.Tensor:
        raw = self.table[self.windows.series_index(batch.window.cpu())].to(batch.target.device)  # (B, Q)
        scaled = (raw[:, None, :] - batch.target_center.view(-1, 1, 1)) / batch.target_scale.view(-1, 1, 1)  # (B, 1, Q)
        return scaled.expand(-1, batch.target.shape[1], -1)  # (B, D, Q)
