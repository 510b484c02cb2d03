"""Read bar files (parquet, CSV, Databento DBN) into one raw polars frame with normalised columns.

Every file, whatever its origin, comes out as the same columns so that later stages never look at formats:

    file_idx UInt32 (position in the file list), row UInt32 (0-based data row in that file),
    ts Datetime("ns", "UTC"), open high low close volume Float64,
    symbol Utf8 (null when the file has none), instrument_id Int64 (null if absent), rtype UInt8 (null if absent: a
    Databento record type is one byte)

Formats understood:
- Databento `to_parquet()` / `to_df().to_parquet()` / `to_df().reset_index()` files: `ts_event` is a plain column to
  pyarrow whether or not pandas index metadata names it as the index. `price_type="fixed"` files hold int64 prices in
  units of 1e-9. A file is Databento's when it has the `rtype` and `instrument_id` columns every Databento OHLCV
  frame carries; only then are integer price columns fixed-point (divided by 1e9, 2^63-1 = UNDEF_PRICE becomes null).
  The magnitude of the prices is never used to guess: a generic file of integer cents keeps its values, and
  `price_scale` (`--price-scale 100`) divides them. `pretty_ts=False` timestamps are uint64 ns counts.
- Raw DBN (`.dbn`, `.dbn.zst`) through the optional `databento` package (`pip install foxhunt[dbn]`), decoded from
  its record array (dbn.py).
- Generic OHLCV parquet or CSV: a time column (ts_event, timestamp, datetime, date, time; case-insensitive), open high
  low close volume (case-insensitive) and an optional symbol column. Naive timestamps are wall-clock time in
  `timezone` (`--timezone`, default UTC), aware ones are converted to UTC; integer timestamps are epoch counts (UTC)
  whose unit (s, ms, us, ns) is read from their size.
  A CSV with separate `date` and `time` columns gets them joined.
- A file without a symbol column is one series named after the file stem (for a directory or glob: after the folder),
  unless a hive `symbol=` folder above it names it (partitions.py).

Consecutive parquet files of a directory or glob are read by one lazy polars scan (scan.py) per SCAN_BYTES of files:
only the needed columns are decoded, and with `since` / `until` only the row groups and hive `date=` partitions
that can hold bars in range. CSV and DBN files are read one by one.

All files must hold bars of one size: Databento files are compared by `rtype`, others by their median bar spacing,
and a mix (1-minute and daily files, whose daily bars would otherwise replace the midnight minute bars as
"duplicates") stops with an error naming both files.

All work is columnar.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from foxhunt.data.dbn import read_dbn
from foxhunt.data.partitions import TimeBounds, hive_keys, partition_day
from foxhunt.data.scan import align_chunks, read_error, scan_files
from foxhunt.errors import InputError

PRICE_COLS = ("open", "high", "low", "close")
VALUE_COLS = (*PRICE_COLS, "volume")
TIME_CANDIDATES = ("ts_event", "timestamp", "datetime", "date", "time")
SYMBOL_CANDIDATES = ("symbol", "ticker", "raw_symbol")
SUFFIXES = (".parquet", ".pq", ".csv", ".dbn", ".dbn.zst")
FIXED_SCALE = 1e9  # Databento FIXED_PRICE_SCALE
UNDEF_PRICE = 2**63 - 1  # Databento null price in fixed-point files
RTYPE_NAMES = {32: "ohlcv-1s", 33: "ohlcv-1m", 34: "ohlcv-1h", 35: "ohlcv-1d", 36: "ohlcv-eod"}
# Parquet bytes on disk read by one scan: a scan's decoding buffers come on top of its output, so a directory is read
# in scans of this size (a few hundred daily files) and only the frames they leave add up.
SCAN_BYTES = 16 * 2**20
SAME_SPACING = 4.0  # median spacings within this factor are one bar size (1m beside a sparse contract's 3m)

RAW_SCHEMA = {
    "file_idx": pl.UInt32,
    "row": pl.UInt32,
    "ts": pl.Datetime("ns", "UTC"),
    **dict.fromkeys(VALUE_COLS, pl.Float64),
    "symbol": pl.Utf8,
    "instrument_id": pl.Int64,
    "rtype": pl.UInt8,
}


def read_bars(
    paths: Sequence[str],
    timestamp_col: str | None = None,
    symbol_col: str | None = None,
    timezone: str | None = None,
    price_scale: float = 1.0,
    *,
    since: str | None = None,
    until: str | None = None,
    symbols: Sequence[str] | None = None,
    sources: Sequence[Source] | None = None,
) -> tuple[pl.DataFrame, list[dict]]:
    """Read every file named by `paths` (files, directories or globs) as one raw frame.

    `symbols`: keep only the bars whose symbol column holds one of these values (pushed into the parquet scan;
    store/pieces.py reads a panel series group by series group this way); None keeps all.
    `sources`: the files to read, as `expand_sources(paths)` lists them, when the caller has them (file_idx counts
    the files read): store/pieced.py reads a panel once, in chunks of consecutive files, passing each chunk's files
    this way rather than walking a folder of thousands of daily files again for each chunk.

    `timezone` is the zone of naive timestamps (None: UTC); `price_scale` divides every price (100: cents to dollars).
    `since` / `until` (ISO dates or times, UTC when naive) keep the bars with since <= ts < until: hive partitions
    dated outside them are never opened, and parquet row groups outside them are never decoded.
    Returns (frame with RAW_SCHEMA columns, files [{path, size_bytes, rows, timestamps}]) for every file opened, where
    rows counts the rows kept and timestamps is "naive", "aware", "epoch" or "date": how the file wrote its times.
    Raises InputError for anything a user can fix: a missing or unreadable file, a missing column, text where numbers
    belong, unparseable timestamps, mixed bar sizes, bounds that leave no bar.
    """
    bounds = TimeBounds.parse(since, until)
    frames, files, rtypes, spacings = [], [], [], []
    for source in expand_sources(paths) if sources is None else sources:
        for run in _runs(source, bounds):
            frame, entries = _read_run(run, source, bounds, timestamp_col, symbol_col, timezone, symbols)
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
    check_bar_sizes(rtypes, [s or 0 for s in spacings], [f["path"] for f in files])
    return raw, files


@dataclass(frozen=True)
class Source:
    """The files one path argument names, with the series name for files without a symbol column and the folder
    hive keys are read below (None for a single file)."""

    files: list[Path]
    default_name: str
    root: Path | None


def _runs(source: Source, bounds: TimeBounds) -> list[list[Path]]:
    """`source`'s files left after partition pruning, in order, as runs that are read together: consecutive parquet
    files make one run (one scan), any other file is a run of its own."""
    runs: list[list[Path]] = []
    run_bytes = 0
    for path in source.files:
        if bounds.active and source.root is not None:
            day = partition_day(hive_keys(path, source.root))
            if day is not None and not bounds.keeps_day(day):
                continue  # never opened
        size = path.stat().st_size
        if is_parquet(path) and runs and is_parquet(runs[-1][-1]) and run_bytes + size <= SCAN_BYTES:
            runs[-1].append(path)
            run_bytes += size
        else:
            runs.append([path])
            run_bytes = size
    return runs


def _read_run(
    run: list[Path], source: Source, bounds: TimeBounds, timestamp_col: str | None, symbol_col: str | None,
    timezone: str | None, symbols: Sequence[str] | None = None,
) -> tuple[pl.DataFrame, list[dict]]:
    """One run as normalised columns with file_idx (within the run) and row; its entries of read_bars' file list."""
    if is_parquet(run[0]):
        frame, kind, counts = _read_parquet_run(run, source, bounds, timestamp_col, symbol_col, timezone, symbols)
    else:
        path = run[0]
        frame, kind = read_file(path, source.default_name, timestamp_col, symbol_col, timezone)
        frame = frame.with_columns(pl.lit(0, dtype=pl.UInt32).alias("file_idx"), _rows())
        if bounds.active:
            frame = frame.filter(bounds.mask())
        if symbols is not None:
            frame = frame.filter(pl.col("symbol").is_in(list(symbols)))
        counts = [frame.height]
    entries = [
        {"path": str(p), "size_bytes": p.stat().st_size, "rows": n, "timestamps": kind}
        for p, n in zip(run, counts, strict=True)
    ]
    return frame, entries


