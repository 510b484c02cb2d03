"""The baselines on prepared data: fitted and forecast one series at a time, from the data alone.

A series' inputs are its target and its contracts' own moves (`PreparedData.own_moves`: each contract's own log
range, and returns for a range target, computed as the model's features are: adjusted closes would carry later roll
gaps). Rows are sorted by series, then time, so a series' rows are one slice, read (a feature store's pages) a
series at a time. The baselines' arithmetic is data/baselines/forecasts.py's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from foxhunt.data.bars.grid import future_timestamps
from foxhunt.data.baselines.forecasts import (
    BASELINES,
    INTRADAY_ONLY,
    BaselineSeries,
    baseline_forecasts,
    garch_available,
)
from foxhunt.data.baselines.har import day_bars
from foxhunt.data.dataset.fit_rows import FitRows, fit_cut, series_rows
from foxhunt.data.dataset.types import FittedTransform, PreparedData
from foxhunt.data.features.seasonality import fit_profile, profile_at
from foxhunt.errors import InputError
from foxhunt.evaluate.scored_rows import Scored

log = logging.getLogger("foxhunt.evaluate")

def expected_baselines(intraday: bool) -> dict[str, str | None]:
    """The baselines this data calls for, each with the reason it cannot be scored here (None: it can)."""
    out: dict[str, str | None] = {}
    for k in BASELINES:
        if k in INTRADAY_ONLY and not intraday:
            continue
        if k == "garch_t" and not garch_available():
            out[k] = "the arch package is not installed: pip install 'foxhunt[garch]'"
        else:
            out[k] = None
    return out


def usable_baselines(data: PreparedData, only: Collection[str] | None = None) -> list[str]:
    """The baselines (of `only` when given) that can be scored on `data`; each one that cannot is said once."""
    expected = expected_baselines(data.transform.intraday)
    for k, why in expected.items():
        if why is not None and (only is None or k in only):
            log.warning("baseline %s left out: %s", k, why)
    return [k for k, why in expected.items() if why is None and (only is None or k in only)]


@dataclass(frozen=True)
class SeriesInputs(FitRows):
    """What the baselines of one series read: its rows and fitting bars (data/dataset/fit_rows.py) and its
    contracts' own moves on those rows."""

    own: dict[str, np.ndarray]  # own move column -> (n,) float64


def series_inputs(data: PreparedData, s: int, cut: int) -> tuple[SeriesInputs | None, str | None]:
    """Series `s`'s inputs, fitted on rows before `cut` (ns); (None, why) (said) when fewer than 2 rows are."""
    rows, why = series_rows(data, s, cut)
    if rows is None:
        log.warning("series %s: %s; its baselines are left out", data.windows.series_names[s], why)
        return None, why
    own = {c: v[rows.row0 : rows.row0 + len(rows.target)].astype(np.float64) for c, v in data.own_moves.items()}
    if "log_return" in own:
        own["log_return"][0] = np.nan  # a series' first bar has no return
    return SeriesInputs(**vars(rows), own=own), None


def series_forecasts(kind: str, data: PreparedData, inputs: SeriesInputs, scored: Scored,
                     quantiles: tuple[float, ...]) -> tuple[np.ndarray, str | None]:
    """Baseline `kind`'s (K, D, Q) forecasts at the origins of `scored` (all of series `inputs`); NaN, and why (said),
    where it cannot be fitted on this series."""
    w, tf = data.windows, data.transform
    profile = None
    if kind == "seasonal_rolling_vol" or (kind == "har" and tf.intraday):
        profile = _season(inputs.own["log_range"], inputs.ts, inputs.train_mask, scored.origin_ns, w.horizon, tf)
    try:
        series = BaselineSeries(data.schema.target, inputs.target, inputs.train_mask, inputs.own.get("log_return"),
                                day_bars(tf.bar_spacing_ns, tf.intraday))
        return baseline_forecasts(kind, series, origins=scored.origin_row - inputs.row0, horizon=w.horizon,
                                  quantiles=quantiles, profile=profile), None
    except (InputError, ValueError) as e:
        log.warning("series %s: baseline %s left out (%s)", inputs.name, kind, e)
        return np.full((len(scored), w.horizon, len(quantiles)), np.nan), _first_clause(str(e))


def baselines(data: PreparedData, scored: Scored, cut: int, quantiles: tuple[float, ...],
              only: Collection[str] | None = None) -> tuple[dict[str, np.ndarray], dict[str, dict[str, str]]]:
    """Each baseline's (K, D, Q) on the scored origins, all at once (of `only` when given), fitted per series on
    rows before `cut` (ns), those with no finite forecast left out; and for each baseline, the series it could not
    forecast with the reason."""
    kinds = usable_baselines(data, only)
    out = {k: np.full((*scored.actual.shape, len(quantiles)), np.nan) for k in kinds}
    why: dict[str, dict[str, str]] = {k: {} for k in kinds}
    names = data.windows.series_names
    for s in range(len(names)):  # a handful of series
        pick = np.flatnonzero(scored.series == s)
        if not len(pick):
            continue
        inputs, none = series_inputs(data, s, cut)
        for k in kinds:
            if inputs is None:
                why[k][names[s]] = str(none)
                continue
            out[k][pick], reason = series_forecasts(k, data, inputs, scored.subset(pick), quantiles)
            if reason is not None:
                why[k][names[s]] = reason
    return {k: v for k, v in out.items() if np.isfinite(v).any()}, why


def _season(log_range: np.ndarray, ts: np.ndarray, train_mask: np.ndarray, origin_ns: np.ndarray, horizon: int,
            tf: FittedTransform) -> tuple[np.ndarray, np.ndarray] | None:
    """The seasonal baseline's time-of-day profile, fitted like the model's (seasonality.py) on this series' rows
    before the baseline cut, at each row (n,) and at each origin's forecast-step grid times (K, H)."""
    x2 = log_range**2
    fit = train_mask & np.isfinite(x2)
    if not fit.any() or not x2[fit].mean() > 0:
        return None
    season = fit_profile(ts, x2 / x2[fit].mean(), fit, tf.exchange_tz)
    grid = future_timestamps(origin_ns, tf.bar_spacing_ns, horizon, True, tf.exchange_tz, tf.grid)  # (K, H)
    return profile_at(ts, season), profile_at(grid, season)


def baseline_cut(model_dir: Path, first_forecast_ns: int) -> int:
    """`fit_cut` with the training cut saved in the run directory (data_summary.json)."""
    summary = Path(model_dir) / "data_summary.json"
    train_end = json.loads(summary.read_text()).get("train_end") if summary.exists() else None
    return fit_cut(train_end, first_forecast_ns)


def _first_clause(text: str) -> str:
    """An error's first clause, without its advice: "only 37 finite training returns ... (need >= 100)"."""
    line = text.splitlines()[0] if text else "it could not be fitted"
    return line.split("; ")[0]
