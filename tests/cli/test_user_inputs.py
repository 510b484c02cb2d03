"""Your own inputs end to end: train -> inspect -> predict -> evaluate -> export with an observed column of the bar
files, an observed covariate file, a known covariate and an events file, on the generic daily fixture (ES and NQ);
and the bad inputs that stop with one line and exit 2."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from foxhunt.cli import main
from foxhunt.model.saved import load_model

DAY = 86_400 * 10**9


@pytest.fixture(scope="module")
def files(tmp_path_factory, daily_path) -> dict[str, Path]:
    """The bars with a `flow` column, an unkeyed daily `vix` file (stamped at 21:00 UTC, after each bar's
    midnight stamp: a bar sees the value of the day before), a known `holiday_eve` file running 30 days past the
    bars, and an events file."""
    folder = tmp_path_factory.mktemp("inputs")
    bars = pl.read_parquet(daily_path)
    rng = np.random.default_rng(0)
    bars = bars.with_columns(flow=pl.Series(rng.normal(0, 1, bars.height)))
    out = {"bars": folder / "bars.parquet"}
    bars.write_parquet(out["bars"])
    days = np.arange(int(bars["timestamp"].min().timestamp() * 1e9) - 5 * DAY,
                     int(bars["timestamp"].max().timestamp() * 1e9) + 30 * DAY, DAY, dtype=np.int64)
    vix = pl.DataFrame({"time": pl.Series(days + 21 * 3600 * 10**9).cast(pl.Datetime("ns", "UTC")),
                        "vix": 15 + np.abs(rng.normal(0, 5, len(days)))})
    out["vix"] = folder / "vix.csv"
    vix.write_csv(out["vix"])
    eve = pl.DataFrame({"date": pl.Series(days).cast(pl.Datetime("ns", "UTC")),
                        "holiday_eve": (rng.random(len(days)) < 0.05).astype(float)})
    out["eve"] = folder / "eve.parquet"
    eve.write_parquet(out["eve"])
    fomc, expiry = days[::20] + 13 * 3600 * 10**9, days[7::15] + 14 * 3600 * 10**9  # expiries: ES's alone
    ev = pl.DataFrame({"time": pl.Series(np.concatenate([fomc, expiry])).cast(pl.Datetime("ns", "UTC")),
                       "name": ["FOMC decision"] * len(fomc) + ["expiry"] * len(expiry),
                       "symbol": [""] * len(fomc) + ["ES"] * len(expiry)})
    out["events"] = folder / "events.csv"
    ev.write_csv(out["events"])
    return out


def flags(files: dict[str, Path]) -> list[str]:
    return ["--parquet-file", str(files["bars"]), "--observed", "flow,vix", "--known", "holiday_eve",
            "--covariates", str(files["vix"]), "--covariates", str(files["eve"]), "--events", str(files["events"])]


@pytest.fixture(scope="module")
def run(files, tiny_flags, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("run") / "run"
    assert main(["train", *flags(files), *tiny_flags, "--run-dir", str(run_dir)]) == 0
    return run_dir


EVENT_COLUMNS = ["expiry_until", "expiry_since", "expiry_in_bar", "fomc_decision_until", "fomc_decision_since",
                 "fomc_decision_in_bar"]


def test_the_model_saves_its_inputs_and_their_scaling(run):
    meta = json.loads((run / "model.json").read_text())
    tf = meta["transform"]
    assert tf["inputs"]["observed"] == ["flow", "vix"] and tf["inputs"]["known"] == ["holiday_eve"]
    assert load_model(run).transform.inputs.known_names == ("holiday_eve", *EVENT_COLUMNS)
    assert tf["scalers"]["user_observed"] == ["flow", "vix"]
    assert set(tf["scalers"]["series"]) == {"ES", "NQ"} and "vix" in tf["scalers"]["series"]["ES"]
    known = [f["name"] for f in meta["schema"]["features"] if f["role"] == "known"]
    observed = [f["name"] for f in meta["schema"]["features"] if f["role"] == "observed"]
    assert known[-8:] == ["holiday_eve", *EVENT_COLUMNS, "relative_time"]
    events = tf["inputs"]["events"]  # the calendar, its keys kept
    assert set(events["events"]) == {"expiry", "fomc_decision"} and events["events"]["expiry"] == []
    assert list(events["keyed"]) == ["ES"] and len(events["keyed"]["ES"]["expiry"]) > 0
    assert observed[-2:] == ["flow", "vix"]


def test_inspect_lists_each_input_with_role_source_and_span(files, capsys):
    assert main(["inspect", *flags(files)]) == 0
    out = capsys.readouterr().out
    assert "input     flow: observed real from" in out and "bars.parquet" in out
    assert "input     vix: observed real from" in out and "input     holiday_eve: known real" in out
    assert "events of expiry, fomc_decision (keyed to ES)" in out


def test_predict_and_evaluate_use_the_saved_sources(run, files, tmp_path, capsys):
    out = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(run), "--parquet-file", str(files["bars"]), "--out", str(out)]) == 0
    fc = pl.read_parquet(out)
    assert fc.height > 0 and fc["p50"].is_finite().all()
    assert main(["evaluate", "--model", str(run), "--parquet-file", str(files["bars"]), "--out-dir",
                 str(tmp_path / "ev")]) == 0
    interp = json.loads((tmp_path / "ev" / "interpretation.json").read_text())
    names = json.dumps(interp)
    assert "vix" in names and "holiday_eve" in names and "fomc_decision_until" in names


def test_a_known_input_that_does_not_reach_the_forecast_steps_stops(run, files, tmp_path, capsys):
    short = tmp_path / "eve_short.parquet"
    eve = pl.read_parquet(files["eve"])
    last = pl.read_parquet(files["bars"])["timestamp"].max().replace(tzinfo=dt.UTC)
    eve.filter(pl.col("date") <= last).write_parquet(short)
    code = main(["predict", "--model", str(run), "--parquet-file", str(files["bars"]), "--out",
                 str(tmp_path / "x.parquet"), "--covariates", str(files["vix"]), "--covariates", str(short)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "holiday_eve" in err and "Traceback" not in err


def test_export_describes_every_input(run, tmp_path):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "m.onnx"
    assert main(["export", "--model", str(run), "--out", str(out)]) == 0
    side = json.loads(out.with_suffix(".onnx.json").read_text())
    assert side["your_inputs"]["observed"] == ["flow", "vix"]
    assert "as of the bar" in side["features"]["vix"]
    assert "fomc_decision" in side["features"]["fomc_decision_until"]


def assert_live_forecasts_of_predict(got: pl.DataFrame, run: Path, bars: Path, tmp_path: Path) -> None:
    """`got` (Forecaster.predict on a frame of `bars`) equals `foxhunt predict`'s forecasts from each series' last
    bar on the file."""
    out = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(run), "--parquet-file", str(bars), "--out", str(out)]) == 0
    fc = pl.read_parquet(out)
    live = fc.filter(pl.col("origin") == pl.col("origin").max().over("symbol"))
    np.testing.assert_allclose(got.sort("symbol", "horizon")["p50"].to_numpy(),
                               live.sort("symbol", "horizon")["p50"].to_numpy(), rtol=1e-5, atol=1e-7)


def test_python_predict_on_a_frame_reads_the_covariate_files(files, tiny_flags, tmp_path):
    """A model of covariate inputs (no bar-file column) forecasts a frame in memory like `foxhunt predict` does its
    file."""
    from foxhunt.api.forecaster import Forecaster

    run_dir = tmp_path / "cov"
    cov = ["--observed", "vix", "--known", "holiday_eve", "--covariates", str(files["vix"]), "--covariates",
           str(files["eve"]), "--events", str(files["events"])]
    assert main(["train", "--parquet-file", str(files["bars"]), *cov, *tiny_flags, "--run-dir", str(run_dir)]) == 0
    frame = pl.read_parquet(files["bars"])
    got = Forecaster.load(run_dir).predict(frame)
    assert_live_forecasts_of_predict(got, run_dir, files["bars"], tmp_path)


def test_python_predict_reads_a_bar_column_from_the_frame(run, files, tmp_path):
    """A model of a bar-file column (`flow`) forecasts a frame in memory from the frame's own column, as
    `foxhunt predict` does from the file's."""
    from foxhunt.api.forecaster import Forecaster

    got = Forecaster.load(run).predict(pl.read_parquet(files["bars"]))
    assert_live_forecasts_of_predict(got, run, files["bars"], tmp_path)
    moved = pl.read_parquet(files["bars"]).with_columns(pl.col("flow") + 3.0)
    assert not np.allclose(Forecaster.load(run).predict(moved)["p50"].to_numpy(), got["p50"].to_numpy())