def _read_parquet_run(
    run: list[Path], source: Source, bounds: TimeBounds, timestamp_col: str | None, symbol_col: str | None,
    timezone: str | None, symbols: Sequence[str] | None = None,
) -> tuple[pl.DataFrame, str, list[int]]:
    """Parquet files of one layout through one lazy scan (scan.py); hive keys (partitions.py) add a symbol column
    where the files have none. Files whose columns differ are read one scan each."""
    for path in run:
        if path.stat().st_size == 0:
            raise InputError(f"{path}: the file is empty (0 bytes); re-export or remove it")
    try:
        schema = pl.read_parquet_schema(run[0])
    except Exception as e:  # polars raises several types for truncated or foreign files
        raise read_error(run[0], e) from None
    keys = [hive_keys(p, source.root) if source.root is not None else {} for p in run]
    hive_symbol = _hive_symbol_key(keys[0], symbol_col)
    names = list(schema)
    own_symbol = match_column(names, symbol_col) if symbol_col is not None else symbol_column(names)
    if symbol_col is not None and own_symbol is not None:
        hive_symbol = None  # --symbol-col chose the files' own column over the folders'
    if hive_symbol and own_symbol is None:  # the folders name the symbol of files that have none
        names.append(hive_symbol)
    found = _find_columns(names, run[0], timestamp_col, symbol_col)
    cols = [c for c in _wanted(names, run[0], timestamp_col, symbol_col) if c in schema]
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
        parts = [_read_parquet_run([p], source, bounds, timestamp_col, symbol_col, timezone, symbols) for p in run]
        frame = pl.concat([f.with_columns(pl.lit(i, pl.UInt32).alias("file_idx")) for i, (f, _, _) in enumerate(parts)])
        return frame, parts[0][1], [n for _, _, c in parts for n in c]
    if not bounds.active and symbols is None and 0 in counts:
        raise InputError(f"{run[counts.index(0)]}: the file has no rows; re-export it or leave it out")
    if hive_symbol:
        frame = align_chunks(_with_hive_symbol(frame, run, keys, hive_symbol, own_symbol), frame.get_column("row"))
    try:
        out, kind = _normalise(frame.drop("file_idx", "row"), source.root or run[0], source.default_name,
                               timestamp_col, symbol_col, timezone)
    except InputError:
        for path in run:  # name the file and its own row: read the files one by one until one fails the same way
            read_file(path, source.default_name, timestamp_col, symbol_col, timezone)
        raise
    out = align_chunks(out.with_columns(frame.get_column("file_idx"), frame.get_column("row")), frame.get_column("row"))
    del frame
    if bounds.active:
        out = out.filter(bounds.mask())
        counts = np.bincount(out.get_column("file_idx").to_numpy(), minlength=len(run)).tolist()
    return out, kind, counts


