"""User covariates: tables read from files, joined to the bars as of each bar's time, known inputs at forecast steps.

Expected values are worked out by hand from the tiny tables written here; the fixture test checks that the bar files'
own columns joined back onto the loaded bars give the bars' own values.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.features.covariates import (
    CovariateTable,
    asof_join,
    coverage,
    known_at,
    pick,
    read_bar_columns,
    read_covariates,
)
from foxhunt.errors import InputError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NS = pl.Datetime("ns", "UTC")


def t(text: str) -> datetime:
    """'2024-03-01 10:00' as a UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def ns(text: str) -> int:
    return int(t(text).timestamp()) * 1_000_000_000


def table(rows: dict, keyed: bool = False, source: str = "t.csv") -> CovariateTable:
    """A table as the readers build it: rows {"ts": [...], "key": [...]?, value: [...]} (ts as text)."""
    frame = pl.DataFrame(rows).with_columns(pl.col("ts").str.to_datetime().dt.replace_time_zone("UTC").cast(NS))
    if keyed:
        frame = frame.sort("key", "ts")
    return CovariateTable(source, frame, keyed)


def bars(rows: list[tuple[str, str, str]]) -> pl.DataFrame:
    """(series, contract, ts text) rows, sorted by (series, ts) as the loaded bars are."""
    s, c, ts = zip(*rows, strict=True)
    frame = pl.DataFrame({"series": s, "contract": c, "ts": [t(x) for x in ts]}).with_columns(pl.col("ts").cast(NS))
    return frame.sort("series", "ts")


def fails(fn, *args, **kw) -> str:
    """The one-line InputError message `fn` raises."""
    with pytest.raises(InputError) as info:
        fn(*args, **kw)
    msg = str(info.value)
    assert msg and "\n" not in msg
    return msg


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- the as-of join -------------------------------------------------------------------------------------------------


def test_asof_takes_the_last_row_at_or_before_each_bar():
    vix = table({"ts": ["2024-03-01 10:00", "2024-03-01 11:00", "2024-03-01 12:00"], "vix": [1.0, 2.0, 3.0]})
    b = bars([("ES", "ESH4", x) for x in ["2024-03-01 09:59", "2024-03-01 10:00", "2024-03-01 10:59",
                                           "2024-03-01 11:00", "2024-03-01 11:30", "2024-03-01 13:00"]])
    got = asof_join(b, [vix], ["vix"])
    # before the first row: null; an equal timestamp is included; a later row is never used
    assert got.get_column("vix").to_list() == [None, 1.0, 1.0, 2.0, 2.0, 3.0]
    assert got.get_column("vix").dtype == pl.Float64


def test_unkeyed_table_gives_every_series_the_same_values_and_keeps_row_order():
    rate = table({"ts": ["2024-03-01 00:00", "2024-03-02 00:00"], "rate": [5.25, 5.5]})
    b = bars([("NQ", "NQH4", "2024-03-01 12:00"), ("ES", "ESH4", "2024-03-02 12:00"),
              ("ES", "ESH4", "2024-03-01 12:00"), ("NQ", "NQH4", "2024-03-02 00:00")])
    got = asof_join(b, [rate], ["rate"])
    assert got.select("series", "contract", "ts").equals(b)  # same rows, same order: (series, ts), not time order
    assert got.get_column("rate").to_list() == [5.25, 5.5, 5.25, 5.5]


def test_keyed_table_matches_contracts_bar_by_bar():
    oi = table({"ts": ["2024-03-06 00:00", "2024-03-07 00:00", "2024-03-06 00:00", "2024-03-07 00:00"],
                "key": ["ESH4", "ESH4", "ESM4", "ESM4"], "oi": [10.0, 11.0, 20.0, 21.0]}, keyed=True)
    b = bars([("ES", "ESH4", "2024-03-06 12:00"), ("ES", "ESH4", "2024-03-07 12:00"),
              ("ES", "ESM4", "2024-03-08 12:00"), ("NQ", "NQH4", "2024-03-08 12:00")])
    got = asof_join(b, [oi], ["oi"])
    # ES rolls to ESM4 on the third bar and reads ESM4's row; NQ is not in the file: null
    assert got.get_column("oi").to_list() == [10.0, 11.0, 21.0, None]


