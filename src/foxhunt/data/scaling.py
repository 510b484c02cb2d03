"""Scalers fitted on the training rows only, and their per-row application.

`fit_scalers` returns plain JSON-able values (saved in the model's FittedTransform):
    {"halflife": float, "estimator": "returns" | "range", "vol_features": bool, "fill_gaps": bool,
     "series": {name: {feature: {"mean", "std"}, ..., "target": {"center", "scale"}, "range_k": {"value"}}},
     "pooled": {same, over all training rows}}     # fallback for a series unseen in training
Observed features are standardized per series in both scaling modes. The trailing volatility sigma_t is a causal
EWMA (halflife `halflife` bars, rows up to and including t) of a per-bar variance proxy, seeded with the training
return variance and floored at VOL_FLOOR x the train std:
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
units, and the target is centered at 0 like log_return; scalers then carry "units": "price".
The trailing volatility is also an observed input (`log_vol` = ln sigma_t, then standardized). With `vol_features`
four more inputs describe the recent shocks in units of the volatility known before them (see VOL_OBSERVED).
Intraday, with a time-of-day profile p(t) (seasonality.py, fitted on the training rows, saved as "season"): the
deseasonalized volatility s_t is the same EWMA of proxy / p^2 (a busy open no longer reads as a volatility shock that
takes a halflife to decay), `log_vol_season` = ln s_t is one more input, and volatility scaling uses s_t p(t), the
volatility expected for the bar's time of day.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from foxhunt.data.features import (
    FILL_OBSERVED,
    OBSERVED,
    PRICE_OBSERVED,
    RETURN_TARGETS,
    SEASON_OBSERVED,
    STANDARDIZED,
    VOL_OBSERVED,
    move_columns,
)
from foxhunt.data.seasonality import fit_profile, profile_at

VOL_HALFLIFE = 20.0
VOL_FLOOR = 0.1
ESTIMATORS = ("returns", "range")
FAST_SLOW = 4.0  # log_vol_fast / log_vol_slow use halflife / 4 and halflife * 4


def observed_names(scalers: dict) -> tuple[str, ...]:
    """Observed continuous inputs in batch column order for these scalers."""
    vol = VOL_OBSERVED if scalers.get("vol_features", False) else ()
    season = SEASON_OBSERVED if scalers.get("season") else ()
    base = PRICE_OBSERVED if scalers.get("units") == "price" else OBSERVED
    return base + vol + season + (FILL_OBSERVED if scalers.get("fill_gaps", False) else ())


def _alpha(halflife: float) -> float:
    return 1.0 - 0.5 ** (1.0 / halflife)


def _safe(x: float | None, default: float) -> float:
    return float(x) if x is not None and np.isfinite(x) and x > 0 else default


def _stats(train: pl.DataFrame, cols: tuple[str, ...], names: list[str]) -> tuple[dict, dict]:
    """Per-series and pooled {mean, std} of `cols` (`train`'s column "series" holds the index into `names`). Where a series' std is undefined or zero (one training row, a
    constant column) the pooled value is used, and 1 where that is undefined too."""
    aggs = [a for c in cols for a in (pl.col(c).mean().alias(f"{c}:mean"), pl.col(c).std().alias(f"{c}:std"))]

    def pack(row: dict, std_fallback: dict[str, float]) -> dict:
        return {
            c: {"mean": float(row[f"{c}:mean"] or 0.0), "std": _safe(row[f"{c}:std"], std_fallback[c])}
            for c in cols
        }

    pooled = pack(train.select(aggs).row(0, named=True), dict.fromkeys(cols, 1.0))
    pooled_std = {c: pooled[c]["std"] for c in cols}
    per = {names[r["series"]]: pack(r, pooled_std) for r in train.group_by("series").agg(aggs).iter_rows(named=True)}
    return per, pooled


def _range_k(train: pl.DataFrame, names: list[str], ret: str = "log_return", rng: str = "log_range"
             ) -> tuple[dict, float]:
    """k = mean(r^2) / mean(range^2) per series and pooled (1 where undefined): range^2 in return-variance units."""
    ratio = (pl.col(ret) ** 2).mean() / (pl.col(rng) ** 2).mean()
    pooled = _safe(train.select(ratio.alias("k")).item(), 1.0)
    per = {
        names[r["series"]]: _safe(r["k"], pooled)
        for r in train.group_by("series").agg(ratio.alias("k")).iter_rows(named=True)
    }
    return per, pooled


def _per_row(scalers: dict, names: list[str], sidx: np.ndarray, key: str, field: str) -> np.ndarray:
    """(N,) value scalers[series][key][field] of each row's series (pooled for a series unseen in training)."""
    table = np.array(
        [scalers["series"].get(n, scalers["pooled"])[key][field] for n in names], dtype=np.float64
    )
    return table[sidx]


def fit_scalers(
    feats: pl.DataFrame,
    names: list[str],
    sidx: np.ndarray,
    train_mask: np.ndarray,
    target: str,
    halflife: float = VOL_HALFLIFE,
    estimator: str = "returns",
    vol_features: bool = False,
    fill_gaps: bool = False,
    season_tz: str | None = None,
) -> dict:
    """Fit on rows where `train_mask` is true (ts before the train cut), excluding each series' first row.

    `names[sidx[i]]` is the series of row i (rows sorted by series, ts). `season_tz` (intraday bars only): fit the
    time-of-day volatility profile in that exchange zone (see seasonality.py); None: no profile.
    """
    return fit_and_trail(
        feats, names, sidx, train_mask, target, "series", halflife, estimator, vol_features, fill_gaps, season_tz
    )[0]


def fit_and_trail(
    feats: pl.DataFrame,
    names: list[str],
    sidx: np.ndarray,
    train_mask: np.ndarray,
    target: str,
    scaling: str,
    halflife: float = VOL_HALFLIFE,
    estimator: str = "returns",
    vol_features: bool = False,
    fill_gaps: bool = False,
    season_tz: str | None = None,
) -> tuple[dict, tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]]:
    """`fit_scalers`, and `trailing`'s output under `scaling` for these scalers: fitting needs the trailing inputs
    (their standardization) and applying needs them again, the same values, so `standardize` takes them from here
    rather than running the EWMAs a second time."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"volatility estimator {estimator!r} is not one of {', '.join(ESTIMATORS)}")
    keep = pl.Series(train_mask & ~feats["first"].to_numpy())
    ret, rng = move_columns(target)  # price units for price_change: its prices may be zero or negative
    # Grouped by the series' index: integer keys, where the names would be hashed row by row.
    train = feats.select(ret, rng, "log_volume").with_columns(series=pl.Series(sidx)).filter(keep)
    per, pooled = _stats(train, (ret, rng, "log_volume"), names)
    per_k, pooled_k = _range_k(train, names, ret, rng)
    scalers = {
        "halflife": float(halflife),
        "estimator": estimator,
        "vol_features": bool(vol_features),
        "fill_gaps": bool(fill_gaps),
        **({"units": "price"} if target == "price_change" else {}),  # inputs in price units (PRICE_OBSERVED)
        "series": per,
        "pooled": pooled,
    }
    for name, entry in per.items():
        entry["range_k"] = {"value": per_k[name]}
    pooled["range_k"] = {"value": pooled_k}
    for entry in (*per.values(), pooled):
        t = entry[target]
        entry["target"] = {"center": 0.0 if target in RETURN_TARGETS else t["mean"], "scale": t["std"]}
    if season_tz is not None:
        scalers["season"] = _fit_season(feats, train, names, sidx, keep.to_numpy(), season_tz)
    # log_vol (and the vol features) are seeded from the return std just fitted: a second pass over the same rows.
    vol_cols = ("log_vol", *(VOL_OBSERVED if vol_features else ()), *(SEASON_OBSERVED if season_tz else ()))
    trail = trailing(feats, names, sidx, scalers, target, scaling)
    frame = pl.DataFrame({"series": sidx, **{c: trail[0][c] for c in vol_cols}}).filter(keep)
    per_vol, pooled_vol = _stats(frame, vol_cols, names)
    for name, entry in per.items():
        entry.update(per_vol[name])
    pooled.update(pooled_vol)
    return scalers, trail


def _fit_season(
    feats: pl.DataFrame, train: pl.DataFrame, names: list[str], sidx: np.ndarray, keep: np.ndarray, tz: str
) -> dict:
    """The time-of-day profile from the squared range of each training bar in units of its series' training mean
    (the range: several times less noisy than the squared return, and it ignores the gaps across halts)."""
    ms = train.group_by("series").agg((pl.col("log_range") ** 2).mean().alias("m"))
    mean = {names[i]: m for i, m in zip(ms["series"].to_list(), ms["m"].to_list(), strict=True)}
    per_row = np.array([_safe(mean.get(n), 1.0) for n in names])[sidx]  # (N,)
    proxy = feats["log_range"].to_numpy() ** 2 / per_row
    return fit_profile(feats["ts"].dt.epoch("ns").to_numpy(), proxy, keep, tz)


def trailing(
    feats: pl.DataFrame, names: list[str], sidx: np.ndarray, scalers: dict, target: str, scaling: str
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """({name: (N,)} derived inputs: log_vol and, with vol_features, VOL_OBSERVED), target center and scale (N,)."""
    estimator = scalers.get("estimator", "returns")
    ret, rng = move_columns(target)
    r_std = _per_row(scalers, names, sidx, ret, "std")
    t_center = _per_row(scalers, names, sidx, "target", "center")
    t_scale = _per_row(scalers, names, sidx, "target", "scale")
    # Older models have no range_k; they use the "returns" estimator and no vol features, so 1 is never read.
    k = (
        _per_row(scalers, names, sidx, "range_k", "value")
        if "range_k" in scalers["pooled"]
        else np.ones(len(sidx))
    )
    df = pl.DataFrame(
        {
            "g": sidx,
            "first": feats["first"],
            "r": feats[ret],
            "x": feats[rng],
            "r_std": r_std,
            "t_center": t_center,
            "t_scale": t_scale,
            "k": k,
        }
    )
    season = scalers.get("season")
    if season:
        df = df.with_columns(pl.Series("p2", profile_at(feats["ts"].dt.epoch("ns").to_numpy(), season) ** 2))
    halflife = scalers["halflife"]
    r_std_e, t_center_e, t_scale_e, k_e = pl.col("r_std"), pl.col("t_center"), pl.col("t_scale"), pl.col("k")

    def ewm(x: pl.Expr, seed: pl.Expr, hl: float = halflife) -> pl.Expr:
        # seeded causal EWMA: the first row of a series holds the seed
        return (
            pl.when(pl.col("first"))
            .then(seed)
            .otherwise(x)
            .ewm_mean(alpha=_alpha(hl), adjust=False)
            .over("g")
        )

    proxy = pl.col("r") ** 2 if estimator == "returns" else k_e * pl.col("x") ** 2  # per-bar variance proxy

    def sigma(hl: float) -> pl.Expr:  # trailing volatility in return units, floored
        return pl.max_horizontal(ewm(proxy, r_std_e**2, hl).sqrt(), VOL_FLOOR * r_std_e)

    vol = sigma(halflife)
    exprs = [vol.alias("vol")]
    if season:  # the same EWMA on the deseasonalized proxy, floored alike
        ds = ewm(proxy / pl.col("p2"), r_std_e**2).sqrt()
        exprs += [pl.max_horizontal(ds, VOL_FLOOR * r_std_e).alias("vol_season")]
    if scaling == "volatility" and target == "log_range" and estimator == "returns":
        x = pl.col("x")
        m = ewm(x, t_center_e)
        var = ewm(x**2, t_center_e**2 + t_scale_e**2) - m**2
        exprs += [
            m.alias("center"),
            pl.max_horizontal(var, (VOL_FLOOR * t_scale_e) ** 2).sqrt().alias("scale"),
        ]
    if scalers.get("vol_features", False):
        before = vol.shift(1).over("g")  # sigma known before bar t: the shock is measured against it
        before = pl.when(pl.col("first")).then(r_std_e).otherwise(before)
        exprs += [
            (pl.col("r") / before).alias("shock"),
            (k_e.sqrt() * pl.col("x") / before).alias("range_shock"),
            (sigma(halflife / FAST_SLOW) / vol).log().alias("log_vol_fast"),
            (sigma(halflife * FAST_SLOW) / vol).log().alias("log_vol_slow"),
        ]
    out = df.select(exprs)
    sig = out["vol"].to_numpy()
    # the volatility expected at the bar: the deseasonalized one times the profile at its time of day
    sig_scale = out["vol_season"].to_numpy() * np.sqrt(df["p2"].to_numpy()) if season else sig
    if scaling == "series":
        center, scale = t_center, t_scale
    elif target in RETURN_TARGETS:  # price_change: sigma in price units, the trailing volatility of price changes
        center, scale = np.zeros(len(sidx)), sig_scale
    elif estimator == "range":
        center, scale = np.zeros(len(sidx)), sig_scale / np.sqrt(k)
    else:
        center, scale = out["center"].to_numpy(), out["scale"].to_numpy()
    derived = {"log_vol": np.log(sig)}
    if scalers.get("vol_features", False):
        derived.update({c: out[c].to_numpy() for c in VOL_OBSERVED})
    if season:
        derived["log_vol_season"] = np.log(out["vol_season"].to_numpy())
    return derived, center, scale


def apply_scalers(
    feats: pl.DataFrame, names: list[str], sidx: np.ndarray, scalers: dict, target: str, scaling: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Observed inputs (N, len(observed_names)) float32 standardized per series, and the target center, scale (N,)."""
    return standardize(feats, names, sidx, scalers, *trailing(feats, names, sidx, scalers, target, scaling))


def standardize(
    feats: pl.DataFrame, names: list[str], sidx: np.ndarray, scalers: dict, derived: dict[str, np.ndarray],
    center: np.ndarray, scale: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`apply_scalers` given `trailing`'s output (`derived`, `center`, `scale`) for these scalers."""
    cols = observed_names(scalers)
    obs = np.empty((len(sidx), len(cols)), dtype=np.float32)  # (N, Or)
    for j, c in enumerate(cols):  # a handful of columns
        x = derived[c] if c in derived else feats[c].to_numpy()
        if c in STANDARDIZED or c in VOL_OBSERVED or c in SEASON_OBSERVED:
            x = (x - _per_row(scalers, names, sidx, c, "mean")) / _per_row(scalers, names, sidx, c, "std")
        obs[:, j] = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    return obs, center.astype(np.float32), scale.astype(np.float32)