def _scan_casts(schema: pl.Schema, found: dict[str, str | None]) -> dict[str, pl.Expr]:
    """The casts `_normalise` would make that can run inside the scan, as each row group is decoded: the file's own
    columns (us timestamps, uint64 volume, uint32 ids) are then never held whole beside their casts (2M bars: 40 MB).

    Only the casts that give exactly what `_normalise` gives and leave nothing for it to judge: time zone aware
    timestamps to UTC ns, float or integer volume and float prices to Float64 (Databento's fixed-point integer prices
    keep their own path), integer ids to RAW_SCHEMA's types; `_normalise` then finds these columns done. A column
    that fills two roles is left as it is.
    """
    roles = [c for c in found.values() if c is not None]
    out: dict[str, pl.Expr] = {}
    time = found["time"]
    if isinstance(schema[time], pl.Datetime) and schema[time].time_zone is not None:
        out[time] = pl.col(time).dt.convert_time_zone("UTC").cast(RAW_SCHEMA["ts"])
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


def _hive_symbol_key(keys: dict[str, str], symbol_col: str | None) -> str | None:
    """The hive key that names the symbol: the one --symbol-col names, else symbol / ticker / raw_symbol."""
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
) -> tuple[pl.DataFrame, dict]:
    """An in-memory frame with a file's columns (see the module doc) as one raw frame (RAW_SCHEMA) and its entry
    of `read_bars`' file list, exactly as `read_bars` reads a file; `name` stands for the path in error messages and
    names the series of a frame without a symbol column. Raises InputError like `read_bars`."""
    if frame.height == 0:
        raise InputError(f"{name}: the frame has no rows; pass bars")
    out, kind = _normalise(frame, Path(name), name, timestamp_col, symbol_col, timezone)
    if price_scale != 1.0:
        out = out.with_columns(pl.col(c) / price_scale for c in PRICE_COLS)
    out = out.with_columns(pl.lit(0, dtype=pl.UInt32).alias("file_idx"), _rows())
    return out.select(list(RAW_SCHEMA)), {"path": name, "size_bytes": 0, "rows": frame.height, "timestamps": kind}


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


