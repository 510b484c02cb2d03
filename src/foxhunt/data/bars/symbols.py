"""Futures symbology: which symbols are spreads, outrights (root, month, expiry) or other series, and the trade
date of each bar.

Databento prices are never adjusted and one parent file (`ES.FUT`) holds every outright contract plus calendar spreads,
so the loader builds the series itself:

- Spreads and strategies (a symbol containing '-', ':' or a space) are dropped: their prices are differences, often
  negative, and never a series of their own.
- A symbol is a futures outright when it reads ROOT + month code + 1-2 digit year (`ESH4`, `6EZ24`, `CLF5`), or a
  four-digit year of 19xx or 20xx (`ESH2024`), written as other vendors write them too: after a slash (`/ESH24`,
  TradeStation and thinkorswim) or before an exchange suffix (`ESH4.CME`). The decade of a one- or two-digit year is
  decided per bar: the first year not before the bar's year that ends in those digits (ESH4 traded in 2023 or 2024
  expires 2024; ESH4 traded in 2014 is a different contract expiring 2014); a four-digit year is the year. Whether the
  outrights of a root are one market's contracts, and not vendor continuous series spelled like them (`CU0`), is
  decided from their dates in chains.py.
- Symbol fallback: when a Databento file has no symbol column (`map_symbols=False`), or a symbol that is not an
  outright maps to several instrument_ids (a parent like `ES.FUT` left unresolved, a continuous `ES.v.0` whose
  instrument changes at each roll), rows are grouped by instrument_id instead: the series is named `<instrument_id>`
  or `<symbol>#<instrument_id>`. Such instruments cannot be parsed as futures; one whose prices ever go to zero or
  below is taken to be a spread and dropped.
"""

from __future__ import annotations

import logging
import re

import numpy as np
import polars as pl

from foxhunt.data.bars.rolls import CONTINUOUS_RE
from foxhunt.data.bars.sessions import CME_EQUITY, session_shift
from foxhunt.data.util.clock import DAY_NS, MIN_NS, QUARTER_NS, local_ns
from foxhunt.data.util.runs import run_lengths, run_starts_of

log = logging.getLogger("foxhunt.data")

MONTH_CODES = "FGHJKMNQUVXZ"
# ROOT, month code, year (1-2 digits, or 19xx/20xx); an optional leading slash and exchange suffix (`.CME`) around them
FUTURES_RE = r"^/?([A-Z0-9]{1,4}?)([FGHJKMNQUVXZ])(\d{1,2}|(?:19|20)\d{2})(?:\.[A-Z]{2,})?$"
YEAR_BASE = 10_000  # `base` of a four-digit year: it is the year itself (_expiries)
SPREAD_RE = r"[-: ]"
PRICES = ("open", "high", "low", "close")


def resolve_symbols(df: pl.DataFrame, distinct: pl.Series | None = None) -> tuple[pl.DataFrame, int]:
    """Fill or split symbols from instrument_id where the symbol cannot identify one instrument.

    Adds a Boolean column `by_instrument` (True where the series is keyed by instrument_id). Returns (frame, number of
    instruments keyed that way). `distinct`: the distinct values of df's symbol, when the caller has them. Symbols
    change only where one is missing (null) or when some instrument is keyed by its id.
    """
    iid = pl.col("instrument_id")
    symbol = df.get_column("symbol")
    distinct = symbol.unique() if distinct is None else distinct
    if not symbol.null_count() and distinct.str.contains(FUTURES_RE).all():
        return df.with_columns(by_instrument=pl.lit(False)), 0  # outrights only: nothing to fill or split
    # A row outside every symbology interval has a null symbol: take the one its instrument has elsewhere.
    if symbol.null_count():  # a grouped pass over every row, only where it can change one
        df = df.with_columns(
            pl.col("symbol").fill_null(
                pl.when(iid.is_not_null()).then(pl.col("symbol").max().over("instrument_id"))
            )
        )
    not_outright = ~pl.col("symbol").str.contains(FUTURES_RE).fill_null(False)
    shared = (iid.n_unique().over("symbol") > 1) & iid.is_not_null() & not_outright
    named = pl.when(pl.col("symbol").is_null() & iid.is_not_null()).then(iid.cast(pl.Utf8))
    split = pl.when(shared).then(pl.col("symbol") + "#" + iid.cast(pl.Utf8))
    df = df.with_columns(
        by_instrument=(pl.col("symbol").is_null() & iid.is_not_null()) | shared.fill_null(False)
    ).with_columns(symbol=pl.coalesce(named, split, pl.col("symbol")))
    keyed = df.filter("by_instrument").select("instrument_id", continuous=pl.col("symbol").str.contains(CONTINUOUS_RE))
    n = keyed.select(iid.n_unique()).item()
    rolled = keyed.filter("continuous").select(iid.n_unique()).item()
    if rolled:  # the documented case: Databento chose one contract per row, and its instrument_id says which
        log.info("grouping %d instruments of Databento continuous symbols by instrument_id: each is a contract, and"
                 " the series rolls where it changes", rolled)
    if n - rolled:  # a parent (`ES.FUT`) left unresolved, or rows outside the symbology: their contracts are unknown
        log.warning(
            "grouping %d instruments by instrument_id: symbols missing or shared by several instruments", n - rolled
        )
    return df, n


