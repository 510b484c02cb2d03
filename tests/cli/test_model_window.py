"""A model reads bars from its own data window: trained with --since beside a covariate that starts years after the
bars (issue 43, item 3), predict, evaluate, backtest, export and the Python API read from the model's --since by
default, take --since / --until to override it, and say which bars they read."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from foxhunt import Forecaster
from foxhunt.cli import main
from foxhunt.model.saved import load_model
from foxhunt.predict.origins import prepare_for_model

SINCE = "2016-01-04"  # the SPX fixture runs 1999-01-04 .. 2018-12-31
ENCODER = 16  # tiny_flags'


@pytest.fixture(scope="module")
def vix(spx_path, tmp_path_factory) -> Path:
    """A VIX-like daily close from the session before SINCE on, stamped 21:00 UTC (after the day's midnight bar):
    17 years after the first bar."""
    ts = pl.read_parquet(spx_path)["timestamp"]
    ts = ts.filter(ts >= dt.datetime(2015, 12, 31, tzinfo=dt.UTC)) + dt.timedelta(hours=21)
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("vix") / "vix.parquet"
    pl.DataFrame({"time": ts, "vix": 15 * np.exp(np.cumsum(rng.normal(0, 0.05, len(ts))))}).write_parquet(path)
    return path


@pytest.fixture(scope="module")
def run(spx_path, vix, tiny_flags, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("run") / "run"
    assert main(["train", "-f", str(spx_path), "--since", SINCE, "--covariates", str(vix), "--observed", "vix",
                 *tiny_flags, "--epochs", "1", "--max-train-batches", "2", "--run-dir", str(run_dir)]) == 0
    return run_dir


def bars_from(spx_path: Path, since: str) -> pl.Series:
    ts = pl.read_parquet(spx_path)["timestamp"]
    return ts.filter(ts >= dt.datetime.fromisoformat(since).replace(tzinfo=dt.UTC))


def test_evaluate_predict_and_export_read_from_the_models_since(run, spx_path, vix, tmp_path, capsys):
    # the command: the bars from 1999, the covariate from 2016, no --since
    assert main(["evaluate", "--model", str(run), "-f", str(spx_path), "--covariates", str(vix),
                 "--start", "2018-01-01", "--out-dir", str(tmp_path / "eval")]) == 0
    assert f"reading bars since {SINCE} (the model's --since)" in capsys.readouterr().err
    period = json.loads((tmp_path / "eval" / "metrics.json").read_text())["period"]
    assert "2017-12-28" <= period["first_origin"] < "2018-01-03", period
    assert (period["since"], period["until"]) == (SINCE, None)  # the bars read, as metrics.json records them
    out = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(run), "-f", str(spx_path), "--out", str(out)]) == 0
    origins = pl.read_parquet(out)["origin"]
    bars = bars_from(spx_path, SINCE)
    assert origins.min() == bars[ENCODER] and origins.max() == bars[-1]  # the first full encoder .. the live one
    # export's parity data: the same bars, read within the model's window
    data = prepare_for_model(load_model(run), (str(spx_path),))
    assert int(data.windows.ts_ns.min()) == bars[0].timestamp() * 10**9


def test_a_backtest_reads_and_scores_within_its_since_and_until(spx_path, vix, tiny_flags, tmp_path):
    out = tmp_path / "bt"
    assert main(["backtest", "-f", str(spx_path), "--since", SINCE, "--until", "2018-07-02", "--covariates",
                 str(vix), "--observed", "vix", "--folds", "2", "--test-length", "6mo", "--val-length", "6mo",
                 "--refit", "once", *tiny_flags, "--epochs", "1", "--max-train-batches", "2",
                 "--out-dir", str(out)]) == 0
    origins = pl.read_parquet(out / "forecasts.parquet")["origin"]
    assert origins.min() >= dt.datetime(2017, 6, 1, tzinfo=dt.UTC)
    assert origins.max() < dt.datetime(2018, 7, 2, tzinfo=dt.UTC)  # the last fold stops at --until


def test_since_and_until_override_the_models_window(run, spx_path, tmp_path, capsys):
    out = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(run), "-f", str(spx_path), "--since", "2017-01-03",
                 "--until", "2018-01-01", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"reading bars since 2017-01-03 (--since; the model's: {SINCE}) until 2018-01-01 (--until)" in err
    origins = pl.read_parquet(out)["origin"]
    bars = bars_from(spx_path, "2017-01-03")
    assert origins.min() == bars[ENCODER] and origins.max() < dt.datetime(2018, 1, 1, tzinfo=dt.UTC)
    # --start before the first forecast that --since allows: forecasts start later, and the console says so
    assert main(["predict", "--model", str(run), "-f", str(spx_path), "--since", "2018-01-02", "--start",
                 "2018-01-02", "--out", str(out)]) == 0
    first = bars_from(spx_path, "2018-01-02")[ENCODER + 1]
    assert (f"--start 2018-01-02 comes before the first forecast that the bars since --since 2018-01-02 allow, "
            f"{first:%Y-%m-%d}") in capsys.readouterr().err


def test_a_since_that_leaves_no_encoder_stops_in_one_line(run, spx_path, tmp_path, capsys):
    assert main(["evaluate", "--model", str(run), "-f", str(spx_path), "--since", "2018-12-14",
                 "--out-dir", str(tmp_path / "eval")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == ("foxhunt: error: --since 2018-12-14 leaves 11 bars in the longest series, SPX (2018-12-14 .. "
                   "2018-12-31), fewer than the 17 a forecast needs (the model's encoder 16 + 1: the first bar has "
                   "no return); pass an earlier --since")
    assert main(["predict", "--model", str(run), "--features", str(tmp_path), "--since", SINCE,
                 "--out", str(tmp_path / "fc.parquet")]) == 2
    assert "--features reads a store's windows" in capsys.readouterr().err


def test_the_python_api_reads_a_frame_from_the_models_since(run, spx_path):
    frame = pl.read_parquet(spx_path)  # from 1999: years before the covariate
    live = Forecaster.load(run).predict(frame)
    assert live["origin"].unique().to_list() == [frame["timestamp"][-1]]
    earlier = Forecaster.load(run, until="2018-01-01").predict(frame)
    assert earlier["origin"].unique().to_list() == [bars_from(spx_path, "2017-12-29")[0]]


def test_the_window_line_names_who_chose_each_bound():
    from foxhunt.predict.bar_range import window_text

    assert window_text(None, None) is None
    assert window_text(SINCE, None, SINCE) == f"reading bars since {SINCE} (the model's --since)"
    assert window_text("2017-01-03", None, SINCE) == f"reading bars since 2017-01-03 (--since; the model's: {SINCE})"
    assert window_text(SINCE, "2019-01-01", SINCE, "2019-01-01") == (
        f"reading bars since {SINCE} (the model's --since) until 2019-01-01 (the model's --until)")
    assert window_text(None, None, None, "2017-01-01") == (
        "reading bars to the last bar (the model's --until 2017-01-01 bounded its training, not its forecasts)")
