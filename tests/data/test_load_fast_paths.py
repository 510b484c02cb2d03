"""The loader's fast paths (numpy sorts by integer keys, binary-search lookups, local_ns for zones) give exactly what
the plain polars formulations they replaced give: each test holds one stage to that reference, written out here, on
rows built to hit the awkward cases (duplicates, rows out of order, null instrument ids, DST changes, several roots)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pytest

from foxhunt.data.bars.load import _grouped_summary, _series_summary, bar_interval, load_raw, spacing_ns
from foxhunt.data.bars.series import SEG_SPAN, _per_bar, _sorted_last
from foxhunt.data.bars.sessions import closed_share
from foxhunt.data.bars.symbols import parse_futures, trade_date
from foxhunt.data.bars.validate import INSTRUMENT, clean_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.io.normalise import RAW_SCHEMA
from foxhunt.data.io.read import read_bars
from foxhunt.data.prepare.load_stage import series_index as _series_index
from foxhunt.data.prepare.load_stage import sorted_bars
from foxhunt.data.util.order import (
    combined,
    grouped_order,
    instrument_code,
    new_group,
    run_starts,
    sort_keys,
    stable_order,
    take_out,
)
from foxhunt.data.util.runs import run_starts_of

CT = "America/Chicago"
T0 = dt.datetime(2024, 3, 8, 12, 0, tzinfo=dt.UTC)  # the US DST change (2024-03-10) falls inside the rows below


def _messy(n: int = 3000, seed: int = 0) -> pl.DataFrame:
    """Raw bars of three symbols (one with a null instrument id): duplicates, shuffled stretches, out-of-order rows.
    A duplicate is the same bar again (its values follow from its symbol and minute): one with other values is a
    conflict, which more than 1% of the rows make an error (test_duplicates.py)."""
    rng = np.random.default_rng(seed)
    sym = rng.choice(["ESH4", "NQH4", "ES"], n)
    minute = rng.integers(0, 6000, n)  # many (symbol, ts) repeats: duplicates
    code = np.unique(sym, return_inverse=True)[1]
    close = 100 + np.sin(minute + 2.0 * code)
    return pl.DataFrame(
        {
            "file_idx": np.zeros(n, np.uint32),
            "row": np.arange(n),
            "ts": [T0 + dt.timedelta(minutes=int(m)) for m in minute],
            "open": close,
            "high": close + 1,
            "low": close - 1,
            "close": close,
            "volume": ((minute * 31 + code * 7) % 99 + 1).astype(float),
            "symbol": sym,
            "instrument_id": [None if s == "ES" else 7 + (s == "NQH4") for s in sym],
            "rtype": [None] * n,
        },
        schema=RAW_SCHEMA,
    )


def _clean_reference(df: pl.DataFrame) -> tuple[pl.DataFrame, int, int]:
    """The polars formulation clean_bars used: unique keeping the last row read, a running maximum, a sort."""
    dedup = df.unique(subset=[*INSTRUMENT, "ts"], keep="last", maintain_order=True)
    late = pl.col("ts") < pl.col("ts").cum_max().shift(1).over(INSTRUMENT)
    out_of_order = dedup.select(late.fill_null(False).sum()).item()
    return dedup.sort(*INSTRUMENT, "ts"), df.height - dedup.height, out_of_order


def test_one_stable_sort_dedups_and_counts_like_unique_and_cum_max():
    df = _messy()
    got, stats = clean_bars(df, ["f.parquet"])
    want, duplicates, out_of_order = _clean_reference(df)
    assert got.equals(want, null_equal=True)
    assert (stats["duplicates_dropped"], stats["rows_out_of_order"]) == (duplicates, out_of_order)
    assert duplicates > 100 and out_of_order > 100  # the rows hit both cases many times


def _in_time_order(df: pl.DataFrame) -> pl.DataFrame:
    """`df`'s rows by ts, instruments interleaved, as a vendor writes a file: each instrument's rows in time order."""
    return df.sort("ts", maintain_order=True).with_columns(pl.int_range(pl.len(), dtype=RAW_SCHEMA["row"]).alias("row"))


@pytest.mark.parametrize("consume", [False, True])
@pytest.mark.parametrize("spread", [1, 20_000, 100_000])
def test_clean_bars_of_rows_in_time_order_gathers_only_what_varies_and_matches(consume, spread):
    # instrument ids `spread` apart: a radix sort of the instrument code, of its dense numbers, or np.lexsort
    df = _in_time_order(_messy()).with_columns(
        instrument_id=pl.col("instrument_id") * spread, rtype=pl.lit(33 if spread > 1 else None, pl.UInt8)
    )
    want, duplicates, _ = _clean_reference(df)
    mine = df.clone()
    got, stats = clean_bars(mine, ["f.parquet"], consume=consume)
    assert got.equals(want, null_equal=True) and got.schema == want.schema
    assert mine.width == (0 if consume else df.width)  # handed over: every column taken out, else left as it was
    assert (stats["duplicates_dropped"], stats["rows_out_of_order"]) == (duplicates, 0) and duplicates > 100


def test_clean_bars_of_several_files_in_time_order_keeps_their_locators():
    df = _in_time_order(_messy(600)).with_columns(  # two files: file_idx varies and row restarts
        file_idx=(pl.int_range(pl.len()) >= 300).cast(pl.UInt32), row=(pl.int_range(pl.len()) % 300).cast(pl.UInt32)
    )
    got, _ = clean_bars(df, ["a.parquet", "b.parquet"])
    assert got.equals(_clean_reference(df)[0], null_equal=True)


@pytest.mark.parametrize("values", [3, 300, 70_000, 3_000_000])
def test_grouped_order_is_the_stable_lexsort_where_it_applies(values):
    rng = np.random.default_rng(values)
    lead = rng.integers(0, values, 5000) * 7 - 11  # sparse and negative codes
    ts = np.sort(rng.integers(0, 500, 5000))  # rising in row order: every instrument's rows in time order
    got = grouped_order(lead, [ts])
    if values > 1_000_000:  # codes spread wider than the numbering table
        assert got is None
        return
    order, (moved,), codes, counts = got
    want = np.lexsort((ts, lead))
    np.testing.assert_array_equal(order, want)
    np.testing.assert_array_equal(moved, ts[want])
    np.testing.assert_array_equal(np.repeat(codes, counts), lead[want])
    assert grouped_order(lead, [ts[::-1]]) is None  # falling within an instrument: not its case
    np.testing.assert_array_equal(stable_order([lead, ts[::-1]]), np.lexsort((ts[::-1], lead)))


def test_consuming_clean_bars_empties_the_input_and_gives_the_same_frame():
    df = _messy()
    want, want_stats = clean_bars(df, ["f.parquet"])
    mine = df.clone()
    got, stats = clean_bars(mine, ["f.parquet"], consume=True)
    assert got.equals(want, null_equal=True) and stats == want_stats
    assert mine.width == 0  # its columns were taken out as they were gathered


def test_load_raw_consuming_its_frame_loads_the_same_bars(fixtures_dir):
    cfg = DataConfig(paths=(str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"),))
    raw, files = read_bars(cfg.paths)
    want = load_raw(raw, files, cfg)
    assert raw.width > 0  # not handed over: left as it was
    got = load_raw(raw, files, cfg, consume=True)
    assert raw.width == 0
    assert got.bars.equals(want.bars, null_equal=True) and got.rolls == want.rolls and got.report == want.report


def test_dedup_and_out_of_order_by_hand():
    df = _messy(5).with_columns(
        symbol=pl.Series(["A", "A", "A", "B", "A"]),
        instrument_id=pl.Series([1, 1, 1, 2, 1]),
        ts=pl.Series([T0 + dt.timedelta(minutes=m) for m in (3, 1, 2, 1, 1)]),
        close=pl.Series([10.0, 14.0, 12.0, 13.0, 14.0]),
        volume=pl.Series([1.0] * 5),
    ).with_columns(open=pl.col("close"), high=pl.col("close"), low=pl.col("close"))
    got, stats = clean_bars(df, ["f.parquet"])
    # A at minute 1 is read twice: the later row (row 4) stays. In reading order A runs 3, 2, 1: two rows late.
    assert got["close"].to_list() == [14.0, 12.0, 10.0, 13.0] and got["row"].to_list() == [4, 2, 0, 3]
    assert (stats["duplicates_dropped"], stats["rows_out_of_order"]) == (1, 2)


def test_sort_keys_order_strings_by_bytes_and_nulls_first_like_polars():
    df = pl.DataFrame({"s": ["b", None, "a", "B", "b", "é", "a"], "i": [2, 1, None, 3, None, 0, 2]})
    order = stable_order(sort_keys(df, ("s", "i")))
    want = df.with_row_index().sort("s", "i", maintain_order=True)["index"].to_numpy()
    assert order is not None and np.array_equal(order, want)
    assert stable_order(sort_keys(df[want], ("s", "i"))) is None  # sorted already: no permutation


def test_series_sort_keeps_the_last_of_bars_sharing_a_timestamp():
    bars = pl.DataFrame(
        {"series": ["NQ", "ES", "ES", "NQ", "ES"], "ts": [2, 3, 1, 2, 3], "close": [1.0, 2.0, 3.0, 4.0, 5.0]}
    )
    got, dropped = _sorted_last(bars)
    want = bars.unique(subset=["series", "ts"], keep="last", maintain_order=True).sort("series", "ts")
    assert got.equals(want) and dropped == 2
    assert got["close"].to_list() == [3.0, 5.0, 4.0]


def test_per_bar_lookup_is_a_left_join_on_series_and_segment():
    bars = pl.DataFrame({"series": ["ES", "ES", "NQ", "NQ", "NQ", "YM"], "seg": [0, 1, 1, 1, 2, 0]},
                        schema_overrides={"seg": pl.Int32})
    table = pl.DataFrame({"series": ["NQ", "ES", "ZZ", "YM"], "seg": [1, 1, 0, 0], "factor": [2.0, 3.0, 9.0, None]},
                         schema_overrides={"seg": pl.Int32})

    def key(frame: pl.DataFrame) -> np.ndarray:
        code = frame["series"].cast(pl.Enum(["ES", "NQ", "YM", "ZZ"])).to_physical().to_numpy().astype(np.int64)
        return code * SEG_SPAN + frame["seg"].to_numpy()

    (got,), (null,) = _per_bar(key(bars), key(table), table, ("factor",))
    want = bars.join(table, on=["series", "seg"], how="left", maintain_order="left")["factor"]
    assert [None if n else v for v, n in zip(got, null, strict=True)] == want.to_list()
    assert want.to_list() == [None, 3.0, 2.0, 2.0, None, None]
    (empty,), (all_null,) = _per_bar(key(bars), key(table.clear()), table.clear(), ("factor",))
    assert all_null.all() and np.isnan(empty).all()


def test_spacing_and_interval_match_the_grouped_median():
    df, _ = clean_bars(_messy(), ["f.parquet"])
    step = df.select(pl.col("ts").diff().over(INSTRUMENT).dt.total_nanoseconds().median()).item()
    assert spacing_ns(df) == step
    assert spacing_ns(df, run_starts_of(df["symbol"])) == step  # the symbol runs load_raw finds once
    minutes = df.select(pl.col("ts").diff().over(INSTRUMENT).median()).item() / dt.timedelta(minutes=1)
    assert minutes == int(minutes) and bar_interval(spacing_ns(df)) == f"{int(minutes)}m"
    assert bar_interval(None) == "?"
    assert spacing_ns(df.head(1)) is None


def test_trade_dates_and_closed_share_match_polars_time_zones_across_dst():
    df, _ = clean_bars(_messy(seed=1), ["f.parquet"])
    df = df.with_columns(by_instrument=pl.lit(False))
    got = parse_futures(df, CT)
    assert got.equals(parse_futures(df, CT, runs=run_starts_of(df["symbol"])))
    want = df.join(got.select("symbol", "root").unique(), on="symbol", how="left", maintain_order="left")
    want = want.with_columns(trade_date=trade_date(pl.col("ts"), CT, pl.col("root")))
    assert got["trade_date"].equals(want["trade_date"])
    assert got["root"].to_list() == [{"ESH4": "ES", "NQH4": "NQ"}.get(s) for s in got["symbol"]]
    # closed_share against the polars-zone formulation, with a root of another calendar (ZC) and plain symbols
    bars = got.with_columns(root=pl.when(pl.col("symbol") == "NQH4").then(pl.lit("ZC")).otherwise("root"))
    local = pl.col("ts").dt.convert_time_zone(CT)
    minute = local.dt.hour().cast(pl.Int64) * 60 + local.dt.minute().cast(pl.Int64)
    from foxhunt.data.bars.sessions import _per_root

    key = pl.coalesce("root", "symbol")
    open_, close = _per_root(key, "open_min"), _per_root(key, "close_min")
    wd = local.dt.weekday()
    closed = ((minute > close) & (minute < open_)) | (wd == 6) | ((wd == 5) & (minute > close)) | (
        (wd == 7) & (minute < open_)
    )
    want_share = bars.select(closed.mean()).item()
    assert closed_share(bars, CT) == pytest.approx(want_share, abs=0) and 0 < want_share < 1
    assert closed_share(bars, CT, run_starts_of(bars["symbol"])) == pytest.approx(want_share, abs=0)
    with pytest.MonkeyPatch.context() as mp:  # in slices of 7 bars: the same share
        mp.setattr("foxhunt.data.bars.sessions.CLOSED_CHUNK", 7)
        assert closed_share(bars, CT) == pytest.approx(want_share, abs=0)


def test_run_starts_equal_the_groups_of_ranked_keys():
    df = _messy().sort(*INSTRUMENT)  # runs of one symbol, with null instrument ids
    want = new_group(sort_keys(df, INSTRUMENT))
    np.testing.assert_array_equal(run_starts(df, INSTRUMENT), want)
    assert run_starts(df.head(0), INSTRUMENT).shape == (0,)


def test_series_summary_and_index_from_runs_match_the_grouped_ones():
    bars = pl.DataFrame(
        {
            "series": ["ES", "ES", "ES", "NQ", "NQ", "CL"],
            "ts": [T0 + dt.timedelta(minutes=m) for m in (0, 1, 2, 0, 5, 3)],
            "contract": ["ESH4", "ESM4", "ESH4", "NQH4", None, "CLF5"],
        }
    )
    assert _series_summary(bars) == _grouped_summary(bars)
    assert _series_index(bars).tolist() == [1, 1, 1, 2, 2, 0]
    split = bars[[0, 3, 1]]  # ES in two runs: ranked bar by bar
    assert _series_summary(split) == _grouped_summary(split)
    assert _series_index(split).tolist() == [0, 1, 0]
    back = bars[[1, 0, 2, 3, 4, 5]]  # one run per series, but ES's first two bars out of time order
    for frame in (bars, split, back):  # names from the runs, or from every bar: the sorted distinct names either way
        got, names, sidx, ts = sorted_bars(frame)
        assert names == sorted(frame["series"].unique().to_list()) and got["series"].to_list() == [
            names[i] for i in sidx]
        assert got.equals(frame.sort("series", "ts", maintain_order=True))  # sorted by (series, ts)
        assert np.array_equal(ts, got["ts"].dt.epoch("ns").to_numpy())


def test_combined_keys_sort_and_group_like_the_keys():
    df = _messy()
    keys = sort_keys(df, (*INSTRUMENT, "ts"))  # with a null flag: four keys
    two = combined(list(keys))
    assert len(keys) == 4 and len(two) == 2
    np.testing.assert_array_equal(stable_order(two), stable_order(keys))
    np.testing.assert_array_equal(new_group(two[:-1]), new_group(keys[:-1]))


def test_take_out_gathers_chunked_columns_as_one_chunk_and_empties_the_input() -> None:
    rng = np.random.default_rng(3)
    whole = pl.DataFrame({"a": rng.random(1000), "b": rng.integers(0, 9, 1000), "c": rng.random(1000).astype(str)})
    chunked = pl.concat([whole.slice(0, 300), whole.slice(300, 700)], rechunk=False)  # a scan's row groups
    rows = rng.permutation(1000)[:600]
    out = take_out(chunked, rows)
    assert out.equals(whole[rows]) and out.columns == whole.columns
    assert chunked.width == 0  # moved out column by column


def test_instrument_code_orders_and_ties_like_the_ranked_keys() -> None:
    rng = np.random.default_rng(5)
    n = 5000
    ident = rng.choice([7, 300, 301, 90_000], n)  # a wide span: numbered through a table of it
    names = {7: "NQH4", 300: "ESH4", 301: "ESM4", 90_000: "ESH4"}  # ESH4 under two ids: two instruments
    df = pl.DataFrame({"symbol": [names[i] for i in ident], "instrument_id": ident})
    code = instrument_code(df["symbol"], df["instrument_id"])
    (want,) = combined(sort_keys(df, INSTRUMENT)[:2] + [np.zeros(n, np.int64)])[:1]
    np.testing.assert_array_equal(np.argsort(code, kind="stable"), np.argsort(want, kind="stable"))
    np.testing.assert_array_equal(new_group([code[np.argsort(code, kind="stable")]]),
                                  new_group([want[np.argsort(want, kind="stable")]]))
    two = df.with_columns(symbol=pl.when(pl.int_range(n) == 17).then(pl.lit("YMH4")).otherwise("symbol"))
    assert instrument_code(two["symbol"], two["instrument_id"]) is None  # one id, two symbols
    assert instrument_code(df["symbol"], df["instrument_id"].set(pl.int_range(n, eager=True) == 3, None)) is None
    assert instrument_code(df["symbol"], pl.Series([0, 2**40] * (n // 2))) is None  # too sparse
