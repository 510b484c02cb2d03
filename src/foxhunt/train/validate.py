"""Validation with flat memory, however many batches there are.

Nothing computed for a batch outlives it on the device: the loss and q-risk are running sums moved to the host as a
few numbers per batch. An out-of-memory error halves the validation batch and repeats only the failed batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from foxhunt.data.batch import Batch
from foxhunt.data.windows import WindowedData
from foxhunt.errors import ResourceError
from foxhunt.model.loss import pinball
from foxhunt.train.faults import FaultInjector
from foxhunt.train.step import SINGLE_SAMPLE_ADVICE, release_memory
from foxhunt.train.telemetry import MemoryTracker

log = logging.getLogger("foxhunt.train")

Predictor = Callable[[Batch], torch.Tensor]  # batch on device -> (B, D, Q) quantiles in scaled target space


@dataclass
class ValResult:
    loss: float  # mean pinball in scaled target space (the training loss)
    qrisk: dict[float, float]  # TFT paper q-risk per quantile, on the target's own scale
    n_samples: int
    batch_size: int  # the validation batch size in force at the end (smaller after an OOM)


class ValSums:
    """Running sums on the host: O(Q) memory whatever the number of batches."""

    def __init__(self, n_q: int):
        self.pinball_scaled = torch.zeros(n_q, dtype=torch.float64)
        self.pinball_raw = torch.zeros(n_q, dtype=torch.float64)
        self.abs_raw = 0.0
        self.count = 0  # (sample, horizon) pairs

    def add(self, batch: Batch, pred: torch.Tensor, quantiles: torch.Tensor) -> None:
        scaled = pinball(pred, batch.target, quantiles)  # (B, D, Q)
        raw_pred, raw_y = batch.unscale(pred), batch.unscale(batch.target)  # (B, D, Q), (B, D)
        raw = pinball(raw_pred, raw_y, quantiles)
        self.pinball_scaled += scaled.double().sum(dim=(0, 1)).cpu()
        self.pinball_raw += raw.double().sum(dim=(0, 1)).cpu()
        self.abs_raw += float(raw_y.double().abs().sum())
        self.count += raw_y.numel()

    def result(self, quantiles: list[float], batch_size: int) -> ValResult:
        n = max(1, self.count)
        loss = float(self.pinball_scaled.sum() / (n * len(quantiles)))
        denom = self.abs_raw if self.abs_raw > 0 else float("nan")
        qrisk = {q: float(2.0 * s / denom) for q, s in zip(quantiles, self.pinball_raw.tolist(), strict=True)}
        return ValResult(loss, qrisk, self.count, batch_size)


def validate(
    predictor: Predictor,
    windows: WindowedData,
    ids: torch.Tensor,
    batch_size: int,
    quantiles: list[float],
    device: torch.device,
    injector: FaultInjector | None = None,
    tracker: MemoryTracker | None = None,
    epoch: int | None = None,
) -> ValResult:
    q = torch.tensor(quantiles, dtype=torch.float32, device=device)
    sums = ValSums(len(quantiles))
    cursor, index = 0, 0
    with torch.inference_mode():
        while cursor < len(ids):
            size = min(batch_size, len(ids) - cursor)
            failed = False
            try:
                if injector is not None:
                    injector.check("val", index + 1)
                batch = windows.batch(ids[cursor : cursor + size]).to(device, non_blocking=True)
                sums.add(batch, predictor(batch), q)
                del batch
            except torch.OutOfMemoryError:
                failed = True
            if failed:
                release_memory(device)
                if size <= 1:
                    raise ResourceError(SINGLE_SAMPLE_ADVICE.replace("training", "validation"))
                batch_size = max(1, size // 2)
                log.warning("[MEMORY] out of memory in validation batch %d; repeating it with batch size %d",
                            index + 1, batch_size)
                if tracker is not None:
                    tracker.record("oom_recovered", epoch=epoch, batch=index + 1)
                continue
            cursor += size
            index += 1
            if tracker is not None:
                tracker.maybe_record("val_batch", epoch, index)
    return sums.result(quantiles, batch_size)


class TrainingQuantiles:
    """The baseline the model must beat: per series and horizon, the training-set quantiles of the raw target."""

    def __init__(self, windows: WindowedData, train_ids: torch.Tensor, quantiles: list[float], chunk: int = 65536):
        codes, actual = [], []
        for start in range(0, len(train_ids), chunk):
            ids = train_ids[start : start + chunk]
            codes.append(windows.series_code(ids))
            actual.append(windows.actual(ids))
        code = torch.cat(codes)  # (W,)
        y = torch.cat(actual).double()  # (W, D)
        q = torch.tensor(quantiles, dtype=torch.float64)
        pooled = torch.quantile(y, q, dim=0).T  # (D, Q): fallback for series unseen in training
        n_codes = int(code.max()) + 1 if len(code) else 1
        table = pooled.expand(n_codes, -1, -1).clone()  # (S, D, Q)
        for c in torch.unique(code).tolist():  # a handful of series
            table[c] = torch.quantile(y[code == c], q, dim=0).T
        self.table = table.float()
        self.windows = windows

    def __call__(self, batch: Batch) -> torch.Tensor:
        code = self.windows.series_code(batch.window.cpu()).clamp(max=self.table.shape[0] - 1)
        raw = self.table[code].to(batch.target.device)  # (B, D, Q)
        return (raw - batch.target_center.view(-1, 1, 1)) / batch.target_scale.view(-1, 1, 1)
