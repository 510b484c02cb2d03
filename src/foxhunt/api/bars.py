"""Bars handed to the Python API, as the loader and the stream take them: frames (polars or pandas), the tail of a
parquet file, and single bars (dicts or one-row-per-series frames) for `Forecaster.update`."""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from foxhunt.data.bars.symbols import FUTURES_RE
from foxhunt.data.io.dates import date_labels, wall_in, written_offsets
from foxhunt.data.io.normalise import SYMBOL_CANDIDATES, TIME_CANDIDATES, VALUE_COLS
from foxhunt.data.io.times import text_times
from foxhunt.errors import InputError

FRAME_NAME = "<DataFrame>"  # stands for a path in the loader's messages about a frame in memory
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def as_polars(df: Any) -> pl.DataFrame:
    """A polars frame of `df` (polars or pandas; a pandas DatetimeIndex becomes a column, as `reset_index()`)."""
    if isinstance(df, pl.DataFrame):
        return df
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency of the loader's extras only
        pd = None
    if pd is not None and isinstance(df, pd.DataFrame):
        if not isinstance(df.index, pd.RangeIndex):
            df = df.reset_index()
        return pl.from_pandas(df)
    raise InputError(f"expected a polars or pandas DataFrame of bars, got {type(df).__name__}; pass a DataFrame")


