"""Futures symbols, front-contract choice, the roll table and back-adjustment: by hand and on the ES fixture."""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
from pathlib import Path

import polars as pl
import pytest

from foxhunt.data.bars.load import BAR_COLUMNS, load_bars
from foxhunt.data.bars.symbols import drop_spreads, parse_futures, resolve_symbols, trade_date
from foxhunt.data.config import DataConfig
from foxhunt.errors import InputError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
ES_1M = FIXTURES / "es_fut_ohlcv1m_databento.parquet"
UTC = dt.UTC
CT = "America/Chicago"


def _frame(symbols: list[str | None], iids: list[int | None], days: list[int] | None = None) -> pl.DataFrame:
    n = len(symbols)
    days = days or [4] * n
    return pl.DataFrame(
        {
            "ts": [dt.datetime(2024, 3, d, 15, tzinfo=UTC) for d in days],
            "open": [1.0] * n,
            "high": [1.0] * n,
            "low": [1.0] * n,
            "close": [1.0] * n,
            "volume": [1.0] * n,
            "symbol": symbols,
            "instrument_id": iids,
        },
        schema_overrides={"symbol": pl.Utf8, "instrument_id": pl.Int64, "ts": pl.Datetime("ns", "UTC")},
    )


def _write_csv(path: Path, rows: list[tuple[str, str, float, float]]) -> str:
    """rows of (symbol, ISO ts, close, volume); open = close, high = close + 1, low = close - 1."""
    lines = ["timestamp,symbol,open,high,low,close,volume"]
    lines += [f"{ts},{sym},{c},{c + 1},{c - 1},{c},{v}" for sym, ts, c, v in rows]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


# --- symbols -------------------------------------------------------------------------------------------------------


def test_parse_futures_roots_months_and_decades():
    df = _frame(["ESH4", "ESH4", "ESZ24", "CLF5", "6EH4", "ES", "SPX", "1H4", "AAPL"], [None] * 9)
    df = df.with_columns(
        ts=pl.Series(
            [
                dt.datetime(2023, 12, 1, tzinfo=UTC),  # ESH4 traded in 2023 expires in 2024
                dt.datetime(2014, 1, 2, tzinfo=UTC),  # ESH4 traded in 2014 is the 2014 contract
                dt.datetime(2024, 1, 2, tzinfo=UTC),
                dt.datetime(2024, 12, 2, tzinfo=UTC),  # CLF5 in December 2024 is January 2025
                *[dt.datetime(2024, 1, 2, tzinfo=UTC)] * 5,
            ]
        ).cast(pl.Datetime("ns", "UTC")),
        by_instrument=pl.lit(False),
    )
    out = parse_futures(df, CT)
    assert out.get_column("root").to_list() == ["ES", "ES", "ES", "CL", "6E", None, None, None, None]
    assert out.get_column("expiry").to_list() == [
        2024 * 12 + 3,
        2014 * 12 + 3,
        2024 * 12 + 12,
        2025 * 12 + 1,
        2024 * 12 + 3,
        None,
        None,
        None,
        None,
    ]


def test_parse_futures_reads_four_digit_years_slashes_and_exchange_suffixes():
    """Other vendors' spellings of a contract (TradeStation/thinkorswim `/ESH24`, `ESH2024`, `ESH4.CME`) read as
    the contract; a four-digit year is the year itself, even for a bar after it; a Chinese YYMM code (`CU2405`:
    not 19xx/20xx) and a continuous name stay plain symbols."""
    symbols = ["ESH2024", "/ESH24", "ESH4.CME", "/CLZ2024.NYMEX", "ESZ4", "ESZ4", "ESZ2024", "ESZ2024", "CU2405",
               "ES.c.0"]
    df = _frame(symbols, [None] * len(symbols)).with_columns(
        ts=pl.Series([
            *[dt.datetime(2024, 1, 2, tzinfo=UTC)] * 4,
            dt.datetime(2024, 12, 2, tzinfo=UTC), dt.datetime(2025, 1, 2, tzinfo=UTC),  # a run over two years
            dt.datetime(2024, 12, 2, tzinfo=UTC), dt.datetime(2025, 1, 2, tzinfo=UTC),  # a bar after its year
            *[dt.datetime(2024, 1, 2, tzinfo=UTC)] * 2,
        ]).cast(pl.Datetime("ns", "UTC")),
        by_instrument=pl.lit(False),
    )
    out = parse_futures(df, CT)
    assert out.get_column("root").to_list() == ["ES", "ES", "ES", "CL", "ES", "ES", "ES", "ES", None, None]
    assert out.get_column("expiry").to_list() == [
        *[2024 * 12 + 3] * 3, 2024 * 12 + 12, 2024 * 12 + 12, 2034 * 12 + 12, 2024 * 12 + 12, 2024 * 12 + 12,
        None, None,
    ]


