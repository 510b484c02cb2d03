"""`foxhunt predict` and `foxhunt evaluate` end to end on a tiny model trained in the test."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from foxhunt.cli import main

TINY = ["--hidden-size", "8", "--attention-heads", "2", "--encoder-length", "16", "--horizon", "3", "--no-progress",
        "--threads", "1"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, request):
    fixtures = request.config.rootpath / "tests" / "fixtures"
    run = tmp_path_factory.mktemp("model") / "run"
    assert main(["train", *TINY, "--parquet-file", str(fixtures / "generic_ohlcv_daily.parquet"), "--epochs", "2",
                 "--train-end", "2024-07-01", "--test-fraction", "0", "--run-dir", str(run)]) == 0
    return run


@pytest.fixture(scope="module")
def daily(request):
    return request.config.rootpath / "tests" / "fixtures" / "generic_ohlcv_daily.parquet"


def test_predict_writes_one_row_per_series_origin_horizon(model_dir, daily, tmp_path):
    out = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(model_dir), "--parquet-file", str(daily), "--out", str(out)]) == 0
    fc = pl.read_parquet(out)
    assert fc.columns == ["symbol", "origin", "horizon", "target_time", "p10", "p50", "p90", "actual"]
    assert set(fc["symbol"]) == {"ES", "NQ"}
    assert fc["horizon"].unique().sort().to_list() == [1, 2, 3]
    # every origin with a full encoder behind it: bars 2..300 have a return (299), the first 15 of them cannot
    # end an encoder of 16 bars, so 299 - 15 = 284 origins per series, the last bar included
    assert fc.group_by("symbol").agg(pl.col("origin").n_unique())["origin"].to_list() == [284, 284]
    assert (fc["p10"] <= fc["p50"]).all() and (fc["p50"] <= fc["p90"]).all()
    last = fc.filter(pl.col("origin") == pl.col("origin").max())
    assert last["actual"].is_null().all()  # the live forecast: its steps' times are the grid's, the next weekdays
    assert last.sort("symbol", "horizon")["target_time"].dt.date().to_list() == [
        dt.date(2024, 12, 10), dt.date(2024, 12, 11), dt.date(2024, 12, 12)] * 2
    inside = fc.filter(pl.col("actual").is_not_null())
    assert (inside["target_time"] > inside["origin"]).all()
    # actual is the realised log return of the target bar
    raw = pl.read_parquet(daily).filter(pl.col("symbol") == "ES").sort("timestamp")
    ret = np.diff(np.log(raw["close"].to_numpy()))
    es = inside.filter((pl.col("symbol") == "ES") & (pl.col("horizon") == 1)).sort("origin")
    np.testing.assert_allclose(es["actual"].to_numpy()[-5:], ret[-5:], rtol=1e-5)


def test_predict_respects_start_and_end(model_dir, daily, tmp_path):
    out = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(model_dir), "--parquet-file", str(daily), "--out", str(out),
                 "--start", "2024-09-02", "--end", "2024-09-30"]) == 0
    first = pl.read_parquet(out).filter(pl.col("horizon") == 1)["target_time"]
    assert str(first.min())[:10] >= "2024-09-02" and str(first.max())[:10] <= "2024-09-30"


def test_predict_on_an_unseen_file_and_symbol_uses_the_unknown_series_fallback(model_dir, request, tmp_path):
    spx = request.config.rootpath / "tests" / "fixtures" / "spx_daily.parquet"
    out = tmp_path / "spx.parquet"
    assert main(["predict", "--model", str(model_dir), "--parquet-file", str(spx), "--out", str(out),
                 "--start", "2018-12-01"]) == 0
    fc = pl.read_parquet(out)
    assert set(fc["symbol"]) == {"SPX"} and fc.height > 0
    assert fc.select(pl.col("p10", "p50", "p90").is_finite().all()).row(0) == (True, True, True)


def test_predict_with_intraday_bars_on_a_daily_model_is_a_clear_error(model_dir, request, tmp_path, capsys):
    hourly = request.config.rootpath / "tests" / "fixtures" / "es_fut_ohlcv1h_databento.parquet"
    code = main(["predict", "--model", str(model_dir), "--parquet-file", str(hourly), "--out",
                 str(tmp_path / "x.parquet")])
    assert code == 2 and "daily" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


def test_evaluate_scores_model_and_baselines_on_the_same_origins(model_dir, daily, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["evaluate", "--model", str(model_dir), "--parquet-file", str(daily), "--start", "2024-07-01",
                 "--out-dir", str(out)]) == 0
    assert "simulated" not in capsys.readouterr().out.lower()  # real bars: the terminal table neither
    metrics = json.loads((out / "metrics.json").read_text())
    names = {"training_quantiles", "rolling_vol"}
    assert names <= set(metrics["baselines"])
    n = metrics["model"]["overall"]["n"]
    assert all(b["overall"]["n"] == n for b in metrics["baselines"].values())
    assert set(metrics["model"]["per_series"]) == {"ES", "NQ"}
    for q in ("0.1", "0.5", "0.9"):
        assert metrics["model"]["overall"]["q_risk"][q] > 0
        assert q in metrics["skill"]["training_quantiles"]
    interp = json.loads((out / "interpretation.json").read_text())
    assert abs(sum(interp["encoder"].values()) - 1) < 1e-4 and len(interp["attention_by_lag"]) == 3
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 6  # fans, calibration, q-risk, importance, attention, curves, memory
    assert "simulated" not in html.lower()  # real bars: no word of the bundled sample


def test_evaluate_on_the_bundled_sample_says_it_is_simulated(model_dir, daily, tmp_path, capsys):
    """The sample is known by its file name (data/io/sample_path.py); a file of that name is taken for it. The
    report's claim and data note say so, and so does the terminal table's header line."""
    from foxhunt.data.io.sample_path import DEFAULT_SEED, SAMPLE_VERSION

    sample = tmp_path / f"es_ohlcv1m_sample_v{SAMPLE_VERSION}_seed{DEFAULT_SEED}.parquet"
    shutil.copy(daily, sample)
    out = tmp_path / "eval"
    assert main(["evaluate", "--model", str(model_dir), "--parquet-file", str(sample), "--start", "2024-07-01",
                 "--out-dir", str(out)]) == 0
    html = (out / "report.html").read_text()
    claim = html[html.index('<p class="claim">'):html.index("</p>", html.index('<p class="claim">'))]
    assert "SIMULATED ES 1-minute bars" in claim and f"data: {sample} (simulated: the bundled sample)" in html
    header = [line for line in capsys.readouterr().out.splitlines() if line.startswith("source ")]
    assert len(header) == 1 and header[0].endswith("  (simulated)")


def test_evaluate_can_score_forecasts_written_by_predict(model_dir, daily, tmp_path, monkeypatch):
    fc = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(model_dir), "--parquet-file", str(daily), "--out", str(fc)]) == 0
    a, b = tmp_path / "a", tmp_path / "b"
    args = ["--model", str(model_dir), "--parquet-file", str(daily), "--start", "2024-07-01"]
    assert main(["evaluate", *args, "--out-dir", str(a)]) == 0
    read_schema, schemas_read = pq.read_schema, []
    monkeypatch.setattr(pq, "read_schema", lambda path, *a, **k: schemas_read.append(path) or read_schema(path, *a, **k))
    assert main(["evaluate", *args, "--out-dir", str(b), "--forecasts", str(fc)]) == 0
    assert schemas_read.count(fc) == 1  # the file's metadata read once: who made it, and how it is calibrated
    ma = json.loads((a / "metrics.json").read_text())["model"]["overall"]["q_risk"]
    mb = json.loads((b / "metrics.json").read_text())["model"]["overall"]["q_risk"]
    assert ma == pytest.approx(mb, rel=1e-5)


def _with_metadata(src, dst, change) -> None:
    """`src`'s forecasts written to `dst` with their "foxhunt" metadata changed by `change` (None: dropped)."""
    table = pq.read_table(src)
    info = json.loads(table.schema.metadata[b"foxhunt"])
    info = change(info)
    pq.write_table(table.replace_schema_metadata(None if info is None else {b"foxhunt": json.dumps(info).encode()}),
                   dst)


