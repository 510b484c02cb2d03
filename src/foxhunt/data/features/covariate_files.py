"""User inputs read from files: `--covariates` tables (a VIX close, a rate, an event flag) and extra columns of the bar
files themselves, each as one `CovariateTable` that covariates.py joins to the bars as of each bar's time.

A covariate file (parquet or CSV; a file, directory or glob, as for the bars) has a time column (the bar reader's
names: ts_event, timestamp, datetime, date, time) and optionally a symbol column (symbol, ticker, contract, ...) or a
`root` column; every other column is a value: numbers (Float64; text whose every cell is a number, as any CSV
column is, reads as numbers) or, where a column is not numbers, text (Utf8: a categorical input). Only a
column in `real` (a saved model's real inputs) must be numbers: a text one stops with the file, column and row. Times are read exactly as the bar reader reads
them (normalise.parse_time): naive times are wall-clock time in `timezone` (UTC when None), aware ones are converted to
UTC, integers are epoch counts, text is ISO 8601 or read by `date_format` (--date-format; data/io/times.py).

A date-only file ("2024-03-01") is stamped at midnight of each date (UTC by default; in `timezone` when one is given,
as for any naive time; a parquet Date column or YYYYMMDD integers always in UTC, as the bar reader reads them), so a
day's value is used from that midnight on: a daily close stamped with its own date would reach bars of that day that traded before the close. The
as-of join cannot guess when a value was published; stamp each row with the time it was known (a close at 16:00
New York, a rate at its release), or with the next day's date.

Within one key (or the whole file, without a symbol column) times must increase: a file out of order or with a repeated
time stops with an error naming the row, rather than the join silently taking one of two values. An empty cell reads as
NaN, like a "NaN" cell: a null in a table is left to mean "no row at or before the bar" (covariates.py), which the
caller reports apart from non-finite values.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from foxhunt.data.bars.symbols import resolve_symbols
from foxhunt.data.io.discover import Source, expand_paths, expand_sources
from foxhunt.data.io.normalise import (
    PRICE_COLS,
    TIME_CANDIDATES,
    find_columns,
    match_column,
    numeric,
    parse_time,
    symbol_column,
)
from foxhunt.data.io.partitions import hive_keys
from foxhunt.data.io.read import hive_symbol_key
from foxhunt.data.io.scan import read_error
from foxhunt.data.util.listing import listing
from foxhunt.errors import InputError

KEY_COLUMNS = ("root",)  # besides the bar reader's symbol names: a table for every contract of a futures root
RESERVED = ("ts", "key")  # the table's own column names
WHAT = "an --observed or --known input"  # "... must be numeric"


@dataclass(frozen=True)
class BarColumnRead:
    """What a read of the bar files' own columns asks for: the columns (`real`: those that must be numbers), and
    how each file's time and symbol are found and its times read, as the bar reader reads them (the run's
    --timestamp-col, --symbol-col, --timezone and --date-format)."""

    columns: tuple[str, ...]
    timestamp_col: str | None = None
    symbol_col: str | None = None
    timezone: str | None = None
    real: Collection[str] = ()
    date_format: str | None = None


@dataclass(frozen=True)
class CovariateTable:
    """One source of user inputs, ready for the as-of join: what one `--covariates` flag names, or the bar files'
    extra columns. Frozen: the join and the reports read it, nothing changes it after the checks in the readers."""

    source: str  # what the user named, for messages
    # "ts" Datetime("ns","UTC"), "key" Utf8 when keyed, then value columns (Float64, or Utf8 text); sorted by (key, ts)
    frame: pl.DataFrame
    keyed: bool  # True when the file had a symbol/root column (frame has "key")
    held: Held | None = None  # a table whose rows the pieces of a prepare hold (`frame` empty): what is known of them

    @property
    def columns(self) -> tuple[str, ...]:
        """The value columns, in the file's order: the names --observed / --known may use."""
        return tuple(c for c in self.frame.columns if c not in RESERVED)


@dataclass(frozen=True)
class TextCells:
    """What static.kinds judges a text column by: its cells that read as numbers, its non-empty cells, and (not a
    text cell, key, time, value) of its first text cell in the table's (key, ts) order (of its first cell where no
    cell is text)."""

    numbers: int
    given: int
    first: tuple | None  # None: no cell


@dataclass(frozen=True)
class Held:
    """The facts the `prepare` process reads of a table whose rows stay in the pieces (the bar files' own columns in
    a pieced prepare), each piece's (`held`) merged (`merged`): its rows, least and greatest time (ns; for
    `coverage`) and each text column's TextCells."""

    rows: int
    first: int
    last: int
    text: dict[str, TextCells]


