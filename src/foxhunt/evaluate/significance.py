"""Is a difference in pinball loss more than noise? The Diebold-Mariano test of equal loss (Diebold and Mariano 1995),
per quantile, for the model against one baseline, per series and pooled over the panel.

The loss differential of an origin is the model's pinball loss minus the baseline's, averaged over the forecast steps
that have a realised target (negative: the model's loss is lower). H0: its mean is 0. The statistic is the mean over
T periods divided by its standard error, with the long-run variance of Newey and West (1987):

    lrv = g_0 + 2 sum_{k=1..L} (1 - k / (L + 1)) g_k,   g_k = sum_t e_t e_{t-k} / T,   e = d - mean(d)
    stat = mean(d) / sqrt(lrv / (T - 1))

- HAC, not the plain variance: forecasts of D steps made at consecutive origins share D - 1 realised targets, so the
  differentials are autocorrelated up to lag D - 1 even under H0, and beyond it by the persistence of volatility in
  the losses.
- The Bartlett kernel (the weights 1 - k / (L + 1)) keeps the variance positive, which the original test's flat
  weights over D - 1 lags do not.
- The lag L = max(D - 1, floor(4 (T / 100)^(2/9))) (`bandwidth`): the overlap sets the floor, and the usual
  Newey-West rule, which grows with T, covers the volatility persistence; on 250 daily origins of 5 steps it is 4, on
  2,500 it is 8. Capped at T - 1.
- Small samples: the variance is taken over T - 1 (the degrees-of-freedom factor T / (T - 1)) and the statistic is
  compared with Student's t with T - 1 degrees of freedom, the part of the Harvey, Leybourne and Newbold (1997)
  correction that carries over to a Bartlett variance. Their factor sqrt((T + 1 - 2D + D (D - 1) / T) / T) is not
  applied: it was derived for the flat-weight variance with D - 1 lags, and with the Bartlett weights and a longer
  lag it would correct a bias this variance does not have. The p-value is the same as statsmodels' OLS of d on a
  constant with cov_type="HAC", maxlags=L, use_correction=True, use_t=True (tested).
- Two-sided at ALPHA = 5%: "better" needs p < 0.05 and a negative mean, "worse" p < 0.05 and a positive one, anything
  else is "level".
- Differentials at the level of float rounding are not tested (`equal`, "level"): a model that reproduces a baseline
  (an anchored model that kept its untrained epoch IS GARCH-t's forecast, computed in float32) differs from it by a
  few float32 units in the last place, and those differ in one direction often enough to reject at any T. ROUNDING
  says where that level ends.

Pooled over a panel, the series are not independent (markets move together), so stacking every series' differentials
as one sample would overstate the evidence. `PooledDifferentials` sums the differentials of all series per origin
time and tests that one time series with the same HAC variance: the cross-sectional dependence at each time is inside
each term. Each term is divided by the panel's mean number of series per time, so the statistic's mean is the mean
differential over all origins (each origin weighed once, as q-risk weighs it, so the test's sign is the skill's);
in a balanced panel each term is exactly the cross-sectional mean. Memory: (Q + 1) float64 and one int64 per distinct
origin time, 40 bytes at Q = 3 (2 MB for 50,000 daily or hourly times, 160 MB for a panel of 4M distinct minutes),
never per origin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

ALPHA = 0.05  # two-sided level of every verdict
# Loss differentials this small are float rounding, not evidence: the mean absolute differential (not the mean, which
# cancels) in q-risk units, 2 mean|d| / mean|y|, at or below ROUNDING makes two forecasts equal. Why this size: the
# model's forecasts are float32 (the network computes them, forecasts.parquet stores them), the baselines' float64; a
# float32 value is off by up to FLOAT32_EPS / 2 = 6e-8 of itself per rounding. The pinball loss moves by at most
# max(q, 1 - q) <= 1 times a forecast's move, and forecasts are within a few times the target's mean size (a normal
# p99 is 2.9 mean|y|), so forecasts 16 units in the last place apart on values 4 mean|y| large differ by at most
# 2 * 16 * 4 * FLOAT32_EPS = 128 FLOAT32_EPS = 1.5e-5 in q-risk units. An anchored model that kept GARCH-t's forecast
# measures 0.6 FLOAT32_EPS (forecasts up to 3 ulps apart, S&P 500, 2017). Real comparisons are far above it: the
# smallest of the quality benchmark's model-against-model pairs (benchmarks/versus.py, seeds 0-2 of five variants
# against the defaults) is 1.4e-4 at p50 and 1.6e-3 at p10 / p90, where its 0.1% margins are tested as they were.
# Since |mean d| <= mean|d|, two forecasts called equal have q-risks within about ROUNDING of each other (a skill
# under 0.003% at a q-risk of 0.5).
FLOAT32_EPS = float(np.finfo(np.float32).eps)  # 2^-23 = 1.19e-7
ROUNDING = 128 * FLOAT32_EPS


def bandwidth(periods: int, horizon: int) -> int:
    """The Newey-West lag for `periods` differentials of `horizon`-step forecasts (see the module doc)."""
    rule = int(4 * (max(periods, 1) / 100) ** (2 / 9))
    return max(0, min(max(horizon - 1, rule), periods - 1))


@dataclass(frozen=True)
class DMTest:
    """One Diebold-Mariano test: `mean` loss differential (model - baseline, < 0: the model's loss is lower), the
    statistic and two-sided p-value (None when T < 2, the differentials are constant or the forecasts are `equal`),
    T and the lag used; `equal`: the losses differ by float rounding alone (ROUNDING), so nothing was tested."""

    mean: float | None
    stat: float | None
    p_value: float | None
    periods: int
    lag: int
    equal: bool = False

    @property
    def outcome(self) -> str:
        """"better" / "worse" (significant at ALPHA for / against the model), "level" (not significant, or equal
        forecasts), or "none" (no test)."""
        if self.equal:
            return "level"
        if self.p_value is None or self.mean is None:
            return "none"
        if self.p_value >= ALPHA:
            return "level"
        return "better" if self.mean < 0 else "worse"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "outcome": self.outcome}


def equal_to_rounding(d: np.ndarray, mean_abs_y: float) -> np.ndarray:
    """(Q,) whether the differentials `d` (T, Q) are float rounding: 2 mean|d| / mean|y| <= ROUNDING (see there);
    `mean_abs_y` is the mean |actual| over the compared (origin, step) pairs, q-risk's denominator."""
    return 2.0 * np.abs(d).mean(axis=0) <= ROUNDING * mean_abs_y


def dm_tests(d: np.ndarray, horizon: int, mean_abs_y: float) -> list[DMTest]:
    """One test per column of the differentials `d` (T, Q), in time order, all columns at once; `mean_abs_y`: the
    mean |actual| over the pairs they come from (for `equal_to_rounding`)."""
    from scipy.stats import t as student

    d = np.asarray(d, dtype=np.float64)  # (T, Q)
    T, n_q = d.shape
    lag = bandwidth(T, horizon)
    if T == 0:
        return [DMTest(None, None, None, 0, lag)] * n_q
    mean = d.mean(axis=0)  # (Q,)
    equal = equal_to_rounding(d, mean_abs_y)  # (Q,)
    if T < 2:
        return [DMTest(float(m), None, None, T, lag, bool(eq)) for m, eq in zip(mean, equal, strict=True)]
    e = d - mean  # (T, Q)
    lrv = (e * e).sum(axis=0) / T  # (Q,) g_0
    for k in range(1, lag + 1):  # a few dozen lags at most, each a vector product over T
        lrv += 2.0 * (1.0 - k / (lag + 1)) * (e[k:] * e[:-k]).sum(axis=0) / T
    out = []
    for m, v, eq in zip(mean, lrv, equal, strict=True):
        se = np.sqrt(v / (T - 1)) if v > 0 else 0.0
        scale = max(abs(float(m)), float(np.abs(d).max()), 1e-300)
        if eq or not se > 1e-12 * scale:  # equal forecasts, or constant differentials: nothing to test
            out.append(DMTest(float(m), None, None, T, lag, bool(eq)))
            continue
        stat = float(m / se)
        out.append(DMTest(float(m), stat, float(2.0 * student.sf(abs(stat), T - 1)), T, lag))
    return out


class PooledDifferentials:
    """The panel's differentials summed per origin time, fed a series at a time (see the module doc for why and
    what it costs)."""

    def __init__(self, n_quantiles: int):
        self.times = np.empty(0, dtype=np.int64)  # (T,) sorted distinct origin times, ns
        self.sums = np.empty((0, n_quantiles))  # (T, Q)
        self.counts = np.empty(0, dtype=np.int64)  # (T,) series with a differential at that time

    def add(self, times: np.ndarray, d: np.ndarray) -> None:
        """One series' differentials `d` (K, Q) at its origin times (K,) ns."""
        if len(times) == 0:
            return
        t = np.concatenate([self.times, np.asarray(times, dtype=np.int64)])
        u, where = np.unique(t, return_inverse=True)
        n_q = self.sums.shape[1]
        w = np.concatenate([self.sums, np.asarray(d, dtype=np.float64)])  # (T + K, Q)
        idx = (where[:, None] * n_q + np.arange(n_q)).ravel()
        self.sums = np.bincount(idx, weights=w.ravel(), minlength=len(u) * n_q).reshape(len(u), n_q)
        self.counts = np.bincount(where, weights=np.concatenate([self.counts, np.ones(len(times), np.int64)]),
                                  minlength=len(u)).astype(np.int64)
        self.times = u

    def tests(self, horizon: int, mean_abs_y: float) -> list[DMTest]:
        """The pooled test per quantile: the per-time sums over the mean number of series per time; `mean_abs_y`:
        the mean |actual| over every pair of the panel."""
        if len(self.times) == 0:
            return dm_tests(self.sums, horizon, mean_abs_y)
        mean_count = self.counts.sum() / len(self.counts)
        return dm_tests(self.sums / mean_count, horizon, mean_abs_y)