def test_keyed_table_naming_the_series_applies_to_all_its_contracts():
    cot = table({"ts": ["2024-03-06 00:00", "2024-03-08 00:00", "2024-03-06 00:00"],
                 "key": ["ES", "ES", "ESM4"], "cot": [1.0, 2.0, 99.0]}, keyed=True)
    b = bars([("ES", "ESH4", "2024-03-07 00:00"), ("ES", "ESM4", "2024-03-08 00:00")])
    got = asof_join(b, [cot], ["cot"])
    assert got.get_column("cot").to_list() == [1.0, 2.0]  # the series' rows first, ESM4's own row is not used


def test_daily_values_join_to_intraday_bars_without_looking_ahead(tmp_path):
    daily = read_covariates([str(write(tmp_path / "vix.csv", "date,vix\n2024-03-01,14.5\n2024-03-04,15.25\n"))])
    b = bars([("ES", "ESH4", x) for x in ["2024-02-29 23:59", "2024-03-01 00:00", "2024-03-01 14:30",
                                           "2024-03-03 23:59", "2024-03-04 00:00", "2024-03-04 09:30"]])
    got = asof_join(b, [daily], ["vix"])
    # stamped at midnight UTC of each date: the value applies from that midnight on, never earlier
    assert got.get_column("vix").to_list() == [None, 14.5, 14.5, 14.5, 15.25, 15.25]


def test_columns_of_several_tables_come_in_the_order_declared():
    a = table({"ts": ["2024-03-01 00:00"], "x": [1.0], "y": [2.0]})
    b2 = table({"ts": ["2024-03-01 00:00"], "key": ["ESH4"], "z": [3.0]}, keyed=True, source="z.parquet")
    got = asof_join(bars([("ES", "ESH4", "2024-03-02 00:00")]), [a, b2], ["y", "z", "x"])
    assert got.columns == ["series", "contract", "ts", "y", "z", "x"]
    assert got.row(0)[3:] == (2.0, 3.0, 1.0)


def test_non_finite_values_are_joined_as_they_are(tmp_path):
    tab = read_covariates([str(write(tmp_path / "c.csv", "date,x\n2024-03-01,NaN\n2024-03-02,\n2024-03-03,inf\n"))])
    got = asof_join(bars([("ES", "ESH4", f"2024-03-0{d} 12:00") for d in (1, 2, 3)]), [tab], ["x"])
    x = got.get_column("x").to_list()
    assert np.isnan(x[0]) and np.isnan(x[1]) and x[2] == np.inf  # an empty cell is NaN: null means "no row yet"


def test_keyed_table_matching_nothing_names_file_keys_and_series():
    oi = table({"ts": ["2024-03-01 00:00", "2024-03-01 00:00"], "key": ["CLJ4", "CLK4"], "oi": [1.0, 2.0]},
               keyed=True, source="oi.csv")
    msg = fails(asof_join, bars([("ES", "ESH4", "2024-03-02 00:00")]), [oi], ["oi"])
    assert "oi.csv" in msg and "CLJ4, CLK4" in msg and "ES" in msg


