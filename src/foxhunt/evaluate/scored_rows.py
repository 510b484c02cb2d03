"""Scored forecasts: the origins scored, their actuals and the model's quantiles, and their metrics.

`Scored` is what `foxhunt evaluate` scores; `evaluate/accumulators.py` scores it a series at a time, `score` in one go
(training's validation claim, the backtest's folds).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from foxhunt.evaluate.metrics import MetricAccumulator

if TYPE_CHECKING:
    import torch

    from foxhunt.data.dataset.types import PreparedData
    from foxhunt.data.dataset.windows import WindowedData
    from foxhunt.predict.predictor import ForecastBatch


@dataclass
class Scored:
    """Forecasts gathered on the host for scoring: (K, D, Q) model quantiles and (K, D) actuals, K origins."""

    series: np.ndarray  # (K,)
    origin_row: np.ndarray  # (K,) global row of each origin
    origin_ns: np.ndarray  # (K,)
    quantiles: np.ndarray  # (K, D, Q), calibrated when `raw` is set
    actual: np.ndarray  # (K, D)
    raw: np.ndarray | None = None  # (K, D, Q) the model's own quantiles when `quantiles` are calibrated

    def subset(self, keep: np.ndarray) -> Scored:
        return Scored(*(None if a is None else a[keep] for a in dataclasses.astuple(self)))

    def __len__(self) -> int:
        return len(self.series)


def concat(parts: list[Scored]) -> Scored:
    """The pieces `parts` as one (their fields concatenated; `raw` kept only when every piece has it)."""
    raw = None if any(p.raw is None for p in parts) else np.concatenate([p.raw for p in parts])
    return Scored(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                    ("series", "origin_row", "origin_ns", "quantiles", "actual")), raw)


def from_batch(fb: ForecastBatch, data: PreparedData) -> Scored:
    """A prediction batch as scored forecasts (its origin rows read from the window index)."""
    import torch

    w = data.windows
    origin_row = (w.starts[torch.from_numpy(fb.window)] + w.encoder_length - 1).numpy()
    return Scored(fb.series, origin_row, fb.origin_ns, fb.quantiles, fb.actual, fb.raw)


def gather(kept: list[ForecastBatch], data: PreparedData) -> Scored:
    """Prediction batches as one Scored."""
    return concat([from_batch(k, data) for k in kept])


def scored_windows(w: WindowedData, ids: torch.Tensor, quantiles: np.ndarray) -> Scored:
    """The windows `ids` with their (K, D, Q) `quantiles` (Q may be 0: baselines alone are scored there)."""
    origin_row = (w.starts[ids] + w.encoder_length - 1).numpy()
    return Scored(w.series_index(ids).numpy(), origin_row, w.origin_ns(ids).numpy(), quantiles,
                  w.actual(ids).numpy().astype(np.float64))


def score(y: np.ndarray, q: np.ndarray, series: np.ndarray, qs: tuple[float, ...], names: tuple[str, ...],
          directional: bool) -> dict[str, Any]:
    """Metrics overall, per horizon and per series (by name), in one go."""
    acc = MetricAccumulator(qs, y.shape[1], n_series=len(names))
    acc.update(y, q, series)
    return metrics_of(acc, names, directional)


def metrics_of(acc: MetricAccumulator, names: tuple[str, ...], directional: bool) -> dict[str, Any]:
    """An accumulator's metrics, per series by name. The directional hit rate means something for returns only: a
    range is always positive, so for other targets it is reported as null."""
    res = acc.result()
    res["per_series"] = {names[int(k)]: v for k, v in res.get("per_series", {}).items()}
    if not directional:
        for block in [res["overall"], *res["per_horizon"], *res["per_series"].values()]:
            block["hit_rate"] = None
    return res
