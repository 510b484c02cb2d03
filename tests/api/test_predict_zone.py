"""A naive bars file written in another zone than the model's: `foxhunt predict --timezone` (and
`Forecaster.load(timezone=...)`) reads it in that zone, giving the forecasts of the same bars with their zone, and
the refusal without it names that option. The 1-minute model of tests/api/conftest.py (UTC, the CME grid)."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import foxhunt
from foxhunt.cli import main

CT = "America/Chicago"


@pytest.fixture(scope="module")
def files(intraday_run, tmp_path_factory) -> tuple:
    """(aware UTC file, the same bars as naive Chicago wall-clock times) of the sample's last 2000 bars."""
    tail = intraday_run[1].tail(2000)
    where = tmp_path_factory.mktemp("zones")
    aware, naive = where / "aware.parquet", where / "naive_ct.parquet"
    tail.write_parquet(aware)
    tail.with_columns(pl.col("ts_event").dt.convert_time_zone(CT).dt.replace_time_zone(None)).write_parquet(naive)
    return aware, naive


def _predict(run, path, out, *flags) -> int:
    return main(["predict", "--model", str(run), "-f", str(path), "--out", str(out), "--threads", "1", *flags])


def test_predict_reads_a_naive_file_in_the_zone_given(intraday_run, files, tmp_path, capsys):
    run = intraday_run[0]
    aware, naive = files
    assert _predict(run, naive, tmp_path / "n.parquet") == 2  # read as the model's UTC: refused, naming the fix
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"pass --timezone {CT}" in err
    assert _predict(run, naive, tmp_path / "n.parquet", "--timezone", CT) == 0
    assert _predict(run, aware, tmp_path / "a.parquet") == 0
    assert_frame_equal(pl.read_parquet(tmp_path / "n.parquet"), pl.read_parquet(tmp_path / "a.parquet"))


def test_forecaster_reads_naive_frames_in_its_zone(intraday_run, files):
    aware, naive = files
    want = foxhunt.Forecaster.load(intraday_run[0]).predict(pl.read_parquet(aware))
    got = foxhunt.Forecaster.load(intraday_run[0], timezone=CT).predict(pl.read_parquet(naive))
    assert_frame_equal(got, want)


def test_evaluate_and_export_take_timezone_and_a_store_refuses_it(tmp_path, capsys):
    for command in ("evaluate", "export"):
        assert main([command, "--help"]) == 0
        assert "--timezone" in capsys.readouterr().out
    code = main(["predict", "--model", str(tmp_path), "--features", str(tmp_path), "--out", str(tmp_path / "f"),
                 "--timezone", CT])
    assert code == 2 and "--timezone" in capsys.readouterr().err