def test_input_named_like_a_bar_column_is_refused():
    tab = table({"ts": ["2024-03-01 00:00"], "contract": [1.0]}, source="c.csv")
    msg = fails(asof_join, bars([("ES", "ESH4", "2024-03-02 00:00")]), [tab], ["contract"])
    assert "'contract'" in msg and "c.csv" in msg and "rename" in msg


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stamps=st.lists(st.integers(0, 200), min_size=1, max_size=25, unique=True),
    cut=st.integers(0, 200),
    later=st.lists(st.tuples(st.integers(1, 100), st.floats(-1e3, 1e3)), min_size=1, max_size=10),
    keyed=st.booleans(),
)
def test_rows_stamped_after_t_never_change_values_at_bars_up_to_t(stamps, cut, later, keyed):
    """Replacing every row stamped after `cut` (new times, new values, more or fewer rows) leaves the values joined
    to bars at or before `cut` exactly as they were."""
    minute = 60_000_000_000
    stamps = sorted(stamps)

    def make(ts: list[int], vals: list[float]) -> CovariateTable:
        cols = {"ts": pl.Series(np.array(ts, dtype=np.int64) * minute).cast(NS), "v": pl.Series(vals, dtype=pl.Float64)}
        if keyed:
            cols = {"ts": cols["ts"], "key": ["ESH4"] * len(ts), "v": cols["v"]}
        return CovariateTable("p.csv", pl.DataFrame(cols), keyed)

    before = [s for s in stamps if s <= cut]
    jitter = sorted({cut + d for d, _ in later})
    base = make(stamps, [float(s) for s in stamps])
    moved = make(before + jitter, [float(s) for s in before] + [v for _, v in later][: len(jitter)])
    bar_ts = np.arange(0, 260, 7, dtype=np.int64) * minute
    b = pl.DataFrame({"series": ["ES"] * len(bar_ts), "contract": ["ESH4"] * len(bar_ts),
                      "ts": pl.Series(bar_ts).cast(NS)})
    early = bar_ts <= cut * minute
    got = asof_join(b, [base], ["v"]).get_column("v").to_numpy()[early]
    again = asof_join(b, [moved], ["v"]).get_column("v").to_numpy()[early]
    np.testing.assert_array_equal(got, again)


# --- pick -----------------------------------------------------------------------------------------------------------


def test_pick_finds_the_table_of_each_column():
    a, b2 = table({"ts": ["2024-03-01"], "x": [1.0]}, source="a.csv"), table({"ts": ["2024-03-01"], "y": [1.0]})
    assert pick([a, b2], ["y", "x"]) == {"y": b2, "x": a}


def test_pick_lists_what_the_tables_have_when_none_has_the_column():
    a = table({"ts": ["2024-03-01"], "vix": [1.0], "rate": [2.0]}, source="macro.csv")
    msg = fails(pick, [a], ["VIX"])
    assert "'VIX'" in msg and "macro.csv has vix, rate" in msg and "--covariates" in msg


def test_pick_refuses_a_column_two_tables_have():
    a = table({"ts": ["2024-03-01"], "vix": [1.0]}, source="a.csv")
    b2 = table({"ts": ["2024-03-01"], "vix": [2.0]}, source="b.parquet")
    msg = fails(pick, [a, b2], ["vix"])
    assert "'vix'" in msg and "a.csv" in msg and "b.parquet" in msg and "ambiguous" in msg


def test_pick_refuses_an_input_named_twice():
    a = table({"ts": ["2024-03-01"], "vix": [1.0]})
    assert "'vix' is named twice" in fails(pick, [a], ["vix", "vix"])


# --- known inputs at forecast steps, coverage -----------------------------------------------------------------------


def test_known_at_gives_values_as_of_each_timestamp_in_any_order():
    cal = table({"ts": ["2024-03-01 00:00", "2024-03-02 00:00", "2024-03-03 00:00"],
                 "holiday": [0.0, 1.0, 0.0], "event": [5.0, 6.0, 7.0]})
    when = np.array([ns("2024-03-02 13:00"), ns("2024-03-01 00:00"), ns("2024-03-03 00:00")])
    got = known_at(when, [cal], ["event", "holiday"])
    assert got.dtype == np.float32 and got.shape == (3, 2)
    np.testing.assert_array_equal(got, [[6.0, 1.0], [5.0, 0.0], [7.0, 0.0]])


