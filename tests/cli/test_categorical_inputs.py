"""Categorical observed and known inputs end to end: train -> inspect -> predict -> evaluate -> export with a text
`regime` column of the bar files (--observed) and a text `session_type` column of a covariate file running 30 days
past the bars (--known), on the generic daily fixture (ES and NQ); a regime unseen in training gets code 0, said
once; Forecaster.update continues predict's stream of such a model (parity:
tests/data/features/test_codes_live.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from foxhunt.cli import main

DAY = 86_400 * 10**9
REGIMES = ("calm", "storm", "trend")
SESSIONS = ("full", "half", "holiday")


@pytest.fixture(scope="module")
def files(tmp_path_factory, daily_path) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("categorical")
    bars = pl.read_parquet(daily_path)
    rng = np.random.default_rng(0)
    bars = bars.with_columns(regime=pl.Series([REGIMES[i] for i in rng.integers(0, 3, bars.height)]))
    out = {"bars": folder / "bars.parquet", "session": folder / "session.csv"}
    bars.write_parquet(out["bars"])
    days = np.arange(int(bars["timestamp"].min().timestamp() * 1e9) - 5 * DAY,
                     int(bars["timestamp"].max().timestamp() * 1e9) + 30 * DAY, DAY, dtype=np.int64)
    pl.DataFrame({"date": pl.Series(days).cast(pl.Datetime("ns", "UTC")),
                  "session_type": [SESSIONS[i] for i in rng.integers(0, 3, len(days))]}).write_csv(out["session"])
    return out


def flags(files: dict[str, Path]) -> list[str]:
    return ["--parquet-file", str(files["bars"]), "--observed", "regime", "--known", "session_type",
            "--covariates", str(files["session"])]


@pytest.fixture(scope="module")
def run(files, tiny_flags, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("run") / "run"
    assert main(["train", *flags(files), *tiny_flags, "--run-dir", str(run_dir)]) == 0
    return run_dir


def test_the_model_saves_the_vocabularies_and_the_schema_sizes_the_embeddings(run):
    meta = json.loads((run / "model.json").read_text())
    got = meta["transform"]["inputs"]
    assert got["observed_cat"] == ["regime"] and got["known_cat"] == ["session_type"]
    assert got["observed"] == [] and got["known"] == []
    assert got["timed_vocab"] == {"regime": list(REGIMES), "session_type": list(SESSIONS)}
    cats = {(f["name"], f["role"]): f["cardinality"] for f in meta["schema"]["features"]
            if f["kind"] == "categorical"}
    assert cats[("regime", "observed")] == 4 and cats[("session_type", "known")] == 4


def test_inspect_lists_them_as_categorical(files, capsys):
    assert main(["inspect", *flags(files)]) == 0
    out = capsys.readouterr().out
    assert "input     regime: observed categorical from" in out
    assert "input     session_type: known categorical from" in out


def test_predict_and_evaluate_read_them_and_importance_lists_them(run, files, tmp_path):
    out = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(run), "--parquet-file", str(files["bars"]), "--out", str(out)]) == 0
    fc = pl.read_parquet(out)
    assert fc.height > 0 and fc["p50"].is_finite().all()
    assert main(["evaluate", "--model", str(run), "--parquet-file", str(files["bars"]), "--out-dir",
                 str(tmp_path / "ev")]) == 0
    interp = json.loads((tmp_path / "ev" / "interpretation.json").read_text())
    assert "regime" in interp["encoder"] and "session_type" in interp["encoder"]
    assert "session_type" in interp["decoder"] and "regime" not in interp["decoder"]


def test_a_regime_unseen_in_training_gets_the_unknown_code_said_once(run, files, tmp_path, caplog):
    other = tmp_path / "other.parquet"
    b = pl.read_parquet(files["bars"])
    b.with_columns(regime=pl.when(pl.int_range(b.height) % 7 == 0).then(pl.lit("panic"))
                   .otherwise(pl.col("regime"))).write_parquet(other)
    with caplog.at_level("WARNING", logger="foxhunt.data"):
        assert main(["predict", "--model", str(run), "--parquet-file", str(other), "--covariates",
                     str(files["session"]), "--out", str(tmp_path / "fc.parquet")]) == 0
    said = [r.getMessage() for r in caplog.records if "unseen in training" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("--observed regime:") and "panic" in said[0]


def test_export_writes_the_categorical_inputs_and_parity_passes(run, tmp_path):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "m.onnx"
    assert main(["export", "--model", str(run), "--out", str(out)]) == 0
    side = json.loads(out.with_suffix(".onnx.json").read_text())
    assert side["your_inputs"]["timed_vocab"]["regime"] == list(REGIMES)
    assert "timed_vocab" in side["features"]["regime"] and "timed_vocab" in side["features"]["session_type"]


def test_predict_on_a_frame_takes_them_and_update_continues_it(run, files):
    from foxhunt.api.forecaster import Forecaster

    fc = Forecaster.load(run)
    frame = pl.read_parquet(files["bars"]).sort("symbol", "timestamp")
    got = fc.predict(frame.filter(pl.col("timestamp") < pl.col("timestamp").max().over("symbol")))  # its own regime column; session_type
    assert got.height > 0 and got["p50"].is_finite().all()  # from the training run's covariate file
    later = fc.update(frame.filter(pl.col("symbol") == "ES").tail(1))
    assert later.height == fc.horizon and later["p50"].is_finite().all()
