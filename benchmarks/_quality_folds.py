"""Scoring other forecasts on rows foxhunt already scored, for benchmarks/quality.py: a forecasts parquet
(`foxhunt predict`'s schema) put on a backtest fold's scored rows, the folds scored by the backtest's own summary
with the model column swapped, and two sets of forecasts of the same rows compared by evaluate's paired test.

One path for every "other" forecast: pytorch-forecasting's TFT on each fold, and foxhunt's own fold models forecast
again with another calibration (`foxhunt predict --calibration M`); the baselines, tests and series counts are the
backtest's, on the backtest's rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from _quality_table import QUANTILES

from foxhunt.model.config import quantile_label


def aligned(arrays: dict[str, np.ndarray], names: list[str], path: Path) -> np.ndarray:
    """A forecasts parquet on a backtest fold's scored rows: (K, D, Q), NaN where it has no forecast."""
    import polars as pl

    keys = pl.DataFrame({"symbol": np.asarray(names, dtype=object)[arrays["series"]].tolist(),
                         "origin_ns": arrays["origin_ns"], "row": np.arange(len(arrays["origin_ns"]))})
    cols = [quantile_label(q) for q in QUANTILES]
    fc = pl.read_parquet(path).with_columns(pl.col("origin").dt.epoch("ns").alias("origin_ns"))
    hit = fc.join(keys, on=["symbol", "origin_ns"], how="inner")
    out = np.full((*arrays["actual"].shape, len(cols)), np.nan)  # (K, D, Q)
    out[hit["row"].to_numpy(), hit["horizon"].to_numpy() - 1] = hit.select(cols).to_numpy()
    return out


def fold_arrays(bt_dir: Path, folds: list[dict[str, Any]], forecasts: list[Path] | None = None) -> dict[str, np.ndarray]:
    """Every fold's scored arrays (scored.npz) together, as the backtest's summary reads them; with `forecasts` (one
    parquet per fold), the model column replaced by those forecasts on the same rows."""
    from foxhunt.backtest.summary import concat

    parts = []
    for k, f in enumerate(folds):
        at = table_columns(f["quantiles"])
        with np.load(bt_dir / f"fold-{f['index']:02d}" / "scored.npz") as z:
            arrays = {name: z[name] for name in z.files}
        arrays = {name: a[..., at] if a.ndim == 3 else a for name, a in arrays.items()}  # (K, D, Q) at the table's Q
        if forecasts is not None:
            arrays["model"] = aligned(arrays, f["series_names"], forecasts[k])
        parts.append(arrays)
    return concat(parts)


def _positions(quantiles: list[float]) -> dict[float, int]:
    """Each of a run's quantile levels (to 9 decimals) and its column."""
    return {round(float(q), 9): i for i, q in enumerate(quantiles)}


def missing_quantiles(quantiles: list[float]) -> list[float]:
    """The table's QUANTILES that a run of `quantiles` does not forecast (quality.py refuses such --quantiles)."""
    at = _positions(quantiles)
    return [q for q in QUANTILES if round(q, 9) not in at]


def table_columns(quantiles: list[float]) -> list[int]:
    """Where the table's QUANTILES sit among a run's `quantiles`: every array here holds those only, so that runs of
    other --quantiles compare with the defaults' (a run must forecast each of them)."""
    missing = missing_quantiles(quantiles)
    if missing:
        raise SystemExit(f"quality.py scores the quantiles {QUANTILES}: a run with --quantiles {quantiles} lacks "
                         f"{missing}")
    at = _positions(quantiles)
    return [at[round(q, 9)] for q in QUANTILES]


def fold_result(arrays: dict[str, np.ndarray], folds: list[dict[str, Any]]) -> dict[str, Any]:
    """The backtest's `overall` of these arrays (the table's QUANTILES) with its verdict added (backtest.json's, for
    another model column): quality.py's `score_of` reads it as it reads backtest.json."""
    from foxhunt.backtest.run import overall_verdict
    from foxhunt.backtest.summary import merge_gaps, metrics
    from foxhunt.data.features.bar_features import RETURN_TARGETS

    qs, names = QUANTILES, tuple(folds[-1]["series_names"])
    overall = metrics(arrays, qs, names, folds[-1]["target"] in RETURN_TARGETS, merge_gaps(folds))
    return {**overall, "verdict": overall_verdict(overall, qs, len(folds)).to_dict()}


def missing_pairs(arrays: dict[str, np.ndarray]) -> int:
    """(origin, step) pairs with an actual where the model column has no forecast."""
    return int((np.isfinite(arrays["actual"]) & ~np.isfinite(arrays["model"]).all(axis=-1)).sum())


def forecast_arrays(path: Path) -> tuple[dict[str, np.ndarray], list[str]]:
    """A forecasts parquet (`foxhunt predict`'s or evaluate's forecasts.parquet) as scored arrays: series codes and
    origin times (K,), actual (K, D) (NaN beyond the data), model (K, D, Q); and the series names."""
    import polars as pl

    fc = pl.read_parquet(path).with_columns(pl.col("origin").dt.epoch("ns").alias("origin_ns"))
    keys = fc.select("symbol", "origin_ns").unique().sort("symbol", "origin_ns").with_row_index("row")
    names = keys["symbol"].unique(maintain_order=True).to_list()
    fc = fc.join(keys, on=["symbol", "origin_ns"])
    row, step = fc["row"].to_numpy(), fc["horizon"].to_numpy() - 1
    shape = (keys.height, int(fc["horizon"].max()))
    actual = np.full(shape, np.nan)
    actual[row, step] = fc["actual"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    model = np.full((*shape, len(QUANTILES)), np.nan)  # (K, D, Q)
    model[row, step] = fc.select([quantile_label(q) for q in QUANTILES]).to_numpy()
    series = np.searchsorted(np.asarray(names, dtype=object), keys["symbol"].to_numpy().astype(object))
    return {"series": series, "origin_ns": keys["origin_ns"].to_numpy(), "actual": actual, "model": model}, names


def versus(arrays: dict[str, np.ndarray], names: list[str], other: np.ndarray) -> dict[str, Any]:
    """evaluate's paired comparison (evaluate/paired.py) of the model column against `other` (K, D, Q), on the rows
    both forecast: q-risk, skill (> 0: the model column is better), Diebold-Mariano tests, series won."""
    from foxhunt.evaluate.paired import compare

    return compare(arrays["series"], arrays["origin_ns"], arrays["actual"], arrays["model"], other, QUANTILES,
                   names)
