"""What a forecast leaves out or makes up is said once: a series with fewer bars than the encoder needs, beside
longer ones, gets no forecast and a warning naming it, its bars and the count needed; a symbol the model never saw
gets the unknown-series embedding and pooled scalers, and a warning naming it (`predict`, `foxhunt predict` and a
series that `update` starts). The tiny daily model of tests/api/conftest.py (ES, NQ; encoder 16)."""

from __future__ import annotations

import datetime as dt
import logging

import polars as pl
import pytest

import foxhunt
from foxhunt.cli import main


@pytest.fixture(scope="module")
def run_dir(readme_run):
    return readme_run["run"].run_dir


@pytest.fixture(scope="module")
def bars(daily_path) -> pl.DataFrame:
    return pl.read_parquet(daily_path).sort("symbol", "timestamp")


def _warnings(caplog, needle: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and needle in r.getMessage()]


def _short_nq(bars: pl.DataFrame) -> pl.DataFrame:
    return pl.concat([bars.filter(pl.col("symbol") == "ES"), bars.filter(pl.col("symbol") == "NQ").tail(5)])


def test_a_series_too_short_for_the_encoder_is_named(run_dir, bars, caplog):
    caplog.set_level(logging.WARNING, logger="foxhunt")
    out = foxhunt.Forecaster.load(run_dir).predict(_short_nq(bars))
    assert out["symbol"].unique().to_list() == ["ES"]
    said = _warnings(caplog, "no forecast")
    assert said == ["no forecast for 1 series with fewer bars than the model's encoder needs, 17 (encoder 16 + 1, "
                    "the first bar has no return): 'NQ' (5 bars); load a longer history of them"]


def test_cli_predict_names_the_short_series(run_dir, bars, tmp_path, capsys):
    path = tmp_path / "short.parquet"
    _short_nq(bars).write_parquet(path)
    assert main(["predict", "--model", str(run_dir), "-f", str(path), "--out", str(tmp_path / "f.parquet"),
                 "--threads", "1"]) == 0
    err = capsys.readouterr().err
    assert err.count("no forecast for 1 series") == 1 and "'NQ' (5 bars)" in err


def test_a_symbol_the_model_never_saw_is_named_once(run_dir, bars, caplog):
    caplog.set_level(logging.WARNING, logger="foxhunt")
    fc = foxhunt.Forecaster.load(run_dir)
    renamed = bars.with_columns(pl.col("symbol").replace("NQ", "NEWCO"))
    out = fc.predict(renamed)
    assert sorted(out["symbol"].unique().to_list()) == ["ES", "NEWCO"]
    said = _warnings(caplog, "never saw")
    assert len(said) == 1 and "('NEWCO')" in said[0] and "'ES'" not in said[0]
    assert "unknown-series embedding" in said[0] and "pooled scalers" in said[0]
    last = renamed.filter(pl.col("symbol") == "ES").tail(1).to_dicts()[0]
    new = {**last, "symbol": "ZZZ", "timestamp": last["timestamp"].replace(year=last["timestamp"].year + 1)}
    fc.update(new)  # a series the stream starts: said once, not again on its next bar
    fc.update({**new, "timestamp": new["timestamp"] + dt.timedelta(days=1)})
    fc.update({**last, "timestamp": new["timestamp"]})  # ES, known: nothing
    said = _warnings(caplog, "never saw")
    assert len(said) == 2 and "('ZZZ')" in said[1]


def test_an_update_of_series_the_stream_knows_asks_nothing_of_training(run_dir, bars, monkeypatch):
    """The usual update (every bar of a live stream) looks no name up in the training vocabulary: only series new to
    the stream are told of."""
    from foxhunt.data.dataset.types import FittedTransform

    fc = foxhunt.Forecaster.load(run_dir)
    fc.predict(bars)
    asked: list[list[str]] = []
    monkeypatch.setattr(FittedTransform, "tell_unseen", lambda self, names: asked.append(list(names)))
    last = bars.filter(pl.col("symbol") == "ES").tail(1).to_dicts()[0]
    later = last["timestamp"].replace(year=last["timestamp"].year + 1)
    fc.update({**last, "timestamp": later})  # ES: known to the stream
    assert asked == []
    fc.update({**last, "symbol": "ZZZ", "timestamp": later})
    assert asked == [["ZZZ"]]


def test_cli_predict_names_an_unseen_symbol(run_dir, bars, tmp_path, capsys):
    path = tmp_path / "new.parquet"
    bars.with_columns(pl.col("symbol").replace("NQ", "NEWCO")).write_parquet(path)
    assert main(["predict", "--model", str(run_dir), "-f", str(path), "--out", str(tmp_path / "f.parquet"),
                 "--threads", "1"]) == 0
    err = capsys.readouterr().err
    assert err.count("never saw") == 1 and "('NEWCO')" in err
