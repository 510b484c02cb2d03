"""Read the bar files the paths name (discover.py) into one raw polars frame of the normalised columns
(normalise.py), in scans of consecutive parquet files, within `since` / `until`.

Consecutive parquet files of a directory or glob whose times are written alike (naive, or in one zone) are read by one
lazy polars scan (scan.py) per SCAN_BYTES of files:
only the needed columns are decoded, and with `since` / `until` only the row groups and hive `date=` partitions
that can hold bars in range. CSV and DBN files are read one by one.

All files must hold bars of one size: Databento files are compared by `rtype`, others by their median bar spacing,
and a mix (1-minute and daily files, whose daily bars would otherwise replace the midnight minute bars as
"duplicates") stops with an error naming both files.
Naive files beside files with a zone stop unless --timezone says where the naive ones were written, and naive
intraday files that keep a stock market's local hours get a warning naming the zone (zones.py).

All work is columnar.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from foxhunt.data.io.discover import Source, expand_sources, is_parquet
from foxhunt.data.io.normalise import (
    PRICE_COLS,
    RAW_SCHEMA,
    SYMBOL_CANDIDATES,
    VALUE_COLS,
    find_columns,
    match_column,
    normalise,
    read_file,
    symbol_column,
    wanted_columns,
)
from foxhunt.data.io.partitions import TimeBounds, hive_keys, partition_day
from foxhunt.data.io.scan import align_chunks, read_error, scan_files
from foxhunt.data.io.zones import check_zones, warn_local_hours
from foxhunt.errors import InputError

if TYPE_CHECKING:
    from foxhunt.data.config import DataConfig

RTYPE_NAMES = {32: "ohlcv-1s", 33: "ohlcv-1m", 34: "ohlcv-1h", 35: "ohlcv-1d", 36: "ohlcv-eod"}
# Parquet bytes on disk read by one scan: a scan's decoding buffers come on top of its output, so a directory is read
# in scans of this size (a few hundred daily files) and only the frames they leave add up.
SCAN_BYTES = 16 * 2**20
SAME_SPACING = 4.0  # median spacings within this factor are one bar size (1m beside a sparse contract's 3m)


@dataclass(frozen=True)
class FileFormat:
    """How the bar files are written: their time and symbol columns (None: detected), the zone of naive times
    (None: UTC) and how text times are written (None: ISO 8601; times.py). A run's --timestamp-col, --symbol-col,
    --timezone and --date-format (`of`)."""

    timestamp_col: str | None = None
    symbol_col: str | None = None
    timezone: str | None = None
    date_format: str | None = None

    @staticmethod
    def of(cfg: DataConfig) -> FileFormat:
        return FileFormat(cfg.timestamp_col, cfg.symbol_col, cfg.timezone, cfg.date_format)


def read_bars(
    paths: Sequence[str],
    fmt: FileFormat | None = None,
    price_scale: float = 1.0,
    *,
    since: str | None = None,
    until: str | None = None,
    symbols: Sequence[str] | None = None,
    sources: Sequence[Source] | None = None,
) -> tuple[pl.DataFrame, list[dict]]:
    """Read every file named by `paths` (files, directories or globs) as one raw frame.

    `symbols`: keep only the bars whose symbol column holds one of these values (pushed into the parquet scan;
    prepare/plan.py reads a panel series group by series group this way); None keeps all.
    `sources`: the files to read, as `expand_sources(paths)` lists them, when the caller has them (file_idx counts
    the files read): prepare/read_stage.py reads a panel once, in chunks of consecutive files, passing each chunk's files
    this way rather than walking a folder of thousands of daily files again for each chunk.

    `fmt`: how the files are written (FileFormat; None: every column detected, naive times UTC, text times ISO 8601);
    `price_scale` divides every price (100: cents to dollars).
    `since` / `until` (ISO dates or times, UTC when naive) keep the bars with since <= ts < until: hive partitions
    dated outside them are never opened, and parquet row groups outside them are never decoded.
    Returns (frame with RAW_SCHEMA columns, files [{path, size_bytes, rows, timestamps}]) for every file opened, where
    rows counts the rows kept and timestamps is "naive", "aware", "epoch" or "date": how the file wrote its times.
    Raises InputError for anything a user can fix: a missing or unreadable file, a missing column, text where numbers
    belong, unparseable timestamps, mixed bar sizes, bounds that leave no bar.
    """
    fmt = FileFormat() if fmt is None else fmt
    bounds = TimeBounds.parse(since, until)
    frames, files, rtypes, spacings = [], [], [], []
    for source in expand_sources(paths) if sources is None else sources:
        for run in _runs(source, bounds):
            frame, entries = _read_run(run, source, bounds, fmt, symbols)
            run_rtypes = rtype_sets(frame, len(run))  # bar sizes are measured per run, while the run is small
            rtypes += run_rtypes
            spacings += median_spacings(frame, len(run)) if not all(run_rtypes) else [None] * len(run)
            if files:
                frame = frame.with_columns(pl.col("file_idx") + len(files))
            frames.append(frame.select(list(RAW_SCHEMA)))
            files += entries
    if not files:
        raise InputError(f"{paths[0]}: no partition lies within {_bounds_text(since, until)}; widen the range")
    raw = frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical")  # appends chunks, copies nothing
    del frames
    if price_scale != 1.0:
        raw = raw.with_columns(pl.col(c) / price_scale for c in PRICE_COLS)
    if raw.height == 0:
        raise InputError(f"{files[0]['path']}: no bar lies within {_bounds_text(since, until)}; widen the range")
    if not all(rtypes) and None in spacings:  # Databento files beside generic ones: compare spacings of all
        spacings = median_spacings(raw, len(files))
    spacings = [s or 0 for s in spacings]
    check_bar_sizes(rtypes, spacings, [f["path"] for f in files])
    check_zones(files, fmt.timezone)
    warn_local_hours(raw, files, spacings, fmt.timezone)
    return raw, files


def _runs(source: Source, bounds: TimeBounds) -> list[list[Path]]:
    """`source`'s files left after partition pruning, in order, as runs that are read together: consecutive parquet
    files whose times are written alike (`_time_zones`) make one run (one scan), any other file is a run of its own.
    A folder then reads each file's times by its own zone, exactly as the same files named one by one."""
    runs: list[list[Path]] = []
    run_bytes, run_zones = 0, None
    for path in source.files:
        if bounds.active and source.root is not None:
            day = partition_day(hive_keys(path, source.root))
            if day is not None and not bounds.keeps_day(day):
                continue  # never opened
        size = path.stat().st_size
        zones = _time_zones(path) if is_parquet(path) else None
        if (is_parquet(path) and runs and is_parquet(runs[-1][-1]) and run_bytes + size <= SCAN_BYTES
                and zones == run_zones):
            runs[-1].append(path)
            run_bytes += size
        else:
            runs.append([path])
            run_bytes, run_zones = size, zones
    return runs