def extent(table: CovariateTable) -> tuple[int, int, int]:
    """(rows, least time, greatest time) of `table`, times in ns UTC."""
    if table.held is not None:
        return table.held.rows, table.held.first, table.held.last
    ts = table.frame.get_column("ts").cast(pl.Datetime("ns", "UTC")).to_physical()
    return table.frame.height, int(ts.min()), int(ts.max())


def text_cells(table: CovariateTable, c: str) -> TextCells:
    """The TextCells of the text column `c` of `table`."""
    if table.held is not None:
        return table.held.text[c]
    frame = table.frame
    text = frame.get_column(c).cast(pl.Utf8)
    number = text.str.strip_chars().cast(pl.Float64, strict=False).is_not_null()  # (R,)
    given = text.is_not_null()
    bad = given & ~number
    at = int(bad.arg_max()) if frame.height else None
    first = None if at is None else (not bad[at], frame["key"][at] if table.keyed else "", frame["ts"][at], text[at])
    return TextCells(int(number.sum()), int(given.sum()), first)


def held(table: CovariateTable) -> Held:
    """The Held facts of `table` (a piece's share of a table)."""
    rows, first, last = extent(table) if table.frame.height else (0, 0, 0)
    return Held(rows, first, last, {c: text_cells(table, c) for c in table.columns if table.frame.schema[c] == pl.Utf8})


def merged(parts: Sequence[Held]) -> Held:
    """The Held facts of a table from those of its pieces (tables of distinct keys)."""
    parts = [h for h in parts if h.rows]
    text = {c: TextCells(sum(h.text[c].numbers for h in parts), sum(h.text[c].given for h in parts),
                         min((h.text[c].first for h in parts if h.text[c].first is not None), default=None))
            for c in (parts[0].text if parts else {})}
    return Held(sum(h.rows for h in parts), min((h.first for h in parts), default=0),
                max((h.last for h in parts), default=0), text)


def read_covariates(
    paths: Sequence[str], timestamp_col: str | None = None, timezone: str | None = None,
    real: Collection[str] = (), date_format: str | None = None,
) -> CovariateTable:
    """Every file `paths` names (one --covariates flag) as one table: the files are concatenated in path order and
    must all have the same columns. `real`: the columns that must be numbers. Raises InputError for anything the
    user can fix (see the module docstring)."""
    files = [p for p, _ in expand_paths(paths)]
    parts = unified([_read_covariate_file(p, timestamp_col, timezone, real, date_format) for p in files])
    first, layout = files[0], parts[0].columns[1:]  # after "row": ts, key when keyed, the values
    for path, part in zip(files[1:], parts[1:], strict=True):
        if part.columns[1:] != layout:
            raise InputError(
                f"{path}: columns {', '.join(part.columns[2:])} differ from {first}'s {', '.join(layout[1:])}; every"
                " file of one --covariates source needs the same columns (and a symbol column in all or none)"
            )
    frame = pl.concat(
        [p.with_columns(pl.lit(i, pl.UInt32).alias("file_idx")) for i, p in enumerate(parts)], how="vertical"
    )
    keyed = "key" in layout
    _check_order(frame, files, keyed)
    frame = frame.drop("file_idx", "row")
    if keyed:
        frame = frame.sort("key", "ts", maintain_order=True)
    return CovariateTable(", ".join(paths), frame, keyed)


def read_bar_columns(
    paths: Sequence[str],
    columns: Sequence[str],
    timestamp_col: str | None = None,
    symbol_col: str | None = None,
    timezone: str | None = None,
    price_scale: float = 1.0,
    real: Collection[str] = (),
    date_format: str | None = None,
) -> CovariateTable:
    """(time, symbol, `columns`) of the bar files, keyed by each bar's raw symbol: the loaded bars' `contract`.

    The time and symbol columns are found as the bar reader finds them (normalise.find_columns, hive `symbol=`
    folders, the file name for files without a symbol); symbols missing beside an instrument_id are filled as the
    loader fills them (bars/symbols.resolve_symbols). A column is numbers or text as in read_covariates (those in
    `real` must be numbers). A column asked for matches up to case, as the bar reader's
    columns do, and comes out under the name asked for. Rows are sorted by (symbol, ts) and a repeated time keeps
    the last row read, as the loader treats duplicate bars. open/high/low/close come out as the bars' prices:
    fixed-point Databento prices decoded and divided by `price_scale`. Empty cells are NaN, as in read_covariates.
    DBN files carry no extra columns: an error.
    """
    frames = bar_parts(expand_sources(paths), columns, timestamp_col, symbol_col, timezone, real, date_format)
    return bar_table(frames, columns, price_scale, ", ".join(paths))


