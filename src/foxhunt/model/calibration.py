"""Calibrated quantiles: a conformal shift per quantile and horizon, fitted on the validation split after training.

Conformalized quantile regression (Romano, Patterson and Candes 2019), one-sided per quantile: for quantile q and
horizon h the score of a validation window is how far its outcome lies above the forecast, and the shift c is the
k-th smallest score, so that a share q of validation outcomes falls at or below `forecast + c`. The rank carries the
finite-sample correction and leans outward: k = ceil((n + 1) q) for q >= 0.5 (an upper bound: at least a share q
below it) and k = floor((n + 1) q) for q < 0.5 (a lower bound: at most a share q below it), clamped to 1..n. For a
central interval (p10, p90) this is the asymmetric CQR interval of the paper.

Units (`mode`):
- "scaled": scores and shifts are in units of each window's target scale (`Batch.target_scale`), so a shift widens a
  band in proportion to the volatility the window's scaler sees; with `--scaling volatility` the correction follows
  the regime (with `--scaling series` the scale is one per series, and the two modes agree);
- "raw": scores and shifts in the target's own units, the same for every window.
The default, "scaled", was chosen by measurement (benchmarks/calibration_modes.py, docs/benchmarks.md "Calibration"):
fitted on validation and scored on the later test split, both give the same result with `--scaling series` (one
scale per series) and nearly the same for models already calibrated, but for volatility-scaled models that need a
real correction the scaled shift held coverage (0.804 and 0.809 test p10-p90 against 0.815 and 0.856 raw, on the
ES sample and SPX daily) and gave lower q-risk at every quantile: a raw shift is too wide in calm windows and too
narrow in wild ones. (A shift in units of each forecast's own p10-p90 width was no better than "scaled".)

Quantiles stay in order after the shift: they are sorted along Q (the monotone rearrangement of Chernozhukov et
al. 2010, which never raises the pinball loss of a crossing forecast). Everything here is numpy on the host.
Legend: N windows, D forecast steps, Q quantiles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from foxhunt.model.config import DEFAULT_METHOD, METHODS, quantile_label  # noqa: F401  (declared with the options)

MODES = ("scaled", "raw")
DEFAULT_MODE = "scaled"
MIN_WINDOWS = 20  # fewer validation windows than this give shifts too noisy to trust: no calibration is fitted


def conformal_rank(n: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The 1-based rank of the conformal shift among n sorted scores (see the module docstring), clamped to 1..n;
    n and q broadcast. The 1e-9 keeps (n + 1) q that is an integer in floating point from rounding past it."""
    r = (np.asarray(n) + 1) * np.asarray(q, dtype=np.float64)
    k = np.where(np.asarray(q) >= 0.5, np.ceil(r - 1e-9), np.floor(r + 1e-9)).astype(np.int64)
    return np.clip(k, 1, np.maximum(np.asarray(n), 1))


def conformal_shifts(scores: np.ndarray, quantiles: Sequence[float]) -> np.ndarray:
    """Shifts (D, Q) from scores (N, D, Q) = (outcome - forecast) in the chosen units; NaN scores are ignored.

    Each (h, q) takes its own sorted finite scores and the conformal rank for its count. A column with no finite
    score gets shift 0 (no evidence, no correction)."""
    s = np.sort(np.asarray(scores, dtype=np.float64), axis=0)  # (N, D, Q), NaN last
    n = np.isfinite(s).sum(axis=0)  # (D, Q)
    qs = np.asarray(quantiles, dtype=np.float64)
    ranks = conformal_rank(n, qs[None, :])  # (D, Q)
    shifts = np.take_along_axis(s, (ranks - 1)[None], axis=0)[0]  # (D, Q)
    return np.where(n > 0, shifts, 0.0)


def units(scale: np.ndarray, mode: str) -> np.ndarray | float:
    """What one unit of shift is worth in target units, broadcastable to (N, D, Q): each window's scale (N, 1, 1)
    ("scaled") or 1 ("raw")."""
    return np.asarray(scale, dtype=np.float64)[:, None, None] if mode == "scaled" else 1.0


def scores(y: np.ndarray, q_pred: np.ndarray, scale: np.ndarray, mode: str) -> np.ndarray:
    """(N, D, Q) outcome minus forecast, in the mode's units (see `units`)."""
    s = np.asarray(y, dtype=np.float64)[..., None] - np.asarray(q_pred, dtype=np.float64)  # (N, D, Q)
    return s / units(scale, mode)


