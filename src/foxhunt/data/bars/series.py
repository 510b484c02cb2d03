"""Series from symbols: front-contract selection, the roll table and back-adjustment (continuous contracts).

Contract modes (`DataConfig.contracts`):
- continuous (what `auto` picks when any symbol is an outright or a Databento continuous symbol; `auto` first reads the
  symbols of a root that are not one market's contracts as plain symbols, chains.py): one series per root.
  The front contract of a trade date (the exchange-time date of ts + the root's session shift, sessions.py: a CME
  equity session that opens at 17:00 CT belongs to the next day) starts at the nearest expiry with data and moves
  only forward, at a session boundary: to the next contract in expiry order once it has out-traded the front for `roll_confirm` consecutive sessions (volumes
  of earlier sessions only), or, on a session where the front has no bars, to the nearest later contract that has
  (see rolls.py). A Databento continuous file (`ES.c.0`, `ES.v.0`, `ES.n.0`) is one series per root (per symbol when
  one root has several), rolled where its instrument_id changes.
- each: every outright contract (and every instrument of a continuous file) is its own series, named by its symbol.
- Non-futures symbols (stocks, indices, vendor continuous exports such as "ES") are always one series each; with no
  outright at all the mode is reported as "symbols".

Back-adjustment (continuous only): at each roll the gap is taken at the last bar before the switch at which both the
old and the new contract have a bar (same timestamp); if they never share one, the new contract's last bar before the
switch is paired with the old contract's latest bar at or before it (a continuous file: the old instrument's last
close and the new one's first open). `ratio` multiplies every earlier price by new/old; `difference` adds new - old;
`none` leaves raw prices. Adjustment shapes the displayed open/high/low/close only: each bar also carries its
contract's own prices and the roll's log ratio, from which features take returns and ranges, so no later roll's gap
ever enters a feature or a target.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import polars as pl

from foxhunt.data.bars.rolls import CONTINUOUS_RE, ContractIndex, continuous_file_rolls, pick_fronts
from foxhunt.data.bars.symbols import PRICES
from foxhunt.data.util import parallel
from foxhunt.data.util.order import gather, runs_order, same_as_next, sort_keys, stable_order
from foxhunt.data.util.runs import distinct, run_lengths, run_starts_of
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")

SEG_SPAN = 1 << 32  # segments (rolls) of one series are numbered below this
OWN = ("own_high", "own_low", "own_close", "roll_log_ratio", "roll_gap")  # what features read: see _adjust
BAR_COLUMNS = ("series", "ts", *PRICES, "volume", "symbol", *OWN)  # what build_series keeps of each part


def build_series(
    df: pl.DataFrame, mode: str, adjust: str, roll_confirm: int = 2, *, runs: np.ndarray | None = None,
    ready: Callable[[], object] | None = None,
) -> tuple[pl.DataFrame, list[dict], dict]:
    """Turn cleaned, parsed bars into output series.

    `df` needs columns symbol, root, expiry, trade_date, ts and OHLCV. Returns (bars with series, ts, OHLCV, contract,
    own_high, own_low, own_close, roll_log_ratio, roll_gap; roll table; {contracts_mode, contracts_kept, contracts_dropped}).
    `roll_confirm`: sessions the next contract must out-trade the front before a volume roll (see rolls.py).
    `runs` (Y,): the first row of each run of one symbol of `df` (`runs.run_starts_of`), when the caller has them.
    `df` is consumed when it holds only outright futures (the usual file): its columns are taken out of it as the
    output is built (`DataFrame.drop_in_place`), so that the input and the output series never take memory together
    (2M bars: 200 MB less at the loader's peak); the caller must not read `df` afterwards.
    `ready`: called (once or more) before the output takes memory of its own, and before returning: the loader
    waits there for checks that run beside the first steps and hold `df`'s columns until they end.
    """
    wait = ready if ready is not None else _nothing
    height, null_symbols, empty = df.height, df.get_column("symbol").null_count(), df.clear()
    is_fut = df.get_column("root").is_not_null()  # (N,) masks, each computed once
    symbol_runs = run_starts_of(df.get_column("symbol")) if runs is None else runs  # (Y,) runs of one symbol
    firsts = df.get_column("symbol").gather(pl.Series(symbol_runs, dtype=pl.get_index_type()))  # (Y,)
    names = firsts.drop_nulls().unique()
    continuous = names.filter(names.str.contains(CONTINUOUS_RE))
    is_cont = (
        ~is_fut & df.get_column("symbol").is_in(continuous.implode())
        if len(continuous)
        else pl.repeat(False, df.height, dtype=pl.Boolean, eager=True)  # no continuous symbol: no pass over rows
    )
    has_futures = bool(is_fut.any() or is_cont.any())
    if mode == "continuous" and not has_futures:
        found = ", ".join(df.get_column("symbol").unique().sort().head(10).to_list())
        raise InputError(
            f"--contracts continuous needs futures symbols such as ESH4 (root, month code, year) or a Databento"
            f" continuous symbol such as ES.v.0; found {found}; use --contracts auto"
        )
    keys, kept_runs = None, None  # the output's sort keys and its runs of df's rows, when the futures alone make it up
    if mode == "each" or not has_futures:
        wait()
        out = _unadjusted(df.with_columns(series=pl.col("symbol")))
        rolls: list[dict] = []
        report_mode = "each" if mode == "each" and has_futures else "symbols"
    else:
        parts, roll_frames = [], []
        fut = df if is_fut.all() else df.filter(is_fut)  # most files are all futures: no copy
        n_fut = fut.height
        if n_fut:
            index = ContractIndex.of(fut)
            for c in ("root", "expiry", "trade_date"):  # read through the index from here on
                fut.drop_in_place(c)
            front, roll_df = _front_and_rolls(fut, roll_confirm, index)
            rows, series, segments, kept_runs = _front_rows(front, index)
            keys = [series, index.ts[rows]]  # the output's sort keys: (series code, ts)
            roots, roll_code = index.roots, index.codes_of(roll_df.get_column("series"))
            del index  # a column's worth per array, gone before the bars are gathered
            wait()
            bars = _front_bars(fut, rows, keys, segments, roots, roll_df, roll_code, adjust)  # takes fut's columns out
            del fut, rows, segments
            parts.append(bars)
            roll_frames.append(roll_df)
        wait()
        cont = df.filter(is_cont) if len(continuous) and n_fut < height else empty
        if cont.height:
            bars, roll_df = continuous_file_rolls(_continuous_series(cont))
            roll_df = _priced(roll_df)
            enum = pl.Enum(pl.concat([bars.get_column("series"), roll_df.get_column("series")]).unique().sort())
            code = bars.get_column("series").cast(enum).to_physical().to_numpy().astype(np.int64)
            roll_code = roll_df.get_column("series").cast(enum).to_physical().to_numpy().astype(np.int64)
            bar_key = code * SEG_SPAN + bars.get_column("seg").to_numpy().astype(np.int64)
            parts.append(_adjust(bars, *_key_runs(bar_key), roll_df, roll_code, adjust))
            roll_frames.append(roll_df)
        plain = empty if n_fut + cont.height == height else df.filter(~is_fut & ~is_cont.fill_null(False))
        others = _unadjusted(plain.with_columns(series=pl.col("symbol")))
        named = [p for p in [*parts, others] if p.height]  # a source without bars names no series
        if len(named) > 1:
            _check_clash([distinct(p.get_column("series")) for p in named])
        out = pl.concat([p.select(BAR_COLUMNS) for p in parts] + [others.select(BAR_COLUMNS)], how="vertical")
        rolls = _roll_dicts(pl.concat([r.select(ROLL_COLUMNS) for r in roll_frames], how="vertical"))
        report_mode = "continuous"
        keys = keys if keys is not None and out.height == parts[0].height else None  # futures alone: their keys
        kept_runs = kept_runs if keys is not None and n_fut == height else None  # and fut is df: its rows are df's
    out = out.select("series", "ts", *PRICES, "volume", pl.col("symbol").alias("contract"), *OWN)
    out, shared = _sorted_last(out, keys, presorted=keys is not None)  # _front_rows' keys come sorted
    if shared:
        log.warning("%d bars shared a timestamp within one series (two symbols for one contract); kept the last", shared)
    if kept_runs is not None and not shared:  # the symbols of the runs of rows kept, without reading every bar's
        kept = sorted(_symbols_of(firsts, symbol_runs, *kept_runs).to_list())
    else:
        kept = sorted(distinct(out.get_column("contract")).to_list())
    null = {None} if null_symbols else set()
    dropped = sorted((set(names.to_list()) | null) - set(kept))
    return out, rolls, {"contracts_mode": report_mode, "contracts_kept": kept, "contracts_dropped": dropped}


def _nothing() -> None:
    return None


def _symbols_of(firsts: pl.Series, symbol_runs: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> pl.Series:
    """The distinct symbols of the rows in runs `starts` (T,) `lens` (T,), from the frame's runs of one symbol:
    `symbol_runs` (Y,) their first rows and `firsts` (Y,) their symbols."""
    lo = np.searchsorted(symbol_runs, starts, side="right") - 1  # (T,) the symbol run of each run's first row
    hi = np.searchsorted(symbol_runs, starts + lens - 1, side="right") - 1  # (T,) and of its last
    inside = np.zeros(len(symbol_runs) + 1, dtype=np.int64)
    np.add.at(inside, lo, 1)
    np.add.at(inside, hi + 1, -1)
    return firsts.filter(pl.Series(np.cumsum(inside)[:-1] > 0)).unique()


def _sorted_last(bars: pl.DataFrame, keys: list[np.ndarray] | None = None, presorted: bool = False
                 ) -> tuple[pl.DataFrame, int]:
    """`bars` sorted by (series, ts), keeping the last of rows that share both; also how many were dropped.

    A stable sort keeps such rows in their order in `bars`, so the last of each run is the one to keep. `keys`: the
    rows' sort keys when the caller has them (`order.sort_keys(bars, ("series", "ts"))` or an equivalent);
    `presorted`: the caller knows the rows are in that order already (no pass to check it).
    """
    keys = keys if keys is not None else sort_keys(bars, ("series", "ts"))
    order = None if presorted else stable_order(keys)
    if order is not None:
        keys = [k[order] for k in keys]
    keep = ~same_as_next(keys)  # (N,)
    dropped = int(len(keep) - keep.sum())
    if dropped:
        order = np.flatnonzero(keep) if order is None else order[keep]
    return gather(bars, order), dropped


def _check_clash(names: list[pl.Series]) -> None:
    seen: set[str] = set()
    for s in names:
        clash = seen & set(s.to_list())
        if clash:
            raise InputError(
                f"series name(s) {', '.join(sorted(clash))} come from two sources (a futures root, a continuous file,"
                " a plain symbol); use --contracts each or load them separately"
            )
        seen |= set(s.to_list())


def _unadjusted(bars: pl.DataFrame) -> pl.DataFrame:
    """Bars of series that never roll: own prices are the prices, no roll ratio."""
    return bars.with_columns(
        own_high=pl.col("high"), own_low=pl.col("low"), own_close=pl.col("close"), roll_log_ratio=pl.lit(0.0),
        roll_gap=pl.lit(0.0),
    )


def _continuous_series(cont: pl.DataFrame) -> pl.DataFrame:
    """Name each Databento continuous symbol's series: its root (`ES`), or the symbol (`ES.v.0`) when the file holds
    several continuous symbols of one root (`ES.c.0` and `ES.c.1`)."""
    base = pl.col("symbol").str.replace(r"#\d+$", "")
    root = base.str.extract(CONTINUOUS_RE, 1)
    return (
        cont.with_columns(_base=base, _root=root)
        .with_columns(
            series=pl.when(pl.col("_base").n_unique().over("_root") == 1)
            .then(pl.col("_root"))
            .otherwise(pl.col("_base"))
        )
        .drop("_base", "_root")
        .sort("series", "ts")
    )


def _front_and_rolls(fut: pl.DataFrame, confirm: int, index: ContractIndex) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Front contract per (root, trade_date) and the roll table with gap and ratio at the last common bar."""
    front = (
        pick_fronts(index.daily_volume(fut.get_column("volume").to_numpy()), confirm)
        .with_columns(prev=pl.col("front").shift(1).over("root"))
        .with_columns(is_roll=(pl.col("front") != pl.col("prev")).fill_null(False))
        .with_columns(seg=pl.col("is_roll").cast(pl.Int32).cum_sum().over("root"))
        .select("root", "trade_date", "front", "prev", "is_roll", "seg", "reason")
    )
    rolls = front.filter("is_roll").select("root", "trade_date", "seg", "reason", old="prev", new="front")
    names = index.first_symbols(fut.get_column("symbol"))
    rolls = (
        rolls.join(names.rename({"expiry": "old", "symbol": "from"}), on=["root", "old"], how="left")
        .join(names.rename({"expiry": "new", "symbol": "to"}), on=["root", "new"], how="left")
        .join(index.roll_prices(fut.get_column("close").to_numpy(), rolls), on=["root", "seg"], how="left")
        .rename({"root": "series"})
    )
    return front, _priced(rolls)


def _priced(rolls: pl.DataFrame) -> pl.DataFrame:
    """Add gap (new - old) and ratio (new / old); a roll with no price pair is left unadjusted (gap 0, ratio 1) and
    `paired` False, so features take no return across it."""
    paired = pl.col("old_close").is_not_null() & pl.col("new_close").is_not_null()
    n = rolls.select((~paired).sum()).item()
    if n:
        log.warning("no price pair for %d rolls; those rolls are left unadjusted", n)
    return rolls.with_columns(
        gap=(pl.col("new_close") - pl.col("old_close")).fill_null(0.0),
        ratio=(pl.col("new_close") / pl.col("old_close")).fill_null(1.0),
        paired=paired,
    ).sort("series", "seg")


def _front_rows(front: pl.DataFrame, index: ContractIndex) -> tuple[
    np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray] | None
]:
    """(M,) the rows of each trade date's front-contract bars, sorted by (series = root, ts), (M,) their series (root)
    code, their segments: (S,) the first of those rows in each run of one series and segment and (S,) its key
    (series code * SEG_SPAN + segment, see `_adjust`), and the runs of rows they are made of ((T,) first rows, (T,)
    lengths) when they were laid end to end (else None).

    The front of each bar's (root, trade date) is found by a binary search in the small front table: a join of
    millions of bars on (root, date) costs several times more.
    """
    table = front.filter(pl.col("root").is_in(pl.Series(index.roots).implode()))
    t_code = index.codes_of(table.get_column("root"))
    t_day = table.get_column("trade_date").cast(pl.Int32).to_numpy().astype(np.int64)
    # Bars come in runs of one contract and session (sorted by symbol and ts): each run is kept or dropped whole.
    starts, code, day = index.runs, index.code, index.day  # (K,)
    lens = run_lengths(starts, len(index.ts))
    lo = min(day.min(), t_day.min()) if len(t_day) and len(day) else 0
    span = max(day.max(), t_day.max()) - lo + 1 if len(t_day) and len(day) else 1
    at, hit = _lookup(code * span + (day - lo), t_code * span + (t_day - lo))  # (K,) front row
    take = hit & (index.expiry == table.get_column("front").to_numpy()[at])  # (K,) runs of the front
    starts, lens, code, seg = starts[take], lens[take], code[take], table.get_column("seg").to_numpy()[at[take]]
    by = _runs_by_time(code, index.ts[starts], index.ts[starts + lens - 1]) if index.order is None else None
    if by is not None:  # the kept runs laid end to end in (root, ts) order: no row is compared or moved twice
        starts, lens, code, seg = starts[by], lens[by], code[by], seg[by]
        first = np.cumsum(lens) - lens  # (T,) each run's first row in the output
        # In polars' index type, which the gathers take as it is; a run's offset may be negative: it wraps around
        # and back, as unsigned sums do, to the row it stands for.
        kind = np.uint32 if pl.get_index_type() == pl.UInt32 else np.uint64
        keep = np.repeat((starts - first).astype(kind), lens)  # (M,) their rows
        keep += np.arange(len(keep), dtype=kind)
        key = code * SEG_SPAN + seg  # (T,)
        new = np.concatenate([[True], key[1:] != key[:-1]]) if len(key) else key.astype(bool)
        return keep, np.repeat(code.astype(kind), lens), (first[new], key[new]), (starts, lens)
    keep = np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(lens.sum())  # (M,)
    seg, series = np.repeat(seg, lens), np.repeat(code, lens)  # (M,)
    order = runs_order(series, index.ts[keep])
    if order is not None:
        keep, seg, series = keep[order], seg[order], series[order]
    return keep, series, _key_runs(series * SEG_SPAN + seg), None


