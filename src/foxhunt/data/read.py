"""Read bar files (parquet, CSV, Databento DBN) into one raw polars frame with normalised columns.

Every file, whatever its origin, comes out as the same columns so that later stages never look at formats:

    file_idx UInt32 (position in the file list), row Int64 (0-based data row in that file),
    ts Datetime("ns", "UTC"), open high low close volume Float64,
    symbol Utf8 (null when the file has none), instrument_id Int64 (null if absent), rtype Int64 (null if absent)

Formats understood:
- Databento `to_parquet()` / `to_df().to_parquet()` / `to_df().reset_index()` files: `ts_event` is a plain column to
  pyarrow whether or not pandas index metadata names it as the index. `price_type="fixed"` files hold int64 prices in
  units of 1e-9: integer price columns whose median magnitude is above 1e6 are divided by 1e9, and 2^63-1 (UNDEF_PRICE)
  becomes null. `pretty_ts=False` timestamps are uint64 ns counts.
- Raw DBN (`.dbn`, `.dbn.zst`) through the optional `databento` package (`pip install foxhunt[dbn]`).
- Generic OHLCV parquet or CSV: a time column (ts_event, timestamp, datetime, date, time; case-insensitive), open high
  low close volume (case-insensitive) and an optional symbol column. Naive timestamps are taken as UTC, aware ones are
  converted to UTC; integer timestamps are epoch counts whose unit (s, ms, us, ns) is read from their size.
  A CSV with separate `date` and `time` columns gets them joined.
- A file without a symbol column is one series named after the file stem (for a directory or glob: after the folder).

Only the needed columns are read; all work is columnar.
"""

from __future__ import annotations

import glob
import warnings
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from foxhunt.errors import InputError

PRICE_COLS = ("open", "high", "low", "close")
VALUE_COLS = (*PRICE_COLS, "volume")
TIME_CANDIDATES = ("ts_event", "timestamp", "datetime", "date", "time")
SYMBOL_CANDIDATES = ("symbol", "ticker", "raw_symbol")
SUFFIXES = (".parquet", ".pq", ".csv", ".dbn", ".dbn.zst")
FIXED_SCALE = 1e9  # Databento FIXED_PRICE_SCALE
UNDEF_PRICE = 2**63 - 1  # Databento null price in fixed-point files
FIXED_MEDIAN = 1e6  # integer prices with a larger median are fixed-point

RAW_SCHEMA = {
    "file_idx": pl.UInt32,
    "row": pl.Int64,
    "ts": pl.Datetime("ns", "UTC"),
    **dict.fromkeys(VALUE_COLS, pl.Float64),
    "symbol": pl.Utf8,
    "instrument_id": pl.Int64,
    "rtype": pl.Int64,
}


def read_bars(
    paths: Sequence[str], timestamp_col: str | None = None, symbol_col: str | None = None
) -> tuple[pl.DataFrame, list[dict]]:
    """Read every file named by `paths` (files, directories or globs) as one raw frame.

    Returns (frame with RAW_SCHEMA columns, files [{path, size_bytes, rows}]). Raises InputError for anything a user
    can fix: a missing or unreadable file, a missing column, text where numbers belong, unparseable timestamps.
    """
    entries = expand_paths(paths)
    frames, files = [], []
    for idx, (path, default_name) in enumerate(entries):
        frame = read_file(path, default_name, timestamp_col, symbol_col)
        frames.append(
            frame.with_columns(
                pl.lit(idx, dtype=pl.UInt32).alias("file_idx"), pl.int_range(pl.len()).alias("row")
            )
        )
        files.append({"path": str(path), "size_bytes": path.stat().st_size, "rows": frame.height})
    return pl.concat([f.select(list(RAW_SCHEMA)) for f in frames], how="vertical"), files


