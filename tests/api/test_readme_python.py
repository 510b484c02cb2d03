"""The docs' "From Python" section (docs/production.md) runs as written (on the daily fixture) and does what it
says."""

from __future__ import annotations

import datetime as dt
import json

import foxhunt
from tests.api.conftest import readme_python_blocks

COLUMNS = ["symbol", "origin", "horizon", "target_time", "p10", "p50", "p90", "actual"]


def test_readme_section_has_train_load_predict_and_update_blocks():
    code = "\n".join(readme_python_blocks())
    for call in ("foxhunt.fit(", "foxhunt.Forecaster.load(", ".predict(", ".predict_parquet(", ".update("):
        assert call in code


def test_readme_code_trains_and_forecasts(readme_run):
    run, live, forecast = readme_run["run"], readme_run["live"], readme_run["forecast"]
    assert isinstance(run, foxhunt.Run) and run.best_epoch == 1
    lines = [json.loads(x) for x in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["val_loss"] for m in run.metrics] == [m["val_loss"] for m in lines]
    assert [m["epoch"] for m in lines] == [0, 1] and run.best_val_loss == lines[1]["val_loss"] < lines[0]["val_loss"]
    for name in ("model.json", "model.safetensors", "calibration.json", "config.json"):
        assert (run.run_dir / name).is_file()
    assert live.columns == COLUMNS
    assert live["symbol"].to_list() == ["ES"] * 3 + ["NQ"] * 3
    assert live["horizon"].to_list() == [1, 2, 3] * 2
    assert live["origin"].dt.date().unique().to_list() == [readme_run["bars"]["timestamp"].max().date()]
    assert live["actual"].is_null().all()  # live: target_time is the grid's, the weekdays after Mon 2024-12-09
    assert live["target_time"].dt.date().to_list() == [dt.date(2024, 12, d) for d in (10, 11, 12)] * 2
    assert readme_run["tail"].equals(live)  # the fixture is shorter than the history predict_parquet reads
    # calibration auto: this anchored model's own quantiles unless the adaptive shifts beat them on validation
    won = json.loads((run.run_dir / "calibration.json").read_text())["adaptive"]["fitted_on"]["beats_own"]
    assert readme_run["fc"].calibration_method == ("adaptive" if won else "none")
    assert readme_run["raw"].equals(live) != won
    assert forecast.columns == COLUMNS and forecast["symbol"].to_list() == ["ES"] * 3
    assert forecast["origin"].dt.date().to_list() == [dt.date(2024, 12, 10)] * 3
    arrays = readme_run["arrays"]
    assert arrays.symbols == ("ES",) and arrays.quantiles.shape == (1, 3, 3)
    assert (arrays.origin_ns == [dt.datetime(2024, 12, 11, tzinfo=dt.UTC).timestamp() * 10**9]).all()
