"""Scalers fitted on the training rows only, and their per-row application.

`fit_scalers` returns a `Scalers` (fitted.py, saved in the model's FittedTransform): per series, each standardized
input's mean and std, the target's center and scale and range_k; the same pooled over all training rows (for a
series unseen in training); the time-of-day profile. The options it was fitted under (the halflife, the estimator,
--vol-features, --fill-gaps, the target) are the DataConfig's: every function here that reads them takes it.
Observed features are standardized per series in both scaling modes. The trailing volatility sigma_t is a causal
EWMA (halflife `vol_halflife` bars, rows up to and including t) of a per-bar variance proxy, seeded with the
training return variance and floored at VOL_FLOOR x the train std:
- estimator "returns": the proxy is r_t^2 (RiskMetrics);
- estimator "range": the proxy is k ln(H/L)_t^2, k = mean(r^2) / mean(ln(H/L)^2) on the training rows, so sigma stays
  in return units. A bar's range carries several times the information about its variance that its close-to-close
  return does (Parkinson 1980), so the same halflife gives a far less noisy sigma, and a shorter halflife (faster
  reaction to a volatility shock, which is what GARCH's alpha buys) becomes affordable.
The target's (center, scale) per row:
- "series": constant per series: center 0 (log_return) or the train mean (log_range), scale the train std.
- "volatility", log_return: center 0, scale sigma_t, so the model forecasts in units of recent volatility.
- "volatility", log_range, estimator "returns": center EWMA mean of the range, scale its EWMA std.
- "volatility", log_range, estimator "range": center 0, scale sigma_t / sqrt(k) (the trailing RMS range): a scale
  model, because a range is positive and proportional to volatility, its shape nearly fixed (see garch_range).
With target "price_change" (prices that may be zero or negative) every "return" and "range" above is in price units
(price_change, price_range; features.PRICE_OBSERVED), so sigma_t is the trailing volatility of price changes, in price
units, and the target is centered at 0 like log_return.
The trailing volatility is also an observed input (`log_vol` = ln sigma_t, then standardized). With `vol_features`
four more inputs describe the recent shocks in units of the volatility known before them (see VOL_OBSERVED).
Intraday, with a time-of-day profile p(t) (seasonality.py, fitted on the training rows, `Scalers.season`): the
deseasonalized volatility s_t is the same EWMA of proxy / p^2 (a busy open no longer reads as a volatility shock that
takes a halflife to decay), `log_vol_season` = ln s_t is one more input, and volatility scaling uses s_t p(t), the
volatility expected for the bar's time of day.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from foxhunt.data.config import DataConfig
from foxhunt.data.features.bar_features import (
    FILL_OBSERVED,
    OBSERVED,
    PRICE_OBSERVED,
    RETURN_TARGETS,
    SEASON_OBSERVED,
    STANDARDIZED,
    VOL_OBSERVED,
    move_columns,
)
from foxhunt.data.features.fitstats import (
    KeptRows,
    Selected,
    moments_of,
    range_k,
    season_moments,
    season_profile,
    select,
    squares_of,
    stats,
)
from foxhunt.data.features.fitted import Moments, Scalers, SeriesScalers
from foxhunt.data.features.seasonality import MINUTES, minute_of_day, profile_of_minute
from foxhunt.data.util import parallel
from foxhunt.data.util.runs import value_runs

VOL_FLOOR = 0.1
FAST_SLOW = 4.0  # log_vol_fast / log_vol_slow use halflife / 4 and halflife * 4


def observed_names(scalers: Scalers, cfg: DataConfig) -> tuple[str, ...]:
    """Observed continuous inputs in batch column order for these scalers, fitted under `cfg`."""
    vol = VOL_OBSERVED if cfg.vol_features else ()
    season = SEASON_OBSERVED if scalers.season is not None else ()
    base = PRICE_OBSERVED if cfg.target == "price_change" else OBSERVED  # inputs in price units
    user = scalers.user_observed  # the user's own (inputs.fit_observed), last
    return base + vol + season + (FILL_OBSERVED if cfg.fill_gaps else ()) + user


def ewma_alpha(halflife: float) -> float:
    """The EWMA weight of the newest value for a halflife in bars; the live stream must use the same one."""
    return 1.0 - 0.5 ** (1.0 / halflife)


def seeded_ewm(x: pl.Expr, seed: pl.Expr, halflife: float) -> pl.Expr:
    """The causal EWMA every trailing input runs (y_t = (1 - a) y_t-1 + a x_t, the first row of a series holding
    `seed`), not yet windowed by series: `trailing` and the live stream's priming (data/features/bar_features_live.py) both build on it."""
    return pl.when(pl.col("first")).then(seed).otherwise(x).ewm_mean(alpha=ewma_alpha(halflife), adjust=False)