def test_forecasts_say_what_they_hold_and_evaluate_refuses_another_models(model_dir, daily, tmp_path, capsys):
    """The file names its target and units, quantiles, horizon, bar spacing, model and weights digest; evaluate
    refuses forecasts of other weights or of bars of another spacing in one line, and scores a file without the
    metadata (written before it) with a warning."""
    fc = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(model_dir), "--parquet-file", str(daily), "--out", str(fc)]) == 0
    meta = json.loads(pq.read_schema(fc).metadata[b"foxhunt"])
    assert meta["target"] == "log_return" and "natural log" in meta["units"] and meta["horizon"] == 3
    assert meta["quantiles"] == {"p10": 0.1, "p50": 0.5, "p90": 0.9} and meta["calibrated"] is True
    assert meta["bar_interval"] == "1d" and meta["model_bar_interval"] == "1d"
    assert meta["model_dir"] == str(model_dir.resolve())
    assert meta["weights_sha256"] == hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()
    args = ["evaluate", "--model", str(model_dir), "--parquet-file", str(daily), "--start", "2024-07-01"]
    capsys.readouterr()
    other = tmp_path / "other.parquet"
    _with_metadata(fc, other, lambda m: {**m, "weights_sha256": "0" * 64, "model_dir": "/runs/other"})
    assert main([*args, "--out-dir", str(tmp_path / "a"), "--forecasts", str(other)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("foxhunt: error:") and "made by another model (/runs/other" in err
    hourly = tmp_path / "hourly.parquet"
    _with_metadata(fc, hourly, lambda m: {**m, "bar_interval": "1h"})
    assert main([*args, "--out-dir", str(tmp_path / "b"), "--forecasts", str(hourly)]) == 2
    assert "forecast from 1h bars, but these bars are 1d" in capsys.readouterr().err
    older = tmp_path / "older.parquet"
    _with_metadata(fc, older, lambda m: None)
    assert main([*args, "--out-dir", str(tmp_path / "c"), "--forecasts", str(older)]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "does not say which model made it" in line]
    assert len(warned) == 1


def test_bad_dates_and_missing_model_are_one_line_errors(model_dir, daily, tmp_path, capsys):
    assert main(["predict", "--model", str(model_dir), "--parquet-file", str(daily), "--out",
                 str(tmp_path / "x.parquet"), "--start", "July"]) == 2
    assert "--start" in capsys.readouterr().err
    assert main(["evaluate", "--model", str(tmp_path / "nope"), "--parquet-file", str(daily), "--out-dir",
                 str(tmp_path / "e")]) == 2
    assert "model.json" in capsys.readouterr().err
