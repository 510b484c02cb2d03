"""A candidate model against the reference, dataset by dataset: the forecasts of two `benchmarks/quality.py` runs
compared row for row by evaluate's paired Diebold-Mariano test (evaluate/paired.py), seed by seed.

    python benchmarks/versus.py CANDIDATE_WORKDIR REFERENCE_WORKDIR [--names tied,independent]

Each folder is the `foxhunt-quality-...` folder a `quality.py --workdir` run made. For every dataset and seed that
both hold: foxhunt's forecasts with its default calibration (`evaluate`'s forecasts.parquet, `eval/`, `eval-auto/` or `eval-fixed/`;
the backtest's own for a walk-forward dataset), joined on (symbol, origin, horizon) where the actual is known. Per
dataset, one row: each model's q-risk at p10 / p50 / p90 on those rows (the mean over the seeds), the skill 1 -
candidate / reference, the Diebold-Mariano p-value (two-sided, HAC, pooled over the panel; the largest over the seeds,
so a value under 0.05 is significant in every seed, its direction the skill's), the series where the candidate's p90
q-risk is lower (the range over the seeds); the skill and p-value seed by seed at each quantile. Why: the quality table
compares each model with the baselines, not with the other model; two models can both be "level with GARCH-t" and
still differ significantly on the same rows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl

from foxhunt.evaluate.paired import compare

QUANTILES = (0.1, 0.5, 0.9)
KEYS = ("0.1", "0.5", "0.9")
COLUMNS = ("p10", "p50", "p90")
FORECASTS = ("eval/forecasts.parquet", "eval-auto/forecasts.parquet", "eval-fixed/forecasts.parquet",
             "bt/forecasts.parquet")


def forecasts(seed_dir: Path) -> pl.DataFrame | None:
    """The seed's forecasts with foxhunt's default calibration, the rows with a known actual; None if it has none."""
    path = next((seed_dir / f for f in FORECASTS if (seed_dir / f).exists()), None)
    return None if path is None else pl.read_parquet(path).filter(pl.col("actual").is_not_null())


def paired(a: pl.DataFrame, b: pl.DataFrame) -> dict:
    """evaluate/paired.py's comparison of `a` (the candidate) against `b` on the (symbol, origin, horizon) both hold."""
    rows = a.join(b.select("symbol", "origin", "horizon", *COLUMNS), on=["symbol", "origin", "horizon"],
                  suffix="_ref").sort("symbol", "origin", "horizon")
    horizon = int(rows["horizon"].max())
    keys = rows.select("symbol", "origin").unique(maintain_order=True)  # (K,) windows
    k = keys.with_row_index("k")
    rows = rows.join(k, on=["symbol", "origin"])
    at = (rows["k"].to_numpy(), rows["horizon"].to_numpy() - 1)
    actual = np.full((k.height, horizon), np.nan)  # (K, D)
    actual[at] = rows["actual"].to_numpy()
    model, ref = (np.full((k.height, horizon, len(COLUMNS)), np.nan) for _ in range(2))  # (K, D, Q) each
    model[at] = rows.select(COLUMNS).to_numpy()
    ref[at] = rows.select([f"{c}_ref" for c in COLUMNS]).to_numpy()
    names = keys["symbol"].unique(maintain_order=True).to_list()
    series = keys["symbol"].replace_strict(names, list(range(len(names)))).to_numpy()
    origin = keys["origin"].dt.epoch("ns").to_numpy()
    return compare(series, origin, actual, model, ref, QUANTILES, names)


def mean(results: list[dict], key: str) -> str:
    """`key`'s q-risks (p10 / p50 / p90), the mean over the seeds."""
    return " / ".join(f"{np.mean([r[key][q] for r in results]):.4f}" for q in KEYS)


def p_text(p: float | None) -> str:
    return "-" if p is None else "<0.001" if p < 0.001 else f"{p:.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("candidate", type=Path)
    ap.add_argument("reference", type=Path)
    ap.add_argument("--names", default="candidate,reference", help="what to call the two, comma-separated")
    a = ap.parse_args(argv)
    cand, ref = a.names.split(",")
    print(f"| dataset | seeds | {cand} q-risk p10 / p50 / p90 | {ref} q-risk p10 / p50 / p90 | skill p10 / p50 / p90 "
          f"| DM p p10 / p50 / p90 | series won p90 | seed by seed: skill p10 / p50 / p90 (p) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for ds in sorted(p.name for p in a.candidate.iterdir() if p.is_dir() and (a.reference / p.name).is_dir()):
        results = []
        for seed_dir in sorted((a.candidate / ds).glob("seed-*")):
            mine, theirs = forecasts(seed_dir), forecasts(a.reference / ds / seed_dir.name)
            if mine is not None and theirs is not None:
                results.append(paired(mine, theirs))
        if not results:
            continue
        skill = " / ".join(f"{np.mean([r['skill'][q] for r in results]):+.1%}" for q in KEYS)
        worst = " / ".join(p_text(max((r["dm"][q]["p_value"] or 1.0) for r in results)) for q in KEYS)
        won = [r["series_won"]["0.9"]["won"] for r in results]
        won_text = f"{min(won)}-{max(won)}" if min(won) != max(won) else f"{won[0]}"
        each = ", ".join(" / ".join(f"{r['skill'][q]:+.1%} ({p_text(r['dm'][q]['p_value'])})" for q in KEYS)
                         for r in results)
        print(f"| {ds} | {len(results)} | {mean(results, 'model_q_risk')} | {mean(results, 'baseline_q_risk')} "
              f"| {skill} | {worst} "
              f"| {won_text}/{results[0]['series_won']['0.9']['of']} | {each} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
