"""The whole pipeline learns a known pattern: on a synthetic series whose daily return is set by the weekday (a
known-future input), validation loss ends far below the loss of predicting the training-set quantiles."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import polars as pl

from foxhunt.cli import main


def weekday_series(n: int = 700, seed: int = 0) -> pl.DataFrame:
    days = [d for d in (dt.date(2020, 1, 6) + dt.timedelta(i) for i in range(n * 2)) if d.weekday() < 5][:n]
    pattern = np.array([0.012, -0.004, -0.004, -0.004, 0.0])  # Monday up, mid-week down: zero mean per week
    rng = np.random.default_rng(seed)
    ret = pattern[[d.weekday() for d in days]] + rng.normal(0, 0.0008, n)
    close = 100 * np.exp(np.cumsum(ret))
    return pl.DataFrame({
        "date": days, "symbol": "SYN", "open": close, "high": close * 1.001, "low": close * 0.999, "close": close,
        "volume": np.full(n, 1000.0),
    })


def test_validation_loss_drops_well_below_the_training_quantile_baseline(tmp_path):
    path = tmp_path / "weekday.parquet"
    weekday_series().write_parquet(path)
    run = tmp_path / "run"
    assert main(["train", "--parquet-file", str(path), "--hidden-size", "8", "--attention-heads", "2",
                 "--encoder-length", "10", "--horizon", "3", "--epochs", "12", "--patience", "12", "--batch-size",
                 "32", "--learning-rate", "3e-3", "--dropout", "0", "--no-progress", "--threads", "1",
                 "--run-dir", str(run)]) == 0
    baseline = json.loads((run / "config.json").read_text())["baseline"]["val_loss"]
    best = min(json.loads(line)["val_loss"] for line in (run / "metrics.jsonl").read_text().splitlines())
    assert best < 0.4 * baseline, (best, baseline)