def expand_paths(paths: Sequence[str]) -> list[tuple[Path, str]]:
    """Turn files, directories (searched recursively) and globs into a sorted file list.

    Each file comes with the series name to use if it has no symbol column: its stem for a named file, the folder's name
    for a directory or glob (so one-file-per-day folders stay one series).
    """
    return [(f, s.default_name) for s in expand_sources(paths) for f in s.files]


def expand_sources(paths: Sequence[str]) -> list[Source]:
    """`expand_paths` grouped by argument, with the folder below which a directory's or glob's hive keys are read."""
    if not paths:
        raise InputError("no data files given; pass one or more parquet/CSV/DBN files, directories or globs")
    out: list[Source] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if glob.has_magic(str(p)):
            hits = sorted(Path(h) for h in glob.glob(str(p), recursive=True) if _supported(Path(h)))
            if not hits:
                raise InputError(f"{raw}: the pattern matches no {'/'.join(SUFFIXES)} file; check the path")
            out.append(Source(hits, _folder_name(p.parent), _glob_root(p)))
        elif p.is_dir():
            hits = _walk(p)
            if not hits:
                raise InputError(f"{raw}: the directory holds no {'/'.join(SUFFIXES)} file; check the path")
            out.append(Source(hits, _folder_name(p), p))
        elif p.is_file():
            out.append(Source([p], _stem(p), None))
        else:
            raise InputError(f"{raw}: file not found; check the path")
    return out


def _walk(folder: Path) -> list[Path]:
    """The supported, non-hidden files below `folder`, sorted; os.walk lists a folder once, where rglob + is_file
    would stat every one of thousands of daily files again."""
    return sorted(
        Path(top, name)
        for top, _, names in os.walk(folder)
        for name in names
        if not name.startswith(".") and name.lower().endswith(SUFFIXES)
    )


def _glob_root(pattern: Path) -> Path:
    """The folder above a glob's first wildcard: hive keys are the key=value folders below it."""
    parts = pattern.parts
    first = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    return Path(*parts[:first]) if first else Path(".")


def read_file(
    path: Path, default_name: str, timestamp_col: str | None, symbol_col: str | None, timezone: str | None = None
) -> tuple[pl.DataFrame, str]:
    """Read one file into normalised columns (without file_idx/row); also how it wrote its times (see read_bars)."""
    if path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty (0 bytes); re-export or remove it")
    name = path.name.lower()
    if name.endswith((".dbn", ".dbn.zst")):
        frame = read_dbn(path)
    elif name.endswith(".csv"):
        frame = _read_csv(path, timestamp_col, symbol_col)
    else:
        frame = _read_parquet(path, timestamp_col, symbol_col)
    if frame.height == 0:
        raise InputError(f"{path}: the file has no rows; re-export it or leave it out")
    return _normalise(frame, path, default_name, timestamp_col, symbol_col, timezone)


def _read_parquet(path: Path, timestamp_col: str | None, symbol_col: str | None) -> pl.DataFrame:
    try:
        names = list(pl.read_parquet_schema(path))
        cols = _wanted(names, path, timestamp_col, symbol_col)
        return pl.read_parquet(path, columns=cols)
    except InputError:
        raise
    except Exception as e:  # polars raises several types for truncated or foreign files
        raise read_error(path, e) from None