def test_known_at_refuses_a_time_past_the_last_row():
    cal = table({"ts": ["2024-03-01 00:00", "2024-03-01 14:00"], "event": [1.0, 2.0]}, source="cal.csv")
    when = np.array([ns("2024-03-01 14:45"), ns("2024-03-01 14:00"), ns("2024-03-01 14:30")])
    msg = fails(known_at, when, [cal], ["event"])
    assert msg.startswith("cal.csv: column 'event' has no value at 2024-03-01T14:30:00Z")
    assert msg.endswith("extend the file to cover the forecast steps; a row holds from its time until the next "
                        "row's, so the last row covers no later time (a daily file needs the next day's row for the "
                        "rest of its last day)")


def test_known_at_refuses_a_time_before_the_first_row():
    cal = table({"ts": ["2024-03-01 00:00", "2024-03-02 00:00"], "event": [1.0, 2.0]}, source="cal.csv")
    msg = fails(known_at, np.array([ns("2024-03-01 12:00"), ns("2024-02-29 23:00")]), [cal], ["event"])
    assert "'event' has no value at 2024-02-29T23:00:00Z" in msg and "next row's" not in msg


def test_known_at_refuses_a_keyed_table():
    oi = table({"ts": ["2024-03-01"], "key": ["ESH4"], "oi": [1.0]}, keyed=True, source="oi.csv")
    msg = fails(known_at, np.array([ns("2024-03-01 00:00")]), [oi], ["oi"])
    assert "oi.csv" in msg and "'oi'" in msg and "drop the symbol column or use --observed" in msg


def test_coverage_reports_rows_and_span_per_column():
    a = table({"ts": ["2024-03-01 00:00", "2024-03-04 00:00"], "vix": [1.0, 2.0]}, source="vix.csv")
    b2 = table({"ts": ["2024-03-05 10:00", "2024-03-01 10:30", "2024-03-02 00:00"], "key": ["ESM4", "ESH4", "ESH4"],
                "oi": [1.0, 2.0, 3.0]}, keyed=True, source="oi.csv")
    assert coverage([a, b2], ["oi", "vix"]) == [
        {"name": "oi", "source": "oi.csv", "rows": 3, "first": "2024-03-01T10:30:00Z", "last": "2024-03-05T10:00:00Z",
         "keyed": True},
        {"name": "vix", "source": "vix.csv", "rows": 2, "first": "2024-03-01T00:00:00Z",
         "last": "2024-03-04T00:00:00Z", "keyed": False},
    ]


# --- reading covariate files ----------------------------------------------------------------------------------------


def test_csv_with_a_symbol_column_is_keyed_and_sorted_by_key_and_time(tmp_path):
    path = write(tmp_path / "oi.csv", "timestamp,symbol,oi,basis\n2024-03-01 10:00,ESM4,1,0.5\n"
                                      "2024-03-01 10:00,ESH4,2,0.25\n2024-03-01 11:00,ESM4,3,-1\n")
    tab = read_covariates([str(path)])
    assert tab.keyed and tab.columns == ("oi", "basis") and tab.source == str(path)
    assert tab.frame.schema == pl.Schema({"ts": NS, "key": pl.Utf8, "oi": pl.Float64, "basis": pl.Float64})
    assert tab.frame.get_column("key").to_list() == ["ESH4", "ESM4", "ESM4"]
    assert tab.frame.get_column("oi").to_list() == [2.0, 1.0, 3.0]


def test_a_root_column_keys_the_table(tmp_path):
    tab = read_covariates([str(write(tmp_path / "r.csv", "date,root,cot\n2024-03-01,ES,1\n2024-03-01,NQ,2\n"))])
    assert tab.keyed and tab.columns == ("cot",) and tab.frame.get_column("key").to_list() == ["ES", "NQ"]