@pytest.mark.parametrize("spell", ["{root}{month}20{yy}", "/{root}{month}{yy}", "{root}{month}{y}.CME"])
def test_vendor_spellings_of_contracts_roll_as_one_series(tmp_path, spell):
    def name(symbol: str) -> str:  # AAH4 -> the vendor's spelling
        return spell.format(root=symbol[:2], month=symbol[2], yy="24", y="4")

    rows = [(name(s), ts, c, v) for s, ts, c, v in HAND]
    lb = load_bars(DataConfig(paths=(_write_csv(tmp_path / "aa.csv", rows),), roll_confirm=1))
    assert lb.bars.get_column("series").unique().to_list() == ["AA"]
    assert [(r["from"], r["to"], r["trade_date"]) for r in lb.rolls] == [(name("AAH4"), name("AAM4"), "2024-03-06")]
    assert lb.report["contracts_kept"] == [name("AAH4"), name("AAM4")]


def test_a_year_month_code_its_bars_contradict_is_no_four_digit_year_contract(tmp_path):
    """CU2012 and CU2101 (copper, Dec 2020 and Jan 2021, China's year-month codes) traded in 2020-21 are not root C,
    September 2012: each stays a symbol of its own, and --contracts continuous refuses them as before four-digit
    years were read; ESH2024 traded in 2024 still reads as ES, March 2024."""
    rows = [(s.replace("AAH4", "CU2012").replace("AAM4", "CU2101"), ts.replace("2024", "2020"), c, v)
            for s, ts, c, v in HAND]
    lb = load_bars(DataConfig(paths=(_write_csv(tmp_path / "cu.csv", rows),), roll_confirm=1))
    assert sorted(lb.bars.get_column("series").unique().to_list()) == ["CU2012", "CU2101"]
    assert lb.rolls == []
    with pytest.raises(InputError, match="--contracts continuous needs futures symbols"):
        load_bars(DataConfig(paths=(tmp_path / "cu.csv",), contracts="continuous", roll_confirm=1))
    df = parse_futures(_frame(["ESH2024", "CU2012"], [1, 2]).with_columns(
        ts=pl.Series([dt.datetime(2024, 1, 5, tzinfo=UTC), dt.datetime(2020, 6, 1, tzinfo=UTC)]).cast(
            pl.Datetime("ns", "UTC")), by_instrument=pl.lit(False)), CT)
    assert df.get_column("root").to_list() == ["ES", None]


def test_trade_date_is_exchange_date_of_ts_plus_7h_across_dst():
    ts = pl.Series(
        [
            dt.datetime(2024, 3, 5, 21, 59, tzinfo=UTC),  # 15:59 CST: still the 03-05 session
            dt.datetime(2024, 3, 5, 23, 0, tzinfo=UTC),  # 17:00 CST: the 03-06 session opens
            dt.datetime(2024, 3, 10, 22, 0, tzinfo=UTC),  # 17:00 CDT after the DST change: 03-11 session
            dt.datetime(2024, 3, 11, 20, 59, tzinfo=UTC),  # 15:59 CDT
        ]
    ).cast(pl.Datetime("ns", "UTC"))
    got = pl.select(trade_date(pl.lit(ts), CT)).to_series().to_list()
    assert got == [dt.date(2024, 3, 5), dt.date(2024, 3, 6), dt.date(2024, 3, 11), dt.date(2024, 3, 11)]