def variance_proxy(estimator: str, r: pl.Expr, x: pl.Expr, k: pl.Expr) -> pl.Expr:
    """The per-bar variance the trailing volatility averages: r^2 ("returns") or k x^2 ("range")."""
    return r**2 if estimator == "returns" else k * x**2


def ewm_range_scale(scaling: str, target: str, estimator: str) -> bool:
    """Whether the target's center and scale are EWMAs of the range (log_range under volatility scaling with the
    returns estimator) rather than a function of the trailing volatility."""
    return scaling == "volatility" and target == "log_range" and estimator == "returns"


def standardized(name: str, scalers: Scalers | None = None) -> bool:
    """Whether an observed input is standardized per series (mean, std of its training rows) before the model: one
    of foxhunt's own, or one of the user's own inputs of `scalers` (inputs.fit_observed)."""
    user = scalers.user_observed if scalers is not None else ()
    return name in STANDARDIZED or name in VOL_OBSERVED or name in SEASON_OBSERVED or name in user


def _sorted(sidx: np.ndarray) -> bool:
    """Whether the series indices never decrease (rows sorted by series: each one run)."""
    return bool(np.all(sidx[1:] >= sidx[:-1]))


def fit_scalers(feats: pl.DataFrame, names: list[str], sidx: np.ndarray, train_mask: np.ndarray, cfg: DataConfig,
                season_tz: str | None = None) -> Scalers:
    """Fit on rows where `train_mask` is true (ts before the train cut), excluding each series' first row, under
    `cfg`'s target and volatility options: the steps the stages of data/prepare take over a panel's pieces
    (`train_moments`, `first_scalers`, `trailing`, `vol_moments`, `with_vol_stats`), over the one frame `feats`.

    `names[sidx[i]]` is the series of row i (rows sorted by series, ts). `season_tz` (intraday bars only): fit the
    time-of-day volatility profile in that exchange zone (see seasonality.py); None: no profile.
    """
    keep = train_mask & ~feats["first"].to_numpy()
    kept = select(keep, sidx, len(names))  # the training rows, for both passes of sums
    mom = train_moments(feats, sidx, len(names), keep, cfg.target, season_tz, kept=kept)
    scalers = first_scalers(mom, names, cfg.target, season_tz)
    # log_vol (and the vol features) are seeded from the return std just fitted: a second pass over the same rows.
    derived = trailing(feats, names, sidx, scalers, cfg)[0]
    return with_vol_stats(scalers, cfg, vol_moments(derived, sidx, len(names), keep, scalers, cfg, kept=kept), names,
                          mom["rows"] > 0)


def train_moments(
    feats: pl.DataFrame, sidx: np.ndarray, s: int, keep: np.ndarray, target: str, season_tz: str | None,
    *, minute: np.ndarray | None = None, kept: Selected | None = None,
) -> dict[str, np.ndarray]:
    """The per-series sufficient statistics (fitstats.py) of the first fit over rows where `keep` (training rows
    but each series' first): (S,) arrays, so that those of consecutive series groups concatenate. `minute`: each
    row's minute of the day in `season_tz` (seasonality.minute_of_day), `kept`: select(keep, sidx, s), each when the
    caller has it."""
    ret, rng = move_columns(target)  # price units for price_change: its prices may be zero or negative
    kept = select(keep, sidx, s) if kept is None else kept  # the rows of every column without nulls
    mom = {"rows": kept.n}
    squares = None  # the kept rows' log_range squared and its sums, for the seasonality when it has no nulls
    for c in (ret, rng, "log_volume"):
        col = feats.get_column(c)
        x = col.to_numpy()
        sel = kept if col.null_count() == 0 else select(keep & col.is_not_null().to_numpy(), sidx, s)
        xv = x.take(sel.at)
        mom.update(moments_of(xv, sel, c))
        if c != "log_volume":
            x2 = xv**2
            mom.update(squares_of(xv, sel, c, x2))
            if c == "log_range" and sel is kept:
                squares = (x2, mom["log_range:sq"])
            del x2
    if season_tz is not None:  # the range, several times less noisy than the squared return, ignores halt gaps
        col = feats.get_column("log_range")
        mom.update(season_moments(feats["ts"].dt.epoch("ns").to_numpy(), col.to_numpy(),
                                  col.is_not_null().to_numpy(), KeptRows(keep, sidx, s, kept), season_tz, minute,
                                  squares))
    return mom