def _read_csv(path: Path, timestamp_col: str | None, symbol_col: str | None) -> pl.DataFrame:
    try:
        names = pl.read_csv(path, n_rows=0).columns
        cols = _wanted(names, path, timestamp_col, symbol_col)
        # Text first, numbers later: a bad cell then gives an error naming its row instead of a parser failure.
        return pl.read_csv(path, columns=cols, schema_overrides=dict.fromkeys(cols, pl.Utf8))
    except InputError:
        raise
    except Exception as e:
        raise InputError(
            f"{path}: cannot read it as CSV ({_one_line(e)}); check the file is comma-separated text"
        ) from None


def _wanted(names: list[str], path: Path, timestamp_col: str | None, symbol_col: str | None) -> list[str]:
    """The source columns to read, in any order; errors name the columns that were found."""
    found = _find_columns(names, path, timestamp_col, symbol_col)
    cols = [c for c in found.values() if c is not None]
    if found["time"] is not None and found["time"].lower() == "date":
        time_col = match_column(names, "time")  # date + time columns in separate fields
        if time_col is not None and timestamp_col is None:
            cols.append(time_col)
    return list(dict.fromkeys(cols))


def _required(names: list[str], column: str, flag: str, path: Path, listing: str) -> str:
    """The column a flag names (case-insensitive); a one-line error naming the flag when the file lacks it."""
    match = match_column(names, column)
    if match is None:
        raise InputError(f"{path}: no column {column!r} (from {flag}); found columns: {listing}")
    return match


def _find_columns(names: list[str], path: Path, timestamp_col: str | None, symbol_col: str | None) -> dict:
    found: dict[str, str | None] = {}
    listing = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
    if timestamp_col is not None:
        found["time"] = _required(names, timestamp_col, "--timestamp-col", path, listing)
    else:
        found["time"] = next((m for c in TIME_CANDIDATES if (m := match_column(names, c)) is not None), None)
        if found["time"] is None and "__index_level_0__" in names:
            found["time"] = "__index_level_0__"  # pandas wrote an unnamed DatetimeIndex
        if found["time"] is None:
            raise InputError(
                f"{path}: no time column (looked for {', '.join(TIME_CANDIDATES)}); found columns: {listing};"
                " name it with --timestamp-col"
            )
    missing = [c for c in VALUE_COLS if match_column(names, c) is None]
    if missing and match_column(names, "instrument_class") is not None and match_column(names, "raw_symbol") is not None:
        raise InputError(f"{path}: holds Databento definition records, not OHLCV bars; pass an ohlcv-1s/1m/1h/1d file")
    if missing:
        raise InputError(
            f"{path}: missing required column(s) {', '.join(missing)}; found columns: {listing};"
            " the file needs open, high, low, close and volume"
        )
    found.update({c: match_column(names, c) for c in VALUE_COLS})
    if symbol_col is not None:
        found["symbol"] = _required(names, symbol_col, "--symbol-col", path, listing)
    else:
        found["symbol"] = symbol_column(names)
    found["instrument_id"] = match_column(names, "instrument_id")
    found["rtype"] = match_column(names, "rtype")
    return found


def _normalise(
    frame: pl.DataFrame,
    path: Path,
    default_name: str,
    timestamp_col: str | None,
    symbol_col: str | None,
    timezone: str | None,
) -> tuple[pl.DataFrame, str]:
    names = frame.columns
    found = _find_columns(names, path, timestamp_col, symbol_col)
    ts, kind = _parse_time(frame, found["time"], names, path, timestamp_col is None, timezone or "UTC")
    out = {"ts": ts}
    # Databento's OHLCV frames always carry rtype and instrument_id; only their integer prices are fixed-point.
    databento = found["rtype"] is not None and found["instrument_id"] is not None
    for c in VALUE_COLS:
        out[c] = _numeric(frame.get_column(found[c]), path, found[c], fixed_point=databento and c in PRICE_COLS)
    if found["symbol"] is not None:
        out["symbol"], distinct = _stripped(frame.get_column(found["symbol"]).cast(pl.Utf8))
        if found["instrument_id"] is None and (distinct.is_null().any() or (distinct == "").any()):
            missing = out["symbol"].is_null() | (out["symbol"] == "")
            i = int(missing.arg_max())
            raise InputError(
                f"{path}: column {found['symbol']!r} row {i + 1} is empty; give every row a symbol"
            )
        if (distinct == "").any():
            out["symbol"] = out["symbol"].set(out["symbol"] == "", None)
    elif found["instrument_id"] is not None:
        out["symbol"] = pl.Series([None] * frame.height, dtype=pl.Utf8)  # resolved from instrument_id later
    else:
        out["symbol"] = pl.Series([default_name] * frame.height, dtype=pl.Utf8)
    for c in ("instrument_id", "rtype"):
        src, dtype = found[c], RAW_SCHEMA[c]
        out[c] = (
            frame.get_column(src).cast(dtype, strict=False)
            if src is not None
            else pl.Series([None] * frame.height, dtype=dtype)
        )
    return pl.DataFrame({k: v.alias(k) for k, v in out.items()}), kind


