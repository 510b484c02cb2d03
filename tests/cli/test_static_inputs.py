"""Static inputs end to end: train -> inspect -> predict -> evaluate -> export with a text `sector` column (a
category) and a numeric `tick_value` column (real) of the bar files, on the generic daily fixture (ES and NQ); and a
column that varies within a series, which stops with one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from foxhunt.cli import main

SECTOR = {"ES": "equity", "NQ": "tech"}
TICK = {"ES": 12.5, "NQ": 5.0}


@pytest.fixture(scope="module")
def bars(tmp_path_factory, daily_path) -> Path:
    out = tmp_path_factory.mktemp("static") / "bars.parquet"
    b = pl.read_parquet(daily_path)
    b.with_columns(sector=pl.col("symbol").replace_strict(SECTOR),
                   tick_value=pl.col("symbol").replace_strict(TICK)).write_parquet(out)
    return out


def flags(bars: Path) -> list[str]:
    return ["--parquet-file", str(bars), "--static", "sector,tick_value"]


@pytest.fixture(scope="module")
def run(bars, tiny_flags, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("run") / "run"
    assert main(["train", *flags(bars), *tiny_flags, "--run-dir", str(run_dir)]) == 0
    return run_dir


def test_the_model_saves_the_static_inputs_their_kinds_vocabulary_and_scaling(run):
    meta = json.loads((run / "model.json").read_text())
    got = meta["transform"]["inputs"]
    assert got["static"] == ["sector", "tick_value"]
    assert got["static_kinds"] == {"sector": "categorical", "tick_value": "real"}
    assert got["static_vocab"] == {"sector": ["equity", "tech"]}
    # two series, 12.5 and 5.0: mean 8.75, std (ddof 1) = 7.5 / sqrt(2)
    assert got["static_scalers"]["tick_value"]["mean"] == pytest.approx(8.75)
    assert got["static_scalers"]["tick_value"]["std"] == pytest.approx(7.5 / 2**0.5)
    static = [(f["name"], f["kind"], f.get("cardinality")) for f in meta["schema"]["features"]
              if f["role"] == "static"]
    assert [s[:2] for s in static] == [("series", "categorical"), ("sector", "categorical"),
                                       ("tick_value", "continuous")]
    assert static[1][2] == 3  # two sectors and the unknown code


def test_inspect_lists_the_static_inputs(bars, capsys):
    assert main(["inspect", *flags(bars)]) == 0
    out = capsys.readouterr().out
    assert "input     sector: static categorical from" in out
    assert "input     tick_value: static real from" in out


def test_predict_and_evaluate_read_them_and_importance_lists_them(run, bars, tmp_path):
    out = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(run), "--parquet-file", str(bars), "--out", str(out)]) == 0
    fc = pl.read_parquet(out)
    assert fc.height > 0 and fc["p50"].is_finite().all()
    assert main(["evaluate", "--model", str(run), "--parquet-file", str(bars), "--out-dir", str(tmp_path / "ev")]) == 0
    interp = json.loads((tmp_path / "ev" / "interpretation.json").read_text())
    assert set(interp["static"]) == {"series", "sector", "tick_value"}


def test_a_sector_unseen_in_training_gets_the_unknown_code(run, bars, tmp_path, caplog):
    other = tmp_path / "other.parquet"
    pl.read_parquet(bars).with_columns(
        sector=pl.when(pl.col("symbol") == "NQ").then(pl.lit("metals")).otherwise(pl.col("sector"))
    ).write_parquet(other)
    with caplog.at_level("WARNING", logger="foxhunt.data"):
        assert main(["predict", "--model", str(run), "--parquet-file", str(other), "--out",
                     str(tmp_path / "fc.parquet")]) == 0
    said = [r.getMessage() for r in caplog.records if "unseen in training" in r.getMessage()]
    assert len(said) == 1 and "NQ=metals" in said[0]


def test_export_describes_the_static_inputs(run, tmp_path):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "m.onnx"
    assert main(["export", "--model", str(run), "--out", str(out)]) == 0
    side = json.loads(out.with_suffix(".onnx.json").read_text())
    assert side["your_inputs"]["static_vocab"] == {"sector": ["equity", "tech"]}
    assert "static_vocab" in side["features"]["sector"] and "static_scalers" in side["features"]["tick_value"]


def test_a_column_that_varies_within_a_series_stops_naming_it(bars, tiny_flags, tmp_path, capsys):
    varying = tmp_path / "varying.parquet"
    b = pl.read_parquet(bars)
    b.with_columns(sector=pl.when(pl.int_range(b.height) % 2 == 0).then(pl.lit("a")).otherwise(pl.lit("b")))\
        .write_parquet(varying)
    code = main(["train", "--parquet-file", str(varying), "--static", "sector", *tiny_flags, "--run-dir",
                 str(tmp_path / "r")])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--static sector: series ES has 2 values" in err and "use --observed" in err


def test_categorical_names_declared_columns_only(bars, tiny_flags, tmp_path, capsys):
    code = main(["train", "--parquet-file", str(bars), "--static", "sector", "--categorical", "tick_value",
                 *tiny_flags, "--run-dir", str(tmp_path / "r")])
    assert code == 2
    assert "--categorical tick_value: not a --static, --observed or --known column" in capsys.readouterr().err


def test_a_keyed_covariate_file_gives_a_static_input_and_categorical_takes_its_numbers(bars, tmp_path, capsys):
    tiers = tmp_path / "tiers.csv"
    tiers.write_text("date,symbol,tier\n2020-01-01,ES,1\n2020-01-01,NQ,2\n")
    assert main(["inspect", "--parquet-file", str(bars), "--static", "tier", "--covariates", str(tiers),
                 "--categorical", "tier"]) == 0
    assert f"input     tier: static categorical from {tiers}" in capsys.readouterr().out


def test_update_continues_predict_on_a_static_model(run, bars):
    """Parity with predict: tests/data/features/test_codes_live.py."""
    from foxhunt.api.forecaster import Forecaster

    fc = Forecaster.load(run)
    frame = pl.read_parquet(bars).sort("symbol", "timestamp")
    fc.predict(frame.filter(pl.col("timestamp") < pl.col("timestamp").max().over("symbol")))
    later = fc.update(frame.filter(pl.col("symbol") == "ES").tail(1))
    assert later.height == fc.horizon and later["p50"].is_finite().all()
