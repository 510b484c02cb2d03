"""Live forecasts name the time of each step: `target_time` of a forecast beyond the data is the forecast grid's
time of step k (the bar spacing from the origin, the CME halt and the weekend skipped for intraday bars, weekends
for daily ones, and --calendar's holidays), from `foxhunt predict`, `Forecaster.predict` and `Forecaster.update`
alike."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pytest

import foxhunt
from foxhunt.cli import main

UTC = dt.UTC


def _utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def _times(rows: pl.DataFrame) -> list[dt.datetime]:
    return rows.sort("horizon")["target_time"].to_list()


def test_intraday_live_steps_skip_the_friday_halt_and_the_weekend(intraday_run):
    run, bars = intraday_run
    friday = bars.filter(pl.col("ts_event") <= _utc(2024, 2, 23, 21, 57))  # through 15:57 CT, Friday
    fc, ref = foxhunt.Forecaster.load(run), foxhunt.Forecaster.load(run)
    live = fc.predict(friday)
    assert live["origin"].unique().to_list() == [_utc(2024, 2, 23, 21, 57)]
    # 15:58 and 15:59 CT, then the halt at 16:00 and the weekend: Sunday's open at 17:00 CT (23:00 UTC) and on
    assert _times(live) == [_utc(2024, 2, 23, 21, 58), _utc(2024, 2, 23, 21, 59), _utc(2024, 2, 25, 23, 0),
                            _utc(2024, 2, 25, 23, 1), _utc(2024, 2, 25, 23, 2)]
    assert live["actual"].is_null().all()

    bar = bars.filter(pl.col("ts_event") == _utc(2024, 2, 23, 21, 58)).row(0, named=True)
    got = fc.update(bar)
    assert _times(got) == [_utc(2024, 2, 23, 21, 59), _utc(2024, 2, 25, 23, 0), _utc(2024, 2, 25, 23, 1),
                           _utc(2024, 2, 25, 23, 2), _utc(2024, 2, 25, 23, 3)]
    want = ref.predict(pl.concat([friday, pl.DataFrame([bar], schema=friday.schema)]))
    assert _times(got) == _times(want)  # the stream's grid is predict's
    arrays = fc.update_arrays(bars.filter(pl.col("ts_event") == _utc(2024, 2, 23, 21, 59)).row(0, named=True))
    sunday = np.datetime64("2024-02-25T23:00", "ns").astype(np.int64)
    np.testing.assert_array_equal(arrays.target_ns[0], sunday + np.arange(5) * 60 * 10**9)


@pytest.fixture(scope="module")
def daily_live(readme_run, daily_path, tmp_path_factory) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(foxhunt predict's live rows, Forecaster.predict's) of the daily model on the daily fixture."""
    out = tmp_path_factory.mktemp("daily_live") / "f.parquet"
    run_dir = readme_run["run"].run_dir
    assert main(["predict", "--model", str(run_dir), "-f", str(daily_path), "--out", str(out), "--threads", "1"]) == 0
    rows = pl.read_parquet(out)
    cli = rows.filter(pl.col("origin") == pl.col("origin").max().over("symbol"))
    return cli, foxhunt.Forecaster.load(run_dir).predict(pl.read_parquet(daily_path))


def test_daily_live_steps_are_the_next_weekdays(daily_live):
    cli, api = daily_live
    for rows in (cli, api):
        for symbol in ("ES", "NQ"):
            mine = rows.filter(pl.col("symbol") == symbol)
            assert mine["origin"].unique().to_list() == [_utc(2024, 12, 9)]  # the fixture's last bar, a Monday
            assert _times(mine) == [_utc(2024, 12, 10), _utc(2024, 12, 11), _utc(2024, 12, 12)]
            assert mine["actual"].is_null().all()


def test_daily_steps_past_a_friday_origin_skip_the_weekend(readme_run, daily_path):
    bars = pl.read_parquet(daily_path).filter(pl.col("timestamp") <= dt.datetime(2024, 12, 6))  # through Friday
    fc = foxhunt.Forecaster.load(readme_run["run"].run_dir)
    live = fc.predict(bars).filter(pl.col("symbol") == "ES")
    assert _times(live) == [_utc(2024, 12, 9), _utc(2024, 12, 10), _utc(2024, 12, 11)]
    got = fc.update({"symbol": "ES", "timestamp": "2024-12-09", "open": 6050.0, "high": 6070.0, "low": 6030.0,
                     "close": 6060.0, "volume": 1_000_000})
    assert _times(got) == [_utc(2024, 12, 10), _utc(2024, 12, 11), _utc(2024, 12, 12)]


def test_daily_steps_skip_the_calendars_holiday_in_predict_and_the_stream(xnys_daily_run, tmp_path):
    """A model trained with --calendar XNYS: from Wednesday 2024-11-27 the steps skip Thanksgiving (11-28), in
    `foxhunt predict`, `Forecaster.predict` and, after Friday's bar, `Forecaster.update`, which agrees with
    `predict` on the longer history."""
    run, bars = xnys_daily_run
    through = bars.filter(pl.col("timestamp") <= dt.datetime(2024, 11, 27))
    path = tmp_path / "through.parquet"
    through.write_parquet(path)
    out = tmp_path / "f.parquet"
    assert main(["predict", "--model", str(run), "-f", str(path), "--out", str(out), "--threads", "1"]) == 0
    cli = pl.read_parquet(out).filter(pl.col("symbol") == "ES", pl.col("origin") == _utc(2024, 11, 27))
    fc, ref = foxhunt.Forecaster.load(run), foxhunt.Forecaster.load(run)
    api = fc.predict(through).filter(pl.col("symbol") == "ES")
    for rows in (cli, api):
        assert _times(rows) == [_utc(2024, 11, 29), _utc(2024, 12, 2), _utc(2024, 12, 3)]
    friday = bars.filter(pl.col("symbol") == "ES", pl.col("timestamp") == dt.datetime(2024, 11, 29))
    got = fc.update(friday.row(0, named=True)).filter(pl.col("symbol") == "ES")
    assert _times(got) == [_utc(2024, 12, 2), _utc(2024, 12, 3), _utc(2024, 12, 4)]
    want = ref.predict(pl.concat([through, friday])).filter(pl.col("symbol") == "ES")
    assert _times(got) == _times(want)
