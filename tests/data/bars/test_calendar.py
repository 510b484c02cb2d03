"""Calendar covariates: time of day and session position across DST, Presidents' Day, daily bars, extrapolation."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from foxhunt.data.bars.grid import future_timestamps
from foxhunt.data.features.calendar import SESSION_CALENDAR, calendar_columns, calendar_features
from foxhunt.data.util import clock
from foxhunt.data.util.clock import local_ns
from foxhunt.errors import InputError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CT = "America/Chicago"
MIN = 60 * 10**9


def ns(*stamps: str) -> np.ndarray:
    return np.array([np.datetime64(s, "ns").astype(np.int64) for s in stamps])


@pytest.fixture(scope="module")
def esh4_ts() -> np.ndarray:
    """UTC ns of every ESH4 1-minute bar in the Databento fixture (sorted)."""
    df = pl.read_parquet(FIXTURES / "es_fut_ohlcv1m_databento.parquet", columns=["symbol", "ts_event"])
    return df.filter(pl.col("symbol") == "ESH4")["ts_event"].sort().dt.epoch("ns").to_numpy()


def test_intraday_features_by_hand_across_dst() -> None:
    # Thu 03-07 17:00 CST (session open, trade date Fri), Fri 03-08 15:59 CST (last minute), Sun 03-10 17:00 CDT.
    ts = ns("2024-03-07T23:00", "2024-03-08T21:59", "2024-03-10T22:00")
    f = calendar_features(ts, CT, intraday=True)
    assert list(f) == list(calendar_columns(True, False))
    tod = 2 * math.pi * np.array([17 * 60, 15 * 60 + 59, 17 * 60]) / 1440
    np.testing.assert_allclose(f["tod_sin"], np.sin(tod), atol=1e-12)
    np.testing.assert_allclose(f["tod_cos"], np.cos(tod), atol=1e-12)
    dow = 2 * math.pi * np.array([4, 4, 0]) / 7  # trade dates Fri, Fri, Mon
    np.testing.assert_allclose(f["dow_sin"], np.sin(dow), atol=1e-12)
    np.testing.assert_allclose(f["session_elapsed"], [0.0, 1379 / 1380, 0.0], atol=1e-12)


def test_cached_offset_table_grows_and_matches_polars(monkeypatch) -> None:
    monkeypatch.setattr(clock, "_OFFSET_TABLES", {})
    rng = np.random.default_rng(2)
    for start in ("2024-03-01", "2023-10-20", "2024-11-01", "2024-03-05"):  # later, earlier, later, inside: DSTs
        ts = np.sort(ns(start)[0] + rng.integers(0, 20 * 86_400, 5000) * 10**9)  # dense: the table path
        sparse = ts[::50]  # runs that nearly fill their span, and then too few of them: the run path
        for t in (ts, sparse, sparse[:8]):
            want = pl.Series(t).cast(pl.Datetime("ns", "UTC")).dt.convert_time_zone(CT).dt.replace_time_zone(None)
            np.testing.assert_array_equal(local_ns(t, CT), want.dt.epoch("ns").to_numpy())
    (first, table), = clock._OFFSET_TABLES.values()  # one table per zone, grown to cover every span asked
    assert first * clock.QUARTER_NS <= ns("2023-10-20")[0] and not table.flags.writeable
    assert (first + len(table)) * clock.QUARTER_NS >= ns("2024-11-20")[0]


def test_local_time_matches_polars_across_dst_change() -> None:
    ts = ns("2024-03-10T07:45") + np.arange(0, 180) * MIN  # 01:45 CST .. through the 02:00 -> 03:00 jump
    want = pl.Series(ts).cast(pl.Datetime("ns", "UTC")).dt.convert_time_zone(CT).dt.replace_time_zone(None)
    np.testing.assert_array_equal(local_ns(ts, CT), want.dt.epoch("ns").to_numpy())


def test_fixture_sessions_open_at_17_ct_before_and_after_dst(esh4_ts: np.ndarray) -> None:
    f = calendar_features(esh4_ts, CT, intraday=True)
    elapsed = f["session_elapsed"]
    assert elapsed.min() == 0.0 and elapsed.max() < 1.0
    opens = esh4_ts[elapsed == 0.0]
    # Every session opens at 17:00 CT: 23:00 UTC before DST (2024-03-10), 22:00 UTC after.
    hours = (opens // (3600 * 10**9)) % 24
    before = opens < ns("2024-03-10T12:00")[0]
    assert set(hours[before]) == {23} and set(hours[~before]) == {22}
    assert len(opens) == 20  # 20 sessions in the fixture


def test_presidents_day_session_features(esh4_ts: np.ndarray) -> None:
    pytest.importorskip("pandas_market_calendars")
    f = calendar_features(esh4_ts, CT, intraday=True, sessions=SESSION_CALENDAR)
    assert list(f) == list(calendar_columns(True, True))
    day = ((local_ns(esh4_ts, CT) + 7 * 3600 * 10**9) // (86400 * 10**9)).astype("datetime64[D]")
    pres = day == np.datetime64("2024-02-19")
    assert f["early_close"][pres].min() == 1.0 and f["early_close"][~pres].max() == 0.0
    # The last bar before the 12:00 CT halt (17:59 UTC) closes one minute before the session close.
    last = esh4_ts[pres].max()
    assert last == ns("2024-02-19T17:59")[0]
    assert f["to_close"][esh4_ts == last][0] == pytest.approx(1 / 1380)
    # A normal day closes at 16:00 CT: after DST that is 21:00 UTC.
    assert f["to_close"][esh4_ts == ns("2024-03-11T20:59")[0]][0] == pytest.approx(1 / 1380)
    assert f["to_close"][esh4_ts == ns("2024-03-10T22:00")[0]][0] == pytest.approx(1.0)
    assert f["pre_holiday"].max() == 0.0 and f["post_holiday"].max() == 0.0  # no full holiday in the fixture


def test_daily_features_use_the_utc_date() -> None:
    ts = ns("2024-02-19", "2024-12-24", "2024-12-26", "2024-03-29")  # Mon, Tue, Thu, Fri
    f = calendar_features(ts, CT, intraday=False)
    assert list(f) == list(calendar_columns(False, False))
    np.testing.assert_allclose(f["dow_sin"], np.sin(2 * math.pi * np.array([0, 1, 3, 4]) / 7), atol=1e-12)
    np.testing.assert_allclose(
        f["month_cos"], np.cos(2 * math.pi * np.array([1, 11, 11, 2]) / 12), atol=1e-12
    )


def test_daily_session_flags() -> None:
    pytest.importorskip("pandas_market_calendars")
    ts = ns("2024-02-19", "2024-12-24", "2024-12-26", "2024-03-29", "2024-03-28")
    f = calendar_features(ts, CT, intraday=False, sessions=SESSION_CALENDAR)
    assert f["early_close"].tolist() == [
        1.0,
        1.0,
        0.0,
        1.0,
        0.0,
    ]  # Presidents' Day, Christmas Eve, Good Friday
    assert f["pre_holiday"].tolist() == [0.0, 1.0, 0.0, 0.0, 0.0]  # closed on 12-25
    assert f["post_holiday"].tolist() == [0.0, 0.0, 1.0, 0.0, 0.0]


def test_missing_calendar_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas_market_calendars", None)
    with pytest.raises(InputError, match=r"foxhunt\[calendars\]"):
        calendar_features(ns("2024-02-19"), CT, intraday=False, sessions=SESSION_CALENDAR)


def test_future_daily_timestamps_skip_weekends() -> None:
    out = future_timestamps(ns("2024-03-07", "2024-03-08"), 86400 * 10**9, 3, intraday=False, exchange_tz=CT)
    want = [ns("2024-03-08", "2024-03-11", "2024-03-12"), ns("2024-03-11", "2024-03-12", "2024-03-13")]
    np.testing.assert_array_equal(out, np.stack(want))


def test_future_intraday_timestamps_skip_halt_and_weekend() -> None:
    last = ns("2024-03-07T21:58", "2024-03-08T21:59")  # Thu 15:58 CST, Fri 15:59 CST
    out = future_timestamps(last, MIN, 3, intraday=True, exchange_tz=CT)
    want = [
        ns("2024-03-07T21:59", "2024-03-07T23:00", "2024-03-07T23:01"),
        ns("2024-03-10T22:00", "2024-03-10T22:01", "2024-03-10T22:02"),
    ]  # Sunday 17:00 CDT
    np.testing.assert_array_equal(out, np.stack(want))


def test_future_timestamps_elsewhere_are_plain_steps() -> None:
    out = future_timestamps(ns("2024-03-08T21:59"), MIN, 2, intraday=True, exchange_tz="Europe/London")
    np.testing.assert_array_equal(out, [ns("2024-03-08T22:00", "2024-03-08T22:01")])
