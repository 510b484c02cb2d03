"""Validate and clean raw bars: what can be repaired is repaired and counted, what cannot stops with an InputError.

Repaired (counted in the load report):
- bad rows are dropped, unless more than 1% of all rows are bad (then the export is broken and the run stops): rows
  with a missing or non-finite (NaN, inf) price or volume, and rows whose prices contradict each other (high below
  max(open, close) or low above min(open, close); high below low is one of these);
- duplicate rows (same instrument and timestamp, as when downloads overlap) are dropped keeping the last one read;
  those whose prices or volume differ from the row kept are a warning naming the first, and more than 1% of the rows
  stop the run (duplicates.py);
- rows out of time order within an instrument are sorted (the count is of rows that came earlier than a row before
  them);
- Databento ohlcv-1d Sunday stubs (see `merge_sunday_stubs`).

Fatal (one-line InputError naming file, row, symbol and timestamp): negative volume.

Prices of zero or below are valid (crude oil settled at -37.63 on 2020-04-20): loading keeps them, and the steps whose
math needs positive prices refuse them with the flag to change: `check_ratio_adjust` (--adjust ratio) and
`check_log_target` (--target log_return / log_range; --target price_change works in price differences).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np
import polars as pl

from foxhunt.data.bars import duplicates
from foxhunt.data.bars.bad_rows import (
    OWN_PRICES,
    PRICES,
    VALUES,
    AllRowsBad,
    BadRows,
    contradicts,
    judge_bad_rows,
    negative_volume,
    nonfinite,
    nonpositive,
    row_place,
    why_negative_volume,
    why_nonpositive,
)
from foxhunt.data.bars.duplicates import Duplicates
from foxhunt.data.util import parallel
from foxhunt.data.util.order import (
    Declined,
    combined,
    gather,
    grouped_order,
    indices,
    instrument_code,
    is_sorted,
    new_group,
    same_as_next,
    sort_keys,
    take_out,
)
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")

INSTRUMENT = ("symbol", "instrument_id")  # one instrument; instrument_id is null for generic files
RTYPE_OHLCV_1D = 35
SUNDAY = 7  # polars weekday: Monday = 1
SortPlan = tuple[list[np.ndarray], tuple | None]  # see sort_plan


def clean_bars(
    df: pl.DataFrame, files: list[str], consume: bool = False, plan: Future[SortPlan | None] | None = None,
    judge: bool = True, columns: duplicates.Columns = (None, None),
) -> tuple[pl.DataFrame, dict]:
    """Drop bad/duplicate rows, check prices, sort by (symbol, instrument_id, ts).

    `df` has the read stage's columns (file_idx and row locate a row for messages; `files` maps file_idx to a path).
    Returns (clean frame, {nan_rows_dropped, inconsistent_rows_dropped, duplicates_dropped, rows_out_of_order,
    duplicates_conflicting}); nan_rows_dropped counts every missing or non-finite (NaN, inf) row, and
    duplicates_conflicting the duplicates dropped whose values differ from the row kept (duplicates.py).
    `consume=True`: when the rows must be reordered, `df`'s columns are dropped from it one by one as they are
    gathered (the input and the sorted copy never both take memory); the caller must not read `df` afterwards. `plan`: `sort_plan` of df's instrument and
    ts columns, when the caller has started it (`submit_sort_plan`; pass the only reference to it).
    `judge=False` (a piece of a panel, data/prepare): the bad rows are dropped without a word and stats also holds
    `bad_rows` (BadRows), for the caller to judge over the whole panel (`judge_bad_rows`), as the panel read whole is;
    AllRowsBad when no row is left. `columns`: the --timestamp-col and --symbol-col `df` was read with (named by a
    conflict's hint only when they are not what was read).
    """
    n = df.height
    # The sort order reads only the instrument and ts columns: it is found on the second core while the checks
    # below read the prices. It stands for `df`'s rows as they are: rows dropped below make it worthless.
    if plan is not None and plan.done() and plan.result() is None:  # declined (see sort_plan's accept)
        plan = None
    if plan is None and parallel.threads() > 1:
        plan = submit_sort_plan(df)
    contradicting = contradicts(*[pl.col(c) for c in PRICES])
    bad_value = nonfinite(*[pl.col(c) for c in VALUES])
    inconsistent = ~bad_value & contradicting
    # Counted without adding the masks to the frame: a clean file (the usual case) is then never copied.
    if _all_finite(df):  # the usual case: no row is nonfinite, and finite prices contradict by plain comparisons
        n_nonfinite, n_inconsistent = 0, df.select(contradicting.sum()).item()
    else:
        n_nonfinite, n_inconsistent = df.select(bad_value.sum().alias("n"), inconsistent.sum().alias("i")).row(0)
    bad = BadRows(n, int(n_nonfinite), int(n_inconsistent))
    if not judge or bad.over():  # the first bad rows name the problem: found only where a message may need them
        bad = _with_first(bad, df, bad_value, inconsistent)
    if judge:
        judge_bad_rows(bad, files)
    elif n and n_nonfinite + n_inconsistent == n:
        raise AllRowsBad(bad)
    if n_nonfinite or n_inconsistent:
        df = df.filter(~bad_value & ~inconsistent)
    _check(df, negative_volume(pl.col("volume")), files, why_negative_volume)

    # While the plan is still being found, this thread readies the gather that follows the usual plan (it is
    # wasted on rows that come out of order, whose plan is another).
    kinds = _ready_to_gather(df, consume) if plan is not None and not plan.done() and df.height == n else None
    # Waited for even when dropped rows make it worthless: one plan runs at a time. The caller holds no other
    # reference to it (see load_raw): its arrays go as _sort_dedup lets go of them.
    plan_rows = plan.result() if plan is not None else None
    del plan
    if plan_rows is None or df.height != n:
        plan_rows = None  # a stale plan's arrays go before the new plan's are made
        plan_rows = sort_plan(*_plan_columns(df))
    df, found, out_of_order = _sort_dedup(df, plan_rows, consume, kinds)
    if judge:
        duplicates.tell(found, n, files, out_of_order, columns)
    else:  # a piece: its duplicates are told with the panel's (prepare/driver.py), as its bad rows are judged
        bad = dataclasses.replace(bad, duplicates=found, out_of_order=out_of_order)
    stats = {
        "nan_rows_dropped": int(n_nonfinite),
        "inconsistent_rows_dropped": int(n_inconsistent),
        "duplicates_dropped": found.dropped,
        "rows_out_of_order": out_of_order,
        "duplicates_conflicting": found.conflicting,
    }
    return df, stats if judge else {**stats, "bad_rows": bad}


def _with_first(bad: BadRows, df: pl.DataFrame, nonfinite: pl.Expr, inconsistent: pl.Expr) -> BadRows:
    """`bad` with the first row of `df` (the read frame, in read order) of each kind it counts."""
    def first(mask: pl.Expr, count: int) -> dict | None:
        if not count:
            return None
        row = df.filter(mask).select("file_idx", "row", "symbol", "ts", *PRICES).row(0, named=True)
        return {**row, "symbol": None if row["symbol"] is None else str(row["symbol"])}

    return dataclasses.replace(bad, first_nonfinite=first(nonfinite, bad.nonfinite),
                               first_inconsistent=first(inconsistent, bad.inconsistent))


def _all_finite(df: pl.DataFrame) -> bool:
    """Whether every price and volume is present and finite: one reduction per column, no mask across them."""
    if any(df.get_column(c).null_count() for c in VALUES):
        return False
    return all(df.select(pl.col(c).is_finite().all() for c in VALUES).row(0))


def submit_sort_plan(df: pl.DataFrame, accept: Callable[[pl.Series], bool] | None = None
                     ) -> Future[SortPlan | None]:
    """`sort_plan` of `df`'s instrument and ts columns, found on a pool thread (`parallel.submit`); it holds the
    columns, not `df`, so that `df` may lose them meanwhile. `accept`: see `sort_plan` (the future then gives
    None where it declines)."""
    return parallel.submit(_plan, accept, *_plan_columns(df))


def _plan(accept: Callable[[pl.Series], bool] | None, symbol: pl.Series, ident: pl.Series,
          ts: pl.Series) -> SortPlan | None:
    """`sort_plan`, None where `accept` declines."""
    try:
        plan = sort_plan(symbol, ident, ts, accept)
    except Declined:
        plan = None
    return plan


def _plan_columns(df: pl.DataFrame) -> list[pl.Series]:
    return [df.get_column(c) for c in (*INSTRUMENT, "ts")]


def sort_plan(symbol: pl.Series, ident: pl.Series, ts: pl.Series, accept: Callable[[pl.Series], bool] | None = None
              ) -> SortPlan:
    """How `_sort_dedup` sorts rows of these instrument and ts columns: (keys (N,) each, most significant first,
    in row order; `order.grouped_order`'s answer for them, or None when it does not apply or the rows are sorted
    already). Reads only these columns, so that it can run beside work on the others. `accept`: a test of the
    symbols of a Databento file's instrument ids (`order.instrument_code`), for a plan made before the stages that
    may drop rows: Declined stops it early where they will."""
    code = instrument_code(symbol, ident, accept)  # (N,) a Databento file's instruments
    if code is not None:
        keys = [code, *sort_keys(pl.DataFrame([ts]), ("ts",))]
    else:
        keys = combined(sort_keys(pl.DataFrame([symbol, ident, ts]), (*INSTRUMENT, "ts")))
    if is_sorted(keys) or len(keys) != 2 or ts.null_count():
        return keys, None
    grouped = grouped_order(keys[0], keys[1:])
    return ([], grouped) if grouped is not None else (keys, None)  # the keys are in `grouped`, sorted


def _sort_dedup(
    df: pl.DataFrame, plan: SortPlan, consume: bool = False, kinds: dict[str, str] | None = None
) -> tuple[pl.DataFrame, Duplicates, int]:
    """(df sorted by instrument and ts without duplicates, what dropping them found, rows out of order); `plan` is
    `sort_plan` of df's rows, `kinds` `_column_kinds` of df when the caller has them.

    One stable sort: the rows of one (instrument, ts) stay in the order they were read and the last of them is kept.
    A kept row is out of order when a row of its instrument read before it has a later timestamp, that is when a
    later row in sorted order was read earlier: its read position exceeds the minimum over the rest of its
    instrument's rows (a reversed running minimum, kept inside each instrument by offsetting groups).
    """
    held, grouped = plan
    keys = held[:]
    held.clear()  # the plan's list lets go of the keys (the caller's future holds the plan): freed as they go here
    order = None
    if grouped is not None:  # each instrument's rows were read in time order: the usual file
        order, (ts,), _, counts = grouped
        return _regrouped(df, order, ts, counts, consume, kinds)
    if not is_sorted(keys):
        order = np.lexsort(keys[::-1])
        keys = [k[order] for k in keys]
    keep = ~same_as_next(keys)  # (N,) the last row read of each (instrument, ts)
    n = len(keep)
    found = duplicates.find(df, order, keep)
    dropped = found.dropped
    pos = np.arange(len(keep), dtype=np.int64) if order is None else order.astype(np.int64, copy=False)
    rows = None if dropped == 0 else np.flatnonzero(keep)
    del keep
    if rows is not None:
        keys, pos = [k[rows] for k in keys], pos[rows]
    group = np.cumsum(new_group(keys[:-1])) if len(pos) else pos  # (M,) instrument number, rising
    del keys
    # Reversed, each later group (an earlier instrument) sits n lower, below everything seen before it: n, not M,
    # since read positions run up to n - 1 when duplicates were dropped.
    rev = (pos - (n * (group[-1] - group) if len(pos) else 0))[::-1]
    del pos, group
    out_of_order = int((rev[1:] > np.minimum.accumulate(rev)[:-1]).sum())
    del rev  # the index arrays go before the frame is gathered: they would add a third of it
    if order is not None and rows is not None:
        rows = order[rows]
    elif order is not None:
        rows = order
    if rows is not None and consume:
        return take_out(df, rows), found, out_of_order
    return gather(df, rows), found, out_of_order


def _regrouped(
    df: pl.DataFrame, order: np.ndarray, ts: np.ndarray, counts: np.ndarray, consume: bool,
    kinds: dict[str, str] | None = None,
) -> tuple[pl.DataFrame, Duplicates, int]:
    """`_sort_dedup` for rows whose instruments were each read in time order (`order.grouped_order` found them so):
    no row is out of order, and only the columns that vary within an instrument are gathered.

    `order` (N,) sorts the rows by instrument and ts, `ts` (N,) is the ts key in that order, `counts` (V,) the rows
    of each instrument code. symbol and instrument_id are the same on every row of an instrument: each is read once
    per instrument and repeated, where a gather of the whole column reads it at random. ts comes sorted already.
    Integer and Boolean columns holding one value (file_idx of one file, rtype, by_instrument) are repeated, and a
    `row` that counts the rows (one file read whole) is the order itself (`kinds`: `_column_kinds` of df, when the
    caller has them). The repeated columns are built on the second core while this one gathers the others.
    """
    counts = counts[counts > 0]  # (G,) rows per instrument, in sorted order
    same = ts[1:] == ts[:-1]  # (N - 1,)
    same[np.cumsum(counts)[:-1] - 1] = False  # pairs across two instruments
    keep = np.append(~same, True)  # (N,) the last row read of each (instrument, ts)
    del same
    found = duplicates.find(df, order, keep)
    rows = order
    if found.dropped:
        counts = np.add.reduceat(keep, np.cumsum(counts) - counts).astype(np.int64)
        rows, ts = order[keep], ts[keep]
    del keep, order
    names, m = df.columns, len(rows)
    taken = indices(rows)
    first = indices(rows[np.cumsum(counts) - counts])  # (G,) the first row of each instrument
    del rows
    repeated = parallel.submit(_per_instrument, [df.get_column(c) for c in INSTRUMENT], first, counts, ts,
                               df.schema["ts"])
    del ts
    out = {}
    for c, kind in (_column_kinds(df) if kinds is None else kinds).items():
        s = df.get_column(c)
        out[c] = taken.cast(s.dtype).alias(c) if kind == "rows" else s.new_from_index(0, m)
    rest = [c for c in names if c not in out and c not in (*INSTRUMENT, "ts")]
    if consume:
        for c in (*out, *INSTRUMENT, "ts"):
            df.drop_in_place(c)
        moved = take_out(df, taken, rest)
    else:
        moved = df.select(rest)[taken]
    del taken
    out.update(repeated.result())
    return pl.DataFrame([out[c] if c in out else moved.get_column(c) for c in names]), found, 0


def _per_instrument(
    columns: list[pl.Series], first: pl.Series, counts: np.ndarray, ts: np.ndarray, ts_type: pl.DataType
) -> dict[str, pl.Series]:
    """The sorted frame's ts (from its key `ts` (M,)) and `columns` (the instrument's), each read at the `first` (G,)
    row of each instrument and repeated its `counts` (G,) rows."""
    group = pl.Series(np.repeat(np.arange(len(counts), dtype=np.uint32), counts))  # (M,) instrument of each row
    out = {s.name: s.gather(first).gather(group) for s in columns}
    return {"ts": pl.Series("ts", ts).cast(ts_type), **out}


def _column_kinds(df: pl.DataFrame) -> dict[str, str]:
    """{column: "rows" for a `row` that counts the rows (`_counts_rows`), "same" for an integer or Boolean column
    holding one value (or only nulls)}, of df's columns besides ts and the instrument's."""
    kinds = {}
    for c in df.columns:
        s = df.get_column(c)
        if c in (*INSTRUMENT, "ts") or not (s.dtype.is_integer() or s.dtype == pl.Boolean):
            continue
        if c == "row" and len(s) and _counts_rows(s):
            kinds[c] = "rows"
        elif s.null_count() == len(s) or (not s.null_count() and s.min() == s.max()):
            kinds[c] = "same"
    return kinds


def _ready_to_gather(df: pl.DataFrame, consume: bool) -> dict[str, str]:
    """`_column_kinds` of df, and (`consume`) the columns `_regrouped` gathers each made one chunk in place, as
    `take_out` would make them: work that needs no sort order, done while the order is being found."""
    kinds = _column_kinds(df)
    if consume:
        for c in df.columns:
            if c not in kinds and c not in (*INSTRUMENT, "ts") and df.get_column(c).n_chunks() > 1:
                df.replace_column(df.get_column_index(c), df.get_column(c).rechunk())
    return kinds


def _counts_rows(row: pl.Series) -> bool:
    """Whether `row` is 0, 1, 2, ... (the rows of one file read whole)."""
    r = row.to_numpy()
    return bool(r[0] == 0 and r[-1] == len(r) - 1 and np.all(r[1:] > r[:-1]))


def merge_sunday_stubs(df: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Fold Databento ohlcv-1d (rtype 35) Sunday bars into the following Monday bar of the same instrument.

    ohlcv-1d bars are UTC days, and CME's Monday session opens on Sunday at 22:00/23:00 UTC, so each week starts with a
    one-to-two-hour "Sunday" bar. It is the first part of Monday's session: the merged bar takes its open from the stub,
    the high/low over both, the close from Monday and the summed volume. A stub with no Monday bar becomes the Monday
    bar. `df` must be sorted by instrument and ts; returns (frame, stubs merged).
    """
    daily = pl.col("rtype") == RTYPE_OHLCV_1D
    if not df.select(daily.any()).item():  # no daily Databento bar: no weekday to compute on every row
        return df, 0
    stub = daily & (pl.col("ts").dt.weekday() == SUNDAY)
    n = df.select(stub.fill_null(False).sum()).item()
    if n == 0:
        return df, 0
    order = df.columns
    df = df.with_columns(
        _orig=pl.col("ts"),
        ts=pl.when(stub.fill_null(False))
        .then(pl.col("ts") + pl.duration(days=1, time_unit="ns"))
        .otherwise("ts")
        .cast(pl.Datetime("ns", "UTC")),
    )
    merged = (
        df.sort(*INSTRUMENT, "_orig")
        .group_by(*INSTRUMENT, "ts", maintain_order=True)
        .agg(
            pl.col("open").first(),
            pl.col("high").max(),
            pl.col("low").min(),
            pl.col("close").last(),
            pl.col("volume").sum(),
            pl.all().exclude(*VALUES, "_orig").first(),
        )
        .select(order)
    )
    log.info("folded %d Sunday ohlcv-1d stub bars into Monday bars", n)
    return merged, int(n)