def test_update_takes_the_bars_observed_fields(run, files):
    """flow comes from the bar files: a bar must carry it (vix, from a --covariates file, may be left out: it is
    read from the file as of the bar's time); with it, the stream starts (no forecast before its encoder is full)."""
    from foxhunt.api.forecaster import Forecaster
    from foxhunt.errors import InputError

    fc = Forecaster.load(run)
    bar = pl.read_parquet(files["bars"]).filter(pl.col("symbol") == "ES").row(0, named=True)
    with pytest.raises(InputError, match="the bar of 'ES' has no 'flow'; the model takes it as an observed input"):
        fc.update({k: v for k, v in bar.items() if k != "flow"})
    assert fc._stream.n.tolist() == [0]  # refused before the series moved
    assert fc.update(bar).height == 0
    assert fc._stream.n.tolist() == [1]


@pytest.mark.parametrize(("extra", "needle"), [
    (["--observed", "nope"], "nope"),
    (["--observed", "close"], "foxhunt's own"),
    (["--observed", "flow", "--known", "flow"], "both --observed and --known"),
    (["--known", "flow"], "--known flow"),
    (["--covariate-scaling", "rank"], "--covariate-scaling"),
])
def test_bad_inputs_stop_with_one_line(files, capsys, extra, needle):
    code = main(["inspect", "--parquet-file", str(files["bars"]), "--covariates", str(files["vix"]), *extra])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("foxhunt: error:") and needle in err and "Traceback" not in err


