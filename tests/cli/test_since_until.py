"""--since/--until bound the bars a run reads; forecasts from the model are not bound by them."""

from __future__ import annotations

import json

import polars as pl

from foxhunt.cli import main


def test_train_reads_only_the_bounded_bars_and_predict_reaches_past_until(tmp_path, daily_path, tiny):
    run, out = tmp_path / "run", tmp_path / "fc.parquet"
    assert main(["train", *tiny, "--parquet-file", str(daily_path), "--epochs", "1", "--max-train-batches", "2",
                 "--since", "2024-01-01", "--until", "2024-10-01", "--run-dir", str(run)]) == 0
    data = json.loads((run / "config.json").read_text())["data"]
    assert (data["since"], data["until"]) == ("2024-01-01", "2024-10-01")
    series = json.loads((run / "data_summary.json").read_text())["series"]
    assert series and all("2024-01-01" <= s["start"] and s["end"] < "2024-10-01" for s in series.values()), series
    # the model forecasts from the newest bars of a file, wherever the training run's --until stopped
    assert main(["predict", "--model", str(run), "--parquet-file", str(daily_path), "--out", str(out)]) == 0
    last = pl.read_parquet(daily_path)["timestamp"].max()
    assert pl.read_parquet(out)["origin"].max().replace(tzinfo=None) == last


def test_a_bad_bound_names_the_option(tmp_path, daily_path, tiny, capsys):
    assert main(["train", *tiny, "--parquet-file", str(daily_path), "--until", "next week",
                 "--run-dir", str(tmp_path / "r")]) == 2
    assert "--until" in capsys.readouterr().err