def _time_zones(path: Path) -> tuple[tuple[str, str | None], ...] | None:
    """A parquet file's datetime columns with their zones (None: naive), from its footer; None where polars cannot
    read the footer (the read names the file). One scan over several files takes the first file's types for all,
    and polars reads naive times as the first file's UTC (or UTC ones as naive) without a word: a naive file in a
    folder of aware ones would lose its own zone, and with it --timezone and the check that refuses the mix."""
    try:
        schema = pl.read_parquet_schema(path)
    except Exception:  # polars raises several types for truncated or foreign files
        return None
    return tuple((name, t.time_zone) for name, t in schema.items() if isinstance(t, pl.Datetime))


def _read_run(
    run: list[Path], source: Source, bounds: TimeBounds, fmt: FileFormat, symbols: Sequence[str] | None = None,
) -> tuple[pl.DataFrame, list[dict]]:
    """One run as normalised columns with file_idx (within the run) and row; its entries of read_bars' file list."""
    if is_parquet(run[0]):
        frame, kinds, counts = _read_parquet_run(run, source, bounds, fmt, symbols)
    else:
        path = run[0]
        frame, kind = read_file(path, source.default_name, fmt.timestamp_col, fmt.symbol_col, fmt.timezone,
                                fmt.date_format)
        kinds = [kind]
        frame = frame.with_columns(pl.lit(0, dtype=pl.UInt32).alias("file_idx"), _rows())
        if bounds.active:
            frame = frame.filter(bounds.mask())
        if symbols is not None:
            frame = frame.filter(pl.col("symbol").is_in(list(symbols)))
        counts = [frame.height]
    entries = [
        {"path": str(p), "size_bytes": p.stat().st_size, "rows": n, "timestamps": kind}
        for p, n, kind in zip(run, counts, kinds, strict=True)
    ]
    return frame, entries


