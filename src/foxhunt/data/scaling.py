"""Scalers fitted on the training rows only, and their per-row application.

`fit_scalers` returns plain JSON-able values (saved in the model's FittedTransform):
    {"halflife": float,
     "series": {name: {feature: {"mean", "std"}, ..., "target": {"center", "scale"}}},
     "pooled": {same, over all training rows}}     # fallback for a series unseen in training
Observed features are standardized per series in both scaling modes. The target's (center, scale) per row:
- "series": constant per series: center 0 (log_return) or the train mean (log_range), scale the train std.
- "volatility": causal trailing EWMA (halflife `halflife` bars, using rows up to and including t), seeded with the
  train statistics and floored at VOL_FLOOR x the train std, so the model forecasts in units of recent volatility.
  log_return: center 0, scale sqrt(EWMA r^2); log_range: center EWMA mean, scale EWMA std.
The trailing return volatility is also an observed input (`log_vol` = ln of it, then standardized).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from foxhunt.data.features import OBSERVED, STANDARDIZED

VOL_HALFLIFE = 20.0
VOL_FLOOR = 0.1


def _alpha(halflife: float) -> float:
    return 1.0 - 0.5 ** (1.0 / halflife)


def _safe(x: float | None, default: float) -> float:
    return float(x) if x is not None and np.isfinite(x) and x > 0 else default


def _stats(train: pl.DataFrame, cols: tuple[str, ...]) -> tuple[dict, dict]:
    """Per-series and pooled {mean, std} of `cols`. Where a series' std is undefined or zero (one training row, a
    constant column) the pooled value is used, and 1 where that is undefined too."""
    aggs = [a for c in cols for a in (pl.col(c).mean().alias(f"{c}:mean"), pl.col(c).std().alias(f"{c}:std"))]

    def pack(row: dict, std_fallback: dict[str, float]) -> dict:
        return {
            c: {"mean": float(row[f"{c}:mean"] or 0.0), "std": _safe(row[f"{c}:std"], std_fallback[c])}
            for c in cols
        }

    pooled = pack(train.select(aggs).row(0, named=True), dict.fromkeys(cols, 1.0))
    pooled_std = {c: pooled[c]["std"] for c in cols}
    per = {r["series"]: pack(r, pooled_std) for r in train.group_by("series").agg(aggs).iter_rows(named=True)}
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
) -> dict:
    """Fit on rows where `train_mask` is true (ts before the train cut), excluding each series' first row.

    `names[sidx[i]]` is the series of row i (rows sorted by series, ts).
    """
    keep = pl.Series(train_mask & ~feats["first"].to_numpy())
    train = feats.select("series", "log_return", "log_range", "log_volume").filter(keep)
    per, pooled = _stats(train, ("log_return", "log_range", "log_volume"))
    scalers = {"halflife": float(halflife), "series": per, "pooled": pooled}
    for entry in (*per.values(), pooled):
        t = entry[target]
        entry["target"] = {"center": 0.0 if target == "log_return" else t["mean"], "scale": t["std"]}
    # log_vol is seeded from the return std just fitted, so it is fitted in a second pass over the same rows.
    log_vol = trailing(feats, names, sidx, scalers, target, "series")[0]
    per_vol, pooled_vol = _stats(
        pl.DataFrame({"series": feats["series"], "log_vol": log_vol}).filter(keep), ("log_vol",)
    )
    for name, entry in per.items():
        entry["log_vol"] = per_vol[name]["log_vol"]
    pooled["log_vol"] = pooled_vol["log_vol"]
    return scalers


def trailing(
    feats: pl.DataFrame, names: list[str], sidx: np.ndarray, scalers: dict, target: str, scaling: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N,) arrays: `log_vol` (ln of the trailing return volatility) and the target's center and scale per row."""
    r_std = _per_row(scalers, names, sidx, "log_return", "std")
    t_center = _per_row(scalers, names, sidx, "target", "center")
    t_scale = _per_row(scalers, names, sidx, "target", "scale")
    df = pl.DataFrame(
        {
            "g": sidx,
            "first": feats["first"],
            "r": feats["log_return"],
            "x": feats["log_range"],
            "r_std": r_std,
            "t_center": t_center,
            "t_scale": t_scale,
        }
    )
    alpha = _alpha(scalers["halflife"])

    def ewm(
        x: pl.Expr, seed: pl.Expr
    ) -> pl.Expr:  # seeded causal EWMA: the first row of a series holds the seed
        return pl.when(pl.col("first")).then(seed).otherwise(x).ewm_mean(alpha=alpha, adjust=False).over("g")

    r_std_e, t_center_e, t_scale_e = pl.col("r_std"), pl.col("t_center"), pl.col("t_scale")
    vol = pl.max_horizontal(ewm(pl.col("r") ** 2, r_std_e**2).sqrt(), VOL_FLOOR * r_std_e)
    exprs = [vol.log().alias("log_vol")]
    if scaling == "volatility" and target == "log_return":
        exprs += [vol.alias("scale")]
    elif scaling == "volatility":
        x = pl.col("x")
        m = ewm(x, t_center_e)
        var = ewm(x**2, t_center_e**2 + t_scale_e**2) - m**2
        exprs += [
            m.alias("center"),
            pl.max_horizontal(var, (VOL_FLOOR * t_scale_e) ** 2).sqrt().alias("scale"),
        ]
    out = df.select(exprs)
    if scaling == "series":
        center, scale = t_center, t_scale
    elif target == "log_return":
        center, scale = np.zeros(len(sidx)), out["scale"].to_numpy()
    else:
        center, scale = out["center"].to_numpy(), out["scale"].to_numpy()
    log_vol = out["log_vol"].to_numpy()
    return log_vol, center, scale


def apply_scalers(
    feats: pl.DataFrame, names: list[str], sidx: np.ndarray, scalers: dict, target: str, scaling: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Observed inputs (N, len(OBSERVED)) float32 standardized per series, and the target center, scale (N,)."""
    log_vol, center, scale = trailing(feats, names, sidx, scalers, target, scaling)
    obs = np.empty((len(sidx), len(OBSERVED)), dtype=np.float32)  # (N, Or)
    for j, c in enumerate(OBSERVED):  # a handful of columns
        x = log_vol if c == "log_vol" else feats[c].to_numpy()
        if c in STANDARDIZED:
            x = (x - _per_row(scalers, names, sidx, c, "mean")) / _per_row(scalers, names, sidx, c, "std")
        obs[:, j] = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    return obs, center.astype(np.float32), scale.astype(np.float32)