def parquet_tail(path: str | Path, rows_per_series: int, symbol_col: str | None) -> pl.DataFrame:
    """The last row groups of a parquet file (in time order) until every symbol read has `rows_per_series` rows or
    the file is read whole: the rows a forecast needs, without reading the rest of a long history."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found; check the path")
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for truncated or foreign files
        raise InputError(f"{path}: cannot read it as parquet ({' '.join(str(e).split())[:200]}); re-export it") from None
    names = pf.schema_arrow.names
    sym = _column(names, (symbol_col,) if symbol_col else SYMBOL_CANDIDATES)
    parts: list[pa.Table] = []
    for g in range(pf.num_row_groups - 1, -1, -1):
        parts.insert(0, pf.read_row_group(g))
        table = pa.concat_tables(parts)
        if sym is None:
            if table.num_rows >= rows_per_series:
                break
            continue
        counts = pl.from_arrow(table.select([sym])).to_series().value_counts()["count"]  # rows per symbol read
        if int(counts.min()) >= rows_per_series:
            break
    out = pl.from_arrow(pa.concat_tables(parts)) if parts else pl.DataFrame()
    assert isinstance(out, pl.DataFrame)
    return out


def _column(names: list[str], candidates: tuple[str, ...]) -> str | None:
    lower = {n.strip().lower(): n for n in names}
    return next((lower[c.lower()] for c in candidates if c and c.lower() in lower), None)


class StreamBars:
    """New bars for `update`, one per series: series names (B,), contracts (B,) (None when not given), times (B,)
    int ns UTC, open high low close volume (B, 5) floats and the --fill-gaps flag (B,): plain Python values, which
    the stream's per-series arithmetic reads without numpy's per-element cost. `observed` (B, Ou): the fields the
    model takes as --observed inputs, as given (None where a bar has none); None for a model without them."""

    def __init__(self, names: list[str], contracts: list[str | None], ts_ns: list[int], ohlcv: list[list[float]],
                 filled: list[bool], observed: list[list[Any]] | None = None):
        self.names, self.contracts, self.ts_ns, self.ohlcv, self.filled = names, contracts, ts_ns, ohlcv, filled
        self.observed = observed


class _Keys:
    """Where a bar record keeps its symbol, time, values and `filled`: found once per distinct set of keys (a live
    feed sends the same keys on every bar)."""

    def __init__(self, rec: Mapping[str, Any]):
        keys = {str(k).strip().lower(): k for k in rec}
        self.symbol = next((keys[c] for c in ("symbol", "series", *SYMBOL_CANDIDATES) if c in keys), None)
        self.time = next((keys[c] for c in TIME_CANDIDATES if c in keys), None)
        self.missing = next((c for c in VALUE_COLS if c not in keys), None)
        self.values = [keys[c] for c in VALUE_COLS if c in keys]
        self.filled = keys.get("filled")


_KEYS: dict[tuple, _Keys] = {}


def _keys(rec: Mapping[str, Any]) -> _Keys:
    sig = tuple(rec)
    found = _KEYS.get(sig)
    if found is None:
        if len(_KEYS) > 64:  # a feed whose keys keep changing: keep the table small
            _KEYS.clear()
        found = _KEYS[sig] = _Keys(rec)
    return found


def stream_bars(bar: Any, series_of: Mapping[str, str], only: str | None, timezone: str | None,
                fields: Sequence[str] = (), date_format: str | None = None, daily: bool = False) -> StreamBars:
    """`bar`: a dict (one bar) or a frame (one row per series) with a time column (ts_event, timestamp, ...),
    open high low close volume, a symbol (the series' name or its current contract; optional with one series),
    optionally `filled`, and the model's --observed columns `fields` by their exact names. `series_of` maps each series' current contract to the series; `only` is the one series a bar without a symbol
    belongs to (None: several, so a symbol is required). Naive times are in `timezone` (None: UTC); text times are
    read by the model's --date-format when it was given (data/io/times.py, as the files were), else as ISO 8601.
    `daily` (the model's bars are): each bar is labelled by its date where it was stamped, as the files' daily bars
    are (data/io/dates.py)."""
    if isinstance(bar, Mapping):
        records = [bar]
    else:
        records = as_polars(bar).to_dicts()
    if not records:
        raise InputError("update: no bar given; pass a dict or a frame with one row per series")
    names, contracts, times, walls, values, filled = [], [], [], [], [], []
    observed: list[list[Any]] | None = [] if fields else None
    for rec in records:  # one per series: a handful
        k = _keys(rec)
        if k.symbol is None and only is None:
            raise InputError("update: the bar has no symbol and the forecaster holds several series; add a 'symbol'")
        symbol = str(rec[k.symbol]).strip() if k.symbol is not None else only
        name, contract = _series(symbol, series_of)
        names.append(name)
        contracts.append(contract)
        if k.time is None:
            raise InputError(f"update: the bar of {symbol!r} has no time ({', '.join(TIME_CANDIDATES)}); add 'ts_event'")
        ts, wall = _ns(rec[k.time], timezone, symbol, date_format)
        times.append(ts)
        walls.append(wall)
        if k.missing is not None:
            raise InputError(f"update: the bar of {symbol!r} has no {k.missing!r}; a bar needs "
                             f"{', '.join(VALUE_COLS)}")
        try:
            values.append([float(rec[c]) for c in k.values])
        except (TypeError, ValueError):
            raise InputError(f"update: the bar of {symbol!r} has a price or volume that is not a number") from None
        filled.append(bool(rec[k.filled]) if k.filled is not None else False)
        if observed is not None:
            observed.append([rec.get(f) for f in fields])
    if daily:
        times = date_labels(np.array(times, dtype=np.int64), np.array(walls, dtype=np.int64)).tolist()
    return StreamBars(names, contracts, times, values, filled, observed)


def _series(symbol: str, series_of: Mapping[str, str]) -> tuple[str, str | None]:
    """(series, contract) of a bar's symbol: a series' own name continues it (contract None: unchanged); its
    current contract too; another contract of a futures root the stream holds is that series rolling (which the
    stream refuses); anything else is a series of its own."""
    if symbol in series_of.values():
        return symbol, None
    if symbol in series_of:
        return series_of[symbol], symbol
    m = re.match(FUTURES_RE, symbol)
    if m is not None and m.group(1) in series_of.values():
        return m.group(1), symbol
    return symbol, symbol


def _ns(value: Any, timezone: str | None, symbol: str, date_format: str | None = None) -> tuple[int, int]:
    """A bar time (datetime, pandas Timestamp, numpy datetime64, ISO text or epoch ns) as (int ns UTC, its wall clock
    where it was stamped as naive ns: data/io/dates.py); naive times are wall-clock times in `timezone` (None: UTC),
    as the loader reads them, aware ones keep their own zone's wall clock."""
    if type(value).__module__.startswith("pandas"):  # a pandas Timestamp: exact to the nanosecond
        stamp = value if value.tzinfo is not None else value.tz_localize(timezone or "UTC")
        return int(stamp.tz_convert("UTC").value), int(stamp.tz_localize(None).value)
    if isinstance(value, np.datetime64):
        value = value.astype("datetime64[ns]")
        if timezone is None:
            return int(value.astype(np.int64)), int(value.astype(np.int64))
        value = value.astype("datetime64[us]").item()
    if isinstance(value, str) and date_format is not None:
        text = pl.Series([value.strip()])
        read, kind = text_times(text, Path(f"update: the bar of {symbol!r}"), "time", timezone or "UTC", date_format)
        ts = read.dt.epoch("ns").to_numpy()  # (1,)
        wall = ts + written_offsets(text) if kind == "aware" else wall_in(ts, timezone if kind == "naive" else None)
        return int(ts[0]), int(ts[0] if wall is None else wall[0])
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InputError(f"update: the bar of {symbol!r} has time {value!r}, not ISO 8601") from None
    if isinstance(value, dt.datetime):
        wall = (value.replace(tzinfo=None) - EPOCH.replace(tzinfo=None)) // dt.timedelta(microseconds=1) * 1000
        if value.tzinfo is None:
            value = value.replace(tzinfo=ZoneInfo(timezone) if timezone else dt.UTC)
        return (value - EPOCH) // dt.timedelta(microseconds=1) * 1000, wall
    if isinstance(value, dt.date):
        day = (value - EPOCH.date()).days * 86_400 * 10**9
        return day, day
    if isinstance(value, int | np.integer) or (isinstance(value, float) and math.isfinite(value)):
        return int(value), int(value)
    raise InputError(f"update: the bar of {symbol!r} has time {value!r} of type {type(value).__name__}; pass a "
                     "datetime or epoch nanoseconds")
