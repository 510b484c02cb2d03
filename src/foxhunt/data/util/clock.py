"""Wall-clock time from UTC timestamps: the time constants and the zone conversion every stage shares.

`local_ns` converts UTC ns to naive wall-clock ns of a zone; sessions (bars/sessions.py), the forecast grid
(bars/grid.py), trade dates (bars/symbols.py), the seasonal profile and the calendar features all read it, so it
lives below all of them.
"""

from __future__ import annotations

import datetime as dt
import functools
from zoneinfo import ZoneInfo

import numpy as np
import polars as pl

from foxhunt.data.util.runs import run_lengths

MIN_NS = 60 * 10**9
DAY_NS = 86_400 * 10**9
QUARTER_NS = 15 * MIN_NS
DAY_MIN = 24 * 60
WEEK_MIN = 7 * DAY_MIN
INTRADAY_MAX_NS = 20 * 3600 * 10**9  # median spacing below this: intraday bars (daily stamps carry no time of day)


def local_ns(ts_ns: np.ndarray, tz: str) -> np.ndarray:
    """Wall-clock time in `tz` as ns since the epoch (naive), for UTC ns `ts_ns`.

    UTC offsets change only on quarter-hour boundaries, so one instant per quarter-hour is converted and its offset
    applied to every timestamp in it: O(N) numpy instead of N time-zone look-ups. When the data span few quarter-hours
    for their number (intraday bars, several series over the same days) every quarter-hour of the span is converted
    once and looked up; otherwise one instant per run of equal quarter-hours (daily bars over decades).
    """
    if len(ts_ns) == 0:
        return ts_ns.copy()
    key = ts_ns // QUARTER_NS
    lo, hi = int(key.min()), int(key.max())
    if hi - lo < len(key) // SPAN_ROWS:  # a table of the whole span: no run detection, one gather
        return ts_ns + _quarter_offsets(lo, hi, tz)[key - lo]
    starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
    if FEW_PROBES < len(starts) and hi - lo < SPAN_RUNS * len(starts):  # runs that nearly fill the span
        offset = _quarter_offsets(lo, hi, tz)[key[starts] - lo]
    else:
        offset = _offsets(key[starts] * QUARTER_NS, tz)
    return ts_ns + np.repeat(offset, run_lengths(starts, len(ts_ns)))


SPAN_RUNS = 8  # runs of one quarter-hour read from the span's table when they number over 1/8 of its quarter-hours


OFFSET_TABLE_MAX = 1 << 20  # quarter-hours (30 years) of offsets kept per zone at most


_OFFSET_TABLES: dict[str, tuple[int, np.ndarray]] = {}  # zone -> (first quarter-hour, (Q,) read-only offsets)


def _quarter_offsets(lo: int, hi: int, tz: str) -> np.ndarray:
    """(hi - lo + 1,) int64 UTC offsets in ns of zone `tz` at quarter-hours lo..hi (QUARTER_NS since the epoch).

    Loading and preparing convert the same days a dozen times (trade dates, the session grid, the seasonality's
    minutes, the calendar features, the forecast grid: ~45,000 quarter-hours each for 2M bars over four years), so
    each zone's offsets are kept in one table, computed once for the span asked and grown to cover a later call's:
    a slice of it is what `_offsets` gives for those quarter-hours, value for value (the same conversion of each)."""
    if hi - lo < FEW_PROBES:
        return _offsets(np.arange(lo, hi + 1, dtype=np.int64) * QUARTER_NS, tz)
    held = _OFFSET_TABLES.get(tz)
    if held is not None and held[0] <= lo and hi < held[0] + len(held[1]):
        return held[1][lo - held[0] : hi - held[0] + 1]
    first, last = lo, hi
    if held is not None and max(hi, held[0] + len(held[1]) - 1) - min(lo, held[0]) < OFFSET_TABLE_MAX:
        first, last = min(lo, held[0]), max(hi, held[0] + len(held[1]) - 1)  # the union: one table per zone
    table = _offsets(np.arange(first, last + 1, dtype=np.int64) * QUARTER_NS, tz)
    if last - first < OFFSET_TABLE_MAX:
        table.setflags(write=False)
        _OFFSET_TABLES[tz] = (first, table)
    return table[lo - first : hi - first + 1]


def _offsets(probe: np.ndarray, tz: str) -> np.ndarray:
    """(P,) int64 UTC offsets in ns of zone `tz` at UTC ns instants `probe` (P,)."""
    if len(probe) <= FEW_PROBES:  # a live bar and its forecast steps: zoneinfo directly, no polars series to build
        return np.array([_offset_ns(int(p), tz) for p in probe], dtype=np.int64)
    wall = pl.Series(probe).cast(pl.Datetime("ns", "UTC")).dt.convert_time_zone(tz).dt.replace_time_zone(None)
    return wall.dt.epoch("ns").to_numpy() - probe


SPAN_ROWS = 16  # look quarter-hours up in a table of the span when it has fewer than one per this many timestamps


FEW_PROBES = 16  # up to this many quarter-hours a Python zoneinfo look-up each beats building a polars series


@functools.lru_cache(maxsize=4096)  # a live stream asks for the same few quarter-hours over and over
def _offset_ns(utc_ns: int, tz: str) -> int:
    """The UTC offset of zone `tz` at a whole-second UTC instant, in ns."""
    offset = dt.datetime.fromtimestamp(utc_ns // 10**9, dt.UTC).astimezone(ZoneInfo(tz)).utcoffset()
    return int(offset.total_seconds()) * 10**9 if offset is not None else 0


def weekday(days: np.ndarray) -> np.ndarray:
    return (days + 3) % 7  # 1970-01-01 was a Thursday; Monday 0 .. Sunday 6