def expand_paths(paths: Sequence[str]) -> list[tuple[Path, str]]:
    """Turn files, directories (searched recursively) and globs into a sorted file list.

    Each file comes with the series name to use if it has no symbol column: its stem for a named file, the folder's name
    for a directory or glob (so one-file-per-day folders stay one series).
    """
    if not paths:
        raise InputError("no data files given; pass one or more parquet/CSV/DBN files, directories or globs")
    out: list[tuple[Path, str]] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if glob.has_magic(str(p)):
            hits = sorted(Path(h) for h in glob.glob(str(p), recursive=True) if _supported(Path(h)))
            if not hits:
                raise InputError(f"{raw}: the pattern matches no {'/'.join(SUFFIXES)} file; check the path")
            out += [(h, _folder_name(p.parent)) for h in hits]
        elif p.is_dir():
            hits = sorted(
                h for h in p.rglob("*") if h.is_file() and not h.name.startswith(".") and _supported(h)
            )
            if not hits:
                raise InputError(f"{raw}: the directory holds no {'/'.join(SUFFIXES)} file; check the path")
            out += [(h, _folder_name(p)) for h in hits]
        elif p.is_file():
            out.append((p, _stem(p)))
        else:
            raise InputError(f"{raw}: file not found; check the path")
    return out


def read_file(
    path: Path, default_name: str, timestamp_col: str | None, symbol_col: str | None
) -> pl.DataFrame:
    """Read one file into normalised columns (without file_idx/row)."""
    if path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty (0 bytes); re-export or remove it")
    name = path.name.lower()
    if name.endswith((".dbn", ".dbn.zst")):
        frame = _read_dbn(path)
    elif name.endswith(".csv"):
        frame = _read_csv(path, timestamp_col, symbol_col)
    else:
        frame = _read_parquet(path, timestamp_col, symbol_col)
    if frame.height == 0:
        raise InputError(f"{path}: the file has no rows; re-export it or leave it out")
    return _normalise(frame, path, default_name, timestamp_col, symbol_col)


def _read_parquet(path: Path, timestamp_col: str | None, symbol_col: str | None) -> pl.DataFrame:
    try:
        names = list(pl.read_parquet_schema(path))
        cols = _wanted(names, path, timestamp_col, symbol_col)
        return pl.read_parquet(path, columns=cols)
    except InputError:
        raise
    except Exception as e:  # polars raises several types for truncated or foreign files
        raise InputError(
            f"{path}: cannot read it as parquet ({_one_line(e)}); the file may be truncated, re-download or re-export it"
        ) from None


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


def _read_dbn(path: Path) -> pl.DataFrame:
    try:
        import databento as db
    except ImportError:
        raise InputError(
            f"{path}: reading DBN files needs the databento package; install foxhunt[dbn] or convert to parquet"
        ) from None
    try:
        store = db.DBNStore.from_file(path)
        schema = str(store.schema)
    except Exception as e:
        raise InputError(
            f"{path}: cannot read it as DBN ({_one_line(e)}); the file may be truncated, re-download it"
        ) from None
    if not schema.startswith("ohlcv"):
        raise InputError(f"{path}: holds {schema} records, not OHLCV bars; pass an ohlcv-1s/1m/1h/1d file")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # databento warns (not raises) on a truncated file
            df = store.to_df().reset_index()
    except Exception as e:
        raise InputError(
            f"{path}: cannot decode its DBN records ({_one_line(e)}); the file may be truncated"
        ) from None
    truncated = [w for w in caught if "truncated" in str(w.message)]
    if truncated:
        raise InputError(
            f"{path}: the DBN file is truncated ({_one_line(Exception(truncated[0].message))}); re-download it"
        )
    return pl.from_pandas(df)


def _wanted(names: list[str], path: Path, timestamp_col: str | None, symbol_col: str | None) -> list[str]:
    """The source columns to read, in any order; errors name the columns that were found."""
    found = _find_columns(names, path, timestamp_col, symbol_col)
    cols = [c for c in found.values() if c is not None]
    if found["time"] is not None and found["time"].lower() == "date":
        time_col = _match(names, "time")  # date + time columns in separate fields
        if time_col is not None and timestamp_col is None:
            cols.append(time_col)
    return list(dict.fromkeys(cols))