def bar_parts(sources: Sequence[Source], columns: Sequence[str], timestamp_col: str | None = None,
              symbol_col: str | None = None, timezone: str | None = None, real: Collection[str] = (),
              date_format: str | None = None) -> list[pl.DataFrame]:
    """The files of `sources` (expand_sources') read one at a time into the parts `bar_table` makes one table of:
    (ts, symbol, instrument_id, `columns`) each, in file order. A pieced prepare reads its chunks of files so."""
    read = BarColumnRead(tuple(columns), timestamp_col, symbol_col, timezone, real, date_format)
    frames = []
    for source in sources:
        for path in source.files:
            hive = hive_keys(path, source.root) if source.root is not None else {}
            frames.append(_read_bar_file(path, source.default_name, hive, read))
    return frames


def frame_bar_columns(
    frame: pl.DataFrame, name: str, columns: Sequence[str], timestamp_col: str | None = None,
    symbol_col: str | None = None, timezone: str | None = None, price_scale: float = 1.0, real: Collection[str] = (),
    date_format: str | None = None,
) -> CovariateTable:
    """`read_bar_columns` of bars in memory (`Forecaster.predict` on a frame): the frame's columns, found as a
    file's are; `name` stands for the path in messages and names the series of a frame without a symbol column."""
    read = BarColumnRead(tuple(columns), timestamp_col, symbol_col, timezone, real, date_format)
    part = _bar_columns_of(frame, frame.columns, Path(name), name, {}, read)
    return bar_table([part], columns, price_scale, name)


def bar_table(frames: list[pl.DataFrame], columns: Sequence[str], price_scale: float, source: str) -> CovariateTable:
    """The bar files' parts (`bar_parts`) as one table keyed by raw symbol (see read_bar_columns)."""
    frame = pl.concat(unified(frames), how="vertical")
    if frame.get_column("symbol").null_count():
        frame, _ = resolve_symbols(frame)
    if price_scale != 1.0:
        frame = frame.with_columns(pl.col(c) / price_scale for c in columns if c.lower() in PRICE_COLS)
    frame = (
        frame.select(pl.col("ts"), pl.col("symbol").alias("key"),
                     *(pl.col(c).fill_null(np.nan) if frame.schema[c] == pl.Float64 else pl.col(c) for c in columns))
        .sort("key", "ts", maintain_order=True)
        .unique(["key", "ts"], keep="last", maintain_order=True)
    )
    return CovariateTable(source, frame, keyed=True)


def _read_covariate_file(path: Path, timestamp_col: str | None, timezone: str | None,
                         real: Collection[str], date_format: str | None = None) -> pl.DataFrame:
    """One covariate file -> row UInt32, ts, key (when it has one), value columns Float64 (or Utf8 text)."""
    frame = _read_whole(path, None)
    names = frame.columns
    time_col = _time_column(names, path, timestamp_col)
    joined = time_col.lower() == "date" and timestamp_col is None and match_column(names, "time") is not None
    ts, _ = parse_time(frame, time_col, names, path, timestamp_col is None, timezone or "UTC", date_format)
    key_col = symbol_column(names) or next((m for c in KEY_COLUMNS if (m := match_column(names, c))), None)
    used = {time_col, key_col, match_column(names, "time") if joined else None, "__index_level_0__"}
    values = [c for c in names if c not in used]
    if not values:
        raise InputError(f"{path}: no value columns besides the time and symbol columns; add the columns to use")
    for c in values:
        if c in RESERVED:
            raise InputError(f"{path}: column {c!r} clashes with a name foxhunt uses for the table; rename it")
    databento = match_column(names, "rtype") is not None and match_column(names, "instrument_id") is not None
    out = [pl.Series("row", np.arange(frame.height, dtype=np.uint32)), ts.alias("ts")]
    if key_col is not None:
        out.append(_keys(frame.get_column(key_col), path, key_col))
    for c in values:
        fixed = databento and c.lower() in PRICE_COLS
        out.append(_values(frame.get_column(c), path, c, fixed, c in real).alias(c))
    return pl.DataFrame(out)


