"""Daily bars are labelled by their date where they were stamped.

The daily pipeline reads a daily bar's date as the UTC date of its timestamp (`ts // DAY`: the forecast grid and its
holidays, the calendar inputs, the forecast steps, the dates printed). A bar stamped at midnight of 2017-07-25 in
Asia/Shanghai (a naive date read with --timezone, or a zone-aware time) is 2017-07-24 16:00 UTC, a day early; one
stamped at midnight in Berlin is 23:00 UTC the day before. So the bar readers (normalise.parse_time, for the bar files
and their own columns; api/bars.py, for the stream's bars) label each daily bar whose UTC date is not its local date
(its date on the wall clock where it was stamped: --timezone for naive times, the column's zone or the UTC offset
written for aware ones) at UTC midnight of its local date. Every other bar keeps its time: UTC stamps, a close at
16:00 New York (21:00 UTC, the same date), midnight in Chicago (05:00 UTC), intraday bars.

Bars are daily when consecutive bars of one series are 20 hours or more apart (their median gap: the bar size, as
the read stage measures it); a file with no two bars of one series (one file per day) is daily when every stamp is
at local midnight: it holds dates. The stream's bars are daily when the model's are.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from foxhunt.data.io.times import OFFSET
from foxhunt.data.util.clock import DAY_NS, INTRADAY_MAX_NS, local_ns
from foxhunt.data.util.median import median_gap
from foxhunt.data.util.runs import changes

UTC_ZONES = ("UTC", "Etc/UTC")
SORTED_SHARE = 0.9  # neighbouring rows of one series, in time order, at least this share of a file's: no sort


def date_labels(ts_ns: np.ndarray, wall_ns: np.ndarray) -> np.ndarray:
    """(N,) UTC ns labels of daily bars at UTC ns `ts_ns` (N,) whose wall clock where they were stamped is `wall_ns`
    (N,, naive ns): the bar's own time where its UTC date is its local date, else UTC midnight of the local date."""
    day = wall_ns // DAY_NS  # (N,) the local date
    return np.where(ts_ns // DAY_NS == day, ts_ns, day * DAY_NS)


def wall_in(ts_ns: np.ndarray, zone: str | None) -> np.ndarray | None:
    """(N,) naive ns: the wall clock in `zone` of UTC ns `ts_ns`; None for UTC (or None), where it is `ts_ns`."""
    return None if zone is None or zone in UTC_ZONES else local_ns(ts_ns, zone)


def written_offsets(text: pl.Series) -> np.ndarray:
    """(N,) int64 ns: the UTC offset each text time ends with (0 where it ends with none)."""
    tail = text.str.extract(OFFSET).str.replace("Z", "+00:00").str.replace(":", "")  # (N,) "+0800"
    sign = pl.when(tail.str.slice(0, 1) == "-").then(-1).otherwise(1)
    minutes = tail.str.slice(1, 2).cast(pl.Int64) * 60 + tail.str.slice(3, 2).cast(pl.Int64)
    offset = pl.select((sign * minutes).fill_null(0) * (60 * 10**9)).to_series()
    return offset.to_numpy().astype(np.int64)


def dated(ts: pl.Series, wall_ns: np.ndarray | None, series: pl.Series | str) -> pl.Series:
    """`ts` (Datetime("ns", "UTC")) of bars with daily bars labelled by their local date (`date_labels`); `wall_ns`
    (N,) their wall clock where they were stamped (None: UTC); `series` each bar's series (a str: the file's one
    series). `ts` itself wherever no bar moves: intraday bars, UTC stamps, stamps on their local date."""
    if wall_ns is None:
        return ts
    ts_ns = ts.dt.epoch("ns").to_numpy()  # (N,)
    if not (ts_ns // DAY_NS != wall_ns // DAY_NS).any() or not _daily(ts_ns, wall_ns, series):
        return ts
    return pl.Series(ts.name, date_labels(ts_ns, wall_ns)).cast(pl.Datetime("ns", "UTC"))


def _daily(ts_ns: np.ndarray, wall_ns: np.ndarray, series: pl.Series | str) -> bool:
    """The median gap between consecutive bars of one series (the bar size, as the read stage measures it) is a day
    or more (INTRADAY_MAX_NS); without two bars of one series, every stamp is at local midnight."""
    gaps = _gaps(ts_ns, series)
    if len(gaps) == 0:
        return bool((wall_ns % DAY_NS == 0).all())
    return median_gap(gaps) >= INTRADAY_MAX_NS


def _gaps(ts_ns: np.ndarray, series: pl.Series | str) -> np.ndarray:
    """(G,) the positive gaps between consecutive bars of one series: read between neighbouring rows where the
    rows come in runs of one series in time order (most files: no sort of an intraday file's millions of rows),
    else after sorting them by series and time."""
    step = np.diff(ts_ns)  # (N - 1,)
    same = np.ones(len(step), dtype=bool) if isinstance(series, str) else ~changes(series)[1:]  # (N - 1,)
    if same.sum() >= SORTED_SHARE * len(step) and (step[same] >= 0).all():
        return step[same & (step > 0)]
    keys = pl.Series("s", [series] * len(ts_ns)) if isinstance(series, str) else series.alias("s")
    gaps = pl.DataFrame([keys, pl.Series("t", ts_ns)]).sort("s", "t").select(pl.col("t").diff().over("s")).to_series()
    return gaps.filter(gaps > 0).to_numpy()
