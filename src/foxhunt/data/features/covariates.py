"""User inputs (`--covariates` files, extra bar-file columns) joined to the bars as of each bar's time.

A bar at time t sees a table's last row stamped at or before t, never a later one: a daily VIX close joins to
1-minute bars the same way as a 1-minute series, and no input can look ahead of the bar it is attached to (as long as
each row is stamped with the time its value was known: covariate_files.py). Tables with a symbol column apply to the
series or contract their symbol names; tables without one give every series the same value.

Historical bars get their values from `asof_join` (a missing value is null, for the caller to report); forecast
steps get known inputs from `known_at`, which refuses to extrapolate past the file. All work is columnar: one
polars `join_asof` per table, one `searchsorted` per known column.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from foxhunt.data.features.covariate_files import (
    CovariateTable,
    extent,
    frame_bar_columns,
    iso,
    read_bar_columns,
    read_covariates,
)
from foxhunt.data.util.listing import listing
from foxhunt.errors import InputError

__all__ = ["CovariateTable", "asof_join", "coverage", "frame_bar_columns", "known_at", "known_values_at", "pick",
           "read_bar_columns", "read_covariates"]

UTC_NS = pl.Datetime("ns", "UTC")
_ROW = "__foxhunt_row"
SHOWN = 5  # keys and series named in a message
NO_COLUMNS = "no value columns"


def pick(tables: Sequence[CovariateTable], columns: Sequence[str]) -> dict[str, CovariateTable]:
    """Which table provides each declared column (names match exactly). InputError when a column is named twice,
    when no table has it (listing what the tables have) or when two do (an input must have one meaning)."""
    twice = next((c for i, c in enumerate(columns) if c in columns[:i]), None)
    if twice is not None:
        raise InputError(f"input {twice!r} is named twice in --observed / --known / --static; name each input once")
    out = {}
    for c in columns:
        having = [t for t in tables if c in t.columns]
        if not having:
            found = ("; ".join(f"{t.source} has {listing(t.columns, 12, NO_COLUMNS)}" for t in tables)
                     or "no table was given")
            raise InputError(
                f"no input file has a column {c!r} (from --observed / --known / --static); {found}; check the name (case"
                " counts) or add the file with --covariates"
            )
        if len(having) > 1:
            raise InputError(
                f"column {c!r} is in both {having[0].source} and {having[1].source}; it is ambiguous: rename it in"
                " one of them"
            )
        out[c] = having[0]
    return out


def asof_join(bars: pl.DataFrame, tables: Sequence[CovariateTable], columns: Sequence[str]) -> pl.DataFrame:
    """`bars` (at least series, contract, ts; sorted by (series, ts)) plus one column per name in `columns`, in that
    order, rows and height unchanged: Float64, or Utf8 for a text column (a categorical input).

    Each value is the providing table's last row with ts <= the bar's ts. A keyed table applies to a series whose
    name is one of its keys (all of that series' bars, whatever their contract), else to each bar's contract; a
    series it names neither way gets null, as does a bar before the table's first row: the caller reports those.
    InputError when a keyed table names no series or contract at all, or when a name is already a bar column.
    """
    chosen = pick(tables, columns)
    clash = next((c for c in columns if c in bars.columns), None)
    if clash is not None:
        raise InputError(
            f"input {clash!r} of {chosen[clash].source} has the name of a bar column; rename it in the file"
        )
    order = {id(t): t for t in chosen.values()}  # each table once, in the order of its first column
    # (N,) the bars in time order, each with its position in `bars`: what join_asof needs on its left
    left = bars.select(
        pl.int_range(bars.height, dtype=pl.UInt32).alias(_ROW),
        pl.col("ts").cast(UTC_NS),
        pl.col("series").cast(pl.Utf8),
        pl.col("contract").cast(pl.Utf8),
    ).sort("ts", maintain_order=True)
    joined = left.select(_ROW)
    for table in order.values():
        cols = [c for c in columns if chosen[c] is table]
        if table.keyed:
            on_left = left.select("ts", _bar_key(left, table).alias("key"))
            got = on_left.join_asof(
                table.frame.select("ts", "key", *cols), on="ts", by="key", strategy="backward",
                check_sortedness=False,  # by groups: each group is sorted (the table by (key, ts), the bars by ts)
            )
        else:
            got = left.select("ts").join_asof(table.frame.select("ts", *cols), on="ts", strategy="backward")
        joined = joined.with_columns(got.select(cols))
    values = joined.sort(_ROW).select(pl.col(c) if joined.schema[c] == pl.Utf8 else pl.col(c).cast(pl.Float64)
                                      for c in columns)
    return bars.with_columns(values)


def _bar_key(left: pl.DataFrame, table: CovariateTable) -> pl.Series:
    """(N,) the key each bar of `left` looks up: its series where the table names the series, else its contract."""
    keys = table.frame.get_column("key").unique()
    by_series, by_contract = pl.col("series").is_in(keys.implode()), pl.col("contract").is_in(keys.implode())
    if not left.select((by_series | by_contract).any()).item():
        series = left.get_column("series").unique().sort()
        raise InputError(
            f"{table.source}: no symbol in the file names a series or contract of the bars (the file has"
            f" {listing(keys.sort().to_list(), SHOWN, NO_COLUMNS)}; the series are"
            f" {listing(series.to_list(), SHOWN, NO_COLUMNS)}); use the"
            " series' names or their contract symbols"
        )
    return left.select(
        pl.when(by_series).then(pl.col("series")).otherwise(pl.col("contract"))
    ).to_series()


def known_at(ts_ns: np.ndarray, tables: Sequence[CovariateTable], columns: Sequence[str]) -> np.ndarray:
    """(U, K) float32: each unkeyed table's `columns` as of each timestamp of `ts_ns` (U,) int64 ns UTC, any order.

    For known inputs at forecast steps, whose values must be in the file before they are used: a timestamp before a
    column's first row, or after its last row (the file does not say whether the value changed since), raises
    InputError naming the column and the earliest such time. A keyed table cannot give a known input: known inputs
    are the same for every series.
    """
    out = np.empty((len(ts_ns), len(columns)), dtype=np.float32)  # (U, K)
    for k, values in enumerate(known_values_at(ts_ns, tables, columns)):
        out[:, k] = values.to_numpy()
    return out


def known_values_at(ts_ns: np.ndarray, tables: Sequence[CovariateTable], columns: Sequence[str]) -> list[pl.Series]:
    """`known_at`'s values as the file holds them, one (U,) Series per column: Float64, or Utf8 for a text column
    (a categorical known input); the same checks."""
    chosen = pick(tables, columns)
    ts = np.asarray(ts_ns, dtype=np.int64)  # (U,)
    out = []
    for c in columns:
        table = chosen[c]
        if table.keyed:
            raise InputError(
                f"{table.source}: known input {c!r} comes from a file with a symbol column; known inputs are the same"
                " for every series: drop the symbol column or use --observed"
            )
        stamps = table.frame.get_column("ts").cast(UTC_NS).to_physical().to_numpy()  # (R,) increasing
        at = np.searchsorted(stamps, ts, side="right") - 1  # (U,) last row at or before
        outside = (at < 0) | (ts > stamps[-1])
        if outside.any():
            late = ("; a row holds from its time until the next row's, so the last row covers no later time (a daily "
                    "file needs the next day's row for the rest of its last day)") if (ts > stamps[-1]).any() else ""
            raise InputError(
                f"{table.source}: column {c!r} has no value at {iso(int(ts[outside].min()))} (its rows run"
                f" {iso(int(stamps[0]))} .. {iso(int(stamps[-1]))}): extend the file to cover the forecast steps{late}"
            )
        out.append(table.frame.get_column(c).gather(at))
    return out


def coverage(tables: Sequence[CovariateTable], columns: Sequence[str]) -> list[dict]:
    """Per declared column: {name, source, rows, first, last (ISO UTC), keyed}, for `foxhunt inspect`."""
    chosen = pick(tables, columns)
    out = []
    for c in columns:
        table = chosen[c]
        rows, first, last = extent(table)
        out.append({
            "name": c, "source": table.source, "rows": rows, "first": iso(first), "last": iso(last),
            "keyed": table.keyed,
        })
    return out