def drop_spreads(df: pl.DataFrame, distinct: pl.Series | None = None) -> tuple[pl.DataFrame, int, list[str]]:
    """Drop spread/strategy rows. Returns (frame, rows dropped, dropped symbols sorted). `distinct`: the distinct
    values of df's symbol, when the caller has them."""
    # rows in file order: runs of one symbol are short, so the distinct symbols are hashed
    names = (df.get_column("symbol").unique() if distinct is None else distinct).drop_nulls()
    if not names.str.contains(SPREAD_RE).any() and not df.get_column("by_instrument").any():
        return df, 0, []  # no spread symbol, and no instrument whose prices could mark it as one
    low = pl.min_horizontal(*[pl.col(c).fill_nan(None) for c in PRICES])
    by_price = pl.col("by_instrument") & (low.min().over("symbol") <= 0).fill_null(False)
    spread = pl.col("symbol").str.contains(SPREAD_RE).fill_null(False) | by_price
    df = df.with_columns(_spread=spread)
    dropped = df.filter("_spread")
    symbols = sorted(dropped.get_column("symbol").unique().to_list())
    if dropped.height:
        log.info("dropped %d spread rows (%s)", dropped.height, ", ".join(symbols))
    return df.filter(~pl.col("_spread")).drop("_spread"), dropped.height, symbols


def parse_futures(df: pl.DataFrame, exchange_tz: str, *, runs: np.ndarray | None = None) -> pl.DataFrame:
    """Add root (null for non-futures), expiry (year * 12 + month, 1-based) and trade_date columns.

    `runs` (R,): the first row of each run of one symbol (`runs.run_starts_of`), when the caller has them."""
    symbol = df.get_column("symbol")
    starts = run_starts_of(symbol) if runs is None else runs  # (R,) a few hundred runs over millions of sorted bars
    lens = run_lengths(starts, df.height)  # (R,)
    firsts = symbol.gather(pl.Series(starts, dtype=pl.get_index_type()))  # (R,)
    distinct = firsts.drop_nulls().unique().sort()
    plain = df.filter(~pl.col("by_instrument")) if df.get_column("by_instrument").any() else None
    symbols = (
        (pl.DataFrame({"symbol": distinct}) if plain is None else plain.select(pl.col("symbol").unique()))
        .with_columns(_p=pl.col("symbol").str.extract_groups(FUTURES_RE))
        .select(
            "symbol",
            root=pl.col("_p").struct.field("1"),
            month=pl.col("_p")
            .struct.field("2")
            .replace_strict(list(MONTH_CODES), list(range(1, 13)), default=None, return_dtype=pl.Int32),
            digits=pl.col("_p").struct.field("3"),
        )
        .filter(pl.col("root").str.contains("[A-Z]").fill_null(False))  # a root has a letter: "1H4" is none
        .with_columns(base=pl.lit(10, dtype=pl.Int32).pow(pl.col("digits").str.len_chars()).cast(pl.Int32))
    )
    del plain
    # One row per distinct symbol (and one for a null symbol), looked up by its rank once per run of a symbol: a
    # join, a gather or a cast of every row's string on millions of rows costs far more.
    table = (
        pl.DataFrame({"symbol": distinct})
        .join(symbols, on="symbol", how="left", maintain_order="left")
        .with_columns(
            _shift=(session_shift(pl.col("root")) * MIN_NS).fill_null(CME_EQUITY.shift_min * MIN_NS),
            digits=pl.col("digits").cast(pl.Int32),
        )
        .vstack(pl.DataFrame({"symbol": [None]}, schema={"symbol": pl.Utf8}).with_columns(
            root=pl.lit(None, pl.Utf8), month=pl.lit(None, pl.Int32), digits=pl.lit(None, pl.Int32),
            base=pl.lit(None, pl.Int32), _shift=pl.lit(CME_EQUITY.shift_min * MIN_NS, pl.Int64),
        ))  # the last row: a null symbol, the default session
        .rechunk()  # one chunk: a gather from two costs several times more
    )
    code = firsts.cast(pl.Enum(distinct.to_list())).to_physical().fill_null(len(distinct)).to_numpy()  # (R,)

    def per_run(name: str, fill: int = 0) -> np.ndarray:  # (R,) a table column at each run (nulls as `fill`)
        return table.get_column(name).fill_null(fill).to_numpy()[code]

    ts_ns = df.get_column("ts").dt.epoch("ns").to_numpy()
    years = _run_years(ts_ns, starts)  # (R,) each, the UTC years of each run's first and last bars
    table = _without_far_years(table, code, per_run("digits"), per_run("base", 1), years)
    trade = pl.Series("trade_date", _trade_dates(ts_ns, per_run("_shift"), starts, exchange_tz)).cast(pl.Date)
    is_fut = table.get_column("root").is_not_null().to_numpy()[code]  # (R,)
    expiry = pl.Series("expiry", _expiries(ts_ns, lens, years, per_run("digits"), per_run("base", 1),
                                           per_run("month"), is_fut))  # (N,)
    rows = pl.Series(np.repeat(code.astype(np.uint32), lens), dtype=pl.get_index_type())  # (N,) row of `table`
    return df.with_columns(
        table.get_column("root").gather(rows),
        expiry if is_fut.all() else pl.when(pl.Series(np.repeat(is_fut, lens))).then(expiry).alias("expiry"),
        trade_date=trade,
    )


