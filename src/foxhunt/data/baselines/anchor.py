"""The anchor: a baseline's quantile forecast at every bar, the point the model's quantile head starts from.

With `--anchor garch_t` each series' GARCH(1,1)-t (forecasts.py) is fitted on its training rows once, when the data
are prepared (prepare/load_stage.py), and saved with the transform (`AnchorFit`, in model.json and a store's
manifest); its variance filter then runs forward through every bar with those parameters, so the anchor at an origin
uses that series' returns up to the origin only. The anchor of each row, taken as an origin, is its quantiles for
steps 1..D in the model's scaled target units ((q - center_t) / scale_t), stored per row (N, D * Q) beside the
inputs; the model adds its learned correction to it (model/tft.py), and a correction of zero (an untrained head)
forecasts the baseline exactly.

Why GARCH-t first: it is the baseline the panel's and the S&P's verdicts are judged against, and its persistence and
mean reversion are what a trailing volatility lacks (issue "A model that starts where GARCH and HAR stand"). A
series the fit cannot serve (too few training returns, unseen in training) gets the standard normal quantiles in
scaled units: the forecast of a model that knows only its volatility scaling.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from foxhunt.data.baselines.forecasts import (
    GarchParams,
    fit_garch_t,
    garch_available,
    garch_next_variance,
    garch_sigma_paths,
    normal_quantiles,
    std_t_quantiles,
)
from foxhunt.data.config import ANCHORS
from foxhunt.errors import InputError

# The anchor's quantiles are held within this many target scales (trailing volatilities) of the center. A GARCH
# filter fed one bad return (an unadjusted roll gap of a continuous series, a price error: the 45-futures panel has
# returns of 260 trailing volatilities) forecasts quantiles millions of scales wide for weeks after it, and the loss
# of those rows would swamp the training; no honest one-bar quantile lies ten volatilities out.
ANCHOR_CLIP = 10.0


@dataclass(frozen=True)
class AnchorFit:
    """The anchor's fitted parameters: `kind` (ANCHORS) and each series' GARCH-t fit; `left_out`: the series it
    could not be fitted on, with the reason (said once, at training)."""

    kind: str
    params: dict[str, GarchParams]
    left_out: dict[str, str] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "params": {k: dataclasses.asdict(p) for k, p in self.params.items()},
                "left_out": dict(self.left_out)}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> AnchorFit:
        return AnchorFit(d["kind"], {k: GarchParams(**p) for k, p in d["params"].items()}, dict(d["left_out"]))

    def merged(self, other: AnchorFit) -> AnchorFit:
        """This fit and `other`'s (another piece's series) together."""
        return AnchorFit(self.kind, {**self.params, **other.params}, {**self.left_out, **other.left_out})


def fit_anchor(kind: str, target: np.ndarray, sidx: np.ndarray, train: np.ndarray, names: Sequence[str]) -> AnchorFit:
    """Each series' anchor fitted on its training rows: `target` (N,) the returns, `sidx` (N,) into `names`, `train`
    (N,) the rows it may fit on (before the training cut, not a series' first bar)."""
    if kind not in ANCHORS or kind == "none":
        raise ValueError(f"no anchor to fit for {kind!r}")
    if not garch_available():  # every series would be left out: say what to install instead
        raise InputError(f"--anchor {kind} fits GARCH(1,1)-t with the arch package: pip install 'foxhunt[garch]'")
    params, left_out = {}, {}
    bounds = np.searchsorted(sidx, np.arange(len(names) + 1))  # rows are sorted by series
    for s, name in enumerate(names):  # one fit per series: a handful to a few hundred
        a, b = bounds[s], bounds[s + 1]
        rows = target[a:b][train[a:b]]
        try:
            p = fit_garch_t(rows)
        except InputError as e:
            left_out[name] = str(e).split("; ")[0]
            continue
        if not p.beta < 1.0:  # an integrated fit: its filter never forgets a shock (evaluate leaves it out too)
            left_out[name] = f"the GARCH fit has beta = {p.beta:.3f}, a variance that never reverts"
        else:
            params[name] = p
    return AnchorFit(kind, params, left_out)


def anchor_rows(fit: AnchorFit, names: Sequence[str], sidx: np.ndarray, target: np.ndarray, first: np.ndarray,
                center: np.ndarray, scale: np.ndarray, horizon: int, quantiles: Sequence[float]) -> np.ndarray:
    """(N, D * Q) float32: each row's anchor quantiles for steps 1..D, as an origin, in scaled target units.

    `target` (N,) the returns, `first` (N,) a series' first bar (no return: it enters the filter as a missing one),
    `center`, `scale` (N,) the target's scaling at each row. A series with no fit reads the standard normal
    quantiles; every value lies within ANCHOR_CLIP."""
    out = fallback(len(sidx), horizon, quantiles)  # (N, D, Q)
    bounds = np.searchsorted(sidx, np.arange(len(names) + 1))
    for s, name in enumerate(names):  # a loop over series; each series' rows at once
        p = fit.params.get(name)
        a, b = bounds[s], bounds[s + 1]
        if p is None or a == b:
            continue
        v_next = garch_next_variance(np.where(first[a:b], np.nan, target[a:b].astype(np.float64)), p)  # (n,)
        out[a:b] = scaled_quantiles(p, v_next, center[a:b], scale[a:b], horizon, quantiles)
    return out.reshape(len(sidx), horizon * len(quantiles))


def fallback(k: int, horizon: int, quantiles: Sequence[float]) -> np.ndarray:
    """(K, D, Q) float32 the standard normal quantiles: the anchor of a series with no fit. C-contiguous, so that
    `anchor_rows` reshapes it without a copy (an astype of a broadcast view keeps its strides: a 1 GB copy at 18M
    rows)."""
    out = np.empty((k, horizon, len(quantiles)), dtype=np.float32)
    out[...] = normal_quantiles(quantiles).astype(np.float32)
    return out


def scaled_quantiles(p: GarchParams, v_next: np.ndarray, center: np.ndarray, scale: np.ndarray, horizon: int,
                     quantiles: Sequence[float], t_q: np.ndarray | None = None) -> np.ndarray:
    """(K, D, Q) float32 GARCH-t's quantiles mu + sigma_{o+h} t_q for steps 1..D after origins whose next variance is
    `v_next` (K,), in the target's scaled units at those origins (`center`, `scale` (K,)), within ANCHOR_CLIP: the
    one formula of the batch rows (`anchor_rows`) and of the live state (anchor_live.py). `t_q` (Q,): the
    unit-variance Student-t quantiles of `p.nu`, when the caller keeps them (a live state asks on every bar)."""
    sigma = garch_sigma_paths(v_next, np.arange(len(v_next)), horizon, p)  # (K, D)
    if t_q is None:
        t_q = std_t_quantiles(np.asarray(quantiles, dtype=np.float64), p.nu)  # (Q,)
    # ((mu + sigma t_q) - center) / scale, taken as (mu - center) / scale + (sigma / scale) t_q one quantile at a time
    # in float64 into the float32 result: (K, D) temporaries instead of (K, D, Q) float64 ones (at 18M rows the
    # anchor took 12 of prepare's 41 CPU seconds, most of it there)
    inv = 1.0 / np.asarray(scale, np.float64)  # (K,)
    base = ((p.mu - np.asarray(center, np.float64)) * inv)[:, None]  # (K, 1)
    spread = sigma * inv[:, None]  # (K, D)
    out = np.empty((*sigma.shape, len(t_q)), dtype=np.float32)  # (K, D, Q)
    for j, t in enumerate(np.asarray(t_q, np.float64)):  # a handful of quantiles
        out[..., j] = base + spread * t
    return np.clip(out, -ANCHOR_CLIP, ANCHOR_CLIP, out=out)