def test_parquet_times_aware_naive_and_epoch_read_like_the_bars(tmp_path):
    aware = tmp_path / "aware.parquet"
    pl.DataFrame({"ts_event": [datetime(2024, 3, 1, 9, 30)], "x": [1]}).with_columns(
        pl.col("ts_event").dt.replace_time_zone("America/New_York")).write_parquet(aware)
    assert read_covariates([str(aware)]).frame.get_column("ts").to_list() == [t("2024-03-01 14:30")]
    naive = tmp_path / "naive.parquet"
    pl.DataFrame({"datetime": [datetime(2024, 3, 1, 9, 30)], "x": [1.5]}).write_parquet(naive)
    got = read_covariates([str(naive)], timezone="America/New_York").frame
    assert got.get_column("ts").to_list() == [t("2024-03-01 14:30")]  # naive: wall-clock time in --timezone
    assert read_covariates([str(naive)]).frame.get_column("ts").to_list() == [t("2024-03-01 09:30")]  # else UTC
    epoch = write(tmp_path / "epoch.csv", f"time,x\n{ns('2024-03-01 14:30') // 1_000_000_000},2\n")
    assert read_covariates([str(epoch)]).frame.get_column("ts").to_list() == [t("2024-03-01 14:30")]


def test_a_directory_of_two_files_is_one_table(tmp_path):
    write(tmp_path / "vix" / "2024-01.csv", "date,vix\n2024-01-02,13\n2024-01-31,14\n")
    write(tmp_path / "vix" / "2024-02.csv", "date,vix\n2024-02-01,15\n")
    tab = read_covariates([str(tmp_path / "vix")])
    assert tab.frame.get_column("vix").to_list() == [13.0, 14.0, 15.0] and not tab.keyed
    assert tab.frame.get_column("ts").to_list() == [t("2024-01-02"), t("2024-01-31"), t("2024-02-01")]
    assert read_covariates([str(tmp_path / "vix" / "*.csv")]).frame.equals(tab.frame)  # a glob names the same


def test_files_of_one_source_must_have_the_same_columns(tmp_path):
    write(tmp_path / "d" / "a.csv", "date,vix\n2024-01-02,13\n")
    bad = write(tmp_path / "d" / "b.csv", "date,vix,move\n2024-02-01,15,90\n")
    msg = fails(read_covariates, [str(tmp_path / "d")])
    assert msg.startswith(f"{bad}: columns vix, move differ from") and "a.csv's vix" in msg


def test_files_out_of_order_across_a_directory_name_both_rows(tmp_path):
    write(tmp_path / "d" / "a.csv", "date,vix\n2024-02-02,13\n")
    bad = write(tmp_path / "d" / "b.csv", "date,vix\n2024-02-01,15\n")
    msg = fails(read_covariates, [str(tmp_path / "d")])
    assert msg.startswith(f"{bad}: row 1: time 2024-02-01T00:00:00Z comes before 2024-02-02T00:00:00Z")
    assert "a.csv" in msg and "sort the file by time" in msg


def test_times_out_of_order_for_one_key_name_the_key_and_time(tmp_path):
    path = write(tmp_path / "oi.csv", "date,symbol,oi\n2024-03-02,ESH4,1\n2024-03-01,ESM4,2\n2024-03-01,ESH4,3\n")
    msg = fails(read_covariates, [str(path)])
    assert msg == (f"{path}: row 3: time 2024-03-01T00:00:00Z for ESH4 comes before 2024-03-02T00:00:00Z (row 1);"
                   " sort the file by time")


def test_a_repeated_time_names_the_duplicate(tmp_path):
    path = write(tmp_path / "vix.csv", "date,vix\n2024-03-01,1\n2024-03-02,2\n2024-03-02,2\n")
    msg = fails(read_covariates, [str(path)])
    assert msg == f"{path}: row 3: time 2024-03-02T00:00:00Z repeats (row 2 has it too); remove the duplicate"


