"""A model reads bars into the series it was trained on: what `--contracts auto` decided on its training bars
(bars/chains.py: CF0 and CU0 are cotton and copper, not contracts of a root C) is saved with it and applied by predict,
evaluate, backtest folds, export and the Python API, where three months of 2019 bars would on their own read as
contracts of C and roll into one series (issue 43, item 2)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import polars as pl
import pytest

from foxhunt import Forecaster
from foxhunt.cli import main
from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.model.saved import load_model
from foxhunt.predict.origins import prepare_for_model
from tests.data.bars.test_chains import panel

SYMBOLS = ("CF0", "CU0")


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_flags) -> Path:
    """A tiny model trained on six years (2011-2017) of CF0 and CU0, each its own series."""
    folder = tmp_path_factory.mktemp("contracts")
    bars = panel(folder / "cn.parquet", SYMBOLS)
    run_dir = folder / "run"
    assert main(["train", "-f", bars, *tiny_flags, "--epochs", "1", "--max-train-batches", "2",
                 "--run-dir", str(run_dir)]) == 0
    return run_dir


@pytest.fixture(scope="module")
def months(tmp_path_factory) -> str:
    """Three months of CF0 and CU0 bars of 2019, near the 2020 expiries their names read as: a chain, on their own."""
    path = panel(tmp_path_factory.mktemp("months") / "q.parquet", SYMBOLS, dt.date(2019, 9, 2), dt.date(2019, 11, 29))
    assert list(load_bars(DataConfig(paths=(path,))).report["series"]) == ["C"]  # what the rule alone decides
    return path


def test_the_decision_is_saved_with_the_model_and_read_by_predict_and_the_python_api(run, months, tmp_path):
    transform = json.loads((run / "model.json").read_text())["transform"]
    assert (transform["roots_apart"], transform["roots_rolled"]) == (["C"], [])
    out = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(run), "-f", months, "--out", str(out)]) == 0
    assert sorted(pl.read_parquet(out)["symbol"].unique()) == list(SYMBOLS)
    forecasts = Forecaster.load(run).predict(pl.read_parquet(months))
    assert sorted(forecasts["symbol"].unique()) == list(SYMBOLS)
    assert prepare_for_model(load_model(run), (months,)).windows.series_names == SYMBOLS  # export's parity data