def _required(names: list[str], column: str, flag: str, path: Path, listing: str) -> str:
    """The column a flag names (case-insensitive); a one-line error naming the flag when the file lacks it."""
    match = _match(names, column)
    if match is None:
        raise InputError(f"{path}: no column {column!r} (from {flag}); found columns: {listing}")
    return match


def _find_columns(names: list[str], path: Path, timestamp_col: str | None, symbol_col: str | None) -> dict:
    found: dict[str, str | None] = {}
    listing = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
    if timestamp_col is not None:
        found["time"] = _required(names, timestamp_col, "--timestamp-col", path, listing)
    else:
        found["time"] = next((m for c in TIME_CANDIDATES if (m := _match(names, c)) is not None), None)
        if found["time"] is None and "__index_level_0__" in names:
            found["time"] = "__index_level_0__"  # pandas wrote an unnamed DatetimeIndex
        if found["time"] is None:
            raise InputError(
                f"{path}: no time column (looked for {', '.join(TIME_CANDIDATES)}); found columns: {listing};"
                " name it with --timestamp-col"
            )
    missing = [c for c in VALUE_COLS if _match(names, c) is None]
    if missing and _match(names, "instrument_class") is not None and _match(names, "raw_symbol") is not None:
        raise InputError(f"{path}: holds Databento definition records, not OHLCV bars; pass an ohlcv-1s/1m/1h/1d file")
    if missing:
        raise InputError(
            f"{path}: missing required column(s) {', '.join(missing)}; found columns: {listing};"
            " the file needs open, high, low, close and volume"
        )
    found.update({c: _match(names, c) for c in VALUE_COLS})
    if symbol_col is not None:
        found["symbol"] = _required(names, symbol_col, "--symbol-col", path, listing)
    else:
        found["symbol"] = next((m for c in SYMBOL_CANDIDATES if (m := _match(names, c)) is not None), None)
    found["instrument_id"] = _match(names, "instrument_id")
    found["rtype"] = _match(names, "rtype")
    return found


def _normalise(
    frame: pl.DataFrame, path: Path, default_name: str, timestamp_col: str | None, symbol_col: str | None
) -> pl.DataFrame:
    names = frame.columns
    found = _find_columns(names, path, timestamp_col, symbol_col)
    ts = _parse_time(frame, found["time"], names, path, joined_time=timestamp_col is None)
    out = {"ts": ts}
    for c in VALUE_COLS:
        out[c] = _numeric(frame.get_column(found[c]), path, found[c], fixed_point=c in PRICE_COLS)
    if found["symbol"] is not None:
        out["symbol"] = frame.get_column(found["symbol"]).cast(pl.Utf8).str.strip_chars()
        missing = out["symbol"].is_null() | (out["symbol"] == "")
        if found["instrument_id"] is None and missing.any():
            i = int(missing.arg_max())
            raise InputError(
                f"{path}: column {found['symbol']!r} row {i + 1} is empty; give every row a symbol"
            )
        out["symbol"] = out["symbol"].set(out["symbol"] == "", None)
    elif found["instrument_id"] is not None:
        out["symbol"] = pl.Series([None] * frame.height, dtype=pl.Utf8)  # resolved from instrument_id later
    else:
        out["symbol"] = pl.Series([default_name] * frame.height, dtype=pl.Utf8)
    for c in ("instrument_id", "rtype"):
        src = found[c]
        out[c] = (
            frame.get_column(src).cast(pl.Int64, strict=False)
            if src is not None
            else pl.Series([None] * frame.height, dtype=pl.Int64)
        )
    return pl.DataFrame({k: v.alias(k) for k, v in out.items()})


