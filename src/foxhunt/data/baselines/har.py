"""HAR (Corsi 2009), the heterogeneous autoregressive model: the baseline every volatility forecaster is compared to.

Volatility is forecast from its own averages over a day, a week and a month, because traders who rebalance at those
horizons each leave their mark on it; the regression is linear and fitted by least squares on the training rows.
Here, for each forecast step h = 1..H, one direct regression

    x[t + h] = b0 + b1 avg_1(x)[t] + b2 avg_D(x)[t] + b3 avg_5D(x)[t] + b4 avg_22D(x)[t]

where avg_w(x)[t] is the mean of the finite x among rows t-w+1..t (so an origin uses rows <= origin only) and D is
the number of bars in a day: 1 for daily bars, which leaves Corsi's own three averages (the bar is the day); a day
of the bar interval for intraday bars, whose last bar then enters as a fourth average. x is the volatility measure:
    - target "log_range": the range itself, x = log_range / p;
    - returns ("log_return", "price_change"): the squared move, x = (r / p)^2, Corsi's realised variance per bar;
where p is the time-of-day profile for intraday bars (data/features/seasonality.py; p = 1 for daily bars), so the
regression runs on the deseasonalized measure and the forecast is multiplied back by p at the forecast step's grid
time. The forecast scale s[o, h] is p * f (range) or p * sqrt(f) (returns), f the regression's value floored at
FLOOR of the measure's training mean (least squares may dip below zero where volatility falls fast).

Quantiles come from the training rows as for garch_range (baselines.py): the empirical quantiles of the ratio
actual / s over training origins, per step, so the shape of the distribution (skewed ranges, fat-tailed returns)
is the data's, not an assumption. Parameters are fitted once, on the training rows, and never refitted.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from foxhunt.data.util.clock import DAY_NS
from foxhunt.errors import InputError

WEEK, MONTH = 5, 22  # trading days in Corsi's weekly and monthly averages
MIN_HAR_ROWS = 50  # fewer training rows with a next value cannot pin down the regression's 4-5 coefficients
FLOOR = 0.01  # the lowest forecast, as a fraction of the measure's training mean


def day_bars(spacing_ns: int, intraday: bool) -> int:
    """D, the bars in a day: 1 for daily bars; a day of the bar interval for intraday bars (1,440 minute bars)."""
    return max(1, round(DAY_NS / spacing_ns)) if intraday and spacing_ns > 0 else 1


def windows(day: int) -> tuple[int, ...]:
    """The averaging windows in bars: the bar, the day, the week and the month, without repeats (daily bars: 1, 5,
    22)."""
    return tuple(sorted({1, day, WEEK * day, MONTH * day}))


def har_regressors(x: np.ndarray, day: int) -> np.ndarray:
    """(n, 1 + A) the constant and the trailing averages avg_w(x)[t] for each window w of `windows(day)`: the mean
    of the finite values among rows t-w+1..t (fewer rows at the series' start); NaN where there are none."""
    finite = np.isfinite(x)
    c0 = np.concatenate([[0], np.cumsum(finite)])  # (n + 1,) prefix counts
    c1 = np.concatenate([[0.0], np.cumsum(np.where(finite, x, 0.0))])  # (n + 1,) prefix sums
    hi = np.arange(1, x.size + 1)
    cols = [np.ones(x.size)]
    for w in windows(day):  # a few windows, not rows
        lo = np.maximum(hi - w, 0)
        cnt = c0[hi] - c0[lo]
        with np.errstate(invalid="ignore", divide="ignore"):
            cols.append(np.where(cnt > 0, (c1[hi] - c1[lo]) / cnt, np.nan))
    return np.stack(cols, axis=1)


def har(
    target: np.ndarray,
    train_mask: np.ndarray,
    origins: np.ndarray,
    horizon: int,
    quantiles: Sequence[float] | np.ndarray,
    *,
    volatility_target: bool,
    day: int = 1,
    profile: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """HAR quantiles at `origins` (K,) for steps 1..H, (K, H, Q), fitted on the rows of `train_mask` (n,).

    `volatility_target`: the target is a range (x = target / p), else a move (x = (target / p)^2). `profile`: the
    time-of-day profile at each row (n,) and at each origin's forecast steps (K, H) (intraday bars), else None (p =
    1). Rows t of a training origin have t + h a training row with a finite target, as in garch_range."""
    y = np.asarray(target, dtype=np.float64)
    train = np.asarray(train_mask, dtype=bool) & np.isfinite(y)
    o = np.asarray(origins, dtype=np.int64)
    p_rows, p_steps = (np.ones(y.size), np.ones((o.size, horizon))) if profile is None else profile
    x = y / p_rows if volatility_target else (y / p_rows) ** 2  # (n,) the deseasonalized measure
    regs = har_regressors(x, day)  # (n, 1 + A)
    floor = FLOOR * float(np.mean(x[train])) if train.any() else 0.0
    rows = np.flatnonzero(train)  # training origins t
    step_rows = rows[:, None] + np.arange(1, horizon + 1)  # (Kt, H) the rows t + h
    inside = step_rows < y.size
    step_rows = np.minimum(step_rows, y.size - 1)
    usable = inside & train[step_rows] & np.isfinite(regs[rows]).all(axis=1)[:, None]  # (Kt, H)
    qs = np.asarray(quantiles, dtype=np.float64)
    out = np.empty((o.size, horizon, qs.size))
    for h in range(horizon):  # a regression per step, not per row
        fit = rows[usable[:, h]]
        if fit.size < MIN_HAR_ROWS:
            raise InputError(f"HAR baseline: only {fit.size} training bars with a next value at step {h + 1} "
                             f"(need >= {MIN_HAR_ROWS}); use a longer training period or leave this baseline out")
        coef, *_ = np.linalg.lstsq(regs[fit], x[fit + h + 1], rcond=None)  # (1 + A,)
        train_scale = _scale(regs[fit] @ coef, floor, p_rows[fit + h + 1], volatility_target)  # (Kt_h,)
        ratio = y[fit + h + 1] / train_scale
        mult = np.quantile(ratio[np.isfinite(ratio)], qs)  # (Q,)
        scale = _scale(regs[o] @ coef, floor, p_steps[:, h], volatility_target)  # (K,)
        out[:, h] = scale[:, None] * mult
    return out


def _scale(f: np.ndarray, floor: float, p: np.ndarray, volatility_target: bool) -> np.ndarray:
    """The forecast scale from the regression's value `f`: p * f for a range, p * sqrt(f) for a move's variance."""
    f = np.maximum(f, floor)
    return p * (f if volatility_target else np.sqrt(f))