def _stripped(symbol: pl.Series) -> tuple[pl.Series, pl.Series]:
    """(`symbol` without surrounding whitespace, its distinct values): the column itself (no copy) when none of its
    few distinct values has any, as in every vendor file seen so far. The distinct values answer the checks for
    empty symbols without a pass over every row."""
    distinct = symbol.unique()
    stripped = distinct.str.strip_chars()
    if stripped.equals(distinct):
        return symbol, distinct
    return symbol.str.strip_chars(), stripped


def _parse_time(
    frame: pl.DataFrame, col: str, names: list[str], path: Path, joined_time: bool, timezone: str
) -> tuple[pl.Series, str]:
    """Any timestamp representation -> (Datetime("ns", "UTC"), "naive" | "aware" | "epoch" | "date").

    Naive times are wall-clock times in `timezone`; a naive time that does not exist there (the hour skipped when
    daylight saving starts) or any null or bad text raises InputError naming the row.
    """
    s = frame.get_column(col)
    dtype = s.dtype
    if dtype == pl.String:
        time_col = match_column(names, "time") if col.lower() == "date" and joined_time else None
        text = s.str.strip_chars()
        if time_col is not None:
            text = text + " " + frame.get_column(time_col).cast(pl.Utf8).str.strip_chars()
        if text.str.contains(r"^\d+$").all():
            out, kind = _from_epoch(text.cast(pl.Int64))
        else:
            aware = text.str.contains(r"(Z|[+-]\d\d:?\d\d)$").any()
            kind = "aware" if aware else "naive"
            try:
                out = text.str.to_datetime(time_unit="ns", time_zone="UTC" if aware else None, strict=False)
            except Exception:
                out = pl.Series([None] * len(text), dtype=pl.Datetime("ns", "UTC" if aware else None))
            _raise_bad_time(out.is_null() & text.is_not_null(), text, path, col)
            if not aware:
                out = _localize(out, text, timezone, path, col)
    elif isinstance(dtype, pl.Datetime):
        kind = "naive" if dtype.time_zone is None else "aware"
        out = _localize(s, s, timezone, path, col) if kind == "naive" else s.dt.convert_time_zone("UTC")
    elif dtype == pl.Date:
        out, kind = s.cast(pl.Datetime("ns")).dt.replace_time_zone("UTC"), "date"
    elif dtype.is_integer():
        out, kind = _from_epoch(s)
    else:
        raise InputError(
            f"{path}: column {col!r} has type {dtype}, not a timestamp; pass --timestamp-col or convert it"
        )
    out = out.cast(pl.Datetime("ns", "UTC"))
    _raise_bad_time(out.is_null(), s, path, col)  # shown as text only on error: a 2M-row cast costs seconds
    return out, kind


def _localize(naive: pl.Series, shown: pl.Series, timezone: str, path: Path, col: str) -> pl.Series:
    """Naive wall-clock times in `timezone` -> UTC; the earlier of two repeated (DST fall-back) times is taken."""
    if timezone == "UTC":
        return naive.dt.replace_time_zone("UTC")
    local = naive.dt.replace_time_zone(timezone, ambiguous="earliest", non_existent="null")
    gap = local.is_null() & naive.is_not_null()
    if gap.any():
        i = int(gap.arg_max())
        raise InputError(
            f"{path}: column {col!r} row {i + 1}: {shown.cast(pl.Utf8, strict=False)[i]} does not exist in {timezone} (the hour skipped when"
            " daylight saving starts); check --timezone"
        )
    return local.dt.convert_time_zone("UTC")


