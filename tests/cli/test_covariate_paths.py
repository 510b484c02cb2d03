"""A model trained with --covariates typed relative to where training ran forecasts from any directory: the run
saves its files as absolute paths; a model from before that says, when its relative path is not found, where the
path comes from and how to point at the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from foxhunt import Forecaster
from foxhunt.cli import main

DAY = 86_400 * 10**9


@pytest.fixture(scope="module")
def trained(tmp_path_factory, daily_path, tiny_flags) -> Path:
    """A run trained from its data folder with `-f bars.parquet --covariates vix.csv`, as typed there."""
    folder = tmp_path_factory.mktemp("typed")
    bars = pl.read_parquet(daily_path)
    bars.write_parquet(folder / "bars.parquet")
    days = np.arange(int(bars["timestamp"].min().timestamp() * 1e9) - 5 * DAY,
                     int(bars["timestamp"].max().timestamp() * 1e9) + 5 * DAY, DAY, dtype=np.int64)
    vix = pl.DataFrame({"time": pl.Series(days).cast(pl.Datetime("ns", "UTC")),
                        "vix": 15 + np.abs(np.random.default_rng(0).normal(0, 5, len(days)))})
    vix.write_csv(folder / "vix.csv")
    pl.DataFrame({"time": pl.Series(days[::20]).cast(pl.Datetime("ns", "UTC")), "name": "FOMC"}).write_csv(
        folder / "events.csv")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        assert main(["train", "-f", "bars.parquet", "--observed", "vix", "--covariates", "vix.csv", "--events",
                     "events.csv", *tiny_flags, "--epochs", "1", "--run-dir", "run"]) == 0
    return folder / "run"


def test_the_run_saves_its_files_absolute_and_forecasts_from_elsewhere(trained, tmp_path, monkeypatch):
    folder = trained.parent
    meta = json.loads((trained / "model.json").read_text())
    config = json.loads((trained / "config.json").read_text())
    for data in (meta["data"], config["data"]):
        assert data["covariates"] == [str(folder / "vix.csv")] and data["paths"] == [str(folder / "bars.parquet")]
    assert meta["transform"]["inputs"]["sources"] == {"vix": str(folder / "vix.csv")}  # the sidecar's sources
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(trained), "-f", str(folder / "bars.parquet"), "--out", str(out)]) == 0
    assert pl.read_parquet(out).height > 0
    got = Forecaster.load(trained).predict_parquet(str(folder / "bars.parquet"))
    assert got.height > 0


def test_an_old_models_relative_covariates_not_found_say_where_they_come_from(trained, tmp_path, monkeypatch, capsys):
    """A model saved before the paths were made absolute holds them as typed: read from the working directory as
    before, and when not there, one line naming the model's file and the option that points at the file."""
    old = tmp_path / "old"
    old.mkdir()
    for f in trained.iterdir():
        if f.is_file():
            (old / f.name).write_bytes(f.read_bytes())
    meta = json.loads((old / "model.json").read_text())
    meta["data"]["covariates"] = ["vix.csv"]
    meta["transform"]["inputs"]["sources"] = {"vix": "vix.csv"}
    (old / "model.json").write_text(json.dumps(meta))
    bars = str(trained.parent / "bars.parquet")
    monkeypatch.chdir(tmp_path)
    code = main(["predict", "--model", str(old), "-f", bars, "--out", str(tmp_path / "fc.parquet")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "vix.csv" in err[0] and "training run's --covariates" in err[0] and str(old / "model.json") in err[0]
    assert "--covariates PATH" in err[0] and "covariates=[PATH]" in err[0]
    with pytest.raises(Exception, match="training run's --covariates"):
        Forecaster.load(old)
    monkeypatch.chdir(trained.parent)  # where training ran: read as before
    assert main(["predict", "--model", str(old), "-f", bars, "--out", str(tmp_path / "fc.parquet")]) == 0
    monkeypatch.chdir(tmp_path)
    assert main(["predict", "--model", str(old), "-f", bars, "--out", str(tmp_path / "fc2.parquet"),
                 "--covariates", str(trained.parent / "vix.csv")]) == 0


def test_a_saved_absolute_covariates_file_gone_is_said_moved_or_deleted(trained, tmp_path, capsys):
    """A run's --covariates are saved absolute: one gone since training was moved or deleted, not typed relative to
    another directory."""
    moved = tmp_path / "moved"
    shutil.copytree(trained, moved)
    meta = json.loads((moved / "model.json").read_text())
    gone = str(tmp_path / "gone" / "vix.csv")
    meta["data"]["covariates"] = [gone]
    meta["transform"]["inputs"]["sources"] = {"vix": gone}
    (moved / "model.json").write_text(json.dumps(meta))
    code = main(["predict", "--model", str(moved), "-f", str(trained.parent / "bars.parquet"), "--out",
                 str(tmp_path / "fc.parquet")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert gone in err[0] and "moved or deleted since training" in err[0] and "as typed" not in err[0]
    assert "training run's --covariates" in err[0] and "--covariates PATH" in err[0]


def test_the_event_calendar_saved_with_the_model_is_used_without_its_file(trained, tmp_path, monkeypatch):
    """model.json holds the calendar: the training run's events file (relative in an older model, or gone) is not
    read again unless --events names one."""
    old = tmp_path / "old"
    shutil.copytree(trained, old)
    meta = json.loads((old / "model.json").read_text())
    meta["data"]["events"] = "gone.csv"
    (old / "model.json").write_text(json.dumps(meta))
    monkeypatch.chdir(tmp_path)
    bars = str(trained.parent / "bars.parquet")
    out = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(old), "-f", bars, "--out", str(out)]) == 0
    assert main(["predict", "--model", str(trained), "-f", bars, "--out", str(tmp_path / "same.parquet")]) == 0
    assert pl.read_parquet(out).equals(pl.read_parquet(tmp_path / "same.parquet"))