def test_a_repeated_time_in_a_keyed_file_names_the_key(tmp_path):
    path = write(tmp_path / "oi.csv", "date,symbol,oi\n2024-03-01,ESH4,1\n2024-03-01,ESM4,2\n2024-03-01,ESM4,3\n")
    assert "time 2024-03-01T00:00:00Z for ESM4 repeats" in fails(read_covariates, [str(path)])


def test_text_in_a_real_value_column_names_the_row(tmp_path):
    path = write(tmp_path / "vix.csv", "date,vix\n2024-03-01,14.5\n2024-03-02,n/a\n")
    msg = fails(read_covariates, [str(path)], real=["vix"])
    assert msg.startswith(f"{path}: column 'vix' row 2: 'n/a' is not a number")
    assert "an --observed or --known input must be numeric" in msg


def test_a_non_numeric_real_column_in_parquet_is_refused(tmp_path):
    path = tmp_path / "c.parquet"
    pl.DataFrame({"date": ["2024-03-01"], "note": [True]}).write_parquet(path)
    assert "column 'note' has type Boolean, not numeric" in fails(read_covariates, [str(path)], real=["note"])


def test_a_text_column_not_declared_real_is_kept_as_text(tmp_path):
    """A column that is not numbers (a sector name, a flag) is read as text, for a --static category; the numbers
    beside it are numbers still, CSV text included."""
    path = write(tmp_path / "s.csv", "date,symbol,sector,vix\n2024-03-01,ES, equity ,14.5\n2024-03-02,ES,,15\n")
    table = read_covariates([str(path)])
    assert table.frame.schema["sector"] == pl.Utf8 and table.frame.schema["vix"] == pl.Float64
    assert table.frame["sector"].to_list() == ["equity", None]
    parquet = tmp_path / "c.parquet"
    pl.DataFrame({"date": ["2024-03-01"], "note": [True]}).write_parquet(parquet)
    assert read_covariates([str(parquet)]).frame["note"].to_list() == ["true"]


def test_no_time_column_lists_the_columns(tmp_path):
    path = write(tmp_path / "c.csv", "day_of,vix\n2024-03-01,14.5\n")
    msg = fails(read_covariates, [str(path)])
    assert msg.startswith(f"{path}: no time column") and "found columns: day_of, vix" in msg


def test_the_time_column_can_be_named(tmp_path):
    path = write(tmp_path / "c.csv", "day_of,vix\n2024-03-01,14.5\n")
    assert read_covariates([str(path)], timestamp_col="day_of").frame.get_column("ts").to_list() == [t("2024-03-01")]
    assert "no column 'when'" in fails(read_covariates, [str(path)], timestamp_col="when")


def test_an_empty_symbol_names_the_row(tmp_path):
    path = write(tmp_path / "oi.csv", "date,symbol,oi\n2024-03-01,ESH4,1\n2024-03-02,,2\n")
    assert fails(read_covariates, [str(path)]) == f"{path}: column 'symbol' row 2 is empty; give every row a symbol"


def test_a_bad_timestamp_names_the_row(tmp_path):
    path = write(tmp_path / "c.csv", "date,vix\n2024-03-01,1\nyesterday,2\n")
    assert fails(read_covariates, [str(path)]).startswith(f"{path}: column 'date' row 2: cannot parse timestamp")


def test_a_missing_path_is_named(tmp_path):
    assert "file not found" in fails(read_covariates, [str(tmp_path / "nope.csv")])


# --- extra columns of the bar files ---------------------------------------------------------------------------------


def _databento_like(path: Path, rows: list[tuple[str, str, float]]) -> Path:
    """A Databento-style OHLCV parquet (ts_event, symbol, rtype, instrument_id, prices) with an extra `vwap`."""
    ts, sym, vwap = zip(*rows, strict=True)
    n = len(rows)
    pl.DataFrame({
        "rtype": pl.Series([33] * n, dtype=pl.UInt8), "instrument_id": pl.Series([1] * n, dtype=pl.UInt32),
        "open": [1.0] * n, "high": [1.0] * n, "low": [1.0] * n, "close": [4000.25] * n,
        "volume": pl.Series([5] * n, dtype=pl.UInt64), "symbol": list(sym), "VWAP": list(vwap),
        "ts_event": pl.Series([t(x) for x in ts]).cast(NS),
    }).write_parquet(path)
    return path


