"""A daily bar is labelled by its date where it was stamped (data/io/dates.py): a naive date read with --timezone
east of UTC, or a zone-aware stamp at local midnight there, is that date's UTC midnight, not 16:00 or 23:00 UTC of the
day before (every weekday, holiday and forecast step of the daily pipeline was a day early). Bars already on their
local date (UTC, a close at 21:00 UTC, midnight in Chicago) and intraday bars keep their times."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pytest

from foxhunt.data.features.covariates import read_bar_columns
from foxhunt.data.io.read import FileFormat, read_bars

HOUR = 3600 * 10**9
DAYS = [dt.date(2017, 1, 2) + dt.timedelta(days=i) for i in range(200)]  # winter and summer (Berlin's DST)
DAYS = [d for d in DAYS if d.weekday() < 5]


def ns(text: str) -> int:
    return int(np.datetime64(text, "ns").astype(np.int64))


def test_date_labels_move_only_bars_off_their_local_date_to_its_utc_midnight():
    from foxhunt.data.io.dates import date_labels  # here: the other tests run on code without it

    ts = np.array([ns("2017-07-24T16:00"), ns("2017-01-24T23:00"), ns("2017-07-24T21:00"), ns("2017-07-25T05:00"),
                   ns("2017-07-25T00:00")])
    wall = np.array([ns("2017-07-25T00:00"),  # Shanghai midnight
                     ns("2017-01-25T00:00"),  # Berlin midnight (winter)
                     ns("2017-07-24T17:00"),  # a New York close, read in New York
                     ns("2017-07-25T00:00"),  # Chicago midnight (CDT): already on its date
                     ns("2017-07-25T00:00")])  # UTC
    want = [ns("2017-07-25T00:00"), ns("2017-01-25T00:00"), ns("2017-07-24T21:00"), ns("2017-07-25T05:00"),
            ns("2017-07-25T00:00")]
    assert date_labels(ts, wall).tolist() == want


def _bars(times: list, **cols) -> pl.DataFrame:
    n = len(times)
    close = 100.0 + np.arange(n)
    return pl.DataFrame({"timestamp": times, "symbol": "CU0", "open": close, "high": close + 1, "low": close - 1,
                         "close": close, "volume": 1000.0, **cols})


def _read(path, timezone: str | None = None, **bounds) -> list[dt.datetime]:
    raw, _ = read_bars([str(path)], FileFormat(timezone=timezone), **bounds)
    return raw.get_column("ts").to_list()


def _midnights(days: list[dt.date]) -> list[dt.datetime]:
    return [dt.datetime(d.year, d.month, d.day, tzinfo=dt.UTC) for d in days]


@pytest.mark.parametrize("zone", ["Asia/Shanghai", "Europe/Berlin", "UTC"])
def test_naive_dates_read_in_a_zone_are_their_own_dates(tmp_path, zone):
    path = tmp_path / "daily.parquet"
    _bars([dt.datetime(d.year, d.month, d.day) for d in DAYS]).write_parquet(path)
    assert _read(path, zone) == _midnights(DAYS)


def test_naive_dates_read_west_of_utc_keep_their_times(tmp_path):
    """Midnight in New York is 04:00 or 05:00 UTC of the same date: nothing to move (as before)."""
    path = tmp_path / "daily.parquet"
    _bars([dt.datetime(d.year, d.month, d.day) for d in DAYS]).write_parquet(path)
    got = _read(path, "America/New_York")
    assert [t.date() for t in got] == DAYS and {t.hour for t in got} == {4, 5}


@pytest.mark.parametrize("zone", ["Asia/Shanghai", "Europe/Berlin"])
def test_zone_aware_stamps_at_local_midnight_are_their_own_dates(tmp_path, zone):
    path = tmp_path / "daily.parquet"
    local = pl.Series([dt.datetime(d.year, d.month, d.day) for d in DAYS]).dt.replace_time_zone(zone)
    _bars(local.to_list()).with_columns(pl.col("timestamp").dt.replace_time_zone(zone)).write_parquet(path)
    assert pl.read_parquet_schema(path)["timestamp"] == pl.Datetime("us", zone)
    assert _read(path) == _midnights(DAYS)
    assert _read(path, "America/Chicago") == _midnights(DAYS)  # the column's own zone, whatever --timezone says


def test_text_times_with_offsets_are_their_own_dates(tmp_path):
    """A CSV of Berlin midnights written with their offsets (+01:00 in winter, +02:00 in summer)."""
    path = tmp_path / "daily.csv"
    text = pl.Series([dt.datetime(d.year, d.month, d.day) for d in DAYS]).dt.replace_time_zone("Europe/Berlin")
    _bars(text.dt.strftime("%Y-%m-%dT%H:%M:%S%:z").to_list()).write_csv(path)
    assert _read(path) == _midnights(DAYS)


def test_a_close_stamped_in_utc_or_in_new_york_stays_on_its_day(tmp_path):
    """21:00 UTC (16:00 New York) is the close of its own date: not moved to the next day, nor to midnight."""
    closes = [dt.datetime(d.year, d.month, d.day, 21) for d in DAYS]
    path = tmp_path / "utc.parquet"
    _bars(closes).write_parquet(path)
    assert _read(path) == [t.replace(tzinfo=dt.UTC) for t in closes]
    path = tmp_path / "ny.parquet"
    _bars([dt.datetime(d.year, d.month, d.day, 16) for d in DAYS]).with_columns(
        pl.col("timestamp").dt.replace_time_zone("America/New_York")).write_parquet(path)
    got = _read(path)
    assert [t.date() for t in got] == DAYS and {t.hour for t in got} == {20, 21}


def test_intraday_bars_keep_their_times(tmp_path):
    """15-minute bars of a Shanghai night session (21:00 .. 01:00 local): those after midnight are on another local
    date than their UTC one, and are left where they are."""
    days = DAYS[:10]
    wall = [dt.datetime(d.year, d.month, d.day, 21) + dt.timedelta(minutes=15 * k) for d in days for k in range(17)]
    path = tmp_path / "night.parquet"
    _bars(wall).write_parquet(path)
    want = pl.Series(wall).dt.replace_time_zone("Asia/Shanghai").dt.convert_time_zone("UTC").to_list()
    assert _read(path, "Asia/Shanghai") == want


def test_one_file_a_day_holds_dates(tmp_path):
    """A folder of one file per day, one bar per symbol each: no file shows a bar spacing, and every stamp at local
    midnight says they are dates."""
    folder = tmp_path / "days"
    folder.mkdir()
    for d in DAYS[:5]:
        _bars([dt.datetime(d.year, d.month, d.day)]).write_csv(folder / f"{d}.csv")
    assert _read(folder, "Asia/Shanghai") == _midnights(DAYS[:5])


def test_since_and_until_bound_the_dates(tmp_path):
    """--since 2017-07-03 keeps the bar of Monday 2017-07-03 (Shanghai midnight: 07-02 16:00 UTC)."""
    path = tmp_path / "daily.parquet"
    _bars([dt.datetime(d.year, d.month, d.day) for d in DAYS]).write_parquet(path)
    got = _read(path, "Asia/Shanghai", since="2017-07-03", until="2017-07-08")
    assert got == _midnights([dt.date(2017, 7, d) for d in (3, 4, 5, 6, 7)])


def test_the_bar_files_own_columns_are_dated_as_their_bars(tmp_path):
    """An --observed column of the bar file: each bar finds its own row in the as-of join."""
    path = tmp_path / "daily.parquet"
    _bars([dt.datetime(d.year, d.month, d.day) for d in DAYS], basis=np.arange(len(DAYS), dtype=float)
          ).write_parquet(path)
    table = read_bar_columns([str(path)], ["basis"], timezone="Asia/Shanghai")
    assert table.frame.get_column("ts").to_list() == _read(path, "Asia/Shanghai") == _midnights(DAYS)