def _from_epoch(s: pl.Series) -> tuple[pl.Series, str]:
    """Integer epoch counts; the unit follows from the magnitude (a 2020s date is ~1.6e9 s, ~1.6e18 ns).

    Eight-digit values (19000101 .. 29991231) are YYYYMMDD dates, as many vendor exports write them: as epoch seconds
    they would all fall in 1970.
    """
    s = s.cast(pl.Int64, strict=False)  # uint64 past int64 (UNDEF_TIMESTAMP) becomes null -> error
    if s.min() is not None and 19_000_101 <= s.min() and s.max() <= 29_991_231:
        return s.cast(pl.Utf8).str.to_datetime("%Y%m%d", time_unit="ns", time_zone="UTC", strict=False), "date"
    mag = s.abs().median() or 0
    unit = "ns" if mag > 1e17 else "us" if mag > 1e14 else "ms" if mag > 1e11 else "s"
    return pl.from_epoch(s, time_unit=unit).dt.cast_time_unit("ns").dt.replace_time_zone("UTC"), "epoch"


def _raise_bad_time(bad: pl.Series, shown: pl.Series, path: Path, col: str) -> None:
    if bad.any():
        i = int(bad.arg_max())
        raise InputError(
            f"{path}: column {col!r} row {i + 1}: cannot parse timestamp {shown.cast(pl.Utf8, strict=False)[i]!r};"
            " use ISO 8601 (2024-03-08 14:30:00) or epoch nanoseconds"
        )


def _numeric(s: pl.Series, path: Path, col: str, fixed_point: bool) -> pl.Series:
    """Numbers as Float64; text that is not a number raises naming the row.

    `fixed_point` (a Databento file's price column): integers are in units of 1e-9 and UNDEF_PRICE is null. Other
    integers are taken at face value, whatever their size.
    """
    if s.dtype == pl.String:
        text = s.str.strip_chars()
        text = text.set(text == "", None)
        as_int = text.cast(pl.Int64, strict=False)
        if as_int.null_count() == text.null_count():
            s = as_int  # all whole numbers: may be fixed-point, handled below
        else:
            out = text.cast(pl.Float64, strict=False)
            bad = out.is_null() & text.is_not_null()
            if bad.any():
                i = int(bad.arg_max())
                raise InputError(
                    f"{path}: column {col!r} row {i + 1}: {text[i]!r} is not a number; prices and volume must be numeric"
                )
            return out
    if s.dtype.is_integer():
        if not fixed_point and (s.dtype != pl.UInt64 or (s.max() or 0) < 2**63):
            return s.cast(pl.Float64)  # one cast (Databento's uint64 volume), the same numbers as through Int64
        s = s.cast(pl.Int64, strict=False)  # uint64 past int64 becomes null
        if fixed_point:
            return s.set(s == UNDEF_PRICE, None).cast(pl.Float64) / FIXED_SCALE
        return s.cast(pl.Float64)
    if s.dtype.is_numeric() or isinstance(s.dtype, pl.Decimal):
        return s.cast(pl.Float64)
    raise InputError(
        f"{path}: column {col!r} has type {s.dtype}, not numeric; prices and volume must be numbers"
    )


def symbol_column(names: list[str]) -> str | None:
    """The first of SYMBOL_CANDIDATES among a file's column names (case and spaces ignored), as the file spells it."""
    return next((m for c in SYMBOL_CANDIDATES if (m := match_column(names, c)) is not None), None)


def match_column(names: list[str], wanted: str) -> str | None:
    """The column of `names` that is `wanted` up to case and surrounding spaces, as the file spells it; None if absent."""
    w = wanted.strip().lower()
    return next((n for n in names if n.strip().lower() == w), None)


def is_parquet(p: Path) -> bool:
    """By suffix (.parquet, .pq): what the readers and the store's piece planner scan as parquet."""
    return p.name.lower().endswith((".parquet", ".pq"))


def _supported(p: Path) -> bool:
    return p.name.lower().endswith(SUFFIXES)


def _stem(p: Path) -> str:
    name = p.name
    for suf in sorted(SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suf):
            return name[: -len(suf)]
    return p.stem


def _folder_name(p: Path) -> str:
    return p.resolve().name or "data"


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__