def _read_parquet_run(
    run: list[Path], source: Source, bounds: TimeBounds, fmt: FileFormat, symbols: Sequence[str] | None = None,
) -> tuple[pl.DataFrame, list[str], list[int]]:
    """Parquet files of one layout through one lazy scan (scan.py); hive keys (partitions.py) add a symbol column
    where the files have none. Files whose columns differ (or their types: a zone in one file's times and none in
    the next file's) are read one scan each. Returns (frame, how each file wrote its times, rows of each file)."""
    timestamp_col, symbol_col, timezone, date_format = fmt.timestamp_col, fmt.symbol_col, fmt.timezone, fmt.date_format
    for path in run:
        if path.stat().st_size == 0:
            raise InputError(f"{path}: the file is empty (0 bytes); re-export or remove it")
    try:
        schema = pl.read_parquet_schema(run[0])
    except Exception as e:  # polars raises several types for truncated or foreign files
        raise read_error(run[0], e) from None
    keys = [hive_keys(p, source.root) if source.root is not None else {} for p in run]
    hive_symbol = hive_symbol_key(keys[0], symbol_col)
    names = list(schema)
    own_symbol = match_column(names, symbol_col) if symbol_col is not None else symbol_column(names)
    if symbol_col is not None and own_symbol is not None:
        hive_symbol = None  # --symbol-col chose the files' own column over the folders'
    if hive_symbol and own_symbol is None:  # the folders name the symbol of files that have none
        names.append(hive_symbol)
    found = find_columns(names, run[0], timestamp_col, symbol_col)
    cols = [c for c in wanted_columns(names, run[0], timestamp_col, symbol_col) if c in schema]
    cols = [_scan_casts(schema, found).get(c, c) for c in cols]
    predicate = bounds.pushdown(schema[found["time"]], found["time"], timezone or "UTC") if bounds.active else None
    if symbols is not None and own_symbol is not None:
        chosen = pl.col(own_symbol).is_in(list(symbols))
        predicate = chosen if predicate is None else predicate & chosen
    try:
        frame, counts = scan_files(run, cols, predicate)
    except Exception as e:
        if len(run) == 1:
            raise read_error(run[0], e) from None
        parts = [_read_parquet_run([p], source, bounds, fmt, symbols)
                 for p in run]
        frame = pl.concat([f.with_columns(pl.lit(i, pl.UInt32).alias("file_idx")) for i, (f, _, _) in enumerate(parts)])
        return frame, [k for _, kinds, _ in parts for k in kinds], [n for _, _, c in parts for n in c]
    if not bounds.active and symbols is None and 0 in counts:
        raise InputError(f"{run[counts.index(0)]}: the file has no rows; re-export it or leave it out")
    if hive_symbol:
        frame = align_chunks(_with_hive_symbol(frame, run, keys, hive_symbol, own_symbol), frame.get_column("row"))
    try:
        out, kind = normalise(frame.drop("file_idx", "row"), source.root or run[0], source.default_name,
                              timestamp_col, symbol_col, timezone, date_format)
    except InputError:
        for path in run:  # name the file and its own row: read the files one by one until one fails the same way
            read_file(path, source.default_name, timestamp_col, symbol_col, timezone, date_format)
        raise
    out = align_chunks(out.with_columns(frame.get_column("file_idx"), frame.get_column("row")), frame.get_column("row"))
    del frame
    if bounds.active:
        out = out.filter(bounds.mask())
        counts = np.bincount(out.get_column("file_idx").to_numpy(), minlength=len(run)).tolist()
    return out, [kind] * len(run), counts


