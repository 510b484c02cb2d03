"""`--calendar NAME`: the market hours of every bar, for the closed-bars check, the halt and the forecast grid.

A regular 24/7 hourly CSV (naive timestamps) was refused as bars "where the exchange is closed", and with
--timezone UTC it loaded but reported windows missing bars that no bar missed, because the session grid was
CME's. With --calendar 24/7 it loads, trains and forecasts on a grid without closures, saved with the run."""

from __future__ import annotations

import datetime as dt
import json
import sys

import numpy as np
import polars as pl
import pytest

import foxhunt
from foxhunt.cli import main
from foxhunt.data.bars import sessions
from foxhunt.data.config import DataConfig
from foxhunt.errors import InputError

HOUR = dt.timedelta(hours=1)
START = dt.datetime(2024, 1, 1)  # a Monday


@pytest.fixture(scope="module")
def hourly_csv(tmp_path_factory):
    """2000 regular hourly bars, every hour of every day (weekends too), naive timestamps: a crypto-like market."""
    rng = np.random.default_rng(7)
    n = 2000
    close = 40_000 * np.exp(np.cumsum(rng.normal(0, 0.004, n)))
    open_ = np.concatenate([[close[0]], close[:-1]])
    wick = np.abs(rng.normal(0, 0.002, n)) * close
    path = tmp_path_factory.mktemp("hourly") / "btc_1h.csv"
    pl.DataFrame({
        "timestamp": [START + i * HOUR for i in range(n)],
        "open": open_, "high": np.maximum(open_, close) + wick, "low": np.minimum(open_, close) - wick,
        "close": close, "volume": rng.integers(100, 1000, n),
    }).write_csv(path)
    return path


def _last_error(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_without_a_calendar_the_refusal_names_calendar_24_7(hourly_csv, capsys):
    assert main(["inspect", str(hourly_csv)]) == 2
    last = _last_error(capsys)
    assert last.startswith("foxhunt: error:") and "closed" in last and "--calendar 24/7" in last


def test_a_24_7_hourly_csv_trains_with_no_missing_bar_windows_and_forecasts_on_its_grid(hourly_csv, tiny, tmp_path):
    run = tmp_path / "run"
    assert main(["train", "-f", str(hourly_csv), "--calendar", "24/7", *tiny, "--epochs", "1",
                 "--run-dir", str(run)]) == 0
    summary = json.loads((run / "data_summary.json").read_text())
    assert summary["windows_with_gaps"] == 0 and summary["checks"]["closed_share"] == 0.0
    saved = json.loads((run / "config.json").read_text())["data"]
    assert saved["calendar"] == "24/7" and saved["exchange_tz"] == "UTC"
    out = tmp_path / "f.parquet"
    assert main(["predict", "--model", str(run), "-f", str(hourly_csv), "--out", str(out), "--threads", "1"]) == 0
    rows = pl.read_parquet(out)
    live = rows.filter(pl.col("origin") == pl.col("origin").max()).sort("horizon")
    last = (START + 1999 * HOUR).replace(tzinfo=dt.UTC)  # Saturday 2024-03-23 07:00: the grid has no weekend
    assert live["target_time"].to_list() == [last + k * HOUR for k in (1, 2, 3)]
    api = foxhunt.Forecaster.load(run).predict(pl.read_csv(hourly_csv, try_parse_dates=True))
    assert api.sort("horizon")["target_time"].to_list() == live["target_time"].to_list()


def test_an_unknown_calendar_stops_with_one_line_naming_the_option_and_the_list(hourly_csv, capsys):
    assert main(["inspect", str(hourly_csv), "--calendar", "Mars"]) == 2
    last = _last_error(capsys)
    assert "--calendar 'Mars'" in last and "get_calendar_names" in last


def test_without_the_package_a_named_calendar_says_what_to_install_and_24_7_needs_none(hourly_csv, capsys,
                                                                                     monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas_market_calendars", None)  # import raises ImportError
    sessions._named_session.cache_clear()
    try:
        assert main(["inspect", str(hourly_csv), "--calendar", "XNYS"]) == 2
        last = _last_error(capsys)
        assert "--calendar 'XNYS'" in last and "pip install 'foxhunt[calendars]'" in last
        assert main(["inspect", str(hourly_csv), "--calendar", "24/7"]) == 0
    finally:
        sessions._named_session.cache_clear()


def test_a_named_calendar_is_every_bars_session_in_the_closed_check():
    xnys = sessions.calendar_session("XNYS")
    assert (xnys.tz, xnys.open_min, xnys.close_min, xnys.open_day) == ("America/New_York", 570, 960, 0)
    week = np.array(["2024-01-08T15:00", "2024-01-08T17:00", "2024-01-09T01:00", "2024-01-13T15:00"],
                    dtype="datetime64[ns]")  # Monday 10:00 and 12:00 ET (open), 20:00 ET, Saturday 10:00 ET
    df = pl.DataFrame({"ts": pl.Series(week).dt.replace_time_zone("UTC"), "root": [None] * 4,
                       "symbol": ["AAPL"] * 4})
    assert sessions.closed_share(df, xnys.tz, session=xnys) == 0.5
    assert sessions.closed_share(df, "UTC", session=sessions.calendar_session("24/7")) == 0.0
    assert DataConfig(calendar="XNYS").exchange_tz == "America/New_York"  # the calendar's zone
    with pytest.raises(InputError, match="--calendar 'nope'"):
        DataConfig(calendar="nope")
