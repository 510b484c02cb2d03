"""benchmarks/versus.py on two fabricated quality.py work folders: rows paired on (symbol, origin, horizon), q-risk
by hand, only the datasets and seeds both hold."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import versus  # noqa: E402


def forecasts(path: Path, spread: float, rows: int = 40) -> None:
    """Two series, `rows` origins each, horizon 2; actual ±1 alternating, p50 0, p10 / p90 at -/+ spread (one
    origin without an actual, which is left out)."""
    t0 = datetime(2020, 1, 1, tzinfo=UTC)
    data = [{"symbol": s, "origin": t0 + timedelta(days=i), "horizon": h, "target_time": t0 + timedelta(days=i + h),
             "p10": -spread, "p50": 0.0, "p90": spread, "actual": None if i == rows - 1 else (-1.0) ** (i + h)}
            for s in ("A", "B") for i in range(rows) for h in (1, 2)]
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(data).write_parquet(path)


def test_two_work_folders_compared_row_for_row(tmp_path, capsys):
    cand, ref = tmp_path / "cand", tmp_path / "ref"
    forecasts(cand / "daily" / "seed-0" / "eval" / "forecasts.parquet", 1.0)
    forecasts(ref / "daily" / "seed-0" / "eval-fixed" / "forecasts.parquet", 0.5)
    forecasts(cand / "only_here" / "seed-0" / "eval" / "forecasts.parquet", 1.0)
    assert versus.main([str(cand), str(ref), "--names", "wide,narrow"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and "wide q-risk" in out[0] and out[2].startswith("| daily | 1 |")
    # |y| = 1 everywhere: q-risk = 2 * mean pinball. p10 at -1: loss 0.1 * 2 when y = 1, 0 when y = -1 -> 0.2; at
    # -0.5: 0.1 * 1.5 or 0.9 * 0.5 -> 0.6. p50 at 0: 0.5 -> 1.0 for both.
    cells = out[2].split(" | ")
    assert cells[2] == "0.2000 / 1.0000 / 0.2000" and cells[3] == "0.6000 / 1.0000 / 0.6000"
    assert cells[4] == "+66.7% / +0.0% / +66.7%" and cells[6] == "2/2"
    assert cells[7].startswith("+66.7% (") and cells[7].count(" / ") == 2  # seed 0's skill at p10, p50 and p90