def _key_runs(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S,) the first row of each run of equal `key` (N,) and (S,) its key."""
    starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]])) if len(key) else np.zeros(0, np.int64)
    return starts, key[starts]


def _runs_by_time(code: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray | None:
    """(T,) runs of rows (each sorted by ts: `first` and `last` ts, `code` the series) in (code, ts) order, when laid
    end to end in it they are sorted with every tie inside one run (the stable order of their rows); else None."""
    by = np.lexsort((first, code))
    same = code[by][1:] == code[by][:-1]
    return by if np.all(~same | (first[by][1:] > last[by][:-1])) else None


def _front_bars(fut: pl.DataFrame, rows: np.ndarray, keys: list[np.ndarray], segments: tuple[np.ndarray, np.ndarray],
                roots: list[str], rolls: pl.DataFrame, roll_code: np.ndarray, adjust: str) -> pl.DataFrame:
    """The bars `rows` of `fut` (see `_front_rows`; `keys` their series code and ts, `segments` their runs of one
    segment, `roots` the names of the codes), back-adjusted; `fut`'s columns are taken out of it (and freed) as they
    are gathered into the output."""
    index = pl.get_index_type()
    # What the segments and rolls alone decide (the series, ts and roll columns) is built on the second core while
    # this one gathers the bars' own columns.
    made = parallel.submit(_front_columns, keys, roots, len(rows), segments, rolls, roll_code, adjust)
    taken = pl.Series(rows, dtype=index)  # polars' own index type: no cast of millions of indices per gather
    parts = []
    for group in (PRICES[:2], PRICES[2:], ("volume", "symbol")):  # two at a time: polars gathers them in parallel
        parts.append(fut.select(group)[taken])
        for c in group:  # out of fut: the input and the output never both hold a column
            fut.drop_in_place(c)
    first, rolled = made.result()
    bars = _adjusted(pl.concat([first, *parts], how="horizontal"), rolled, adjust)
    del rolled
    return bars


def _front_columns(keys: list[np.ndarray], roots: list[str], n: int, segments: tuple[np.ndarray, np.ndarray],
                   rolls: pl.DataFrame, roll_code: np.ndarray, adjust: str) -> tuple[pl.DataFrame, list[pl.Series]]:
    """The front bars' series and ts (from `keys`, their series code and ts) and `_roll_columns` of their
    `segments`: the columns of `_front_bars` that need none of the bars' prices."""
    index = pl.get_index_type()
    first = pl.DataFrame(
        {
            "series": pl.Series(roots, dtype=pl.Utf8).gather(pl.Series(keys[0], dtype=index)),
            "ts": pl.Series(keys[1]).cast(pl.Datetime("ns", "UTC")),
        }
    )
    return first, _roll_columns(n, *segments, rolls, roll_code, adjust)