def test_resolve_symbols_falls_back_to_instrument_id():
    df = _frame([None, None, "ESH4", None, "ES.FUT", "ES.FUT", "SPX"], [7, 8, 9, 9, 1, 2, None])
    out, n = resolve_symbols(df)
    assert out.get_column("symbol").to_list() == ["7", "8", "ESH4", "ESH4", "ES.FUT#1", "ES.FUT#2", "SPX"]
    assert out.get_column("by_instrument").to_list() == [True, True, False, False, True, True, False]
    assert n == 4


def test_a_databento_continuous_symbol_grouped_by_instrument_is_an_info_line_not_a_warning(caplog):
    """`ES.c.0` changing instrument_id at each roll is the documented case (data.md): said as info; a parent left
    unresolved (`ES.FUT`) still warns, counting only its own instruments."""
    df = _frame(["ES.c.0", "ES.c.0", "NQ.v.0", "ES.FUT", "ES.FUT"], [1, 2, 3, 4, 5])
    with caplog.at_level(logging.INFO, logger="foxhunt.data"):
        out, n = resolve_symbols(df.head(3))
    assert n == 2 and out.get_column("symbol").to_list() == ["ES.c.0#1", "ES.c.0#2", "NQ.v.0"]
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "grouping 2 instruments of Databento continuous symbols by instrument_id: each is a contract, and the"
                 " series rolls where it changes")]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="foxhunt.data"):
        resolve_symbols(df)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "grouping 2 instruments by instrument_id: symbols missing or shared by several instruments"]


def test_drop_spreads_by_symbol_and_by_price_for_instrument_keyed_rows():
    df = _frame(["ESH4-ESM4", "ESH4", "UD:1V: VT 0308", "X Y", None, None], [1, 2, 3, 4, 5, 6])
    df = df.with_columns(close=pl.Series([-50.0, 5000.0, 1.0, 1.0, -3.0, 10.0]))
    out, n, symbols = drop_spreads(resolve_symbols(df)[0])
    assert n == 4
    assert symbols == ["5", "ESH4-ESM4", "UD:1V: VT 0308", "X Y"]
    assert out.get_column("symbol").to_list() == ["ESH4", "6"]


# --- continuous roll by hand ---------------------------------------------------------------------------------------

# Bars at 15:00 UTC (09:00 CST), so the trade date is the UTC date. Volumes:
#   03-04: H 10, M 1 -> first date: nearest expiry, H
#   03-05: H 5,  M 8 -> front by 03-04 volume: H
#   03-06: H 50, M 9 -> front by 03-05 volume: M (roll; last common bar before it is 03-05: H 101, M 103)
#   03-07: M 9       -> 03-06 volume favours H again, but the front never moves back: M
# These tests pin the one-session rule (roll_confirm=1); the default, 2, would stay on H (M led one session only).
HAND = [
    ("AAH4", "2024-03-04T15:00:00Z", 100.0, 10),
    ("AAM4", "2024-03-04T15:00:00Z", 102.0, 1),
    ("AAH4", "2024-03-05T15:00:00Z", 101.0, 5),
    ("AAM4", "2024-03-05T15:00:00Z", 103.0, 8),
    ("AAH4", "2024-03-06T15:00:00Z", 99.0, 50),
    ("AAM4", "2024-03-06T15:00:00Z", 104.0, 9),
    ("AAM4", "2024-03-07T15:00:00Z", 105.0, 9),
]


