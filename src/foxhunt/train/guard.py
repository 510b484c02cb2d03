"""The non-finite guard: batches whose loss or gradient norm is NaN or inf are skipped, counted and named, and the
run stops after too many in a row, before anything non-finite can reach a checkpoint or model.safetensors.

One bad batch (an extreme bar, a bad tick the validation let through) should cost one skipped step, not the run:
clipping and AdamW turn a NaN gradient into NaN weights and NaN moments, which the next checkpoint would keep.
Several in a row mean the model or the learning rate has diverged: stopping keeps the last good checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from foxhunt.atomic import append_jsonl
from foxhunt.data.dataset.batch import Batch
from foxhunt.data.dataset.windows import WindowedData
from foxhunt.errors import NonFiniteError

log = logging.getLogger("foxhunt.train")


def _iso(ns: int) -> str:
    return str(np.datetime64(int(ns), "ns").astype("datetime64[s]")) + "Z"


def describe_batch(windows: WindowedData, batch: Batch) -> str:
    """`series ES.c.0, NQ.c.0; bars 2020-01-02T00:00:00Z .. 2020-01-09T00:00:00Z`: what the batch covers."""
    ids = batch.window.cpu().long()
    if len(ids) == 0:  # under torchrun, a rank's share of a global batch smaller than the ranks
        return "no windows on this rank"
    names = sorted({windows.series_names[i] for i in windows.series_index(ids).tolist()})
    first = int(windows.ts_ns[windows.starts[ids]].min())
    last = int(windows.target_ns(ids, extrapolated=True).max())
    return f"series {', '.join(names)}; bars {_iso(first)} .. {_iso(last)}"


class BadSteps:
    """Counts skipped (non-finite) training batches per epoch and in a row; stops after `max_in_row` in a row."""

    def __init__(self, max_in_row: int, windows: WindowedData, metrics: Path | None = None):
        self.max_in_row, self.windows, self.metrics = max_in_row, windows, metrics
        self.in_row = 0
        self.epoch_count = 0
        self.total = 0

    def new_epoch(self, already: int = 0) -> None:
        """`already`: batches skipped in this epoch before a mid-epoch checkpoint the run resumed from."""
        self.epoch_count = already

    def good(self) -> None:
        self.in_row = 0

    def bad(self, batch: Batch, global_step: int, epoch: int, loss: float, grad_norm: float) -> None:
        """Log the skipped batch (series, time range, loss, gradient norm); at `max_in_row` in a row, append a
        `stopped_non_finite` record to metrics.jsonl and raise NonFiniteError."""
        self.in_row += 1
        self.epoch_count += 1
        self.total += 1
        log.warning("non-finite training step %d (epoch %d): loss %s, gradient norm %s; skipped it (no optimizer "
                    "step); %s; %d in a row (stop at %d)", global_step, epoch, loss, grad_norm,
                    describe_batch(self.windows, batch), self.in_row, self.max_in_row)
        if self.in_row >= self.max_in_row:
            if self.metrics is not None:  # no "loss" or "step" key: the training-curves plot reads these records
                append_jsonl(self.metrics, {"event": "stopped_non_finite", "epoch": epoch,
                                            "bad_steps": self.epoch_count, "bad_steps_in_a_row": self.in_row})
            raise NonFiniteError(
                f"{self.in_row} training steps in a row had a non-finite loss or gradient norm (the last: step "
                f"{global_step}, epoch {epoch}, {describe_batch(self.windows, batch)}); stopped, and kept the last "
                "good checkpoint.pt and model.safetensors as they were; lower --learning-rate or --grad-clip, check "
                "the bars named in train.log, or raise --max-bad-steps"
            )


def check_finite(state: Mapping[str, torch.Tensor], what: str) -> None:
    """NonFiniteError naming the first non-finite tensor of `state`: non-finite weights are never saved."""
    for name, t in state.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise NonFiniteError(f"{name} holds NaN or inf: not writing {what}; the last good one is kept as it was")
