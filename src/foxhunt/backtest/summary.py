"""backtest.json: metrics per fold and over all folds, for the model and every baseline on the same origins, and
the time series the report draws (skill and coverage by month, skill around roll dates)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from foxhunt.atomic import atomic_path
from foxhunt.evaluate.metrics import interval_pairs, pinball
from foxhunt.evaluate.paired import compare
from foxhunt.evaluate.scored_rows import score
from foxhunt.predict.provenance import folds_metadata, read_metadata, row_calibration

BASELINE_PREFIX = "baseline_"
ROLL_BARS = 10  # origins shown before and after each roll date


def sources(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """{"model": (K, D, Q), baseline name: (K, D, Q)} from one scored.npz."""
    out = {"model": arrays["model"]}
    out.update({k[len(BASELINE_PREFIX):]: v for k, v in arrays.items() if k.startswith(BASELINE_PREFIX)})
    return out


def concat(folds: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """All folds' scored arrays in one; a baseline missing from a fold (it could not be fitted there) is NaN on that
    fold's origins, which the metrics count as missing forecasts rather than scoring the others on fewer origins."""
    names = sorted({k for f in folds for k in f if k.startswith(BASELINE_PREFIX)})
    out = {}
    for k in ("series", "origin_ns", "first_ns", "actual", "model", *names):
        parts = [f[k] if k in f else np.full(f["model"].shape, np.nan) for f in folds]
        out[k] = np.concatenate(parts)
    return out