def test_a_config_file_declares_inputs_like_the_flags(files, tiny_flags, tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'[inputs]\nobserved = ["vix"]\ncovariates = ["{files["vix"]}"]\nevents = "{files["events"]}"\n'
                   'covariate-scaling = "global"\n')
    run_dir = tmp_path / "run"
    assert main(["train", "--parquet-file", str(files["bars"]), "--config", str(cfg), *tiny_flags,
                 "--run-dir", str(run_dir)]) == 0
    meta = json.loads((run_dir / "model.json").read_text())
    got = meta["transform"]["inputs"]
    assert got["observed"] == ["vix"] and meta["data"]["covariate_scaling"] == "global" and got["events"] is not None


def test_a_store_keeps_the_inputs_and_trains_like_the_files(files, tiny_flags, tmp_path):
    """`foxhunt prepare` with inputs (prepared in memory: a panel this small is not pieced) writes the inputs
    into the store's transform; a run trained from the store has them."""
    store, run_dir = tmp_path / "store", tmp_path / "run"
    cov = ["--observed", "vix", "--covariates", str(files["vix"]), "--events", str(files["events"])]
    shape = ["--encoder-length", "16", "--horizon", "3"]
    assert main(["prepare", "--parquet-file", str(files["bars"]), *cov, *shape, "--out", str(store)]) == 0
    assert main(["train", "--features", str(store), *tiny_flags, "--run-dir", str(run_dir)]) == 0
    got = json.loads((run_dir / "model.json").read_text())
    assert got["transform"]["inputs"]["observed"] == ["vix"]
    assert [f["name"] for f in got["schema"]["features"]][-1] == "vix"


def test_a_backtest_with_inputs_gives_each_fold_train_then_predict(files, tiny_flags, tmp_path):
    """`foxhunt backtest` takes the inputs like `train`: each fold's model saves them, and a fold's forecasts are
    those of `train` then `predict` with the same inputs on the same dates (its covariates and calendar included)."""
    common = [*flags(files), *tiny_flags, "--epochs", "1", "--seed", "3", "--quiet"]
    out = tmp_path / "bt"
    assert main(["backtest", "--out-dir", str(out), "--folds", "2", "--test-length", "60d", "--val-length", "60d",
                 *common]) == 0
    fold = json.loads((out / "fold-01" / "fold.json").read_text())
    saved = json.loads((Path(fold["run_dir"]) / "model.json").read_text())["transform"]["inputs"]
    assert saved["observed"] == ["flow", "vix"] and saved["known"] == ["holiday_eve"]
    run = tmp_path / "run"
    assert main(["train", *common, "--train-end", fold["val_start"], "--val-end", fold["test_start"],
                 "--run-dir", str(run)]) == 0
    pred = tmp_path / "pred.parquet"
    assert main(["predict", "--model", str(run), "--parquet-file", str(files["bars"]), "--start", fold["test_start"],
                 "--end", fold["test_end"], "--out", str(pred), "--threads", "1"]) == 0
    expected = pl.read_parquet(pred)
    assert expected.height > 0
    assert pl.read_parquet(out / "fold-01" / "forecasts.parquet").equals(expected)


def test_a_tuning_study_takes_the_inputs_and_its_best_config_keeps_them(files, tiny_flags, tmp_path):
    """`foxhunt tune` trains each trial with the inputs (fixed options of the study), and best.toml, a train config,
    declares them as the flags did."""
    pytest.importorskip("optuna")
    from foxhunt.settings import load_config_file

    (tmp_path / "space.toml").write_text("[dropout]\nchoices = [0.0]\n")
    assert main(["tune", "--trials", "1", "--out-dir", str(tmp_path), "--search", str(tmp_path / "space.toml"),
                 *flags(files), *tiny_flags, "--epochs", "1", "--quiet"]) == 0
    values = load_config_file(tmp_path / "best.toml", {"observed", "known", "covariates", "events", "parquet_file",
                                                       "dropout", "epochs", "hidden_size", "attention_heads",
                                                       "encoder_length", "horizon", "progress", "threads"})
    assert (values["observed"], values["known"], values["events"]) == ("flow,vix", "holiday_eve", str(files["events"]))
    assert values["covariates"] == [str(files["vix"]), str(files["eve"])]
    models = list(tmp_path.rglob("model.json"))
    assert models and json.loads(models[0].read_text())["transform"]["inputs"]["known"] == ["holiday_eve"]
