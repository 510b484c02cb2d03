"""One bar file (parquet, CSV, Databento DBN) read into the normalised columns every later stage reads.

Every file, whatever its origin, comes out as the same columns so that later stages never look at formats
(`RAW_SCHEMA`):

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
  low close volume (case-insensitive, or a vendor's name for them: VALUE_ALIASES) and an optional symbol column
  (SYMBOL_CANDIDATES). Naive timestamps are wall-clock time in
  `timezone` (`--timezone`, default UTC), aware ones are converted to UTC; integer timestamps are epoch counts (UTC)
  whose unit (s, ms, us, ns) is read from their size. Text times are ISO 8601 or read by `--date-format`
  (times.py). A daily bar is then labelled by its date where it was stamped (dates.py).
  A CSV with separate `date` and `time` columns gets them joined.
- A file without a symbol column is one series named after the file stem (for a directory or glob: after the folder),
  unless a hive `symbol=` folder above it names it (partitions.py).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from foxhunt.data.io.dates import UTC_ZONES, dated, wall_in, written_offsets
from foxhunt.data.io.dbn import read_dbn
from foxhunt.data.io.scan import read_error
from foxhunt.data.io.times import from_epoch, localize, raise_bad_time, text_times
from foxhunt.data.util.listing import listing
from foxhunt.errors import InputError

PRICE_COLS = ("open", "high", "low", "close")
VALUE_COLS = (*PRICE_COLS, "volume")
TIME_CANDIDATES = ("ts_event", "timestamp", "datetime", "date", "time")
# Symbol columns as vendors name them, in order of preference (a file with `symbol` and `contract` reads `symbol`):
# Databento (symbol, raw_symbol), Barchart/CQG exports (contract), Interactive Brokers (local_symbol), Refinitiv (ric,
# instrument), Tushare (ts_code).
SYMBOL_CANDIDATES = ("symbol", "ticker", "raw_symbol", "contract", "local_symbol", "instrument", "ric", "ts_code")
# The value columns as vendors name them, in order of preference (a file with Close and Last reads Close): CQG, IQFeed
# and Sierra Chart write the close as Last, settlement files (Nasdaq Data Link's CHRIS) as Settle, Investing.com as
# Price with Vol.; Polygon's aggregates are o h l c v. IQFeed's TotalVolume is the day's running total, not the bar's.
VALUE_ALIASES = {
    "open": ("open", "o"),
    "high": ("high", "h"),
    "low": ("low", "l"),
    "close": ("close", "last", "settle", "settlement", "price", "c"),
    "volume": ("volume", "vol", "vol.", "v"),
}
FIXED_SCALE = 1e9  # Databento FIXED_PRICE_SCALE
UNDEF_PRICE = 2**63 - 1  # Databento null price in fixed-point files
RAW_SCHEMA = {
    "file_idx": pl.UInt32,
    "row": pl.UInt32,
    "ts": pl.Datetime("ns", "UTC"),
    **dict.fromkeys(VALUE_COLS, pl.Float64),
    "symbol": pl.Utf8,
    "instrument_id": pl.Int64,
    "rtype": pl.UInt8,
}


def read_file(
    path: Path, default_name: str, timestamp_col: str | None, symbol_col: str | None, timezone: str | None = None,
    date_format: str | None = None,
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
    return normalise(frame, path, default_name, timestamp_col, symbol_col, timezone, date_format)


def _read_parquet(path: Path, timestamp_col: str | None, symbol_col: str | None) -> pl.DataFrame:
    try:
        names = list(pl.read_parquet_schema(path))
        cols = wanted_columns(names, path, timestamp_col, symbol_col)
        return pl.read_parquet(path, columns=cols)
    except InputError:
        raise
    except Exception as e:  # polars raises several types for truncated or foreign files
        raise read_error(path, e) from None


def _read_csv(path: Path, timestamp_col: str | None, symbol_col: str | None) -> pl.DataFrame:
    try:
        names = pl.read_csv(path, n_rows=0).columns
        cols = wanted_columns(names, path, timestamp_col, symbol_col)
        # Text first, numbers later: a bad cell then gives an error naming its row instead of a parser failure.
        return pl.read_csv(path, columns=cols, schema_overrides=dict.fromkeys(cols, pl.Utf8))
    except InputError:
        raise
    except Exception as e:
        raise InputError(
            f"{path}: cannot read it as CSV ({_one_line(e)}); check the file is comma-separated text"
        ) from None


def wanted_columns(names: list[str], path: Path, timestamp_col: str | None, symbol_col: str | None) -> list[str]:
    """The source columns to read, in any order; errors name the columns that were found."""
    found = find_columns(names, path, timestamp_col, symbol_col)
    cols = [c for c in found.values() if c is not None]
    if found["time"] is not None and found["time"].lower() == "date":
        time_col = match_column(names, "time")  # date + time columns in separate fields
        if time_col is not None and timestamp_col is None:
            cols.append(time_col)
    return list(dict.fromkeys(cols))


def _required(names: list[str], column: str, flag: str, path: Path, shown: str) -> str:
    """The column a flag names (case-insensitive); a one-line error naming the flag when the file lacks it."""
    match = match_column(names, column)
    if match is None:
        raise InputError(f"{path}: no column {column!r} (from {flag}); found columns: {shown}")
    return match


def find_columns(names: list[str], path: Path, timestamp_col: str | None, symbol_col: str | None) -> dict:
    found: dict[str, str | None] = {}
    shown = listing(names, 12)
    if timestamp_col is not None:
        found["time"] = _required(names, timestamp_col, "--timestamp-col", path, shown)
    else:
        found["time"] = time_column(names)
        if found["time"] is None:
            raise InputError(
                f"{path}: no time column (looked for {', '.join(TIME_CANDIDATES)}); found columns: {shown};"
                " name it with --timestamp-col"
            )
    found.update({c: value_column(names, c) for c in VALUE_COLS})
    missing = [c for c in VALUE_COLS if found[c] is None]
    if missing and match_column(names, "instrument_class") is not None and match_column(names, "raw_symbol") is not None:
        raise InputError(f"{path}: holds Databento definition records, not OHLCV bars; pass an ohlcv-1s/1m/1h/1d file")
    if missing:
        also = "; ".join(f"{c} as {', '.join(VALUE_ALIASES[c])}" for c in missing)
        raise InputError(
            f"{path}: missing required column(s) {', '.join(missing)}; found columns: {shown}; the file needs open,"
            f" high, low, close and volume, under these names or the vendors' ({also}; any case): rename the"
            " columns that hold them to one of these"
        )
    if symbol_col is not None:
        found["symbol"] = _required(names, symbol_col, "--symbol-col", path, shown)
    else:
        found["symbol"] = symbol_column(names)
    found["instrument_id"] = match_column(names, "instrument_id")
    found["rtype"] = match_column(names, "rtype")
    return found


def time_column(names: list[str]) -> str | None:
    """The first of TIME_CANDIDATES among `names` (as the file spells it), else pandas' unnamed index, else None.

    Shared with files that are not bars (the events calendar), so every file foxhunt reads finds its times alike."""
    found = next((m for c in TIME_CANDIDATES if (m := match_column(names, c)) is not None), None)
    if found is None and "__index_level_0__" in names:
        found = "__index_level_0__"  # pandas wrote an unnamed DatetimeIndex
    return found


def normalise(
    frame: pl.DataFrame,
    path: Path,
    default_name: str,
    timestamp_col: str | None,
    symbol_col: str | None,
    timezone: str | None,
    date_format: str | None = None,
) -> tuple[pl.DataFrame, str]:
    names = frame.columns
    found = find_columns(names, path, timestamp_col, symbol_col)
    key = found["symbol"] or found["instrument_id"]  # each bar's series, for its date (dates.py)
    series = frame.get_column(key).cast(pl.Utf8) if key is not None else default_name
    ts, kind = parse_time(frame, found["time"], names, path, timestamp_col is None, timezone or "UTC", date_format,
                          series)
    out = {"ts": ts}
    # Databento's OHLCV frames always carry rtype and instrument_id; only their integer prices are fixed-point.
    databento = found["rtype"] is not None and found["instrument_id"] is not None
    for c in VALUE_COLS:
        out[c] = numeric(frame.get_column(found[c]), path, found[c], fixed_point=databento and c in PRICE_COLS)
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


def parse_time(
    frame: pl.DataFrame, col: str, names: list[str], path: Path, joined_time: bool, timezone: str,
    date_format: str | None = None, series: pl.Series | str | None = None,
) -> tuple[pl.Series, str]:
    """Any timestamp representation -> (Datetime("ns", "UTC"), "naive" | "aware" | "epoch" | "date").

    Text is read by times.text_times (by `date_format` when given; a text `date` column joined with a `time` column
    beside it when `joined_time`, a space between them); other types never need a format. Naive times are wall-clock
    times in `timezone`; a naive time that does not exist there (the hour skipped when daylight saving starts), any
    null or bad text, an ambiguous day/month order or a mix of naive and offset times raises InputError naming the
    row. `series`: for bars (the bar files and their own columns), each row's series (a str: the file's one series):
    daily bars are then labelled by their date where they were stamped (dates.py); None for other files.
    """
    s = frame.get_column(col)
    dtype = s.dtype
    zone = "UTC"  # the zone of the wall clock the times were written in
    written: pl.Series | None = None  # text times that carry their own UTC offsets: their wall clock
    if dtype == pl.String:
        time_col = match_column(names, "time") if col.lower() == "date" and joined_time else None
        text = s.str.strip_chars()
        if time_col is not None:
            text = text + " " + frame.get_column(time_col).cast(pl.Utf8).str.strip_chars()
        out, kind = text_times(text, path, col, timezone, date_format)
        zone, written = (timezone if kind == "naive" else "UTC"), (text if kind == "aware" else None)
    elif isinstance(dtype, pl.Datetime):
        kind = "naive" if dtype.time_zone is None else "aware"
        out = localize(s, s, timezone, path, col) if kind == "naive" else s.dt.convert_time_zone("UTC")
        zone = dtype.time_zone or timezone
    elif dtype == pl.Date:
        out, kind = s.cast(pl.Datetime("ns")).dt.replace_time_zone("UTC"), "date"
    elif dtype.is_integer():
        out, kind = from_epoch(s)
    else:
        raise InputError(
            f"{path}: column {col!r} has type {dtype}, not a timestamp; pass --timestamp-col or convert it"
        )
    out = out.cast(pl.Datetime("ns", "UTC"))
    raise_bad_time(out.is_null(), s, path, col)  # shown as text only on error: a 2M-row cast costs seconds
    if series is None or (written is None and zone in UTC_ZONES):
        return out, kind
    ts_ns = out.dt.epoch("ns").to_numpy()  # (N,)
    wall = wall_in(ts_ns, zone) if written is None else ts_ns + written_offsets(written)
    return dated(out, wall, series), kind


def numeric(
    s: pl.Series, path: Path, col: str, fixed_point: bool, what: str = "prices and volume"
) -> pl.Series:
    """Numbers as Float64; text that is not a number raises naming the row (`what` the column holds, for the message:
    user covariates read through here too, features/covariate_files.py).

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
                    f"{path}: column {col!r} row {i + 1}: {text[i]!r} is not a number; {what} must be numeric"
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
        f"{path}: column {col!r} has type {s.dtype}, not numeric; {what} must be numbers"
    )


def value_column(names: list[str], value: str) -> str | None:
    """The column of `names` that holds `value` (open, high, low, close or volume): the first of its VALUE_ALIASES
    the file has, as the file spells it; None if none."""
    return next((m for alias in VALUE_ALIASES[value] if (m := match_column(names, alias)) is not None), None)


def symbol_column(names: list[str]) -> str | None:
    """The first of SYMBOL_CANDIDATES among a file's column names (case and spaces ignored), as the file spells it."""
    return next((m for c in SYMBOL_CANDIDATES if (m := match_column(names, c)) is not None), None)


def match_column(names: list[str], wanted: str) -> str | None:
    """The column of `names` that is `wanted` up to case and surrounding spaces, as the file spells it; None if absent."""
    w = wanted.strip().lower()
    return next((n for n in names if n.strip().lower() == w), None)


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__