def metrics(arrays: dict[str, np.ndarray], quantiles: tuple[float, ...], names: tuple[str, ...],
            directional: bool, gaps: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """{"model": result, "baselines": {name: result}, "comparisons": {name: the model against it on the origins both
    forecast (evaluate/paired.py)}, "skill": {name: {q: skill}} (the comparisons')} on one set of origins; `gaps`:
    baseline -> series -> why it has no forecast there."""
    src = sources(arrays)
    res = {k: score(arrays["actual"], v, arrays["series"], quantiles, names, directional) for k, v in src.items()}
    model = res.pop("model")
    pairs = {k: compare(arrays["series"], arrays["origin_ns"], arrays["actual"], arrays["model"], src[k], quantiles,
                        names, (gaps or {}).get(k)) for k in res}
    return {"model": model, "baselines": res, "comparisons": pairs, "skill": {k: c["skill"] for k, c in pairs.items()}}


def with_fold_ic(overall: dict[str, Any], folds: list[dict[str, Any]]) -> dict[str, Any]:
    """`overall` (`metrics` over every fold's origins) with each source's rank IC, overall, per horizon and per series,
    the mean of the folds' own (`folds`: each fold's `metrics`, as fold.json holds them), None where no fold has one.

    An IC pooled over the folds would rank the pairs of different test periods against each other: a baseline whose
    median is one number in each fold (training quantiles, GARCH-t's mean), which has no IC in any fold, would get
    one from the folds' different levels alone. The mean of the periods' ICs is the usual summary of an IC over time.
    """
    def mean(values: list[Any]) -> float | None:
        known = [v for v in values if v is not None]
        return float(np.mean(known)) if known else None

    for name, res in (("model", overall["model"]), *overall["baselines"].items()):
        parts = [m["model"] if name == "model" else m["baselines"].get(name) for m in folds]
        parts = [r for r in parts if r is not None]
        res["overall"]["ic"] = mean([r["overall"]["ic"] for r in parts])
        for h, block in enumerate(res["per_horizon"]):
            block["ic"] = mean([r["per_horizon"][h]["ic"] for r in parts if h < len(r["per_horizon"])])
        for name_s, block in res["per_series"].items():  # by series name, here and in fold.json
            block["ic"] = mean([(r["per_series"].get(name_s) or {}).get("ic") for r in parts])
    return overall


def merge_gaps(infos: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The folds' `baseline_gaps` together: baseline -> series -> each fold's distinct reasons, joined."""
    out: dict[str, dict[str, list[str]]] = {}
    for info in infos:
        for k, by_series in (info.get("baseline_gaps") or {}).items():
            for name, why in by_series.items():
                seen = out.setdefault(k, {}).setdefault(name, [])
                if why not in seen:
                    seen.append(why)
    return {k: {name: "; ".join(whys) for name, whys in v.items()} for k, v in out.items()}


def paired_losses(arrays: dict[str, np.ndarray], quantiles: tuple[float, ...]) -> dict[str, np.ndarray]:
    """For each baseline, the model's and its pinball loss per origin, (2, K), summed over the steps and quantiles
    both forecast (evaluate/paired.py's rule): a skill by month or around a roll compares the same rows."""
    qs = np.asarray(quantiles)
    y = arrays["actual"]
    ok_y = np.isfinite(y)  # (K, D)
    y0 = np.where(ok_y, y, 0)
    model = arrays["model"]
    out = {}
    for name, q in sources(arrays).items():
        if name == "model":
            continue
        both = ok_y & np.isfinite(model).all(axis=-1) & np.isfinite(q).all(axis=-1)  # (K, D)
        out[name] = np.stack([np.where(both[..., None], pinball(y0, np.where(both[..., None], f, 0), qs), 0)
                              .sum(axis=(1, 2)) for f in (model, q)])  # (2, K)
    return out


def monthly(arrays: dict[str, np.ndarray], quantiles: tuple[float, ...]) -> dict[str, Any]:
    """By calendar month of the first forecast bar (the test periods' months): each source's q-risk summed over
    quantiles, its skill against each baseline (1 - model / baseline, on the rows both forecast) and the coverage of
    the outermost central interval."""
    qs = np.asarray(quantiles)
    y = arrays["actual"]
    ok_y = np.isfinite(y)
    month = arrays["first_ns"].astype("datetime64[ns]").astype("datetime64[M]")
    keys, inverse = np.unique(month, return_inverse=True)
    pairs = interval_pairs(qs)
    out: dict[str, Any] = {"month": [str(k) for k in keys], "qrisk": {}, "coverage": {}, "skill": {},
                           "interval": pairs[0][2] if pairs else None,
                           "nominal": float(qs[pairs[0][1]] - qs[pairs[0][0]]) if pairs else None}
    for name, q in sources(arrays).items():  # each source's q-risk on the rows it forecasts
        ok = ok_y & np.isfinite(q).all(axis=-1)  # (K, D)
        loss = np.where(ok[..., None], pinball(np.where(ok_y, y, 0), q, qs), 0).sum(axis=(1, 2))  # (K,)
        abs_y = np.bincount(inverse, np.where(ok, np.abs(y), 0).sum(axis=1), minlength=len(keys))
        out["qrisk"][name] = _ratio(2 * np.bincount(inverse, loss, minlength=len(keys)), abs_y)
        if pairs:
            lo, hi = pairs[0][0], pairs[0][1]
            inside = ok & (q[..., lo] <= y) & (y <= q[..., hi])  # (K, D)
            out["coverage"][name] = _ratio(np.bincount(inverse, inside.sum(axis=1), minlength=len(keys)),
                                           np.bincount(inverse, ok.sum(axis=1), minlength=len(keys)))
    for name, (lm, lb) in paired_losses(arrays, quantiles).items():
        m, b = np.bincount(inverse, lm, minlength=len(keys)), np.bincount(inverse, lb, minlength=len(keys))
        out["skill"][name] = [None if bb == 0 else float(1 - mm / bb) for mm, bb in zip(m, b, strict=True)]
    return out


def around_rolls(arrays: dict[str, np.ndarray], quantiles: tuple[float, ...], names: tuple[str, ...],
                 rolls: list[dict[str, Any]], bars: int = ROLL_BARS) -> dict[str, Any]:
    """Skill against each baseline by origin offset from a roll (0: the first origin on or after the roll's first
    trade date, in that series' origins), pooled over every roll inside the scored origins, on the rows both
    forecast."""
    pairs = paired_losses(arrays, quantiles)  # baseline -> (2, K)
    offsets = np.arange(-bars, bars + 1)
    sums = {name: np.zeros((2, len(offsets))) for name in pairs}
    used = []
    for r in rolls:
        if r.get("root") not in names:
            continue
        rows = np.flatnonzero(arrays["series"] == names.index(r["root"]))
        rows = rows[np.argsort(arrays["origin_ns"][rows], kind="stable")]
        t = np.datetime64(str(r["trade_date"])[:10], "ns").astype(np.int64)
        at = int(np.searchsorted(arrays["origin_ns"][rows], t))
        if at == 0 or at == len(rows):
            continue  # the roll is not inside this series' scored origins
        pick = at + offsets
        inside = (pick >= 0) & (pick < len(rows))
        for name, losses in pairs.items():
            sums[name][:, inside] += losses[:, rows[pick[inside]]]
        used.append(str(r["trade_date"])[:10])
    skills = {name: [None if b == 0 else float(1 - m / b) for m, b in zip(*s, strict=True)]
              for name, s in sums.items()}
    return {"offsets": offsets.tolist(), "rolls": used, "skill": skills}


def write_forecasts(fold_files: list[tuple[int, Path]], out: Path) -> None:
    """The folds' (index, forecasts.parquet) as one file (atomic) in predict's schema, with per-row columns `fold`
    and `calibration` (folds may differ in their calibration) and metadata joining the folds' (provenance.py)."""
    infos = [(n, read_metadata(f)) for n, f in fold_files]
    frames = [pl.read_parquet(f).with_columns(pl.lit(n, pl.Int16).alias("fold"),
                                              pl.lit(row_calibration(info), pl.Utf8).alias("calibration"))
              for (n, f), (_, info) in zip(fold_files, infos, strict=True)]
    table = pl.concat(frames, how="vertical").to_arrow().replace_schema_metadata(folds_metadata(infos))
    with atomic_path(out) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def _ratio(num: np.ndarray, den: np.ndarray) -> list[float | None]:
    return [float(n / d) if d > 0 else None for n, d in zip(num, den, strict=True)]
