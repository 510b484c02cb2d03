"""Adaptive conformal calibration: the conformal shift of each quantile and horizon (model/calibration.py) updated
online, per series, as each outcome becomes known.

A shift fitted once on the validation split carries that period's miscalibration into every later one: fitted on calm
2017, it narrowed the S&P 500's 2018 bands to 0.71 p10-p90 coverage. Adaptive conformal inference (Gibbs and Candes
2021) moves the correction after every outcome instead; here in the form of quantile tracking (Angelopoulos, Candes
and Tibshirani 2023): online gradient descent on the pinball loss of the score s = outcome - forecast (in units of
the window's scale, or the target's, as the fixed shift), so for quantile q a shift c becomes
c + eta (q - 1[s <= c]): up by eta q after an outcome above the shifted forecast, down by eta (1 - q) after one at
or below it. Its long-run share of outcomes below the shifted forecast is q whatever the sequence (Gibbs and Candes'
bound: off by at most (range of c + eta) / (eta T) over T outcomes).

The step eta trades tracking against noise and a single validation year cannot tell which the next year needs
(calm 2017 asks for none; 2018 needed a lot). So there is no single step: K = 5 trackers ("experts") with steps
eta_k = g_k x spread (g on the geometric grid GRID, 0 included: the start itself; spread = P90 - P10 of the
validation scores of that quantile and horizon) run side by side, and the shift applied is their weighted mean, the
weights learnt online from each expert's pinball loss by exponential weighting with fixed share (Herbster and Warmuth
1998), as Gibbs and Candes 2022 (DtACI) and Zaffran et al. 2022 (AgACI) aggregate ACI experts. Its constants follow
the textbook rule for an interval of I outcomes (Cesa-Bianchi and Lugosi 2006, thm 2.2): rate sqrt(8 ln K / I) on
losses in units of the validation mean pinball loss at the start, share 1 / I, I the validation outcomes per
series and horizon. Nothing is tuned on the data beyond that validation spread and loss.

Timing, per series and bar by bar (no look-ahead): at bar t, (1) the outcome y_t scores the forecast made h bars
before for step h, h = 1..D (one new score per horizon), and every expert's shift and weight of that horizon takes
one step (the gradient and loss at its current shift); (2) the shift applied to origin t's forecasts is the
experts' weighted mean; (3) origin t's raw forecasts and scale join the ring of the last D origins, to be scored
when their outcomes arrive. So the shift applied at origin t uses only outcomes realised at or before t's bar, and a
bar costs O(K D Q) whatever the history.

Each series has its own state (a panel's markets differ; benchmarks/calibration_modes.py measures it against one
pooled state). Every expert starts at `Rule.start`: the fixed shifts, or, for an anchored model, zero (its own
quantiles, GARCH-t's corrected, are near their levels already, and a shift fitted on one validation year moved them
off: train/calibrate.py). The saved state is as of each series' last validation origin (train/calibrate.py warms it
up from the start through the validation windows); forecasts continue it from the bar after. Origins before that bar
get the start (those origins were used to fit it). A series without a saved state starts there at its first origin.
Legend: N origins, K experts, D forecast steps, Q quantiles, S series.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# Each expert's step, in units of the score spread: 0 (the start) and 1/256 .. 1/32, chosen on validation alone
# (benchmarks/calibration_modes.py --validation: over 1/256 .. 1/8 the two fastest added noise, the median's most).
GRID = (0.0, 1 / 256, 1 / 128, 1 / 64, 1 / 32)
NEVER = np.iinfo(np.int64).min  # as_of of a series without saved state: every outcome is new


@dataclass(frozen=True)
class Rule:
    """The constants of the tracker, fixed after training (see the module docstring)."""

    quantiles: tuple[float, ...]  # (Q,)
    mode: str  # "scaled" or "raw": the units of scores and shifts (model/calibration.py)
    start: np.ndarray  # (D, Q) every expert's first shift: the fixed conformal shifts, or zeros for an anchored model
    step: np.ndarray  # (K, D, Q) each expert's eta, in score units
    loss_scale: np.ndarray  # (D, Q) > 0: the unit of the pinball losses that weigh the experts
    rate: float  # exponential weighting's learning rate, per unit loss
    share: float  # fixed share: the weight mixed back uniformly after every outcome

    @staticmethod
    def fit(scores: np.ndarray, start: np.ndarray, quantiles: Sequence[float], mode: str, per_series: float,
            grid: Sequence[float] = GRID) -> Rule:
        """From validation scores (N, D, Q) (NaN ignored), the start (D, Q) and the validation outcomes per
        series and horizon (I)."""
        s = np.asarray(scores, dtype=np.float64)
        tau = np.asarray(quantiles, dtype=np.float64)
        with np.errstate(all="ignore"):
            lo, hi = np.nanpercentile(s, 10, axis=0), np.nanpercentile(s, 90, axis=0)  # (D, Q)
            loss = np.nanmean(pinball(s - start[None], tau), axis=0)  # (D, Q)
        spread = np.where(np.isfinite(hi - lo), hi - lo, 0.0)
        loss = np.where(np.isfinite(loss) & (loss > 0), loss, np.maximum(spread, 1e-12))
        g = np.asarray(grid, dtype=np.float64)
        n = max(float(per_series), 1.0)
        return Rule(tuple(float(q) for q in quantiles), mode, np.asarray(start, dtype=np.float64).copy(),
                    g[:, None, None] * spread[None], loss, math.sqrt(8 * math.log(len(g)) / n), 1 / n)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(K, D, Q)."""
        k, d, q = self.step.shape
        return k, d, q

    def fresh(self) -> Track:
        """The state of a series before its first outcome: every expert at the start, equal weights."""
        k, d, q = self.shape
        return Track(np.repeat(self.start[None], k, axis=0), np.full((k, d, q), 1 / k), NEVER,
                     np.full((d, d, q), np.nan), np.full(d, np.nan))

    def to_dict(self) -> dict[str, Any]:
        return {"quantiles": list(self.quantiles), "mode": self.mode, "start": self.start.tolist(),
                "step": self.step.tolist(), "loss_scale": self.loss_scale.tolist(), "rate": self.rate,
                "share": self.share}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Rule:
        step = np.asarray(d["step"], dtype=np.float64)
        rule = Rule(tuple(float(q) for q in d["quantiles"]), str(d["mode"]), np.asarray(d["start"], dtype=np.float64),
                    step, np.asarray(d["loss_scale"], dtype=np.float64), float(d["rate"]), float(d["share"]))
        k, dd, q = rule.shape
        if rule.start.shape != (dd, q) or rule.loss_scale.shape != (dd, q) or len(rule.quantiles) != q:
            raise ValueError(f"adaptive rule of shapes start {rule.start.shape}, step {step.shape}")
        return rule