def _read_bar_file(path: Path, default_name: str, hive: dict[str, str], read: BarColumnRead) -> pl.DataFrame:
    """One bar file -> ts, symbol (null only where an instrument_id may name it), instrument_id Int64, `read.columns`."""
    if path.name.lower().endswith((".dbn", ".dbn.zst")):
        raise InputError(
            f"{path}: a DBN file holds only the OHLCV fields, so it has no column {', '.join(read.columns)}; convert the bars to"
            " parquet with that column, or give the values in a --covariates file"
        )
    names = _names(path)
    return _bar_columns_of(None, names, path, default_name, hive, read)


def _bar_columns_of(whole: pl.DataFrame | None, names: list[str], path: Path, default_name: str,
                    hive: dict[str, str], read: BarColumnRead) -> pl.DataFrame:
    """`_read_bar_file` of a file with columns `names` (read here; `whole`: the frame itself, for bars in
    memory)."""
    timestamp_col, symbol_col = read.timestamp_col, read.symbol_col
    own_symbol = match_column(names, symbol_col) if symbol_col is not None else symbol_column(names)
    hive_symbol = hive_symbol_key(hive, symbol_col) if own_symbol is None else None
    found = find_columns(names + ([hive_symbol] if hive_symbol else []), path, timestamp_col, symbol_col)
    shown = listing(names, 12)
    wanted = {}
    for c in read.columns:
        match = match_column(names, c)
        if match is None:
            raise InputError(
                f"{path}: no column {c!r} for an input; found columns: {shown}; check the name, or give the values"
                " in a --covariates file"
            )
        wanted[c] = match
    extra = [found["symbol"] if own_symbol else None, found["instrument_id"], found["rtype"]]
    if found["time"].lower() == "date" and timestamp_col is None and match_column(names, "time") is not None:
        extra.append(match_column(names, "time"))
    keep = list(dict.fromkeys(c for c in [found["time"], *extra, *wanted.values()] if c))
    frame = _read_whole(path, keep) if whole is None else whole.select(keep)
    name = hive.get(hive_symbol, default_name) if hive_symbol else default_name  # the series of a file without symbols
    key = found["symbol"] if own_symbol is not None else found["instrument_id"]
    # dated as the bar reader dates the bars (normalise.normalise), so that each bar finds its own row
    series = frame.get_column(key).cast(pl.Utf8) if key is not None else name
    ts, _ = parse_time(frame, found["time"], frame.columns, path, timestamp_col is None, read.timezone or "UTC",
                       read.date_format, series)
    if own_symbol is not None:
        symbol = frame.get_column(found["symbol"]).cast(pl.Utf8).str.strip_chars()
        symbol = symbol.set(symbol == "", None)
    else:
        symbol = pl.Series([name] * frame.height)
    databento = found["rtype"] is not None and found["instrument_id"] is not None
    ident = (
        frame.get_column(found["instrument_id"]).cast(pl.Int64, strict=False)
        if found["instrument_id"] is not None
        else pl.Series([None] * frame.height, dtype=pl.Int64)
    )
    if symbol.null_count() and found["instrument_id"] is None:
        i = int(symbol.is_null().arg_max())
        raise InputError(f"{path}: column {found['symbol']!r} row {i + 1} is empty; give every row a symbol")
    out = [ts.alias("ts"), symbol.cast(pl.Utf8).alias("symbol"), ident.alias("instrument_id")]
    for c, src in wanted.items():
        fixed = databento and src.lower() in PRICE_COLS
        out.append(_values(frame.get_column(src), path, src, fixed, c in read.real).alias(c))
    return pl.DataFrame(out)


def _values(s: pl.Series, path: Path, col: str, fixed_point: bool, real: bool) -> pl.Series:
    """A value column as numbers (Float64, empty cells NaN), or as text (Utf8, stripped, empty cells null) where it
    is not numbers and `real` is False; InputError naming the file, column and row where a real one is not."""
    try:
        return numeric(s, path, col, fixed_point=fixed_point, what=WHAT).fill_null(np.nan)
    except InputError:
        if real:
            raise
    try:
        text = s.cast(pl.Utf8).str.strip_chars()
    except pl.exceptions.PolarsError:
        raise InputError(f"{path}: column {col!r} has type {s.dtype}, neither numbers nor text; convert it or leave "
                         "it out of the file") from None
    return text.set(text == "", None)