def _scan_casts(schema: pl.Schema, found: dict[str, str | None]) -> dict[str, pl.Expr]:
    """The casts `normalise` would make that can run inside the scan, as each row group is decoded: the file's own
    columns (us timestamps, uint64 volume, uint32 ids) are then never held whole beside their casts (2M bars: 40 MB).

    Only the casts that give exactly what `normalise` gives and leave nothing for it to judge: time zone aware
    timestamps to ns (in their own zone, which dates a daily bar: dates.py), float or integer volume and float prices
    to Float64 (Databento's fixed-point integer prices keep their own path), integer ids to RAW_SCHEMA's types;
    `normalise` then finds these columns done. A column that fills two roles is left as it is.
    """
    roles = [c for c in found.values() if c is not None]
    out: dict[str, pl.Expr] = {}
    time = found["time"]
    if isinstance(schema[time], pl.Datetime) and schema[time].time_zone is not None:
        out[time] = pl.col(time).cast(pl.Datetime("ns", schema[time].time_zone))
    for c in VALUE_COLS:
        src = found[c]
        dtype = schema[src]
        if dtype.is_float():
            out[src] = pl.col(src).cast(pl.Float64)
        elif dtype.is_integer() and c == "volume":
            out[src] = pl.col(src).cast(pl.Int64, strict=False).cast(pl.Float64)  # uint64 past int64: null
    for c in ("instrument_id", "rtype"):
        src = found[c]
        if src is not None and schema[src].is_integer():
            out[src] = pl.col(src).cast(RAW_SCHEMA[c], strict=False)
    return {c: e for c, e in out.items() if roles.count(c) == 1}


def hive_symbol_key(keys: dict[str, str], symbol_col: str | None) -> str | None:
    """The hive key that names the symbol: the one --symbol-col names, else the first of SYMBOL_CANDIDATES."""
    wanted = (symbol_col,) if symbol_col is not None else SYMBOL_CANDIDATES
    return next((k for w in wanted for k in keys if k.lower() == w.lower()), None)


def _with_hive_symbol(
    frame: pl.DataFrame, run: list[Path], keys: list[dict], key: str, file_col: str | None
) -> pl.DataFrame:
    """Files without a symbol column (`file_col` None) get the hive key's value of their folder as column `key`.
    Files with one keep it, and every non-empty value must equal the folder's: a file filed under the wrong
    symbol would otherwise be read as another contract's bars without a word."""
    values = pl.Series([k.get(key) for k in keys], dtype=pl.Utf8)
    hive = values.gather(frame.get_column("file_idx"))
    if file_col is None:
        return frame.with_columns(hive.alias(key))
    own = frame.get_column(file_col).cast(pl.Utf8).str.strip_chars()
    bad = (own != hive) & (own != "")
    if bad.any():
        i = int(bad.arg_max())
        idx, row = frame.get_column("file_idx")[i], frame.get_column("row")[i]
        raise InputError(
            f"{run[idx]}: data row {row + 1} has {file_col} {own[i]!r} but its folder says {key}={hive[i]}; move the"
            " file to its symbol's folder, or name the column to use with --symbol-col"
        )
    return frame


def _rows() -> pl.Expr:
    """The `row` column of a frame read whole: 0, 1, ... as RAW_SCHEMA's type."""
    return pl.int_range(pl.len(), dtype=RAW_SCHEMA["row"]).alias("row")


def _bounds_text(since: str | None, until: str | None) -> str:
    return " and ".join(t for t in (f"--since {since}" if since else "", f"--until {until}" if until else "") if t)