def pinball(u: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Pinball loss of the residual u = outcome - forecast at levels tau (broadcast along the last axis)."""
    return np.maximum(tau * u, (tau - 1) * u)


def track(rule: Rule, shifts: np.ndarray, weights: np.ndarray, score: np.ndarray) -> None:
    """One outcome per horizon: the experts' shifts (K, D, Q) and weights (K, D, Q) step, in place, on the scores
    (D, Q) (NaN: no outcome for that horizon, nothing moves)."""
    ok = np.isfinite(score)  # (D, Q)
    every = ok.all()  # the usual bar: the masks below are for a series' first D bars and gaps
    if not every and not ok.any():
        return
    tau = np.asarray(rule.quantiles)
    u = (score if every else np.where(ok, score, 0.0))[None] - shifts  # (K, D, Q)
    above = u > 0
    loss = pinball(u, tau) / rule.loss_scale  # (K, D, Q)
    # less the best expert's loss, which the normalisation cancels: an outlier cannot underflow every weight to 0
    w = weights * np.exp(-rule.rate * (loss - loss.min(axis=0)))
    w = (1 - rule.share) * w / w.sum(axis=0) + rule.share / len(w)
    step = rule.step * (above - (1 - tau))
    weights[...] = w if every else np.where(ok, w, weights)
    shifts += step if every else np.where(ok, step, 0.0)


@dataclass
class Track:
    """One series' running state: the experts, the time of the last outcome in it and the last D origins'
    forecasts that wait for their outcomes."""

    shifts: np.ndarray  # (K, D, Q)
    weights: np.ndarray  # (K, D, Q), summing to 1 over K
    as_of: int  # ns: the outcomes of bars up to here are in the state; later bars' are consumed as they come
    pending: np.ndarray  # (D, D, Q) raw forecasts of the last D origins, oldest first (NaN: none)
    pending_scale: np.ndarray  # (D,) their scales

    def shift(self) -> np.ndarray:
        """(D, Q) the shift applied now: the experts' weighted mean."""
        return (self.weights * self.shifts).sum(axis=0)

    def run(self, rule: Rule, origin_ns: np.ndarray, y: np.ndarray, q: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """Advance over N consecutive origins of the series (its bars in order, each right after the last one run):
        origin times (N,), the target of each origin's own bar (N,), raw forecasts (N, D, Q) and scales (N,).
        Returns the shifts applied (N, D, Q): the fixed ones before `as_of`, the tracked ones after."""
        n, d = len(origin_ns), self.pending.shape[0]
        hist = np.concatenate([self.pending, np.asarray(q, dtype=np.float64)])  # (D + N, D, Q)
        hist_scale = np.concatenate([self.pending_scale, np.asarray(scale, dtype=np.float64)])  # (D + N,)
        made = np.arange(d, d + n)[:, None] - np.arange(1, d + 1)[None]  # (N, D) row of the forecast of step h
        f = hist[made, np.arange(d)[None]]  # (N, D, Q): the forecast for this bar made h bars before
        unit = hist_scale[made][..., None] if rule.mode == "scaled" else 1.0
        scores = (np.asarray(y, dtype=np.float64)[:, None, None] - f) / unit  # (N, D, Q)
        out = np.empty((n, *self.shifts.shape[1:]))
        for i, t in enumerate(origin_ns.tolist()):  # the recursion is sequential in time; O(K D Q) a bar
            if t > self.as_of:
                track(rule, self.shifts, self.weights, scores[i])
            out[i] = rule.start if t < self.as_of else self.shift()
        self.pending, self.pending_scale = hist[-d:], hist_scale[-d:]
        self.as_of = max(self.as_of, int(origin_ns[-1])) if n else self.as_of
        return out

    def saved(self) -> Track:
        """A copy without the pending forecasts: what calibration.json keeps. Forecasts after `as_of` recompute the
        last D origins' forecasts up to it from the bars (predict/predictor.lead_in), so the file holds no forecast."""
        d = self.pending.shape[0]
        return Track(self.shifts.copy(), self.weights.copy(), self.as_of, np.full_like(self.pending, np.nan),
                     np.full(d, np.nan))

    def to_dict(self) -> dict[str, Any]:
        return {"as_of_ns": self.as_of, "shifts": self.shifts.tolist(), "weights": self.weights.tolist()}

    @staticmethod
    def from_dict(d: dict[str, Any], rule: Rule) -> Track:
        k, dd, q = rule.shape
        t = Track(np.asarray(d["shifts"], dtype=np.float64), np.asarray(d["weights"], dtype=np.float64),
                  int(d["as_of_ns"]), np.full((dd, dd, q), np.nan), np.full(dd, np.nan))
        if t.shifts.shape != (k, dd, q) or t.weights.shape != (k, dd, q):
            raise ValueError(f"adaptive state of shapes {t.shifts.shape}, {t.weights.shape} for rule {rule.shape}")
        return t


@dataclass(frozen=True)
class AdaptiveCalibration:
    """The rule and each series' state as of its last validation origin (saved in calibration.json)."""

    rule: Rule
    series: dict[str, Track]
    fitted_on: dict[str, Any]

    def runner(self) -> Runner:
        """A running copy that forecasts advance (the saved state is never changed)."""
        return Runner(self)

    def to_dict(self) -> dict[str, Any]:
        return {"method": "adaptive conformal calibration: quantile trackers per series, quantile and horizon, "
                          "mixed by exponential weights with fixed share",
                "rule": {**self.rule.to_dict(), "grid": list(GRID)},
                "series": {name: t.to_dict() for name, t in self.series.items()}, "fitted_on": self.fitted_on}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> AdaptiveCalibration:
        """KeyError / ValueError / TypeError for anything that `to_dict` did not write."""
        rule = Rule.from_dict(d["rule"])
        return AdaptiveCalibration(rule, {str(k): Track.from_dict(v, rule) for k, v in d["series"].items()},
                                   dict(d.get("fitted_on") or {}))


@dataclass(frozen=True)
class Origins:
    """Where a batch of forecasts stands: each row's series (B,) index into `names`, origin time (B,) ns and the
    target of the origin's own bar (B,), the outcome that bar brings."""

    series: np.ndarray
    names: Sequence[str]
    origin_ns: np.ndarray
    y: np.ndarray


class Runner:
    """Adaptive shifts for forecasts that arrive in time order within each series (series may interleave between
    calls): each series' Track is copied from the saved state on first sight and advanced from there."""

    def __init__(self, cal: AdaptiveCalibration):
        self.cal = cal
        self.tracks: dict[str, Track] = {}

    @property
    def mode(self) -> str:
        return self.cal.rule.mode

    def state(self, name: str) -> Track:
        if name not in self.tracks:
            saved = self.cal.series.get(name)
            self.tracks[name] = saved.saved() if saved is not None else self.cal.rule.fresh()
        return self.tracks[name]

    def restart(self, names: Sequence[str]) -> None:
        """Forget the running state of `names`: their next origins continue the saved state again."""
        for n in names:
            self.tracks.pop(n, None)

    def correct(self, q: np.ndarray, scale: np.ndarray, at: Origins | None = None) -> np.ndarray:
        """Calibrated forecasts (B, D, Q) from raw ones (B, D, Q) and the window scales (B,), sorted along Q; the
        rows of a series must be consecutive origins following its last ones."""
        assert at is not None, "adaptive calibration needs each row's series, origin and outcome"
        shifts = np.empty(np.shape(q), dtype=np.float64)
        series = np.asarray(at.series)
        bounds = [0, *(np.flatnonzero(series[1:] != series[:-1]) + 1).tolist(), len(series)]
        for a, b in itertools.pairwise(bounds):  # runs of one series
            if b > a:
                shifts[a:b] = self.state(at.names[int(series[a])]).run(
                    self.cal.rule, np.asarray(at.origin_ns[a:b]), at.y[a:b], q[a:b], scale[a:b])
        unit = np.asarray(scale, dtype=np.float64)[:, None, None] if self.mode == "scaled" else 1.0
        return np.sort(np.asarray(q, dtype=np.float64) + shifts * unit, axis=-1)

    def as_of(self, name: str) -> int | None:
        """The time of the last outcome in series `name`'s state (None: it starts fresh)."""
        t = self.tracks.get(name) or self.cal.series.get(name)
        return None if t is None or t.as_of == NEVER else t.as_of


def started_from(fitted_on: dict[str, Any]) -> str:
    """Where the trackers started, in words, from the fit record train/calibrate.py writes ("start": "none" for an
    anchored model's own quantiles; "fixed", or no key in a file from before it, for the fixed shifts)."""
    return "the model's own quantiles" if fitted_on.get("start") == "none" else "the fixed shifts fitted on validation"


def warm_up(rule: Rule, origins: Origins, q: np.ndarray, scale: np.ndarray,
            fitted_on: dict[str, Any]) -> tuple[AdaptiveCalibration, np.ndarray]:
    """Each series' state after the origins given, started from the rule's start at its first one: the validation
    period's origins, rows (N,) sorted by series and then time, raw forecasts (N, D, Q), scales (N,); and the
    forecasts as the shifts corrected them on the way (N, D, Q), each with outcomes before its origin only."""
    run = Runner(AdaptiveCalibration(rule, {}, {}))
    shifted = run.correct(q, scale, origins)
    return AdaptiveCalibration(rule, {name: t.saved() for name, t in run.tracks.items()}, fitted_on), shifted
