"""A daily model of naive dates read with --timezone Asia/Shanghai forecasts the dates the file shows: from Friday
2016-09-30 with --calendar XSHG the steps go to 10-10 .. 10-12, past National Day week, as without --timezone, in
`foxhunt predict`, `Forecaster.predict` and `Forecaster.update` alike. Before, every bar was labelled 16:00 UTC of the
day before (Shanghai midnight), so the live forecast stepped from "Thursday 09-29" to Friday 09-30 (a Saturday in
Shanghai) and the stream read a new bar a day early as well (data/io/dates.py)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import polars as pl
import pytest

import foxhunt
from foxhunt.api.bars import stream_bars
from foxhunt.cli import main
from foxhunt.data.config import DataConfig
from foxhunt.data.io.read import read_frame

from .conftest import untrained_run

ZONE = "Asia/Shanghai"
HOLIDAYS = ("2016-06-09", "2016-06-10", "2016-09-15", "2016-09-16", "2016-10-03", "2016-10-04", "2016-10-05",
            "2016-10-06", "2016-10-07")  # XSHG's, written by hand (tests/data/conftest.py)
BAR = {"symbol": "CU0", "open": 1.0, "high": 2.0, "low": 0.5, "close": 1.5, "volume": 10.0}


def _utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.UTC)


def _times(rows: pl.DataFrame) -> list[dt.datetime]:
    return rows.sort("horizon")["target_time"].to_list()


@pytest.fixture(scope="module")
def shanghai_run(tmp_path_factory) -> tuple:
    """(run directory, bars file, bars) of a tiny untrained model on two series' naive daily dates (XSHG's trading
    days 2016-05-03 .. 2016-10-14) through 2016-09-30, read with --timezone Asia/Shanghai and --calendar XSHG."""
    pytest.importorskip("pandas_market_calendars")
    days = np.arange(np.datetime64("2016-05-03"), np.datetime64("2016-10-15"))
    days = days[np.is_busday(days) & ~np.isin(days, np.array(HOLIDAYS, dtype="datetime64[D]"))]
    rng = np.random.default_rng(5)
    frames = []
    for k, symbol in enumerate(("CU0", "RB0")):
        close = (100 + 50 * k) * np.exp(np.cumsum(rng.normal(0, 0.01, len(days))))
        frames.append(pl.DataFrame({"timestamp": days.astype("datetime64[us]"), "symbol": symbol, "open": close,
                                    "high": close * 1.01, "low": close * 0.99, "close": close, "volume": 1000.0}))
    bars = pl.concat(frames)
    folder = tmp_path_factory.mktemp("shanghai")
    path = folder / "cn_daily.parquet"
    bars.filter(pl.col("timestamp") <= dt.datetime(2016, 9, 30)).write_parquet(path)
    run = folder / "run"
    run.mkdir()
    untrained_run(run, DataConfig(paths=(str(path),), calendar="XSHG", timezone=ZONE, encoder_length=16, horizon=3))
    return run, path, bars


def test_live_forecasts_step_over_national_day_from_fridays_date(shanghai_run, tmp_path):
    run, path, bars = shanghai_run
    out = tmp_path / "f.parquet"
    assert main(["predict", "--model", str(run), "-f", str(path), "--out", str(out), "--threads", "1"]) == 0
    rows = pl.read_parquet(out).filter(pl.col("symbol") == "CU0")
    cli = rows.filter(pl.col("origin") == pl.col("origin").max())
    through = bars.filter(pl.col("timestamp") <= dt.datetime(2016, 9, 30))
    api = foxhunt.Forecaster.load(run).predict(through).filter(pl.col("symbol") == "CU0")
    for live in (cli, api):
        assert live["origin"].unique().to_list() == [_utc(2016, 9, 30)]
        assert _times(live) == [_utc(2016, 10, 10), _utc(2016, 10, 11), _utc(2016, 10, 12)]
    origins = rows["origin"].unique()  # every origin is a date of the file, at its UTC midnight
    assert origins.dt.replace_time_zone(None).is_in(through["timestamp"].cast(pl.Datetime("ns")).implode()).all()


def test_update_dates_a_new_bar_as_predict_does(shanghai_run):
    """Monday 10-10's bar, stamped as the file stamps it (a naive datetime, in Shanghai): the stream's forecast is
    predict's on the history through it."""
    run, _, bars = shanghai_run
    fc, ref = foxhunt.Forecaster.load(run), foxhunt.Forecaster.load(run)
    fc.predict(bars.filter(pl.col("timestamp") <= dt.datetime(2016, 9, 30)))
    monday = bars.filter(pl.col("timestamp") == dt.datetime(2016, 10, 10))
    got = fc.update(monday).sort("symbol", "horizon")
    want = ref.predict(bars.filter(pl.col("timestamp") <= dt.datetime(2016, 10, 10))).sort("symbol", "horizon")
    assert got["origin"].unique().to_list() == [_utc(2016, 10, 10)]
    assert _times(got.filter(pl.col("symbol") == "CU0")) == [_utc(2016, 10, 11), _utc(2016, 10, 12),
                                                              _utc(2016, 10, 13)]
    assert got.select("symbol", "origin", "target_time").equals(want.select("symbol", "origin", "target_time"))
    np.testing.assert_allclose(got["p50"].to_numpy(), want["p50"].to_numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("stamp", [
    dt.datetime(2016, 10, 10), pd.Timestamp("2016-10-10"), np.datetime64("2016-10-10"), "2016-10-10",
    "2016-10-10T00:00:00+08:00", pd.Timestamp("2016-10-10", tz=ZONE), dt.date(2016, 10, 10)])
def test_the_stream_dates_a_daily_bar_as_the_reader_does(stamp):
    """Every way a bar's time may come to `update`: its label is the file reader's for the same time."""
    frame = pl.DataFrame({"timestamp": [dt.datetime(2016, 10, 7), dt.datetime(2016, 10, 10)], **BAR})
    raw, _ = read_frame(frame, "<DataFrame>", timezone=ZONE)
    assert raw["ts"][1] == _utc(2016, 10, 10)
    got = stream_bars({**BAR, "ts_event": stamp}, {}, "CU0", ZONE, daily=True)
    assert got.ts_ns == [raw["ts"].dt.epoch("ns")[1]]
    intraday = stream_bars({**BAR, "ts_event": stamp}, {}, "CU0", ZONE)  # an intraday model's: the instant
    assert intraday.ts_ns[0] in (_ns(_utc(2016, 10, 9, 16)), _ns(_utc(2016, 10, 10)))  # a date is UTC midnight


def test_the_stream_reads_text_dates_by_the_models_format_and_dates_them():
    got = stream_bars({**BAR, "ts_event": "10.10.2016"}, {}, "CU0", ZONE, date_format="%d.%m.%Y", daily=True)
    assert got.ts_ns == [_ns(_utc(2016, 10, 10))]


def _ns(t: dt.datetime) -> int:
    return int(t.timestamp()) * 10**9
