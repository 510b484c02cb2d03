"""The futures stages' run-wise fast paths (a symbol's table row read once per run of it, expiry years per run, the
front's runs laid end to end by time) give exactly what the row-by-row formulations they replaced give."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from foxhunt.data.bars.rolls import ContractIndex
from foxhunt.data.bars.series import _runs_by_time, build_series
from foxhunt.data.bars.sessions import _per_root, closed_share
from foxhunt.data.bars.symbols import _expiries, _run_years, _trade_dates, _utc_year
from foxhunt.data.util.runs import distinct, run_lengths, run_starts_of

YEAR_NS = 365 * 86_400 * 10**9


@pytest.mark.parametrize("shuffle", [False, True])
def test_distinct_and_run_starts_match_unique_and_neighbour_changes(shuffle):
    s = pl.Series(["b", "b", None, None, "a", "b", "c", "c", None])
    if shuffle:
        s = s.sample(fraction=1.0, shuffle=True, seed=3)
    assert sorted(distinct(s).to_list(), key=str) == sorted(s.unique().to_list(), key=str)
    values = s.to_list()
    want = [i for i in range(len(values)) if i == 0 or values[i] != values[i - 1]]
    assert run_starts_of(s).tolist() == want
    assert run_lengths(np.array(want), len(values)).sum() == len(values)
    assert len(run_starts_of(s.head(0))) == 0 and distinct(s.head(0)).len() == 0


def test_expiries_per_run_equal_the_bar_by_bar_rule():
    rng = np.random.default_rng(0)
    # Runs of one symbol: within one year, across a year end, across a decade end (ESH9 traded 2019 and 2020), unsorted
    spans = [(2023.1, 2023.9), (2023.5, 2024.4), (2019.2, 2020.6), (2014.0, 2024.9)]
    ts = np.concatenate([((rng.uniform(a, b, 50) - 1970) * YEAR_NS).astype(np.int64) for a, b in spans])
    starts, lens = np.arange(0, 200, 50), np.full(4, 50)
    digits, base = np.array([4, 4, 9, 4], np.int32), np.array([10, 10, 10, 100], np.int32)
    month = np.array([3, 6, 9, 12], np.int32)
    for is_fut in (np.ones(4, bool), np.array([True, True, False, True]), np.array([True, True, False, False])):
        got = _expiries(ts, lens, _run_years(ts, starts), digits, base, month, is_fut)
        bar_year = _utc_year(ts)
        want = (bar_year + (np.repeat(digits, lens) - bar_year) % np.repeat(base, lens)) * 12 + np.repeat(month, lens)
        mask = np.repeat(is_fut, lens)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got[mask], want[mask])
    assert len(_expiries(ts[:0], lens[:0], _run_years(ts[:0], starts[:0]), digits[:0], base[:0], month[:0],
                         is_fut[:0])) == 0


def test_runs_by_time_is_the_stable_order_or_none():
    rng = np.random.default_rng(1)
    for _ in range(300):
        n = rng.integers(1, 7)
        code = rng.integers(0, 2, n)
        first = rng.integers(0, 20, n)
        last = first + rng.integers(0, 4, n)
        by = _runs_by_time(code, first, last)
        # rows of each run: first .. last, laid out run after run; the stable sort of them by (code, ts)
        rows_code = np.concatenate([np.full(b - a + 1, c) for c, a, b in zip(code, first, last, strict=True)])
        rows_ts = np.concatenate([np.arange(a, b + 1) for a, b in zip(first, last, strict=True)])
        want = np.lexsort((rows_ts, rows_code))
        starts = np.concatenate([[0], np.cumsum(last - first + 1)[:-1]])
        if by is not None:
            got = np.concatenate([np.arange(starts[i], starts[i] + last[i] - first[i] + 1) for i in by])
            np.testing.assert_array_equal(got, want)
        else:  # only where some run's rows interleave with another's (or tie with them)
            pairs = [(i, j) for i in range(n) for j in range(n) if i != j and code[i] == code[j]]
            assert any(first[j] <= last[i] and first[i] <= last[j] for i, j in pairs)


def _bars(order: list[str]) -> pl.DataFrame:
    """Hourly ES bars of three contracts over 30 days, contracts listed in `order` (symbol order is not expiry order
    once a year passes: ESH5 sorts before ESM4)."""
    expiry = {"ESM4": 24_294, "ESU4": 24_297, "ESH5": 24_303}
    frames = []
    for k, sym in enumerate(["ESM4", "ESU4", "ESH5"]):
        days = np.repeat(np.arange(10 * k, 10 * k + 14), 24)
        ts = days * 86_400 * 10**9 + np.tile(np.arange(24), 14) * 3600 * 10**9 + 19_800 * 86_400 * 10**9
        close = 100.0 + k + np.arange(len(ts)) * 1e-3
        frames.append(pl.DataFrame({
            "ts": ts, "open": close, "high": close + 1, "low": close - 1, "close": close,
            "volume": np.full(len(ts), 10.0 * (k + 1)), "symbol": sym, "root": "ES", "expiry": expiry[sym],
            "trade_date": (days + 19_800).astype(np.int32),
        }))
    by = {f["symbol"][0]: f for f in frames}
    return pl.concat([by[s] for s in order]).with_columns(
        pl.col("ts").cast(pl.Datetime("ns", "UTC")), pl.col("trade_date").cast(pl.Date), pl.col("expiry").cast(pl.Int32)
    )


def test_contracts_lying_together_out_of_expiry_order_are_indexed_without_a_sort():
    together = _bars(["ESH5", "ESM4", "ESU4"])  # as clean_bars sorts them: by symbol
    assert ContractIndex.of(together).order is None
    shuffled = together.sample(fraction=1.0, shuffle=True, seed=0)
    assert ContractIndex.of(shuffled).order is not None
    want = build_series(shuffled.clone(), "continuous", "ratio", 1)
    for frame in (together, _bars(["ESM4", "ESU4", "ESH5"])):
        got = build_series(frame.clone(), "continuous", "ratio", 1)
        assert got[0].equals(want[0]) and got[1] == want[1] and got[2] == want[2]
    assert [r["to"] for r in want[1]] == ["ESU4", "ESH5"]


def _closed_reference(df: pl.DataFrame) -> float:
    """closed_share as polars time zones and per-row session lookups give it."""
    local = pl.col("ts").dt.convert_time_zone("America/Chicago")
    minute = local.dt.hour().cast(pl.Int64) * 60 + local.dt.minute().cast(pl.Int64)
    key = pl.coalesce("root", "symbol") if "symbol" in df.columns else pl.col("root")
    open_, close = _per_root(key, "open_min"), _per_root(key, "close_min")
    wd = local.dt.weekday()
    closed = ((minute > close) & (minute < open_)) | (wd == 6) | ((wd == 5) & (minute > close)) | (
        (wd == 7) & (minute < open_))
    return df.select(closed.mean()).item()


def test_closed_share_counts_by_minute_of_week_in_any_row_order():
    rng = np.random.default_rng(2)
    n = 5000
    ts = (19_785 * 86_400 + rng.integers(0, 30 * 86_400, n)) * 10**9  # a month around the March 2024 DST change
    df = pl.DataFrame({
        "ts": pl.Series(ts).cast(pl.Datetime("ns", "UTC")),
        "root": pl.Series(rng.choice(["ES", "ZC", None], n).tolist(), dtype=pl.Utf8),
        "symbol": pl.Series(rng.choice(["ESH4", "SPY", None], n).tolist(), dtype=pl.Utf8),
    })
    es = df.filter(pl.col("root") == "ES")  # one session: counted by stretches of one UTC offset when sorted
    old = es.with_columns(pl.col("ts") - pl.duration(days=365 * 145))  # before 1883: offsets of odd seconds
    for frame in (df, df.sort("root", "symbol", "ts"), df.drop("symbol"), es, es.sort("ts"), old.sort("ts")):
        want = _closed_reference(frame)
        assert closed_share(frame, "America/Chicago") == want and 0 < want < 1


def test_filled_bars_merge_into_place_like_a_sort():
    from foxhunt.data.bars.fill import _merged

    rng = np.random.default_rng(4)
    series = np.repeat(["ES", "NQ", "YM"], 40)
    ts = np.concatenate([np.sort(rng.choice(10_000, 40, replace=False)) * 100 for _ in range(3)])
    bars = pl.DataFrame({"series": series, "ts": ts, "filled": False})
    gaps = np.flatnonzero((series[1:] == series[:-1]) & (np.diff(ts) > 100))  # bars before a gap of the grid
    src = np.concatenate([np.full((ts[g + 1] - ts[g]) // 100 - 1, g) for g in gaps[::2]])
    fill_ts = np.concatenate([np.arange(ts[g] + 100, ts[g + 1], 100) for g in gaps[::2]])
    shuffle = rng.permutation(len(src))  # filled bars come gap by gap, heads before tails: in no set order
    src, fill_ts = src[shuffle], fill_ts[shuffle]
    filled = pl.DataFrame({"series": series[src], "ts": fill_ts, "filled": True})
    got = _merged(bars, filled, src, fill_ts)
    assert got.equals(pl.concat([bars, filled]).sort("series", "ts")) and got["filled"].sum() == len(src) > 0


@pytest.mark.parametrize("tz", ["America/Chicago", "Asia/Kathmandu", "Australia/Lord_Howe", "America/St_Johns"])
def test_trade_dates_per_quarter_hour_equal_local_ns_per_bar(tz, monkeypatch):
    from foxhunt.data.util.clock import DAY_NS, local_ns

    rng = np.random.default_rng(5)
    minutes = np.arange(1_700_000_000 * 10**9, 1_700_000_000 * 10**9 + 400 * DAY_NS, 60 * 10**9)  # DST changes
    early = np.sort(rng.integers(-3 * 10**18, 0, 5000))  # back to 1875: offsets of odd minutes and seconds
    for chunk in (1 << 18, 1000):  # slices that cut runs of one quarter-hour
        monkeypatch.setattr("foxhunt.data.bars.symbols.DATES_CHUNK", chunk)
        for ts in (minutes, early, rng.permutation(minutes)[:5000], minutes[:0]):
            runs = np.unique(np.r_[0, rng.integers(0, len(ts), 4)]) if len(ts) else ts  # (R,) runs of one shift
            shift = rng.choice([0, 7 * 3600 * 10**9, 5 * 3600 * 10**9], len(runs))
            want = (local_ns(ts + np.repeat(shift, np.diff(np.append(runs, len(ts)))), tz) // DAY_NS).astype(np.int32)
            got = _trade_dates(ts, shift, runs, tz)
            assert got.dtype == np.int32 and np.array_equal(got, want)


def test_kept_contracts_from_runs_name_every_symbol_of_a_run():
    """A contract whose later bars come under a second symbol (ESU4, then ESU24) in one run of rows: both are kept."""
    frame = _bars(["ESH5", "ESM4", "ESU4"]).with_columns(
        symbol=pl.when((pl.col("symbol") == "ESU4") & (pl.col("ts").dt.hour() >= 12) & (pl.col("trade_date").dt.day() > 4))
        .then(pl.lit("ESU24")).otherwise("symbol")
    )
    assert ContractIndex.of(frame).order is None
    got = build_series(frame.clone(), "continuous", "ratio", 1)
    want = build_series(frame.sample(fraction=1.0, shuffle=True, seed=1), "continuous", "ratio", 1)
    assert got[0].equals(want[0]) and got[1] == want[1] and got[2] == want[2]
    assert {"ESU4", "ESU24"} <= set(got[2]["contracts_kept"])
