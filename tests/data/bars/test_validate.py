"""Cleaning: counts and results of dropping, de-duplicating, sorting and folding Sunday stubs, by hand."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from foxhunt.data.bars.bad_rows import VALUES, bar_fault
from foxhunt.data.bars.load import load_bars
from foxhunt.data.bars.validate import clean_bars, merge_sunday_stubs
from foxhunt.data.config import DataConfig
from foxhunt.data.io.normalise import RAW_SCHEMA
from foxhunt.errors import InputError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
UTC = dt.UTC
NAN = float("nan")


def _raw(rows: list[tuple]) -> pl.DataFrame:
    """rows of (symbol, day, close, volume[, rtype]); open = close - 1, high = close + 1, low = close - 2."""
    recs = []
    for i, r in enumerate(rows):
        sym, day, close, vol = r[:4]
        recs.append(
            {
                "file_idx": 0,
                "row": i,
                "ts": dt.datetime(2024, 3, day, tzinfo=UTC),
                "open": close - 1,
                "high": close + 1,
                "low": close - 2,
                "close": close,
                "volume": vol,
                "symbol": sym,
                "instrument_id": None,
                "rtype": r[4] if len(r) > 4 else None,
            }
        )
    return pl.DataFrame(recs, schema=RAW_SCHEMA)


def test_duplicates_keep_last_and_out_of_order_rows_are_sorted_and_counted():
    raw = _raw(
        [
            ("A", 4, 10.5, 2.0),
            ("A", 4, 10.5, 2.0),  # duplicate of A day 4 (the same bar): the last one read is kept
            ("A", 6, 12.0, 1.0),
            ("A", 5, 11.0, 1.0),  # out of order
            ("B", 4, 20.0, 1.0),
            ("B", 3, 19.0, 1.0),  # out of order
        ]
    )
    out, stats = clean_bars(raw, ["f.parquet"])
    assert stats == {
        "nan_rows_dropped": 0,
        "inconsistent_rows_dropped": 0,
        "duplicates_dropped": 1,
        "rows_out_of_order": 2,
        "duplicates_conflicting": 0,
    }
    assert out.select("symbol", pl.col("ts").dt.day(), "close").rows() == [
        ("A", 4, 10.5),
        ("A", 5, 11.0),
        ("A", 6, 12.0),
        ("B", 3, 19.0),
        ("B", 4, 20.0),
    ]
    assert out["row"][0] == 1


def test_nan_rows_up_to_one_percent_are_dropped_and_counted():
    raw = _raw([("A", 1, 100.0 + i, 1.0) for i in range(200)]).with_columns(
        ts=pl.col("ts") + pl.duration(minutes=pl.col("row"))
    )
    raw = raw.with_columns(close=pl.when(pl.col("row") == 7).then(NAN).otherwise("close"))
    raw = raw.with_columns(volume=pl.when(pl.col("row") == 9).then(None).otherwise("volume"))
    out, stats = clean_bars(raw, ["f.parquet"])
    assert stats["nan_rows_dropped"] == 2
    assert out.height == 198
    assert 7 not in out.get_column("row").to_list()


def test_more_than_one_percent_nan_rows_is_an_error():
    raw = _raw([("A", d, 100.0, 1.0) for d in range(1, 11)])
    raw = raw.with_columns(open=pl.when(pl.col("row") == 3).then(NAN).otherwise("open"))
    with pytest.raises(InputError, match=r"f\.csv data row 4 \(A at 2024-03-04.*1 of 10 rows"):
        clean_bars(raw, ["f.csv"])


def test_sunday_stub_folds_into_monday_by_hand():
    # 2024-03-03 is a Sunday, 03-04 a Monday; rtype 35 = ohlcv-1d.
    raw = _raw([("ESH4", 1, 100.0, 5.0, 35), ("ESH4", 3, 101.0, 2.0, 35), ("ESH4", 4, 104.0, 7.0, 35)])
    raw = raw.with_columns(
        high=pl.Series([101.0, 106.0, 105.0]),
        low=pl.Series([98.0, 99.0, 100.0]),
    )
    clean, _ = clean_bars(raw, ["d.parquet"])
    out, n = merge_sunday_stubs(clean)
    assert n == 1
    assert out.schema["ts"] == pl.Datetime("ns", "UTC")
    assert out.select(pl.col("ts").dt.day(), "open", "high", "low", "close", "volume").rows() == [
        (1, 99.0, 101.0, 98.0, 100.0, 5.0),
        (
            4,
            100.0,
            106.0,
            99.0,
            104.0,
            9.0,
        ),  # open from the stub, high/low over both, close Monday, volume summed
    ]


def test_sunday_bars_of_other_sources_are_kept():
    raw = _raw([("BTC", 3, 100.0, 5.0), ("BTC", 4, 101.0, 5.0)])  # no rtype: a 7-day market's Sunday is real
    clean, _ = clean_bars(raw, ["d.parquet"])
    out, n = merge_sunday_stubs(clean)
    assert n == 0 and out.equals(clean)


def test_databento_daily_fixture_has_no_sunday_bars_after_loading():
    lb = load_bars(DataConfig(paths=(str(FIXTURES / "es_fut_ohlcv1d_databento.parquet"),), adjust="none"))
    assert lb.report["sunday_stubs_merged"] == 12  # 4 Sundays x ESH4, ESM4, ESU4 (spread rows dropped first)
    assert lb.report["bar_interval"] == "1d"
    assert (lb.bars.get_column("ts").dt.weekday() <= 5).all()
    raw = pl.read_parquet(FIXTURES / "es_fut_ohlcv1d_databento.parquet").filter(pl.col("symbol") == "ESH4")
    stub = raw.filter(pl.col("ts_event") == dt.datetime(2024, 2, 25, tzinfo=UTC)).row(0, named=True)
    monday = raw.filter(pl.col("ts_event") == dt.datetime(2024, 2, 26, tzinfo=UTC)).row(0, named=True)
    got = lb.bars.filter(pl.col("ts") == dt.datetime(2024, 2, 26, tzinfo=UTC)).row(0, named=True)
    assert got["contract"] == "ESH4"
    assert got["open"] == stub["open"]
    assert got["high"] == max(stub["high"], monday["high"])
    assert got["low"] == min(stub["low"], monday["low"])
    assert got["close"] == monday["close"]
    assert got["volume"] == stub["volume"] + monday["volume"]


def test_the_loader_drops_exactly_the_bars_the_streams_rule_says_it_drops():
    """One definition of the bar rules: on bars with NaN, inf, missing values, ties and every kind of contradiction
    (and prices at or below zero, which the loader keeps), the rows clean_bars drops are those for which
    `bar_fault` (what `Forecaster.update` refuses) says the loader drops the bar."""
    rng = np.random.default_rng(0)
    n = 400
    vals = rng.choice([-1.0, 0.0, 1.0, 2.0, 3.0], size=(n, 5))  # (N, 5) small integers: many ties, some <= 0
    vals[:, 4] = np.abs(vals[:, 4])  # a negative volume stops the loader (below): not among these
    odd = rng.random((n, 5)) < 0.03
    vals[odd] = rng.choice([np.nan, np.inf, -np.inf], size=int(odd.sum()))
    raw = _raw([("A", 1, 1.0, 1.0)] * n).with_columns(ts=pl.col("ts") + pl.duration(minutes=pl.col("row")),
                                                      **{c: pl.Series(vals[:, i]) for i, c in enumerate(VALUES)})
    raw = raw.with_columns(volume=pl.when(pl.col("row") == 5).then(None).otherwise("volume"))  # missing
    out, _ = clean_bars(raw, ["f.parquet"], judge=False)
    rows = raw.select(*VALUES).rows()
    dropped = [i for i, r in enumerate(rows) if bar_fault([np.nan if v is None else v for v in r], False) is not None]
    assert 5 in dropped and 0 < len(dropped) < n
    assert sorted(set(range(n)) - set(out["row"].to_list())) == dropped
    assert all(bar_fault(list(r), False)[1] for r in raw.filter(pl.col("row").is_in(dropped)).select(*VALUES)
               .fill_null(np.nan).rows())  # each a bar the loader drops, not one it stops on


def test_bar_fault_names_the_rule_and_whether_the_loader_drops_or_stops():
    assert bar_fault([10.0, 11.0, 9.0, 10.5, 1.0], True) is None
    assert bar_fault([10.0, 11.0, 0.0, 0.0, 1.0], False) is None  # a zero price is kept: price_change takes it
    assert bar_fault([10.0, 11.0, 0.0, 0.0, 1.0], True) == ("low 0.0 is not positive", False)
    assert bar_fault([10.0, 9.0, 9.5, 10.0, 1.0], False) == (
        "high 9.0 is below low 9.5 (OHLC prices that contradict each other)", True)
    assert bar_fault([10.0, 11.0, 9.0, 10.5, -1.0], False) == ("volume -1.0 is negative", False)
    assert bar_fault([10.0, 11.0, 9.0, NAN, -1.0], True)[1]  # a NaN first: dropped, as the loader's order has it