def _check(df: pl.DataFrame, cond: pl.Expr, files: list[str], what) -> None:
    hit = df.filter(cond)
    if hit.height:
        r = hit.row(0, named=True)
        extra = f" ({hit.height} rows like this)" if hit.height > 1 else ""
        raise InputError(f"{row_place(r, files)}: {what(r)}{extra}; fix or remove the row")


def check_ratio_adjust(df: pl.DataFrame, files: list[str], where: pl.Expr | None = None) -> None:
    """Refuse prices of zero or below in futures that will be back-adjusted by a ratio of closes (which flips signs
    across a negative price), naming the first such row and the `--adjust` modes that work. `df` has the read stage's
    columns (file_idx, row); `where` limits the check to the rows where it holds (the futures), without a copy of
    the others."""
    where = pl.lit(True) if where is None else where
    if not df.select(pl.any_horizontal((nonpositive(pl.col(c)) & where).any() for c in PRICES)).item():
        return  # tested column by column: no price column's worth of minima is built
    hit = df.filter(nonpositive(*[pl.col(c) for c in PRICES]) & where)
    if hit.height:
        r = hit.row(0, named=True)
        raise InputError(
            f"{row_place(r, files)}: {why_nonpositive(r)} ({_rows(hit.height)} like this); --adjust ratio cannot back-adjust"
            " across it, use --adjust difference or --adjust none"
        )


def check_log_target(bars: pl.DataFrame, target: str) -> None:
    """Refuse a log target (log_return, log_range) when a bar's price is zero or below: its log is undefined there.

    `bars` are loaded bars (series, ts, OHLC, contract). The fix is the price-difference target (price_change), or
    leaving those bars out. Features read each contract's own prices (series.OWN) where the loader gave them, so a
    difference-adjusted display price at or below zero is no reason to refuse.
    """
    if not target.startswith("log_"):
        return
    cols = OWN_PRICES if "own_close" in bars.columns else PRICES
    if not bars.select(pl.any_horizontal(nonpositive(pl.col(c)).any() for c in cols)).item():
        return  # tested column by column: no price column's worth of minima is built
    hit = bars.filter(nonpositive(*[pl.col(c) for c in cols]))
    if hit.height:
        r = hit.row(0, named=True)
        raise InputError(
            f"series {r['series']} ({r['contract']} at {r['ts'].isoformat()}): {why_nonpositive(r)} ({_rows(hit.height, 'bar')}"
            f" like this); --target {target} takes the log of prices and is undefined there: use --target price_change"
            " (returns in price differences) or leave these bars out of the files"
        )


def _rows(n: int, noun: str = "row") -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
