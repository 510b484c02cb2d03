"""The anchor one bar at a time: what `Forecaster.update` adds to the model's correction.

The batch form (anchor.py) filters each series' GARCH variance through its whole history; the filter is the
recursion v_t = omega + alpha (r_t - mu)^2 + beta v_{t-1}, so the state after a bar is one number per series, and the
next bar's anchor follows from it in O(1) with the same formula (`anchor.scaled_quantiles`). `prime` starts it from
a history (the batch filter's last value); `step` advances it by one return per series. Tests hold it to the batch
rows on the same history (tests/data/baselines/test_anchor_live.py).

Legend: S series in the state, B series in one step, D forecast steps, Q quantiles.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from foxhunt.data.baselines.anchor import AnchorFit, fallback, scaled_quantiles
from foxhunt.data.baselines.forecasts import garch_next_variance, std_t_quantiles


class LiveAnchor:
    """Each series' next-bar GARCH variance after its last bar, by the row of the feature stream (StreamState)."""

    def __init__(self, fit: AnchorFit, horizon: int, quantiles: Sequence[float]):
        self.fit, self.d, self.q = fit, horizon, tuple(quantiles)
        self.v: dict[str, float] = {}  # series -> v_next after its last bar (series with a fit only)
        # each fitted series' unit-variance Student-t quantiles (Q,), made once: scipy's ppf costs ~0.1 ms a call
        self.t_q = {name: std_t_quantiles(np.asarray(self.q, np.float64), p.nu) for name, p in fit.params.items()}

    def prime(self, name: str, returns: np.ndarray) -> None:
        """(Re)start series `name` from its history of returns (n,), NaN where a bar has none (its first)."""
        p = self.fit.params.get(name)
        if p is not None and len(returns):
            self.v[name] = float(garch_next_variance(np.asarray(returns, np.float64), p)[-1])

    def step(self, name: str, ret: float, first: bool) -> None:
        """Advance series `name` by one bar's return `ret` (none on its first bar: the filter's missing-return rule)."""
        p = self.fit.params.get(name)
        if p is None:
            return
        if first or name not in self.v:
            self.v[name] = float(garch_next_variance(np.array([np.nan if first else ret]), p)[-1])
            return
        # the recursion's one step from the last value (garch_next_variance's, on a finite return), in floats
        self.v[name] = p.omega + p.alpha * (ret - p.mu) ** 2 + p.beta * self.v[name]

    def at(self, names: Sequence[str], center: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """(B, D, Q) float32 the anchor of series `names` at their last bar, in the scaled units of `center`,
        `scale` (B,) (the stream's target scaling at that bar)."""
        out = fallback(len(names), self.d, self.q)
        for i, name in enumerate(names):  # the series of one update: a handful
            p = self.fit.params.get(name)
            if p is not None and name in self.v:
                out[i] = scaled_quantiles(p, np.array([self.v[name]]), center[i:i + 1], scale[i:i + 1], self.d,
                                          self.q, self.t_q[name])[0]
        return out