YEARS_AHEAD = 10  # a contract trades at most this many years before the year of its expiry (long-dated rates)


def _without_far_years(table: pl.DataFrame, code: np.ndarray, digits: np.ndarray, base: np.ndarray,
                       years: tuple[np.ndarray, np.ndarray]) -> pl.DataFrame:
    """`table` with no root for a symbol read with a four-digit year that its bars contradict: a contract's bars
    start at most YEARS_AHEAD years before its expiry year and end by the year after it (a year's slack past the
    expiry year: a bar in the year after it passes, one two years after does not). `CU2012` (copper, December 2020,
    in the year-month codes of China's exchanges) fits the pattern of root C, September 2012: bars of 2020 say it
    is not that, and it stays a symbol of its own, as a code no pattern reads. `code`, `digits`, `base`: (R,) per
    run; `years`: `_run_years`."""
    four = base == YEAR_BASE  # (R,)
    if not four.any():
        return table
    first, last = years
    far = np.unique(code[four & ((digits < last - 1) | (digits > first + YEARS_AHEAD))])
    if not len(far):
        return table
    row = pl.int_range(pl.len(), dtype=pl.Int64)
    return table.with_columns(
        root=pl.when(row.is_in(far.tolist())).then(None).otherwise(pl.col("root")),
        _shift=pl.when(row.is_in(far.tolist())).then(CME_EQUITY.shift_min * MIN_NS).otherwise(pl.col("_shift")),
    )


DATES_CHUNK = 1 << 18  # bars whose shifted times _trade_dates holds at a time