@pytest.mark.parametrize(
    "adjust,closes",
    [
        ("ratio", [100.0 * 103 / 101, 103.0, 104.0, 105.0]),
        ("difference", [102.0, 103.0, 104.0, 105.0]),
        ("none", [100.0, 101.0, 104.0, 105.0]),
    ],
)
def test_continuous_roll_by_hand(tmp_path, adjust, closes):
    lb = load_bars(DataConfig(paths=(_write_csv(tmp_path / "aa.csv", HAND),), adjust=adjust, roll_confirm=1))
    assert lb.bars.columns == list(BAR_COLUMNS)
    assert lb.bars.get_column("series").unique().to_list() == ["AA"]
    assert lb.bars.get_column("contract").to_list() == ["AAH4", "AAH4", "AAM4", "AAM4"]
    assert lb.bars.get_column("close").to_list() == pytest.approx(closes, rel=1e-12)
    scale = 103 / 101 if adjust == "ratio" else 1.0
    shift = 2.0 if adjust == "difference" else 0.0
    assert lb.bars.get_column("high")[0] == pytest.approx(
        101.0 * scale + shift
    )  # every price column is adjusted
    assert lb.bars.get_column("volume").to_list() == [10.0, 5.0, 9.0, 9.0]  # volume never is
    assert lb.rolls == [{"root": "AA", "trade_date": "2024-03-06", "from": "AAH4", "to": "AAM4", "gap": 2.0, "reason": "volume"}]
    assert lb.report["contracts_mode"] == "continuous"
    assert lb.report["contracts_kept"] == ["AAH4", "AAM4"]
    assert lb.report["adjust"] == adjust


def test_each_mode_keeps_every_contract_unadjusted(tmp_path):
    lb = load_bars(DataConfig(paths=(_write_csv(tmp_path / "aa.csv", HAND),), contracts="each"))
    assert lb.report["contracts_mode"] == "each"
    assert lb.rolls == []
    got = {s: g.get_column("close").to_list() for (s,), g in lb.bars.group_by("series", maintain_order=True)}
    assert got == {"AAH4": [100.0, 101.0, 99.0], "AAM4": [102.0, 103.0, 104.0, 105.0]}
    assert (lb.bars.get_column("series") == lb.bars.get_column("contract")).all()


def test_several_roots_roll_on_their_own_dates(tmp_path):
    nq = [("NQ" + s[2:], ts, c * 4, v) for s, ts, c, v in HAND]
    # NQ rolls a day earlier: M already leads on 03-04.
    nq[1] = ("NQM4", "2024-03-04T15:00:00Z", 408.0, 20)
    lb = load_bars(DataConfig(paths=(_write_csv(tmp_path / "two.csv", HAND + nq),), roll_confirm=1))
    assert sorted(lb.report["series"]) == ["AA", "NQ"]
    assert lb.rolls == [
        {"root": "AA", "trade_date": "2024-03-06", "from": "AAH4", "to": "AAM4", "gap": 2.0, "reason": "volume"},
        {
            "root": "NQ",
            "trade_date": "2024-03-05",
            "from": "NQH4",
            "to": "NQM4",
            "gap": 8.0,
            "reason": "volume",
        },  # at 03-04: 408 - 400
    ]
    nq_bars = lb.bars.filter(pl.col("series") == "NQ")
    assert nq_bars.get_column("contract").to_list() == ["NQH4", "NQM4", "NQM4", "NQM4"]
    assert nq_bars.get_column("close")[0] == pytest.approx(400.0 * 408 / 400)


def test_single_contract_is_a_continuous_series_without_rolls(tmp_path):
    only_m = [r for r in HAND if r[0] == "AAM4"]
    lb = load_bars(DataConfig(paths=(_write_csv(tmp_path / "m.csv", only_m),)))
    assert lb.rolls == []
    assert lb.bars.get_column("close").to_list() == [102.0, 103.0, 104.0, 105.0]
    assert lb.report["series"]["AA"]["contracts"] == ["AAM4"]


def test_plain_symbols_are_their_own_series_next_to_futures(tmp_path):
    spx = [("SPX", "2024-03-04T15:00:00Z", 5000.0, 0), ("SPX", "2024-03-05T15:00:00Z", 5010.0, 0)]
    lb = load_bars(DataConfig(paths=(_write_csv(tmp_path / "mix.csv", HAND + spx),)))
    assert sorted(lb.report["series"]) == ["AA", "SPX"]
    assert lb.report["series"]["SPX"]["contracts"] == ["SPX"]


