"""`Forecaster.update` across a gap: a bar nine months after a 1-minute stream's last one is said once (a warning
naming the gap and the bar spacing), and `max_gap=` refuses it with one line, leaving the state as it was.
Weekends and the daily halt are not gaps: the forecast grid skips them."""

from __future__ import annotations

import datetime as dt
import logging

import numpy as np
import polars as pl
import pytest

import foxhunt
from foxhunt.durations import parse_gap
from foxhunt.errors import InputError

FRIDAY = dt.datetime(2024, 2, 23, 21, 59, tzinfo=dt.UTC)  # 15:59 CT, the last bar before the weekend


def _bar(ts: str, close: float = 5000.0) -> dict:
    return {"symbol": "ES", "ts_event": ts, "open": close, "high": close + 2, "low": close - 2, "close": close,
            "volume": 1000}


def _gap_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "grid expected" in r.getMessage()]


@pytest.fixture
def stream(intraday_run):
    run, bars = intraday_run
    fc = foxhunt.Forecaster.load(run)
    fc.predict(bars.filter(pl.col("ts_event") <= FRIDAY))
    return fc


def test_a_bar_nine_months_on_is_said_once(stream, caplog):
    caplog.set_level(logging.WARNING, logger="foxhunt.api")
    stream.update(_bar("2024-11-25T15:00:00Z"))
    said = _gap_warnings(caplog)
    assert len(said) == 1
    assert "'ES'" in said[0] and "273.7 days after the bar the grid expected next (2024-02-25T23:00:00Z; 1m bars)" \
        in said[0] and "max_gap" in said[0]
    stream.update(_bar("2024-11-25T15:01:00Z"))  # the next minute: no new gap
    stream.update(_bar("2024-11-25T15:05:00Z"))  # three bars missing: not a gap worth a word
    assert len(_gap_warnings(caplog)) == 1


def test_the_weekend_and_the_halt_are_no_gap(stream, caplog):
    caplog.set_level(logging.WARNING, logger="foxhunt.api")
    stream.update(_bar("2024-02-25T23:00:00Z"))  # Sunday's open after Friday's close: the grid's next bar
    stream.update(_bar("2024-02-26T23:30:00Z"))  # over Monday's halt, 7.5 hours of bars missing as well
    assert _gap_warnings(caplog) == []


def test_max_gap_refuses_with_one_line_and_keeps_the_state(stream, intraday_run):
    with pytest.raises(InputError) as e:
        stream.update(_bar("2024-11-25T15:00:00Z"), max_gap="1d")
    msg = str(e.value)
    assert "\n" not in msg and "273.7 days" in msg and "past max_gap 1 day" in msg and "1m bars" in msg
    got = stream.update_arrays(_bar("2024-02-25T23:00:00Z"), max_gap=dt.timedelta(hours=36))  # within the limit
    ref = foxhunt.Forecaster.load(intraday_run[0])
    ref.predict(intraday_run[1].filter(pl.col("ts_event") <= FRIDAY))
    want = ref.update_arrays(_bar("2024-02-25T23:00:00Z"))
    np.testing.assert_array_equal(got.quantiles, want.quantiles)  # the refused bar left no trace


@pytest.mark.parametrize(("value", "ns"), [("36h", 36 * 3600 * 10**9), ("3d", 3 * 86_400 * 10**9),
                                           ("90min", 5_400 * 10**9), (dt.timedelta(minutes=5), 300 * 10**9),
                                           (np.timedelta64(2, "h"), 7_200 * 10**9), (None, None)])
def test_max_gap_reads_durations(value, ns):
    assert parse_gap(value) == ns


@pytest.mark.parametrize("value", ["soon", "0h", 5])
def test_max_gap_refuses_what_is_not_a_duration(value):
    with pytest.raises(InputError, match="max_gap"):
        parse_gap(value)