def apply_shifts(q_pred: np.ndarray, shifts: np.ndarray, scale: np.ndarray, mode: str) -> np.ndarray:
    """Forecasts (N, D, Q) moved by the shifts (D, Q) in the mode's units (see `units`); sorted along Q so that the
    quantiles never cross."""
    out = np.asarray(q_pred, dtype=np.float64) + np.asarray(shifts, dtype=np.float64)[None] * units(scale, mode)
    return np.sort(out, axis=-1)  # (N, D, Q)


def coverage_summary(y: np.ndarray, q_pred: np.ndarray, quantiles: Sequence[float]) -> dict[str, Any]:
    """The outer pair's interval coverage ("p10-p90": share with lo <= y <= hi) and the share of outcomes below each
    quantile ("below", ties count one half, as in evaluate's metrics). y (N, D), q_pred (N, D, Q); NaN y ignored."""
    y = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(y)  # (N, D)
    yo, qo = y[ok], np.asarray(q_pred, dtype=np.float64)[ok]  # (M,), (M, Q)
    share = (lambda x: float(x.mean(axis=0)) if len(yo) else None)  # noqa: E731
    out: dict[str, Any] = {}
    label = outer_label(quantiles)
    if label is not None:
        out[label] = share((qo[:, 0] <= yo) & (yo <= qo[:, -1]))
    below = (yo[:, None] < qo) + 0.5 * (yo[:, None] == qo)  # (M, Q)
    out["below"] = {f"{q:g}": share(below[:, j]) for j, q in enumerate(quantiles)}
    out["n"] = int(len(yo))
    return out


def outer_label(quantiles: Sequence[float]) -> str | None:
    """"p10-p90" for (0.1, 0.5, 0.9): the outermost pair of quantiles, when it brackets the median."""
    return f"{quantile_label(quantiles[0])}-{quantile_label(quantiles[-1])}" if quantiles[0] < 0.5 < quantiles[-1] else None


@dataclass(frozen=True)
class Calibration:
    """Conformal shifts (D, Q) and where they came from; `apply` corrects a batch of forecasts."""

    mode: str
    quantiles: tuple[float, ...]
    shifts: np.ndarray  # (D, Q), in target units ("raw") or in units of each window's scale ("scaled")
    fitted_on: dict[str, Any] = field(default_factory=dict)  # validation period, windows, pairs
    coverage: dict[str, Any] = field(default_factory=dict)  # {"before": coverage_summary, "after": ...}

    @staticmethod
    def fit(y: np.ndarray, q_pred: np.ndarray, scale: np.ndarray, quantiles: Sequence[float],
            mode: str = DEFAULT_MODE, fitted_on: dict[str, Any] | None = None) -> Calibration:
        """Fit on validation outcomes y (N, D), sorted raw forecasts q_pred (N, D, Q) and window scales (N,)."""
        if mode not in MODES:
            raise ValueError(f"calibration mode must be one of {MODES}, got {mode!r}")
        qs = tuple(float(q) for q in quantiles)
        shifts = conformal_shifts(scores(y, q_pred, scale, mode), qs)
        after = apply_shifts(q_pred, shifts, scale, mode)
        return Calibration(mode, qs, shifts, dict(fitted_on or {}),
                           {"before": coverage_summary(y, q_pred, qs), "after": coverage_summary(y, after, qs)})

    def apply(self, q_pred: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """Calibrated forecasts (N, D, Q) from raw ones (N, D, Q) and each window's target scale (N,)."""
        return apply_shifts(q_pred, self.shifts, scale, self.mode)

    def correct(self, q_pred: np.ndarray, scale: np.ndarray, at: Any = None) -> np.ndarray:
        """`apply` under the name it shares with the adaptive Runner (model/adaptive.py); fixed shifts need no
        origins `at`."""
        return self.apply(q_pred, scale)

    @property
    def horizon(self) -> int:
        return int(self.shifts.shape[0])

    def to_dict(self) -> dict[str, Any]:
        return {"method": "conformalized quantile regression, one-sided per quantile and horizon",
                "mode": self.mode, "quantiles": list(self.quantiles), "shifts": self.shifts.tolist(),
                "fitted_on": self.fitted_on, "coverage": self.coverage}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Calibration:
        """KeyError / ValueError / TypeError for anything that is not a calibration written by `to_dict`."""
        qs = tuple(float(q) for q in d["quantiles"])
        shifts = np.asarray(d["shifts"], dtype=np.float64)
        if d["mode"] not in MODES or shifts.ndim != 2 or shifts.shape[1] != len(qs) or not np.isfinite(shifts).all():
            raise ValueError(f"mode {d['mode']!r}, shifts of shape {shifts.shape} for {len(qs)} quantiles")
        return Calibration(str(d["mode"]), qs, shifts, dict(d.get("fitted_on") or {}), dict(d.get("coverage") or {}))
