"""Read bar files (parquet, CSV, Databento DBN) into one raw polars frame with normalised columns.

Every file, whatever its origin, comes out as the same columns so that later stages never look at formats:

    file_idx UInt32 (position in the file list), row Int64 (0-based data row in that file),
    ts Datetime("ns", "UTC"), open high low close volume Float64,
    symbol Utf8 (null when the file has none), instrument_id Int64 (null if absent), rtype Int64 (null if absent)

Formats understood:
- Databento `to_parquet()` / `to_df().to_parquet()` / `to_df().reset_index()` files: `ts_event` is a plain column to
  pyarrow whether or not pandas index metadata names it as the index. `price_type="fixed"` files hold int64 prices in
  units of 1e-9. A file is Databento's when it has the `rtype` and `instrument_id` columns every Databento OHLCV
  frame carries; only then are integer price columns fixed-point (divided by 1e9, 2^63-1 = UNDEF_PRICE becomes null).
  The magnitude of the prices is never used to guess: a generic file of integer cents keeps its values, and
  `price_scale` (`--price-scale 100`) divides them. `pretty_ts=False` timestamps are uint64 ns counts.
- Raw DBN (`.dbn`, `.dbn.zst`) through the optional `databento` package (`pip install foxhunt[dbn]`).
- Generic OHLCV parquet or CSV: a time column (ts_event, timestamp, datetime, date, time; case-insensitive), open high
  low close volume (case-insensitive) and an optional symbol column. Naive timestamps are wall-clock time in
  `timezone` (`--timezone`, default UTC), aware ones are converted to UTC; integer timestamps are epoch counts (UTC)
  whose unit (s, ms, us, ns) is read from their size.
  A CSV with separate `date` and `time` columns gets them joined.
- A file without a symbol column is one series named after the file stem (for a directory or glob: after the folder).

All files must hold bars of one size: Databento files are compared by `rtype`, others by their median bar spacing,
and a mix (1-minute and daily files, whose daily bars would otherwise replace the midnight minute bars as
"duplicates") stops with an error naming both files.

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
RTYPE_NAMES = {32: "ohlcv-1s", 33: "ohlcv-1m", 34: "ohlcv-1h", 35: "ohlcv-1d", 36: "ohlcv-eod"}
SAME_SPACING = 4.0  # median spacings within this factor are one bar size (1m beside a sparse contract's 3m)

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
    paths: Sequence[str],
    timestamp_col: str | None = None,
    symbol_col: str | None = None,
    timezone: str | None = None,
    price_scale: float = 1.0,
) -> tuple[pl.DataFrame, list[dict]]:
    """Read every file named by `paths` (files, directories or globs) as one raw frame.

    `timezone` is the zone of naive timestamps (None: UTC); `price_scale` divides every price (100: cents to dollars).
    Returns (frame with RAW_SCHEMA columns, files [{path, size_bytes, rows, timestamps}]), where timestamps is "naive",
    "aware", "epoch" or "date": how the file wrote its times. Raises InputError for anything a user can fix: a missing
    or unreadable file, a missing column, text where numbers belong, unparseable timestamps, mixed bar sizes.
    """
    entries = expand_paths(paths)
    frames, files = [], []
    for idx, (path, default_name) in enumerate(entries):
        frame, kind = read_file(path, default_name, timestamp_col, symbol_col, timezone)
        if price_scale != 1.0:
            frame = frame.with_columns(pl.col(c) / price_scale for c in PRICE_COLS)
        frames.append(
            frame.with_columns(
                pl.lit(idx, dtype=pl.UInt32).alias("file_idx"), pl.int_range(pl.len()).alias("row")
            )
        )
        files.append({"path": str(path), "size_bytes": path.stat().st_size, "rows": frame.height, "timestamps": kind})
    check_bar_sizes(frames, [f["path"] for f in files])
    return pl.concat([f.select(list(RAW_SCHEMA)) for f in frames], how="vertical"), files


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
    out = out.with_columns(pl.lit(0, dtype=pl.UInt32).alias("file_idx"), pl.int_range(pl.len()).alias("row"))
    return out.select(list(RAW_SCHEMA)), {"path": name, "size_bytes": 0, "rows": frame.height, "timestamps": kind}


def check_bar_sizes(frames: list[pl.DataFrame], paths: list[str]) -> None:
    """Refuse files of different bar sizes, naming two of them: compare Databento `rtype`s where both files have one,
    else the median spacing of consecutive bars within an instrument (files with one bar per instrument are skipped).
    """
    rtype_sets = [set(f.get_column("rtype").drop_nulls().unique().to_list()) for f in frames]
    # Spacings are only compared where a file has no rtype (a sort of every file): skip them for Databento files.
    spaced = not all(rtype_sets)
    sizes = [(r, _median_spacing(f) if spaced else 0) for r, f in zip(rtype_sets, frames, strict=True)]
    for i, (rtypes, _) in enumerate(sizes):
        if len(rtypes) > 1:
            kinds = " and ".join(RTYPE_NAMES.get(r, f"rtype {r}") for r in sorted(rtypes))
            raise InputError(
                f"{paths[i]}: holds {kinds} bars in one file; keep one bar size per run (split the file by rtype)"
            )
    first_rtype = next((i for i, (r, _) in enumerate(sizes) if r), None)
    first_spacing = next((i for i, (_, s) in enumerate(sizes) if s), None)
    for i, (rtypes, spacing) in enumerate(sizes):
        j = first_rtype
        if rtypes and j is not None:  # rtype names the bar size exactly; a sparse contract's spacing does not
            if rtypes != sizes[j][0]:
                a, b = RTYPE_NAMES.get(min(sizes[j][0]), "?"), RTYPE_NAMES.get(min(rtypes), "?")
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


def _median_spacing(frame: pl.DataFrame) -> int:
    """Median spacing in ns of consecutive bars of one instrument; 0 if none."""
    gaps = (
        frame.select("symbol", "instrument_id", "ts")
        .sort("symbol", "instrument_id", "ts", nulls_last=True)
        .select(gap=pl.col("ts").diff().over("symbol", "instrument_id").dt.total_nanoseconds())
        .filter(pl.col("gap") > 0)
        .get_column("gap")
    )
    return int(gaps.median()) if gaps.len() else 0


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
    path: Path, default_name: str, timestamp_col: str | None, symbol_col: str | None, timezone: str | None = None
) -> tuple[pl.DataFrame, str]:
    """Read one file into normalised columns (without file_idx/row); also how it wrote its times (see read_bars)."""
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
    return _normalise(frame, path, default_name, timestamp_col, symbol_col, timezone)


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
    return pl.DataFrame({k: v.alias(k) for k, v in out.items()}), kind


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
        time_col = _match(names, "time") if col.lower() == "date" and joined_time else None
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
        s = s.cast(pl.Int64, strict=False)  # uint64 past int64 becomes null
        if fixed_point:
            return s.set(s == UNDEF_PRICE, None).cast(pl.Float64) / FIXED_SCALE
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