def test_continuous_without_futures_symbols_is_an_error(tmp_path):
    spx = [("SPX", "2024-03-04T15:00:00Z", 5000.0, 0)]
    with pytest.raises(InputError, match="--contracts continuous needs futures symbols"):
        load_bars(DataConfig(paths=(_write_csv(tmp_path / "s.csv", spx),), contracts="continuous"))


# --- the ES fixture ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def es_ratio():
    return load_bars(DataConfig(paths=(str(ES_1M),)))


@pytest.fixture(scope="module")
def es_raw():
    return pl.read_parquet(ES_1M).rename({"ts_event": "ts"})


def test_fixture_rolls_from_h_to_m_in_roll_week(es_ratio):
    assert len(es_ratio.rolls) == 1
    roll = es_ratio.rolls[0]
    assert (roll["root"], roll["from"], roll["to"]) == ("ES", "ESH4", "ESM4")
    # ESM4 first out-trades ESH4 on Thu 03-07 (CME's roll date) and again on Fri 03-08: with the default two-session
    # confirmation the series rolls on the next session, Mon 03-11, four sessions before ESH4 expires.
    assert (roll["trade_date"], roll["reason"]) == ("2024-03-11", "volume")
    rep = es_ratio.report
    assert rep["rows_read"] == 68239
    assert rep["spreads_dropped"] == 13428
    assert rep["contracts_kept"] == ["ESH4", "ESM4"]
    assert rep["contracts_dropped"] == ["ESH4-ESM4", "ESU4"]
    assert rep["bar_interval"] == "1m"
    assert list(rep["series"]) == ["ES"]
    assert json.loads(json.dumps(rep)) == rep  # saved with the run as plain JSON


def test_fixture_one_session_confirmation_rolls_on_the_first_lead():
    lb = load_bars(DataConfig(paths=(str(ES_1M),), roll_confirm=1))
    assert [(r["trade_date"], r["from"], r["to"]) for r in lb.rolls] == [("2024-03-08", "ESH4", "ESM4")]
    assert lb.report["roll_confirm"] == 1 and lb.report["rolls_by_reason"] == {"volume": 1}


def test_fixture_roll_bar_has_no_jump(es_ratio, es_raw):
    """The adjusted return at the roll bar is ESM4's own move from the last common bar (Friday's close) to the roll
    bar (Sunday's open), a weekend move, not the ~51-point calendar spread."""
    bars = es_ratio.bars.with_columns(r=pl.col("close").log().diff())
    at_roll = bars.filter(pl.col("contract") != pl.col("contract").shift(1))
    assert at_roll.height == 1
    ts = at_roll.get_column("ts")[0]
    m = es_raw.filter(pl.col("symbol") == "ESM4").sort("ts")
    prev_close = m.filter(pl.col("ts") < ts).get_column("close")[-1]
    own = math.log(at_roll.get_column("own_close")[0] / prev_close)
    assert at_roll.get_column("r")[0] == pytest.approx(own, abs=1e-12)
    jump = math.log(at_roll.get_column("own_close")[0] / bars.filter(pl.col("ts") < ts).get_column("own_close")[-1])
    assert abs(jump) > 5 * abs(own)  # what a return across the two unadjusted contracts would have been


def _roll_pair(es_raw: pl.DataFrame, roll_date: str) -> tuple[float, float]:
    """(old close, new close) at the last timestamp before the roll's trade date where both contracts have a bar."""
    day = dt.date.fromisoformat(roll_date)
    raw = es_raw.with_columns(td=trade_date(pl.col("ts"), CT)).filter(pl.col("td") < day)
    h = raw.filter(pl.col("symbol") == "ESH4").select("ts", h="close")
    m = raw.filter(pl.col("symbol") == "ESM4").select("ts", m="close")
    last = h.join(m, on="ts").sort("ts").row(-1, named=True)
    return last["h"], last["m"]