def _parse_time(frame: pl.DataFrame, col: str, names: list[str], path: Path, joined_time: bool) -> pl.Series:
    """Any timestamp representation -> Datetime("ns", "UTC"); naive means UTC. Nulls or bad text raise InputError."""
    s = frame.get_column(col)
    dtype = s.dtype
    if dtype == pl.String:
        time_col = _match(names, "time") if col.lower() == "date" and joined_time else None
        text = s.str.strip_chars()
        if time_col is not None:
            text = text + " " + frame.get_column(time_col).cast(pl.Utf8).str.strip_chars()
        if text.str.contains(r"^\d+$").all():
            out = _from_epoch(text.cast(pl.Int64))
        else:
            try:
                out = text.str.to_datetime(time_unit="ns", time_zone="UTC", strict=False)
            except Exception:
                out = pl.Series([None] * len(text), dtype=pl.Datetime("ns", "UTC"))
        bad = out.is_null() & text.is_not_null()
        _raise_bad_time(bad, text, path, col)
    elif isinstance(dtype, pl.Datetime):
        out = s.dt.replace_time_zone("UTC") if dtype.time_zone is None else s.dt.convert_time_zone("UTC")
    elif dtype == pl.Date:
        out = s.cast(pl.Datetime("ns")).dt.replace_time_zone("UTC")
    elif dtype.is_integer():
        out = _from_epoch(s)
    else:
        raise InputError(
            f"{path}: column {col!r} has type {dtype}, not a timestamp; pass --timestamp-col or convert it"
        )
    out = out.cast(pl.Datetime("ns", "UTC"))
    _raise_bad_time(out.is_null(), s.cast(pl.Utf8, strict=False), path, col)
    return out


def _from_epoch(s: pl.Series) -> pl.Series:
    """Integer epoch counts; the unit follows from the magnitude (a 2020s date is ~1.6e9 s, ~1.6e18 ns).

    Eight-digit values (19000101 .. 29991231) are YYYYMMDD dates, as many vendor exports write them: as epoch seconds
    they would all fall in 1970.
    """
    s = s.cast(pl.Int64, strict=False)  # uint64 past int64 (UNDEF_TIMESTAMP) becomes null -> error
    if s.min() is not None and 19_000_101 <= s.min() and s.max() <= 29_991_231:
        return s.cast(pl.Utf8).str.to_datetime("%Y%m%d", time_unit="ns", time_zone="UTC", strict=False)
    mag = s.abs().median() or 0
    unit = "ns" if mag > 1e17 else "us" if mag > 1e14 else "ms" if mag > 1e11 else "s"
    return pl.from_epoch(s, time_unit=unit).dt.cast_time_unit("ns").dt.replace_time_zone("UTC")


def _raise_bad_time(bad: pl.Series, shown: pl.Series, path: Path, col: str) -> None:
    if bad.any():
        i = int(bad.arg_max())
        raise InputError(
            f"{path}: column {col!r} row {i + 1}: cannot parse timestamp {shown[i]!r};"
            " use ISO 8601 (2024-03-08 14:30:00) or epoch nanoseconds"
        )


def _numeric(s: pl.Series, path: Path, col: str, fixed_point: bool) -> pl.Series:
    """Numbers as Float64; text that is not a number raises naming the row; fixed-point 1e-9 integers are scaled."""
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
        s = s.cast(pl.Int64, strict=False)  # uint64 past int64 becomes null
        if fixed_point:
            s = s.set(s == UNDEF_PRICE, None)
            med = s.abs().median()
            if med is not None and med > FIXED_MEDIAN:
                return s.cast(pl.Float64) / FIXED_SCALE
        return s.cast(pl.Float64)
    if s.dtype.is_numeric() or isinstance(s.dtype, pl.Decimal):
        return s.cast(pl.Float64)
    raise InputError(
        f"{path}: column {col!r} has type {s.dtype}, not numeric; prices and volume must be numbers"
    )


def _match(names: list[str], wanted: str) -> str | None:
    w = wanted.strip().lower()
    return next((n for n in names if n.strip().lower() == w), None)


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
