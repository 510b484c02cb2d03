"""The bars a baseline is fitted on, one rule for every reader: `evaluate`'s and `backtest`'s baselines, `train`'s
final line (evaluate/series_baselines.py) and the training-quantile baseline `train` reads its losses against
(train/validate.py). Fitted on the same bars, the same baseline gives the same forecast wherever it is printed.

A series' fitting bars are its real rows before the cut with a finite target (a return target's first bar has no
move: the prepared data hold 0 there, which is no observation). The cut is the model's training cut, never past a
bar a scored window forecasts (`fit_cut`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.features.bar_features import RETURN_TARGETS


@dataclass(frozen=True)
class FitRows:
    """One series' real rows (n of them, from global row `row0`) as the baselines read them."""

    name: str
    row0: int
    target: np.ndarray  # (n,) float64; NaN at a return target's first bar
    ts: np.ndarray  # (n,) int64 ns (a view of the data's)
    train_mask: np.ndarray  # (n,) bool: the fitting bars, a finite target before the cut


def series_rows(data: PreparedData, s: int, cut: int) -> tuple[FitRows | None, str | None]:
    """Series `s`'s rows with its fitting bars before `cut` (ns); (None, why) when fewer than 2 bars are. Memory: the
    target's float64 copy and the mask, 9 bytes a bar; the rest are views (of a store's mapped pages, read once)."""
    w = data.windows
    a, b = np.searchsorted(w.series_idx.numpy(), [s, s + 1])  # on a mapped store: a few pages read
    n = int(np.count_nonzero(w.real.numpy()[a:b]))  # the real rows come first (rows appended for prediction follow)
    if n == 0:
        return None, "the series has no bars"
    target = w.target_raw.numpy()[a : a + n].astype(np.float64)
    if data.schema.target in RETURN_TARGETS:
        target[0] = np.nan  # a series' first bar has no move (the prepared data hold 0 there): fit on none
    ts = w.ts_ns.numpy()[a : a + n]
    train_mask = (ts < cut) & np.isfinite(target)
    if np.count_nonzero(train_mask) < 2:
        return None, f"no bars before {_iso(cut)} (the training cut) to fit on"
    return FitRows(w.series_names[s], int(a), target, ts, train_mask), None


def fit_cut(train_end: str | None, first_forecast_ns: int) -> int:
    """The end (ns, exclusive) of the rows every baseline fits on: the model's training cut, and never a bar that a
    scored window forecasts (`first_forecast_ns`, the earliest first forecast bar scored).

    A window belongs to the split of its first forecast bar, so validation's and every held-out window's forecast bars
    lie at or after the training cut: the cut is the training cut, and a series fits on the same bars whichever
    command scores it. An origin is no bound: one series' gap (a market closed for weeks) puts its first validation
    origin weeks before the cut, and bounding by it moved every series' cut there. Only `evaluate --start` inside the
    training period moves the cut earlier, to the first bar it scores."""
    cut = int(first_forecast_ns)
    if train_end:
        cut = min(cut, int(np.datetime64(train_end.replace("+00:00", "").rstrip("Z"), "ns").astype(np.int64)))
    return cut


def windows_cut(data: PreparedData, ids: torch.Tensor) -> int:
    """`fit_cut` for scoring the windows `ids` (int64 window ids) of `data`: its training cut, or their first forecast
    bar where that is earlier."""
    w = data.windows
    return fit_cut(data.summary.get("train_end"), int(w.ts_ns[w.starts[ids] + w.encoder_length].min()))


def first_forecast_ns(data: PreparedData, origin_rows: np.ndarray) -> int:
    """The earliest first forecast bar (ns) of origins at these global rows (each origin's next row)."""
    return int(data.windows.ts_ns.numpy()[np.asarray(origin_rows, dtype=np.int64) + 1].min())


def _iso(ns: int) -> str:
    return str(np.datetime64(int(ns), "ns").astype("datetime64[s]")) + "Z"