def _trade_dates(ts_ns: np.ndarray, shift: np.ndarray, runs: np.ndarray, tz: str) -> np.ndarray:
    """(N,) int32 `local_ns(ts_ns + shift, tz) // DAY_NS` (days since the epoch) for bars in runs that start at
    `runs` (R,), each shifted by its `shift` (R,) ns: the exchange date of each bar's time plus its session shift.

    local_ns takes one UTC offset per quarter-hour; when every offset is whole quarter-hours, as in every zone today,
    the wall clock of a quarter-hour never crosses midnight inside it, so the date is taken once per run of one
    quarter-hour (a few per hour of bars) and repeated. The shifted times and their quarter-hours are made a slice of
    bars at a time (bar-sized int64 temporaries would take 16 MB each per million bars); the quarter-hours of all
    slices are converted by one local_ns call, so it sees the runs of one quarter-hour the whole would give it.
    """
    n = len(ts_ns)
    if not n:
        return np.zeros(0, dtype=np.int32)
    bounds = np.append(runs, n)
    probes, counts = [], []
    for lo in range(0, n, DATES_CHUNK):
        hi = min(lo + DATES_CHUNK, n)
        key = np.repeat(shift, np.diff(np.clip(bounds, lo, hi)))  # (C,)
        key += ts_ns[lo:hi]
        key //= QUARTER_NS
        at = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))  # (Q,) runs of one quarter-hour
        probes.append(key[at] * QUARTER_NS)
        counts.append(run_lengths(at, hi - lo))
    probe = np.concatenate(probes)
    wall = local_ns(probe, tz)  # (Q,)
    if np.any((wall - probe) % QUARTER_NS):  # an offset of odd minutes (before the zones were standardized)
        shifted = np.repeat(shift, np.diff(bounds)) + ts_ns
        return (local_ns(shifted, tz) // DAY_NS).astype(np.int32)
    return np.repeat((wall // DAY_NS).astype(np.int32), np.concatenate(counts))


def _run_years(ts_ns: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R,) int32 each: the UTC years of the first and last bars of the runs that start at `starts` (R,)."""
    if not len(ts_ns):
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
    first, last = (_utc_year(f.reduceat(ts_ns, starts)) for f in (np.minimum, np.maximum))
    return first, last


def _expiries(ts_ns: np.ndarray, lens: np.ndarray, years: tuple[np.ndarray, np.ndarray], digits: np.ndarray,
              base: np.ndarray, month: np.ndarray, is_fut: np.ndarray) -> np.ndarray:
    """(N,) int32 expiry (year * 12 + month) of each bar, for the runs of one symbol of lengths `lens` (R,) whose
    first and last bars fall in `years` (`_run_years`): the expiry year is the first year not before the bar's year
    that ends in its symbol's `digits` (R,) (`base` (R,): 10 ** the number of digits), the month its symbol's
    `month` (R,).

    That year only grows with the bar's year, so a run whose first and last bars give the same one (a contract
    trades a year or so: nearly every run) takes it whole; only otherwise is it found bar by bar.
    """
    if not len(ts_ns):
        return np.zeros(0, dtype=np.int32)
    first, last = years  # (R,)
    year = first + (digits - first) % base  # (R,)
    if np.all((year == last + (digits - last) % base) | ~is_fut | (base == YEAR_BASE)):  # no expiry to get right
        return np.repeat(np.where(base == YEAR_BASE, digits, year) * 12 + month, lens)
    bar_year = _utc_year(ts_ns)
    digits, base = np.repeat(digits, lens), np.repeat(base, lens)  # (N,)
    year = np.where(base == YEAR_BASE, digits, bar_year + (digits - bar_year) % base)  # (N,)
    year *= 12
    year += np.repeat(month, lens)
    return year


def _utc_year(ts_ns: np.ndarray) -> np.ndarray:
    """(N,) int32 UTC calendar year of ns timestamps: a binary search in the first days of the years spanned."""
    if not len(ts_ns):
        return np.zeros(0, dtype=np.int32)
    lo, hi = np.array([ts_ns.min(), ts_ns.max()]).astype("datetime64[ns]").astype("datetime64[Y]").astype(np.int64)
    starts = np.arange(lo, hi + 2).astype("datetime64[Y]").astype("datetime64[ns]").astype(np.int64)  # (Y + 1,)
    return (lo + 1970 + np.searchsorted(starts, ts_ns, side="right") - 1).astype(np.int32)


def trade_date(ts: pl.Expr, exchange_tz: str, root: pl.Expr | None = None) -> pl.Expr:
    """Session (trade) date: the exchange-time date of ts + the root's session shift (sessions.py; 7 h for a 17:00
    open, the CME equity default used without a root)."""
    shift = session_shift(root) if root is not None else CME_EQUITY.shift_min
    return (ts + pl.duration(minutes=shift)).dt.convert_time_zone(exchange_tz).dt.date()


def series_key(symbol: str, contracts: str) -> str:
    """The series a raw symbol's bars belong to: its futures root (a spread's first leg's), else the symbol."""
    text = symbol.strip()
    if contracts == "each":
        return text
    leg = re.split(SPREAD_RE, text)[0] if re.search(SPREAD_RE, text) else text
    m = re.match(FUTURES_RE, leg)
    return m.group(1) if m and re.search("[A-Z]", m.group(1)) else text
