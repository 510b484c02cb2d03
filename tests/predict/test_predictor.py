"""Prediction's out-of-memory ladder: retry, then halve the batch; the forecasts are the clean run's, row for row.
At batch 1 with nothing left it stops with exit 3 and no half-written forecasts file."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest

from foxhunt.cli import main
from foxhunt.data.features.schema import Kind
from foxhunt.errors import InputError
from foxhunt.model.saved import load_model
from foxhunt.predict.origins import prepare_for_model
from foxhunt.train.faults import ENV_VAR


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, daily_path, tiny_flags):
    run = tmp_path_factory.mktemp("model") / "run"
    assert main(["train", *tiny_flags, "--parquet-file", str(daily_path), "--epochs", "1", "--max-train-batches", "3",
                 "--train-end", "2024-07-01", "--test-fraction", "0", "--run-dir", str(run)]) == 0
    return run


def predict(model_dir, daily_path, out, *extra) -> int:
    return main(["predict", "--model", str(model_dir), "--parquet-file", str(daily_path), "--out", str(out),
                 "--batch-size", "64", *extra])


def test_ooms_in_prediction_change_no_forecast(model_dir, daily_path, tmp_path, monkeypatch, capsys):
    assert predict(model_dir, daily_path, tmp_path / "clean.parquet") == 0
    monkeypatch.setenv(ENV_VAR, "oom@predict:2x3,oom@predict:6")  # batch 2: retry, 32, 16; a later one: retry
    assert predict(model_dir, daily_path, tmp_path / "faulty.parquet") == 0
    err = capsys.readouterr().err
    assert "phase=oom_retry reason='out of memory in prediction batch 2 (batch size 64)" in err
    assert "phase=oom_halve reason='out of memory in prediction batch 2 (batch size 64): repeating it with batch " \
           "size 32" in err
    assert "batch size 32): repeating it with batch size 16" in err
    a, b = pl.read_parquet(tmp_path / "clean.parquet"), pl.read_parquet(tmp_path / "faulty.parquet")
    assert a.select("symbol", "origin", "horizon").equals(b.select("symbol", "origin", "horizon"))
    for col in ("p10", "p50", "p90"):
        np.testing.assert_allclose(b[col].to_numpy(), a[col].to_numpy(), rtol=1e-5, atol=1e-7)


def test_a_window_that_never_fits_stops_without_a_forecasts_file(model_dir, daily_path, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(ENV_VAR, "oom@predict:1x2")
    out = tmp_path / "fc.parquet"
    assert predict(model_dir, daily_path, out, "--batch-size", "1") == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "a single window does not fit in memory for prediction: batch 1" in err and "what would fit" in err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_prediction_checks_the_codes_against_the_models_table(model_dir, daily_path):
    """The bounds check at prediction's data boundary uses the loaded model's schema, not the data's own."""
    lm = load_model(model_dir)
    narrower = dataclasses.replace(lm.schema, features=tuple(
        dataclasses.replace(f, cardinality=2) if f.kind == Kind.CATEGORICAL else f for f in lm.schema.features))
    with pytest.raises(InputError, match="code 2 at series NQ .* of the model's embedding table"):
        prepare_for_model(dataclasses.replace(lm, schema=narrower), (str(daily_path),))