def test_fixture_ratio_adjustment_scales_history_by_the_roll_ratio(es_ratio, es_raw):
    roll = es_ratio.rolls[0]
    old, new = _roll_pair(es_raw, roll["trade_date"])
    assert roll["gap"] == pytest.approx(new - old)
    ratio = new / old
    joined = es_ratio.bars.join(
        es_raw.select("ts", contract="symbol", raw_close="close", raw_low="low"), on=["ts", "contract"]
    )
    assert joined.height == es_ratio.bars.height  # every bar is one source bar
    before = joined.filter(pl.col("contract") == "ESH4")
    after = joined.filter(pl.col("contract") == "ESM4")
    assert (before.get_column("close") - before.get_column("raw_close") * ratio).abs().max() < 1e-9
    assert (before.get_column("low") - before.get_column("raw_low") * ratio).abs().max() < 1e-9
    assert (after.get_column("close") == after.get_column("raw_close")).all()


def test_fixture_difference_and_none_adjustments(es_raw):
    diff = load_bars(DataConfig(paths=(str(ES_1M),), adjust="difference"))
    none = load_bars(DataConfig(paths=(str(ES_1M),), adjust="none"))
    gap = diff.rolls[0]["gap"]
    for lb, shift in ((diff, gap), (none, 0.0)):
        joined = lb.bars.join(es_raw.select("ts", contract="symbol", raw="close"), on=["ts", "contract"])
        h = joined.filter(pl.col("contract") == "ESH4")
        assert (h.get_column("close") - (h.get_column("raw") + shift)).abs().max() < 1e-9
    assert none.report["adjust"] == "none"


def test_fixture_each_mode_gives_one_series_per_outright():
    lb = load_bars(DataConfig(paths=(str(ES_1M),), contracts="each"))
    assert lb.report["contracts_mode"] == "each"
    assert {k: v["rows"] for k, v in lb.report["series"].items()} == {
        "ESH4": 25480,
        "ESM4": 23317,
        "ESU4": 6014,
    }


def test_split_files_load_like_the_whole(tmp_path, es_ratio, es_raw):
    folder = tmp_path / "days"
    folder.mkdir()
    frame = pl.read_parquet(ES_1M)
    days = frame.get_column("ts_event").dt.date().unique().sort()
    for day in days:
        frame.filter(pl.col("ts_event").dt.date() == day).write_parquet(folder / f"{day}.parquet")
    for paths in ((str(folder),), (str(folder / "*.parquet"),)):
        lb = load_bars(DataConfig(paths=paths))
        assert lb.bars.equals(es_ratio.bars)
        assert lb.rolls == es_ratio.rolls
        assert len(lb.report["files"]) == days.len()
        assert lb.report["duplicates_dropped"] == 0 and lb.report["rows_out_of_order"] == 0


def test_overlapping_downloads_are_deduplicated(tmp_path, es_ratio):
    frame = pl.read_parquet(ES_1M)
    frame.head(40_000).write_parquet(tmp_path / "a.parquet")
    frame.slice(30_000).write_parquet(tmp_path / "b.parquet")
    lb = load_bars(DataConfig(paths=(str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"))))
    overlap = frame.slice(30_000, 10_000).filter(~pl.col("symbol").str.contains("-"))  # spreads go first
    assert lb.report["duplicates_dropped"] == overlap.height
    assert lb.bars.equals(es_ratio.bars)


def test_spx_daily_loads_as_one_series():
    lb = load_bars(DataConfig(paths=(str(FIXTURES / "spx_daily.parquet"),)))
    assert list(lb.report["series"]) == ["SPX"]
    assert lb.bars.height == 5031
    assert lb.report["series"]["SPX"]["start"] == "1999-01-04T00:00:00+00:00"
    assert lb.report["contracts_mode"] == "symbols"
    assert lb.rolls == []
    assert not any(math.isnan(x) for x in lb.bars.get_column("close").to_list())
