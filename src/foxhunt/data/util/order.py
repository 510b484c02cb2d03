"""Sorting bars by (key columns, ts) in numpy: the loader's hot path, where polars' multi-column sorts cost most.

Sorting 2 million bars by (symbol, instrument_id, ts) in polars takes a second or more of CPU, mostly comparing the
strings. A symbol column holds a few hundred distinct values, so each is replaced by its rank among them (one cast to
an Enum of the sorted distinct values), and `np.lexsort` sorts the integer keys, several times faster. The order is
polars' own: strings by their bytes (the distinct values are sorted by polars), nulls first, ties kept in row order
(the sort is stable, which is what "keep the last row read" of a duplicate needs). Bars as vendors write them (every
instrument interleaved, in time order) need no comparison sort at all: a radix sort of the instrument code gives the
same order in O(N) (`grouped_order`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from foxhunt.data.util.runs import changes


def sort_keys(df: pl.DataFrame, columns: tuple[str, ...]) -> list[np.ndarray]:
    """(N,) int64 arrays whose lexicographic order is the order of `columns` (nulls first), most significant first.

    A column with nulls gives two arrays: 0 for null / 1 otherwise, then the values (nulls as 0).
    """
    keys: list[np.ndarray] = []
    for name in columns:
        s = df.get_column(name)
        if s.dtype == pl.String:
            values = s.drop_nulls().unique().sort()
            s = s.cast(pl.Enum(values.to_list())).to_physical()  # rank among the distinct values
        else:
            s = s.to_physical()
        if not s.dtype.is_integer() or s.dtype == pl.UInt64:
            s = s.cast(pl.Int64)
        if s.null_count():
            keys.append(s.is_not_null().cast(pl.Int64).to_numpy())
            s = s.fill_null(0)
        # Narrower integers are widened by numpy in the copy that gathers the scan's chunks: one pass, not two.
        keys.append(s.to_numpy().astype(np.int64, copy=False))
    return keys


class Declined(Exception):
    """`instrument_code`'s `accept` turned the file's symbols down."""


def instrument_code(
    symbol: pl.Series, ident: pl.Series, accept: Callable[[pl.Series], bool] | None = None
) -> np.ndarray | None:
    """(N,) uint8/uint16 number of each row's (symbol, ident) pair, numbered in their sorted order (symbols as
    `sort_keys` ranks them, then ident): one key with the order and the ties of `combined(sort_keys(...))` of the
    two. None when either column has nulls, ident is not an integer key spanning at most DENSE_SPAN values, or one
    ident carries two symbols: the caller then ranks the strings.

    Ranking millions of symbol strings hashes every row twice (their distinct values, then the cast to an Enum of
    them); a Databento file's integer instrument_id numbers the rows through a table of its span instead, and one
    comparison of each row's symbol with the symbol of its id proves that the ids stand for the pairs.
    `accept`: a test of the symbols of the ids (one each) before that comparison: raises Declined when it fails.
    """
    if symbol.dtype != pl.String or not ident.dtype.is_integer() or symbol.null_count() or ident.null_count():
        return None
    ids = ident.to_numpy()
    if not len(ids):
        return None
    lo = int(ids.min())
    span = int(ids.max()) - lo + 1
    if span > DENSE_SPAN:
        return None
    if span <= RADIX_SPAN:  # (N,) each row's id less the least: as narrow as the span allows
        offset = np.empty(len(ids), dtype=np.uint8 if span <= 256 else np.uint16)
        np.subtract(ids, lo, out=offset, casting="unsafe")
    else:
        offset = ids - lo
    del ids
    index = np.int32 if len(offset) < 2**31 else np.int64  # half the bytes to write where the rows allow
    at = np.full(span, -1, dtype=index)
    at[offset] = np.arange(len(offset), dtype=index)  # (span,) a row of each id present, -1 for the rest
    present = np.flatnonzero(at >= 0)  # (G,) the offsets present, rising
    if len(present) > RADIX_SPAN:
        return None
    pairs = pl.DataFrame({"symbol": symbol.gather(at[present]), "ident": present + lo})  # (G,) one row per id
    if accept is not None and not accept(pairs.get_column("symbol")):
        raise Declined
    by = pairs.with_row_index("i").sort("symbol", "ident").get_column("i").to_numpy()  # (G,) ids in pair order
    code_of = np.zeros(span, dtype=np.uint8 if len(present) <= 256 else np.uint16)  # (span,) offset -> number
    code_of[present[by]] = np.arange(len(present))
    code = code_of[offset]  # (N,)
    del offset
    if not (symbol == pairs.get_column("symbol").gather(by).gather(pl.Series(code))).all():
        return None  # an id with two symbols: separate instruments the ids cannot tell apart
    return code


def combined(keys: list[np.ndarray]) -> list[np.ndarray]:
    """`keys` (most significant first) with all but the last folded into one int64 key of the same order (each key's
    offset from its minimum, in mixed radix), where their ranges allow: a sort by (symbol rank, instrument, ts) is
    then a sort by two keys, with a third less index memory. The same rows compare equal as before. When folded,
    `keys` is left empty: each array is freed once folded in (pass a copy of a list you keep)."""
    if len(keys) < 3 or not len(keys[0]):
        return keys
    bounds = [(int(k.min()), int(k.max()) - int(k.min()) + 1) for k in keys[:-1]]
    if np.prod([float(span) for _, span in bounds]) >= 2.0**62:
        return keys
    last = keys.pop()
    code = np.subtract(keys.pop(0), bounds[0][0], dtype=np.int64)  # (N,) folded in place: no temporary per key
    for lo, span in bounds[1:]:
        code *= span
        code += keys.pop(0)  # may wrap past int64 for a moment: the sum comes back in range, exactly
        code -= lo
    return [code, last]


RADIX_SPAN = 1 << 16  # a leading key of at most this many values is sorted by numpy's O(N) radix sort
DENSE_SPAN = 1 << 21  # a sparse leading key is numbered through a table of this many entries at most


def stable_order(keys: list[np.ndarray]) -> np.ndarray | None:
    """(N,) the stable permutation sorting rows by `keys` (most significant first); None when they are sorted.
    O(N) where `grouped_order` applies (rows read in time order, sorted by an instrument code), else np.lexsort."""
    if not keys or len(keys[0]) < 2 or is_sorted(keys):
        return None
    if len(keys) > 1 and (grouped := grouped_order(keys[0], keys[1:])) is not None:
        return grouped[0]
    return np.lexsort(keys[::-1])


def grouped_order(
    lead: np.ndarray, rest: list[np.ndarray]
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, np.ndarray] | None:
    """The stable order of rows by (lead, *rest) in O(N), for rows whose `rest` keys already rise within each value
    of `lead` (bars read in time order, every instrument interleaved, sorted by an instrument code); None for any
    other rows, or when `lead` is not an integer key of at most RADIX_SPAN distinct values within DENSE_SPAN.

    numpy sorts a key of 16 bits stably by a radix sort (a sparse `lead` is first numbered densely through a table);
    when the `rest` keys then rise within each value, that order is the stable lexicographic one (rows with equal
    keys stay in row order): what `np.lexsort` gives in O(N log N).
    Returns (order (N,), `rest` in that order, values (V,) of `lead` in rising order, counts (V,) rows of each).
    """
    small, values, counts = _dense(lead)
    if small is None:
        return None
    order = np.argsort(small, kind="stable")
    del small
    inner = np.ones(len(lead) - 1, dtype=bool)  # (N - 1,) pairs of sorted rows of one lead value
    inner[np.cumsum(counts)[:-1] - 1] = False
    moved = []
    for k in rest:
        k = k[order]
        if np.any(inner & (k[1:] < k[:-1])):
            return None
        inner &= k[1:] == k[:-1]
        moved.append(k)
    return order, moved, values, counts


def _dense(lead: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """(lead numbered 0, 1, ... in the order of its distinct values, as uint8 or uint16; those values (V,); the rows
    of each (V,)), or (None, empty, empty) when `lead` has more than RADIX_SPAN distinct values or spans more than
    DENSE_SPAN."""
    if len(lead) < 2 or lead.dtype.kind not in "iu":
        return None, lead[:0], lead[:0]
    lo = int(lead.min())
    span = int(lead.max()) - lo + 1
    if span > DENSE_SPAN:
        return None, lead[:0], lead[:0]
    if span <= RADIX_SPAN:
        small = np.empty(len(lead), dtype=np.uint8 if span <= 256 else np.uint16)
        np.subtract(lead, lo, out=small, casting="unsafe")  # (N,) offsets below span, without an int64 temporary
        values = np.arange(lo, lo + span, dtype=np.int64)
        counts = np.bincount(small, minlength=span)  # (span,)
        present = counts > 0
        if present.all():
            return small, values, counts
        table = (np.cumsum(present) - 1).astype(small.dtype)  # (span,) the number of each value present
        return table[small], values[present], counts[present]
    offset = lead - lo  # (N,) int64
    counts = np.bincount(offset, minlength=span)  # (span,)
    present = counts > 0
    if present.sum() > RADIX_SPAN:
        return None, lead[:0], lead[:0]
    table = (np.cumsum(present) - 1).astype(np.uint8 if present.sum() <= 256 else np.uint16)
    return table[offset], np.flatnonzero(present) + lo, counts[present]


def is_sorted(keys: list[np.ndarray]) -> bool:
    """Whether rows are in lexicographic order of `keys` (most significant first): O(N), where a sort is O(N log N)."""
    undecided = np.ones(max(len(keys[0]) - 1, 0), dtype=bool)  # (N - 1,) pairs equal on the keys seen so far
    for k in keys:
        if np.any(undecided & (k[1:] < k[:-1])):
            return False
        undecided &= k[1:] == k[:-1]
    return True


def same_as_next(keys: list[np.ndarray]) -> np.ndarray:
    """(N,) bool: True where a row's keys equal the next row's (the last row: False)."""
    n = len(keys[0])
    same = np.ones(max(n - 1, 0), dtype=bool)
    for k in keys:
        same &= k[1:] == k[:-1]
    return np.append(same, False) if n else np.zeros(0, dtype=bool)


def new_group(keys: list[np.ndarray]) -> np.ndarray:
    """(N,) bool: True on the first row of each run of equal `keys` (rows sorted by them)."""
    n = len(keys[0])
    change = np.zeros(max(n - 1, 0), dtype=bool)
    for k in keys:
        change |= k[1:] != k[:-1]
    return np.concatenate([[True], change]) if n else np.zeros(0, dtype=bool)


def run_starts(df: pl.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    """(N,) bool: True on the first row of each run of equal `columns` (a null equal to a null): what
    `new_group(sort_keys(df, columns))` gives, by comparing each row with the one before it, without ranking strings.
    """
    change = np.zeros(df.height, dtype=bool)
    change[:1] = True
    for name in columns:
        change |= changes(df.get_column(name))
    return change


TAKE_WIDTH = 2  # columns gathered together by take_out: polars gathers them in parallel, one per core


def take_out(df: pl.DataFrame, rows: np.ndarray | pl.Series, columns: list[str] | None = None) -> pl.DataFrame:
    """`df`'s `columns` (all by default) at `rows`, moved out of `df`: gathered TAKE_WIDTH at a time, each dropped from
    `df` in place once gathered, so that the input and its reordered copy never both take memory (the peak is the
    input and TAKE_WIDTH columns). The caller must own `df`: its columns are gone afterwards. `rows` may come as
    `indices(rows)` already.
    Columns in several chunks (a parquet scan's row groups) are first made one chunk, once `df` no longer holds
    them: polars gathers from one chunk several times faster than it resolves every row's chunk, and the copy takes
    the place of the chunks it replaces."""
    taken = rows if isinstance(rows, pl.Series) else indices(rows)
    names = df.columns if columns is None else columns
    parts = []
    for i in range(0, len(names), TAKE_WIDTH):
        group = names[i : i + TAKE_WIDTH]
        part = df.select(group)
        for c in group:
            df.drop_in_place(c)
        if any(s.n_chunks() > 1 for s in part.iter_columns()):
            part = part.rechunk()
        parts.append(part[taken])
        del part
    return pl.concat(parts, how="horizontal") if parts else df.clear()


def gather(df: pl.DataFrame, rows: np.ndarray | None) -> pl.DataFrame:
    """`df`'s rows `rows` (all of them, uncopied, for None)."""
    return df if rows is None else df[indices(rows)]


def indices(rows: np.ndarray) -> pl.Series:
    """`rows` (non-negative) as polars' own index type: converted once, where `df[series]` converts and checks an
    Int64 series on every call. numpy narrows them (polars takes its array as it is): a fifth of polars' cast."""
    idx = pl.get_index_type()
    if idx == pl.UInt32 and len(rows) and int(rows.max()) < 2**32:
        return pl.Series(rows.astype(np.uint32, copy=False))
    return pl.Series(rows, dtype=idx)


def runs_order(major: np.ndarray, minor: np.ndarray) -> np.ndarray | None:
    """The stable permutation sorting rows by (major, minor), like `stable_order`, for rows that come in long runs
    already sorted (bars sorted by symbol and ts, wanted by root and ts): the runs are ordered by their first row
    (a sort of a few hundred runs) and laid end to end, in O(N). Where that does not give the stable order (runs
    that overlap), it falls back to `np.lexsort`. None when the rows are sorted already.
    """
    n = len(major)
    if n < 2:
        return None
    cut = np.flatnonzero((major[1:] != major[:-1]) | (minor[1:] < minor[:-1])) + 1  # (R - 1,) run starts after 0
    if not len(cut):
        return None
    starts = np.concatenate([[0], cut])
    ends = np.append(cut, n) - 1  # (R,) each run's last row
    by = np.lexsort((minor[starts], major[starts]))  # (R,) runs in order of their first row, ties in row order
    # Laid end to end the runs are sorted when each run's first row comes after the previous run's last; strictly,
    # so that rows with equal keys all sit in one run, in row order: then this is the stable order.
    first, last = by[1:], by[:-1]
    if not np.all((major[starts[first]] > major[ends[last]]) | (
        (major[starts[first]] == major[ends[last]]) & (minor[starts[first]] > minor[ends[last]])
    )):
        return np.lexsort((minor, major))
    if np.array_equal(by, np.arange(len(by))):
        return None
    lens = (ends - starts + 1)[by]
    return np.repeat(starts[by] - (np.cumsum(lens) - lens), lens) + np.arange(n)  # (N,) run after run