def read_frame(
    frame: pl.DataFrame,
    name: str,
    timestamp_col: str | None = None,
    symbol_col: str | None = None,
    timezone: str | None = None,
    price_scale: float = 1.0,
    date_format: str | None = None,
    *,
    since: str | None = None,
    until: str | None = None,
) -> tuple[pl.DataFrame, dict]:
    """An in-memory frame with a file's columns (see the module doc) as one raw frame (RAW_SCHEMA) and its entry
    of `read_bars`' file list, exactly as `read_bars` reads a file (within `since` / `until` too); `name` stands for
    the path in error messages and names the series of a frame without a symbol column. Raises InputError like
    `read_bars`."""
    if frame.height == 0:
        raise InputError(f"{name}: the frame has no rows; pass bars")
    out, kind = normalise(frame, Path(name), name, timestamp_col, symbol_col, timezone, date_format)
    if price_scale != 1.0:
        out = out.with_columns(pl.col(c) / price_scale for c in PRICE_COLS)
    out = out.with_columns(pl.lit(0, dtype=pl.UInt32).alias("file_idx"), _rows())
    bounds = TimeBounds.parse(since, until)
    if bounds.active:  # rows keep their numbers in the frame (`row`), as a file's bounded read keeps them
        out = out.filter(bounds.mask())
        if out.height == 0:
            raise InputError(f"{name}: no bar lies within {_bounds_text(since, until)}; widen the range")
    return out.select(list(RAW_SCHEMA)), {"path": name, "size_bytes": 0, "rows": out.height, "timestamps": kind}


def check_bar_sizes(rtypes: list[set[int]], spacings: list[int], paths: list[str]) -> None:
    """Refuse files of different bar sizes, naming two of them: compare Databento `rtype`s where both files have one,
    else the median spacing of consecutive bars within an instrument (0: not measured, or one bar per instrument).
    The lists hold one entry per file of `paths` (see `rtype_sets`, `median_spacings`).
    """
    sizes = list(zip(rtypes, spacings, strict=True))
    for i, (held, _) in enumerate(sizes):
        if len(held) > 1:
            kinds = " and ".join(RTYPE_NAMES.get(r, f"rtype {r}") for r in sorted(held))
            raise InputError(
                f"{paths[i]}: holds {kinds} bars in one file; keep one bar size per run (split the file by rtype)"
            )
    first_rtype = next((i for i, (r, _) in enumerate(sizes) if r), None)
    first_spacing = next((i for i, (_, s) in enumerate(sizes) if s), None)
    for i, (held, spacing) in enumerate(sizes):
        j = first_rtype
        if held and j is not None:  # rtype names the bar size exactly; a sparse contract's spacing does not
            if held != sizes[j][0]:
                a, b = RTYPE_NAMES.get(min(sizes[j][0]), "?"), RTYPE_NAMES.get(min(held), "?")
                raise InputError(_mixed(paths[j], a, paths[i], b))
            continue
        j = first_spacing
        if spacing and j is not None and max(spacing, sizes[j][1]) > SAME_SPACING * min(spacing, sizes[j][1]):
            raise InputError(_mixed(paths[j], _spacing_text(sizes[j][1]), paths[i], _spacing_text(spacing)))


def _mixed(path_a: str, size_a: str, path_b: str, size_b: str) -> str:
    return (
        f"{path_a} holds {size_a} bars but {path_b} holds {size_b} bars; one run reads one bar size,"
        " so pass files of one bar size only"
    )


def rtype_sets(frame: pl.DataFrame, n_files: int) -> list[set[int]]:
    """Per file (`file_idx` < n_files), the Databento rtypes its rows hold (empty for a generic file).

    Read from runs of equal (file, rtype) pairs: rows come in file order, so there are few runs and no hash table
    the size of the frame."""
    pairs = frame.select(pl.struct("file_idx", "rtype").rle().struct.field("value")).unnest("value").drop_nulls()
    out: list[set[int]] = [set() for _ in range(n_files)]
    for i, rtype in pairs.unique().iter_rows():
        out[i].add(rtype)
    return out


def median_spacings(frame: pl.DataFrame, n_files: int) -> list[int]:
    """Per file, the median spacing in ns of consecutive bars of one instrument; 0 where there is none."""
    key = ("file_idx", "symbol", "instrument_id")
    gaps = (
        frame.select(*key, "ts")
        .sort(*key, "ts", nulls_last=True)
        .select("file_idx", gap=pl.col("ts").diff().over(key).dt.total_nanoseconds())
        .filter(pl.col("gap") > 0)
        .group_by("file_idx")
        .agg(pl.col("gap").median())
    )
    out = [0] * n_files
    for i, gap in gaps.iter_rows():
        out[i] = int(gap)
    return out


def _spacing_text(ns: int) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if ns >= size * 10**9:
            return f"{ns / (size * 10**9):g}{unit}"
    return f"{ns}ns"


