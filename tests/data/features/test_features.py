"""Observed features and the raw target against hand-computed values."""

from __future__ import annotations

import math

import polars as pl
import pytest

from foxhunt.data.features.bar_features import raw_features


def bars(rows: list[tuple]) -> pl.DataFrame:
    """rows: (series, contract, minute, open, high, low, close, volume)."""
    series, contract, minute, o, h, lo, c, v = zip(*rows, strict=True)
    ts = pl.Series([m * 60 * 10**9 for m in minute]).cast(pl.Datetime("ns", "UTC"))
    return pl.DataFrame(
        {
            "series": series,
            "ts": ts,
            "open": o,
            "high": h,
            "low": lo,
            "close": c,
            "volume": [float(x) for x in v],
            "contract": contract,
        }
    )


ROWS = [
    ("ES", "ESH4", 0, 100.0, 101.0, 99.0, 100.0, 10),
    ("ES", "ESH4", 1, 100.0, 102.0, 100.0, 102.0, 0),
    ("ES", "ESM4", 2, 110.0, 112.0, 110.0, 111.0, 5),  # roll bar: new contract, different price level
    ("ES", "ESM4", 3, 111.0, 111.0, 111.0, 110.0, 7),  # high == low: zero range
    ("NQ", "NQ", 0, 50.0, 51.0, 49.0, 50.0, 3),  # a new series: first row, no return
    ("NQ", "NQ", 1, 50.0, 50.5, 49.5, 50.5, 4),
]


def test_returns_ranges_volume_by_hand() -> None:
    f = raw_features(bars(ROWS), adjust="ratio", target="log_return")
    assert f["first"].to_list() == [True, False, False, False, True, False]
    expected = [0.0, math.log(102 / 100), math.log(111 / 102), math.log(110 / 111), 0.0, math.log(50.5 / 50)]
    assert f["log_return"].to_list() == pytest.approx(expected, abs=1e-15)
    assert f["log_range"].to_list() == pytest.approx(
        [
            math.log(101 / 99),
            math.log(102 / 100),
            math.log(112 / 110),
            0.0,
            math.log(51 / 49),
            math.log(50.5 / 49.5),
        ]
    )
    assert f["log_volume"].to_list() == pytest.approx(
        [math.log(11), 0.0, math.log(6), math.log(8), 2 * math.log(2), math.log(5)]
    )
    assert f["target"].to_list() == f["log_return"].to_list()


def test_roll_bar_is_flagged_and_zeroed_without_adjustment() -> None:
    """Unadjusted prices of two contracts are not comparable: the roll bar's return is 0 and flagged."""
    f = raw_features(bars(ROWS), adjust="none", target="log_return")
    assert f["roll"].to_list() == [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]  # a new series is not a roll
    assert f["log_return"][2] == 0.0
    assert f["log_return"][3] == pytest.approx(math.log(110 / 111))


def test_roll_bar_keeps_adjusted_return() -> None:
    """Back-adjusted prices (ratio/difference) are continuous: the return is kept, the bar still flagged."""
    f = raw_features(bars(ROWS), adjust="difference", target="log_return")
    assert f["roll"][2] == 1.0
    assert f["log_return"][2] == pytest.approx(math.log(111 / 102))


def test_log_range_target() -> None:
    f = raw_features(bars(ROWS), adjust="ratio", target="log_range")
    assert f["target"].to_list() == f["log_range"].to_list()
