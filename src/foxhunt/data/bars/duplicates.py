"""Duplicate bars, told apart: copies of one bar (overlapping downloads) are dropped, bars of one instrument and time
with other values (a stray outdated copy of a file, two vendors) are a conflict the user must hear of.

The loader keeps the last row read of each (instrument, ts) (validate.py's sort). A dropped row that equals the row
kept in every price and the volume (within REL_TOL, so that a CSV and a parquet copy of one bar agree) changes
nothing; one that does not means one of two values was picked by file order. Conflicts are a warning naming the first
(instrument and time, both values, both files and rows), and more than MAX_CONFLICT_FRACTION of the rows stop the run,
as more than 1% bad rows do (bad_rows.MAX_BAD_FRACTION).

The check costs nothing without duplicates and reads only the dropped rows and their kept rows otherwise: the sort
that found them says which row each repeats (`find`), so no group-by over every bar is needed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from foxhunt.data.io.normalise import VALUE_COLS, wanted_columns
from foxhunt.data.util.order import indices
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")
Columns = tuple[str | None, str | None]  # the --timestamp-col and --symbol-col of the read

SHOWN = ("close", "open", "high", "low", "volume")  # the order in which a conflict's differing values are named
REL_TOL = 1e-9  # relative difference up to which two values are one (a price printed and read back)
MAX_CONFLICT_FRACTION = 0.01  # as bad_rows.MAX_BAD_FRACTION: more conflicting rows than this stop the run


@dataclass(frozen=True)
class Duplicates:
    """What the sort's dedup found: rows dropped as duplicates, how many of them hold other values than the row kept,
    and the rows (the read stage's columns) of the first conflicting pair and of the first pair, in sorted order."""

    dropped: int = 0
    conflicting: int = 0
    first_conflict: tuple[dict, dict] | None = None  # (dropped row, kept row)
    first: tuple[dict, dict] | None = None

    @staticmethod
    def merge(parts: list[Duplicates]) -> Duplicates:
        """The Duplicates of pieces of one panel together: counts summed, the first pair of each kind the earliest
        read (by the dropped row's file_idx and row, file_idx counted over the panel's files)."""
        def first(pairs: list[tuple[dict, dict] | None]) -> tuple[dict, dict] | None:
            return min((p for p in pairs if p is not None), key=lambda p: (p[0]["file_idx"], p[0]["row"]),
                       default=None)

        return Duplicates(sum(p.dropped for p in parts), sum(p.conflicting for p in parts),
                          first([p.first_conflict for p in parts]), first([p.first for p in parts]))

    def over(self, rows: int) -> bool:
        return self.conflicting > MAX_CONFLICT_FRACTION * rows


def find(df: pl.DataFrame, order: np.ndarray | None, keep: np.ndarray) -> Duplicates:
    """The Duplicates of `df`'s rows whose sorted order is `order` (N,) (None: they are sorted) and whose kept rows
    are `keep` (N,) in that order (the last of each run of one instrument and ts). Read before `df` is consumed."""
    dropped = int(len(keep) - np.count_nonzero(keep))
    if dropped == 0:
        return Duplicates()
    kept_at = np.flatnonzero(keep)  # (M,) sorted positions kept
    gone = np.flatnonzero(~keep)  # (K,) sorted positions dropped
    partner = kept_at[np.searchsorted(kept_at, gone)]  # (K,) the kept row of each one's run: the run's last
    del kept_at
    if order is not None:
        gone, partner = order[gone], order[partner]  # (K,) rows of df
    a_rows, b_rows = indices(gone), indices(partner)
    differ = np.zeros(len(gone), dtype=bool)  # (K,)
    for c in VALUE_COLS:  # a column at a time: two gathers of the dropped rows' count, not of the frame
        col = df.get_column(c)
        a, b = col.gather(a_rows).to_numpy(), col.gather(b_rows).to_numpy()
        ne = np.flatnonzero(a != b)  # (J,) exact copies (the usual duplicate) need no more
        a, b = a[ne], b[ne]
        differ[ne[np.abs(a - b) > REL_TOL * np.maximum(np.abs(a), np.abs(b))]] = True
    conflicting = int(np.count_nonzero(differ))
    at = int(np.argmax(differ)) if conflicting else None
    pair = (df.row(int(gone[0]), named=True), df.row(int(partner[0]), named=True))
    first = None if at is None else (df.row(int(gone[at]), named=True), df.row(int(partner[at]), named=True))
    return Duplicates(dropped, conflicting, first, pair)


def tell(found: Duplicates, rows: int, files: list[str], out_of_order: int, columns: Columns = (None, None)) -> None:
    """Stop on more conflicting rows than MAX_CONFLICT_FRACTION of `rows` (the rows read), warn of fewer, and say in an
    info line what was dropped and sorted. `files`: the read stage's paths, by file_idx; `columns`: the
    --timestamp-col and --symbol-col they were read with."""
    if found.over(rows):
        dropped, kept = found.first_conflict  # type: ignore[misc]
        raise InputError(
            f"{_place(dropped, files)}: {found.conflicting} of {rows} rows ({100 * found.conflicting / rows:.1f}%) repeat"
            f" a bar of the same symbol and time with other values, more than the 1% kept with a warning; the first:"
            f" {conflict_text(found, files)}; {_symbol_hint(found, files, columns)}remove the stray or outdated copy of the"
            " file, or pass files that do not overlap"
        )
    if found.conflicting:
        log.warning("kept the last read of %d duplicate bars whose values differ from another bar of the same symbol"
                    " and time; the first: %s; %scheck for a stray or outdated copy of a file", found.conflicting,
                    conflict_text(found, files), _symbol_hint(found, files, columns))
    if found.dropped or out_of_order:
        where = "" if found.first is None else f" ({_files(found.first, files)})"
        log.info("dropped %d duplicate rows%s; sorted %d rows that were out of order", found.dropped, where,
                 out_of_order)


def conflict_text(found: Duplicates, files: list[str]) -> str:
    """'ES at 2024-03-08T14:30:00+00:00 has close 101.5 in a.parquet data row 3 and 102.0 in b.parquet data row 1
    (kept; open differs too)': the first conflict, by its close where that differs."""
    dropped, kept = found.first_conflict  # type: ignore[misc]
    cols = [c for c in SHOWN if abs(dropped[c] - kept[c]) > REL_TOL * max(abs(dropped[c]), abs(kept[c]))]
    also = f"; {', '.join(cols[1:])} {'differs' if len(cols) == 2 else 'differ'} too" if len(cols) > 1 else ""
    ts = dropped["ts"].isoformat() if dropped["ts"] is not None else "?"
    return (f"{dropped['symbol']} at {ts} has {cols[0]} {dropped[cols[0]]!r} in {_place(dropped, files)} and"
            f" {kept[cols[0]]!r} in {_place(kept, files)} (kept{also})")


def _symbol_hint(found: Duplicates, files: list[str], columns: Columns) -> str:
    """'column 'Market', which is not read, tells them apart (ESH4 and ESM4): pass --symbol-col Market if it names
    each bar's instrument; else ' for the first conflicting pair, or '' where no such column does.

    Bars that repeat with other values are most often two instruments read as one: a file whose symbol column has
    a name the reader does not know (a front-month export's `Market`) reads as one series. A text column (not a
    number) the reader left (normalise.wanted_columns, under the run's --timestamp-col and --symbol-col), whose
    values differ between the pair, is that column. Only two rows are read."""
    dropped, kept = found.first_conflict  # type: ignore[misc]
    a, b = (_file_row(files[r["file_idx"]], r["row"]) for r in (dropped, kept))
    if a is None or b is None:
        return ""
    names = list(a)
    try:
        read = set(wanted_columns(names, Path(files[dropped["file_idx"]]), *columns))
    except InputError:  # the file was read, so its columns are found; a hint only, should that ever change
        return ""
    for c in names:
        va, vb = a.get(c), b.get(c)
        if c in read or c not in b or not isinstance(va, str) or not isinstance(vb, str) or va.strip() == vb.strip():
            continue
        if _number(va) or _number(vb):
            continue
        return (f"column {c!r}, which is not read, tells them apart ({va.strip()} and {vb.strip()}): pass"
                f" --symbol-col {c} if it names each bar's instrument; else ")
    return ""


def _file_row(path: str, row: int) -> dict | None:
    """Data row `row` (0-based) of a parquet or CSV file with every column (a CSV's as text); None for another file
    or one that cannot be read."""
    name = path.lower()
    try:
        if name.endswith((".parquet", ".pq")):
            frame = pl.scan_parquet(path).slice(row, 1).collect()
        elif name.endswith(".csv"):
            frame = pl.read_csv(path, skip_rows_after_header=row, n_rows=1, infer_schema=False)
        else:
            return None
    except Exception:  # a hint only: the message stands without it
        return None
    return frame.row(0, named=True) if frame.height else None


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _place(r: dict, files: list[str]) -> str:
    return f"{files[r['file_idx']]} data row {r['row'] + 1}"


def _files(pair: tuple[dict, dict], files: list[str]) -> str:
    """The files of a pair of rows: one, or both when they differ."""
    a, b = (files[r["file_idx"]] for r in pair)
    return f"the first in {a}" if a == b else f"the first in {a} and {b}"