def first_scalers(mom: dict[str, np.ndarray], names: list[str], target: str, season_tz: str | None) -> Scalers:
    """The scalers of `train_moments` (all but the trailing inputs' standardization: `with_vol_stats`)."""
    ret, rng = move_columns(target)
    present = mom["rows"] > 0  # series with training rows get their own entry
    per, pooled = stats(mom, (ret, rng, "log_volume"), names, present)
    per_k, pooled_k = range_k(mom, ret, rng, names, present)

    def entry(moments: dict[str, Moments], k: float) -> SeriesScalers:
        t = moments[target]
        return SeriesScalers(moments, 0.0 if target in RETURN_TARGETS else t.mean, t.std, k)

    return Scalers({name: entry(m, per_k[name]) for name, m in per.items()}, entry(pooled, pooled_k),
                   season_profile(mom, season_tz) if season_tz is not None else None)


def vol_columns(scalers: Scalers, cfg: DataConfig) -> tuple[str, ...]:
    """The trailing inputs standardized per series: log_vol, the vol features, log_vol_season."""
    vol = VOL_OBSERVED if cfg.vol_features else ()
    return ("log_vol", *vol, *(SEASON_OBSERVED if scalers.season is not None else ()))


def vol_moments(
    derived: dict[str, np.ndarray], sidx: np.ndarray, s: int, keep: np.ndarray, scalers: Scalers, cfg: DataConfig,
    *, kept: Selected | None = None,
) -> dict[str, np.ndarray]:
    """The per-series sufficient statistics of `trailing`'s inputs (`derived`) over rows where `keep` (`kept`:
    select(keep, sidx, s), when the caller has it). The columns' sums are independent: one per thread."""
    kept = select(keep, sidx, s) if kept is None else kept
    parts = parallel.map_threads(lambda c: moments_of(derived[c].take(kept.at), kept, c), vol_columns(scalers, cfg))
    return {k: v for part in parts for k, v in part.items()}


def with_vol_stats(scalers: Scalers, cfg: DataConfig, mom: dict[str, np.ndarray], names: list[str],
                   present: np.ndarray) -> Scalers:
    """`first_scalers` completed with the trailing inputs' {mean, std} of `vol_moments`."""
    per_vol, pooled_vol = stats(mom, vol_columns(scalers, cfg), names, present)
    return scalers.with_moments(per_vol, pooled_vol)