def _adjust(bars: pl.DataFrame, starts: np.ndarray, run_key: np.ndarray, rolls: pl.DataFrame, roll_code: np.ndarray,
            adjust: str) -> pl.DataFrame:
    """`bars` back-adjusted (`_adjusted`) by the roll columns of their segments (`_roll_columns`)."""
    return _adjusted(bars, _roll_columns(bars.height, starts, run_key, rolls, roll_code, adjust), adjust)


def _roll_columns(n: int, starts: np.ndarray, run_key: np.ndarray, rolls: pl.DataFrame, roll_code: np.ndarray,
                  adjust: str) -> list[pl.Series]:
    """How to back-adjust the displayed prices of every segment before a roll, keeping each contract's own prices:
    roll_log_ratio and roll_gap (`_on_rolls`' arguments: the bars keep them, so `_adjusted` makes them in the thread
    that keeps the bars) and (ratio, difference) (N,) each bar's factor or shift.

    The `n` bars are sorted by (series, ts) and come in runs of one series and segment: `starts` (K,) the first bar of each
    and `run_key` (K,) its series code * SEG_SPAN + segment (segment s lies between roll s and roll s + 1);
    `roll_code` (R,) the series code of each roll, in one numbering. Segment s is scaled
    by the product of the ratios of all later rolls (ratio) or shifted by the sum of their gaps (difference), so the
    latest segment keeps its raw prices. Those factors depend on rolls that come later, so features never read
    adjusted prices: they use own_high/own_low/own_close (the contract's unadjusted prices) and roll_log_ratio,
    ln(new / old) of the roll that takes effect on the bar (0 on other bars, null when the roll has no price pair),
    and roll_gap, new - old of that roll (the same, in price units: what --target price_change stitches with,
    defined for prices at or below zero). Per-roll values come from the small roll table; per bar it is numpy.
    """
    roll_key = roll_code * SEG_SPAN + rolls.get_column("seg").to_numpy().astype(np.int64)  # (R,)
    later = (
        rolls.with_columns(_key=pl.Series(roll_key))
        .sort("_key", descending=True)
        .with_columns(
            factor=pl.col("ratio").cum_prod().over("series"),
            shift=pl.col("gap").cum_sum().over("series"),
        )
    )
    # Each segment is one run of bars: the small tables are read once per run, and only what a bar needs is
    # expanded to every bar (the factor), or set on the first bar of a run (the roll's own ratio and gap).
    lens = run_lengths(starts, n)  # (K,)
    (factor, shift), (no_later, _) = _per_bar(run_key, later.get_column("_key").to_numpy() - 1, later, ("factor", "shift"))
    at_roll = rolls.select(
        _lr=pl.when("paired").then(pl.col("ratio").log()).otherwise(None),
        _gap=pl.when("paired").then(pl.col("gap")).otherwise(None),
    )
    (lr, gap), (lr_null, gap_null) = _per_bar(run_key, roll_key, at_roll, ("_lr", "_gap"))
    series = run_key // SEG_SPAN
    roll = np.zeros(len(run_key), dtype=bool)  # (K,) a segment's first bar, not its series': a roll
    roll[1:] = series[1:] == series[:-1]
    columns: list = [
        ("roll_log_ratio", n, starts[roll], lr[roll], lr_null[roll]),
        ("roll_gap", n, starts[roll], gap[roll], gap_null[roll]),
    ]
    if adjust == "ratio":
        columns.append(pl.Series(np.repeat(np.where(no_later, 1.0, factor), lens)))  # (N,) each bar's factor
    elif adjust == "difference":
        columns.append(pl.Series(np.repeat(np.where(no_later, 0.0, shift), lens)))  # (N,) each bar's shift
    return columns