def unified(parts: list[pl.DataFrame]) -> list[pl.DataFrame]:
    """`parts` with a column that is text in one of them text in all (numbers written as text), so that they
    concatenate: a column of numbers in one file and of words in another is a text column."""
    text = {c for p in parts for c, t in p.schema.items() if t == pl.Utf8 and c not in ("key", "symbol")}
    if not text:
        return parts
    return [p.with_columns(pl.col(c).cast(pl.Utf8) for c in text if c in p.columns and p.schema[c] != pl.Utf8)
            for p in parts]


def _names(path: Path) -> list[str]:
    try:
        if path.name.lower().endswith(".csv"):
            return pl.read_csv(path, n_rows=0).columns
        return list(pl.read_parquet_schema(path))
    except Exception as e:  # polars raises several types for truncated or foreign files
        raise read_error(path, e) from None


def _read_whole(path: Path, columns: list[str] | None) -> pl.DataFrame:
    """`columns` of one parquet or CSV file (None: all); CSV cells as text, so that a bad cell is named by its row."""
    if path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty (0 bytes); re-export or remove it")
    name = path.name.lower()
    if name.endswith((".dbn", ".dbn.zst")):
        raise InputError(f"{path}: covariates are read from parquet or CSV; convert the DBN file with to_parquet()")
    try:
        if name.endswith(".csv"):
            frame = pl.read_csv(path, columns=columns, infer_schema=False)
        else:
            frame = pl.read_parquet(path, columns=columns)
    except Exception as e:
        raise read_error(path, e) from None
    if frame.height == 0:
        raise InputError(f"{path}: the file has no rows; re-export it or leave it out")
    return frame


def _time_column(names: list[str], path: Path, timestamp_col: str | None) -> str:
    """The time column: the one `timestamp_col` names, else the bar reader's candidates (or pandas' unnamed index)."""
    shown = listing(names, 12)
    if timestamp_col is not None:
        found = match_column(names, timestamp_col)
        if found is None:
            raise InputError(f"{path}: no column {timestamp_col!r} (the time column asked for); found columns: {shown}")
        return found
    found = next((m for c in TIME_CANDIDATES if (m := match_column(names, c)) is not None), None)
    if found is None and "__index_level_0__" in names:
        found = "__index_level_0__"  # pandas wrote an unnamed DatetimeIndex
    if found is None:
        raise InputError(
            f"{path}: no time column (looked for {', '.join(TIME_CANDIDATES)}); found columns: {shown};"
            " rename the time column to one of these"
        )
    return found


def _keys(s: pl.Series, path: Path, col: str) -> pl.Series:
    keys = s.cast(pl.Utf8).str.strip_chars()
    empty = keys.is_null() | (keys == "")
    if empty.any():
        i = int(empty.arg_max())
        raise InputError(f"{path}: column {col!r} row {i + 1} is empty; give every row a symbol")
    return keys.alias("key")


def _check_order(frame: pl.DataFrame, files: list[Path], keyed: bool) -> None:
    """Times strictly increasing within each key, in file order; the first row that breaks it is named."""
    over = (lambda e: e.over("key")) if keyed else (lambda e: e)
    checked = frame.select(
        over(pl.col("ts").shift(1)).alias("prev_ts"),
        over(pl.col("file_idx").shift(1)).alias("prev_file"),
        over(pl.col("row").shift(1)).alias("prev_row"),
    )
    bad = (frame.get_column("ts") <= checked.get_column("prev_ts")).fill_null(False)
    if not bad.any():
        return
    i = int(bad.arg_max())
    row, prev = frame.row(i, named=True), checked.row(i, named=True)
    where = f"{files[row['file_idx']]}: row {row['row'] + 1}"
    other = f"row {prev['prev_row'] + 1}" + ("" if prev["prev_file"] == row["file_idx"] else f" of {files[prev['prev_file']]}")
    whose = f" for {row['key']}" if keyed else ""
    t, t0 = iso(row["ts"]), iso(prev["prev_ts"])
    if row["ts"] == prev["prev_ts"]:
        raise InputError(f"{where}: time {t}{whose} repeats ({other} has it too); remove the duplicate")
    raise InputError(f"{where}: time {t}{whose} comes before {t0} ({other}); sort the file by time")


def iso(t) -> str:
    """A UTC time (datetime or int ns) as ISO 8601 with a Z ('2024-03-01T14:30:00Z'; fractions only when it has them)."""
    ns = t if isinstance(t, (int, np.integer)) else pl.Series([t]).cast(pl.Datetime("ns", "UTC")).to_physical()[0]
    unit = "s" if int(ns) % 1_000_000_000 == 0 else "ns"
    return str(np.datetime64(int(ns), "ns").astype(f"datetime64[{unit}]")) + "Z"