def test_bar_columns_read_by_time_and_raw_symbol(tmp_path):
    path = _databento_like(tmp_path / "es.parquet", [("2024-03-01 10:01", "ESH4", 2.0), ("2024-03-01 10:00", "ESH4", 1.0),
                                                      ("2024-03-01 10:00", "ESM4", 7.0)])
    tab = read_bar_columns([str(path)], ["vwap", "close"], price_scale=100)
    assert tab.keyed and tab.columns == ("vwap", "close")  # matched up to case, named as asked
    assert tab.frame.get_column("key").to_list() == ["ESH4", "ESH4", "ESM4"]  # sorted by (symbol, ts)
    assert tab.frame.get_column("vwap").to_list() == [1.0, 2.0, 7.0]
    assert tab.frame.get_column("close").to_list() == [40.0025] * 3  # a price, divided as the bars' prices are


def test_a_repeated_bar_keeps_the_last_row_read(tmp_path):
    path = _databento_like(tmp_path / "es.parquet", [("2024-03-01 10:00", "ESH4", 1.0), ("2024-03-01 10:00", "ESH4", 2.0)])
    assert read_bar_columns([str(path)], ["vwap"]).frame.get_column("vwap").to_list() == [2.0]


def test_a_missing_bar_column_lists_the_columns_found(tmp_path):
    path = _databento_like(tmp_path / "es.parquet", [("2024-03-01 10:00", "ESH4", 1.0)])
    msg = fails(read_bar_columns, [str(path)], ["spread"])
    assert msg.startswith(f"{path}: no column 'spread'") and "found columns: rtype, instrument_id, open" in msg


def test_bar_files_without_a_symbol_are_named_like_the_bars(tmp_path):
    body = "timestamp,open,high,low,close,volume,oi\n2024-03-01 10:00,1,1,1,1,1,5\n"
    write(tmp_path / "hive" / "symbol=ESH4" / "part-0.csv", body)
    assert read_bar_columns([str(tmp_path / "hive")], ["oi"]).frame.get_column("key").to_list() == ["ESH4"]
    plain = write(tmp_path / "CL.csv", body)
    assert read_bar_columns([str(plain)], ["oi"]).frame.get_column("key").to_list() == ["CL"]  # the file's stem


def test_dbn_bar_files_have_no_extra_columns():
    msg = fails(read_bar_columns, [str(FIXTURES / "es_fut_ohlcv1m_databento.dbn.zst")], ["vwap"])
    assert "es_fut_ohlcv1m_databento.dbn.zst: a DBN file holds only the OHLCV fields" in msg and "--covariates" in msg


@pytest.mark.parametrize("name", ["es_fut_ohlcv1h_databento.parquet", "es_fut_ohlcv1m_databento_raw.parquet",
                                  "generic_ohlcv_daily.csv"])
def test_bar_columns_joined_back_give_the_loaded_bars_own_values(name):
    """Keyed by raw symbol = the bars' contract (or series): every bar finds its own row, fixed-point prices too."""
    path = str(FIXTURES / name)
    loaded = load_bars(DataConfig(paths=(path,))).bars
    tab = read_bar_columns([path], ["close", "volume"])
    got = asof_join(loaded.select("series", "contract", "ts"), [tab], ["close", "volume"])
    np.testing.assert_array_equal(got.get_column("close").to_numpy(), loaded.get_column("own_close").to_numpy())
    np.testing.assert_array_equal(got.get_column("volume").to_numpy(), loaded.get_column("volume").to_numpy())