def _adjusted(bars: pl.DataFrame, rolled: list[pl.Series], adjust: str) -> pl.DataFrame:
    """`bars` with their own prices kept (own_high, own_low, own_close), the roll columns of `_roll_columns`
    (`rolled`) and the prices scaled (ratio) or shifted (difference) by its factor."""
    columns = [
        pl.Series("own_high", bars.get_column("high")),
        pl.Series("own_low", bars.get_column("low")),
        pl.Series("own_close", bars.get_column("close")),
        *(_on_rolls(*r) for r in rolled[:2]),
    ]
    # In polars, like the prices they replace, so that the memory the replaced ones free is what the next takes.
    if adjust == "ratio":
        columns += [pl.col(c) * rolled[2] for c in PRICES]
    elif adjust == "difference":
        columns += [pl.col(c) + rolled[2] for c in PRICES]
    return bars.with_columns(columns)


def _per_bar(bar_key: np.ndarray, table_key: np.ndarray, table: pl.DataFrame, columns: tuple[str, ...]
             ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Float `columns` of the row of `table` whose `table_key` (R,) equals each bar's `bar_key` (N,): a left join by
    binary search in the small table, where a join would copy every column of millions of bars. Returns the (N,)
    values (NaN where null) and the (N,) null masks (no row, or a null in it)."""
    at, hit = _lookup(bar_key, table_key)
    values, nulls = [], []
    for c in columns:
        col = table.get_column(c).cast(pl.Float64)
        values.append(np.where(hit, col.fill_null(np.nan).to_numpy()[at] if len(col) else np.nan, np.nan))
        nulls.append(~hit | (col.is_null().to_numpy()[at] if len(col) else True))
    return values, nulls


def _lookup(key: np.ndarray, table_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N,) the row of `table_key` (R,) equal to each `key` (N,) (some row where none), and (N,) whether it is equal.

    Keys come in long runs (a bar's series and segment, its root and date): one binary search per run.
    """
    if not len(key) or not len(table_key):
        return np.zeros(len(key), dtype=np.int64), np.zeros(len(key), dtype=bool)
    starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))  # (K,) runs of equal keys
    by_key = np.argsort(table_key)
    ranked = table_key[by_key]
    at = by_key[np.minimum(np.searchsorted(ranked, key[starts]), len(ranked) - 1)]  # (K,)
    lens = run_lengths(starts, len(key))
    return np.repeat(at, lens), np.repeat(table_key[at] == key[starts], lens)


def _on_rolls(name: str, n: int, at: np.ndarray, value: np.ndarray, null: np.ndarray) -> pl.Series:
    """(n,) `value` on the roll bars `at`, null where `null` is true, 0 on every other bar."""
    out = np.zeros(n)
    out[at] = np.where(null, 0.0, value)
    return pl.Series(name, out).scatter(at[null], None) if null.any() else pl.Series(name, out)


ROLL_COLUMNS = ("series", "trade_date", "from", "to", "gap", "reason")


def _roll_dicts(rolls: pl.DataFrame) -> list[dict]:
    rows = rolls.sort("series", "trade_date").select(
        root="series",
        trade_date=pl.col("trade_date").dt.to_string("%Y-%m-%d"),
        **{"from": "from", "to": "to"},
        gap=pl.col("gap").cast(pl.Float64),
        reason="reason",
    )
    return rows.to_dicts()