def trailing(
    feats: pl.DataFrame, names: list[str], sidx: np.ndarray, scalers: Scalers, cfg: DataConfig,
    *, minute: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """({name: (N,)} derived inputs: log_vol and, with vol_features, VOL_OBSERVED), target center and scale (N,),
    under `cfg`'s target, scaling and volatility options.

    `minute`: each row's minute of the day in the profile's zone (seasonality.minute_of_day), when the caller has it."""
    target, scaling, estimator = cfg.target, cfg.scaling, cfg.vol_estimator
    ret, rng = move_columns(target)
    tables = {  # (S,) each series' scalars, as per-row columns of the frame the expressions run on
        "r_std": scalers.per_series(names, lambda s: s.moments[ret].std),
        "t_center": scalers.per_series(names, lambda s: s.center),
        "t_scale": scalers.per_series(names, lambda s: s.scale),
        "k": scalers.per_series(names, lambda s: s.range_k),
    }
    season = scalers.season
    if season is not None:  # the profile squared at each bar, and its root: looked up by minute, on the 1440 values
        if minute is None:
            minute = minute_of_day(feats["ts"].dt.epoch("ns").to_numpy(), season.tz)  # (N,)
        table2 = profile_of_minute(np.arange(MINUTES), season) ** 2  # (MINUTES,)
        p2 = table2[minute]
    else:
        p2 = None
    runs = _runs(sidx)
    # A handful of series, each one run: every expression runs on each series' rows (no window groups to build),
    # the series' scalars as constant columns of its rows only.
    by_run = runs is not None and 0 < len(runs) <= RUNS_SLICED

    def frame(lo: int, hi: int, i: int | None) -> pl.DataFrame:
        """Rows [lo, hi) of one series `i`, or all rows (i None) with a `g` column to group by."""
        cols = {"first": feats["first"], "r": feats[ret], "x": feats[rng], "p2": p2}
        df = pl.DataFrame({c: v[lo:hi] for c, v in cols.items() if v is not None})
        if i is not None:
            return df.with_columns(pl.Series(c, np.full(hi - lo, t[i])) for c, t in tables.items() if c in used)
        g = pl.Series("g", sidx)
        return df.with_columns(g.set_sorted() if _sorted(sidx) else g,
                               *(pl.Series(c, t[sidx]) for c, t in tables.items() if c in used))

    halflife = cfg.vol_halflife
    r_std_e, t_center_e, t_scale_e, k_e = pl.col("r_std"), pl.col("t_center"), pl.col("t_scale"), pl.col("k")

    def over(e: pl.Expr) -> pl.Expr:  # a window expression within each series
        return e if by_run else e.over("g")

    def ewm(x: pl.Expr, seed: pl.Expr, hl: float = halflife) -> pl.Expr:
        return over(seeded_ewm(x, seed, hl))

    proxy = variance_proxy(estimator, pl.col("r"), pl.col("x"), k_e)

    def sigma(hl: float) -> pl.Expr:  # trailing volatility in return units, floored
        return pl.max_horizontal(ewm(proxy, r_std_e**2, hl).sqrt(), VOL_FLOOR * r_std_e)

    vol = sigma(halflife)
    exprs = [vol.alias("vol")]
    if season is not None:  # the same EWMA on the deseasonalized proxy, floored alike
        ds = ewm(proxy / pl.col("p2"), r_std_e**2).sqrt()
        exprs += [pl.max_horizontal(ds, VOL_FLOOR * r_std_e).alias("vol_season")]
    if ewm_range_scale(scaling, target, estimator):
        x = pl.col("x")
        m = ewm(x, t_center_e)
        var = ewm(x**2, t_center_e**2 + t_scale_e**2) - m**2
        exprs += [
            m.alias("center"),
            pl.max_horizontal(var, (VOL_FLOOR * t_scale_e) ** 2).sqrt().alias("scale"),
        ]
    if cfg.vol_features:
        before = over(vol.shift(1))  # sigma known before bar t: the shock is measured against it
        before = pl.when(pl.col("first")).then(r_std_e).otherwise(before)
        exprs += [
            (pl.col("r") / before).alias("shock"),
            (k_e.sqrt() * pl.col("x") / before).alias("range_shock"),
            (sigma(halflife / FAST_SLOW) / vol).log().alias("log_vol_fast"),
            (sigma(halflife * FAST_SLOW) / vol).log().alias("log_vol_slow"),
        ]
    used = {c for e in exprs for c in e.meta.root_names()}  # the scalar columns the expressions read
    if by_run:  # each series' results written into the columns as they come: no concatenated frame to copy
        out = {e.meta.output_name(): np.empty(len(sidx)) for e in exprs}

        def run_series(run: tuple[int, int, int]) -> None:
            lo, hi, i = run
            part = frame(lo, hi, i).select(exprs)
            for c, col in out.items():
                col[lo:hi] = part[c].to_numpy()

        parallel.map_threads(run_series, runs)  # the series are independent: two threads take them (polars without the GIL)
    else:
        part = frame(0, len(sidx), None).select(exprs)
        out = {c: part[c].to_numpy() for c in part.columns}
    # Each (N,) column goes once read: at the end of the fit the most memory is in use.
    p2 = None
    sig = out.pop("vol")
    log_vol = np.log(sig)
    if season is not None:  # the volatility expected at the bar: the deseasonalized one times the profile at its time of day
        vol_season = out.pop("vol_season")
        log_vol_season = np.log(vol_season)
        del sig
        # in place where the column is this function's own (not a read-only view of polars' frame)
        sig_scale = np.multiply(vol_season, np.sqrt(table2)[minute], out=vol_season if vol_season.flags.writeable
                                else None)
    else:
        sig_scale = sig
    if scaling == "series":
        center, scale = tables["t_center"][sidx], tables["t_scale"][sidx]
    elif target in RETURN_TARGETS:  # price_change: sigma in price units, the trailing volatility of price changes
        center, scale = np.zeros(len(sidx)), sig_scale
    elif estimator == "range":
        center, scale = np.zeros(len(sidx)), sig_scale / np.sqrt(tables["k"][sidx])
    else:
        center, scale = out["center"], out["scale"]
    derived = {"log_vol": log_vol}
    if cfg.vol_features:
        derived.update({c: out[c] for c in VOL_OBSERVED})
    if season is not None:
        derived["log_vol_season"] = log_vol_season
    return derived, center, scale


def apply_scalers(
    feats: pl.DataFrame, names: list[str], sidx: np.ndarray, scalers: Scalers, cfg: DataConfig,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Observed inputs (N, len(observed_names)) float32 standardized per series, and the target center, scale (N,).

    `out`: a (N, len(observed_names)) float32 array (e.g. columns of the row tensor) to write the inputs into."""
    derived, center, scale = trailing(feats, names, sidx, scalers, cfg)
    return standardize(feats, names, sidx, scalers, cfg, derived, center, scale, out=out)


def standardize(
    feats: pl.DataFrame, names: list[str], sidx: np.ndarray, scalers: Scalers, cfg: DataConfig,
    derived: dict[str, np.ndarray], center: np.ndarray, scale: np.ndarray, out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`apply_scalers` given `trailing`'s output (`derived`, `center`, `scale`) for these scalers.

    Rows sorted by series (a run each, as prepare has them) are standardized run by run with the series' scalars:
    the same float64 operations as with per-row copies of the mean and std, without building them. All columns of
    PIECE_ROWS rows are written before the next rows: a strided column of `out` is written while in cache."""
    cols = observed_names(scalers, cfg)
    obs = np.empty((len(sidx), len(cols)), dtype=np.float32) if out is None else out  # (N, Or)
    xs = [np.asarray(derived[c] if c in derived else feats[c].to_numpy(), dtype=np.float64) for c in cols]
    scaled = [standardized(c, scalers) for c in cols]
    moments = [(scalers.per_series(names, lambda s, c=c: s.moments[c].mean),
                scalers.per_series(names, lambda s, c=c: s.moments[c].std)) if z else None
               for c, z in zip(cols, scaled, strict=True)]
    runs = _runs(sidx)
    if runs is None:  # rows not grouped by series: per-row copies of the scalars
        moments = [m if m is None else (m[0][sidx], m[1][sidx]) for m in moments]
        runs = [(0, len(sidx), None)]

    def scale_pieces(pieces: list[tuple[int, int, int | None]]) -> None:
        y = np.empty(min(len(sidx), PIECE_ROWS))  # float64 work column of a piece
        for lo, hi, i in pieces:
            yp = y[: hi - lo]
            for j, (x, m) in enumerate(zip(xs, moments, strict=True)):  # a handful of columns
                xp = x[lo:hi]
                if m is not None:
                    mean, std = (m[0][i], m[1][i]) if i is not None else (m[0][lo:hi], m[1][lo:hi])
                    np.subtract(xp, mean, out=yp)
                    np.divide(yp, std, out=yp)
                    xp = yp
                col = obs[lo:hi, j]
                col[...] = xp  # then 0 where x is NaN or infinite (np.nan_to_num's zeros, cast after)
                np.copyto(col, np.float32(0.0), where=~np.isfinite(xp))

    # The pieces are independent rows of `obs`: two threads take them PIECES_SHARED at a time.
    pieces = _pieces(runs)
    parallel.map_threads(scale_pieces, [pieces[a : a + PIECES_SHARED] for a in range(0, len(pieces), PIECES_SHARED)])
    return obs, center.astype(np.float32), scale.astype(np.float32)


RUNS_SLICED = 64  # up to this many series, each one run, the trailing EWMAs run series by series
RUNS_MAX = 4096  # more runs of equal series than this (rows not sorted by series): per-row copies instead
PIECE_ROWS = 1 << 15  # rows standardized at a time: a piece of the row tensor and the work column stay in cache
PIECES_SHARED = 4  # pieces a thread takes at a time (one work column each time)


def _runs(sidx: np.ndarray) -> list[tuple[int, int, int]] | None:
    """(start, end, series) of each run of equal `sidx` (N,), or None when there are more than RUNS_MAX."""
    return value_runs(sidx, RUNS_MAX)


def _pieces(runs: list[tuple[int, int, int | None]]) -> list[tuple[int, int, int | None]]:
    """`runs` cut into pieces of at most PIECE_ROWS rows."""
    return [(a, min(a + PIECE_ROWS, hi), i) for lo, hi, i in runs for a in range(lo, hi, PIECE_ROWS)]


def own_scalers(scalers: Scalers, cfg: DataConfig, mom: dict[str, np.ndarray], names: list[str]) -> Scalers | None:
    """The first `scalers` completed with the trailing inputs' statistics of the piece's series `names` alone (`mom`:
    their vol_moments), which are what add_vol_stats gives those series from the whole panel's: each series' mean
    and std are its own. None where a series would read pooled values, which need every piece: one without training
    rows, or a trailing input whose std is undefined or zero (fitstats.stats)."""
    cols = vol_columns(scalers, cfg)
    if not all(n in scalers.series for n in names):
        return None
    for c in cols:
        n, m2 = mom[f"{c}:n"], mom[f"{c}:m2"]
        with np.errstate(divide="ignore", invalid="ignore"):
            std = np.sqrt(m2 / (n - 1))
        if not np.all((n > 1) & np.isfinite(std) & (std > 0)):
            return None
    per, _ = stats(mom, cols, names, np.ones(len(names), dtype=bool))
    return scalers.with_moments(per)
