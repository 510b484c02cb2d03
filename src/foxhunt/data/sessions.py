"""Exchange sessions per futures root: when a root's session opens and closes, and the share of bars that fall
where the exchange is closed (the check that catches local timestamps read as UTC).

A session for trade date d opens at `open_min` (minutes after local midnight) on d-1 and closes at `close_min` on d;
between them lies the daily halt, and from Friday's close to Sunday's open the weekend. The sessions come from
pandas-market-calendars (`pip install 'foxhunt[calendars]'`) through `ROOT_CALENDARS`, read once per install of it
(`calendar_sessions`); without the package, or for a root not in the table, every root gets the CME Globex equity
session, 17:00-16:00 America/Chicago (`CME_EQUITY`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

import numpy as np
import polars as pl

from foxhunt.atomic import write_json
from foxhunt.cache import cache_dir
from foxhunt.data.runs import changes, run_lengths
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")

DAY_MIN = 24 * 60
MIN_NS = 60 * 10**9
DAY_NS = DAY_MIN * MIN_NS


@dataclass(frozen=True)
class Session:
    calendar: str  # the pandas-market-calendars name, or "default"
    tz: str
    open_min: int  # the next trade date's session opens this many minutes after local midnight
    close_min: int  # and the current one closes at this minute

    @property
    def shift_min(self) -> int:
        """Minutes to add to a local time so that its date is the trade date (17:00 open: 7 h)."""
        return (DAY_MIN - self.open_min) % DAY_MIN


CME_EQUITY = Session("default", "America/Chicago", 17 * 60, 16 * 60)

_EQUITY = ("ES", "MES", "NQ", "MNQ", "YM", "MYM", "RTY", "M2K", "EMD")
_ENERGY = ("CL", "MCL", "QM", "NG", "QG", "RB", "HO")
_METALS = ("GC", "MGC", "SI", "SIL", "HG", "PL", "PA")
_RATES = ("ZT", "ZF", "ZN", "TN", "ZB", "UB")
_FX = ("6A", "6B", "6C", "6E", "6J", "6M", "6N", "6S")
_GRAINS = ("ZC", "ZS", "ZW", "ZM", "ZL", "ZO", "KE")
ROOT_CALENDARS = {
    **dict.fromkeys(_EQUITY, "CME Globex Equity"),
    **dict.fromkeys(_ENERGY, "CMEGlobex_Energy"),
    **dict.fromkeys(_METALS, "CMEGlobex_Metals"),
    **dict.fromkeys(_RATES, "CME_Bond"),
    **dict.fromkeys(_FX, "CMEGlobex_FX"),
    **dict.fromkeys(_GRAINS, "CMEGlobex_Grains"),
}


@cache
def session_for(root: str | None) -> Session:
    """The session of a futures root (or of a plain symbol spelled like one, e.g. a vendor's continuous "CL")."""
    name = ROOT_CALENDARS.get(root or "")
    sessions = calendar_sessions() if name is not None else None
    return CME_EQUITY if sessions is None else sessions[name]


CACHE_FILE = "sessions.json"


@cache
def calendar_sessions() -> dict[str, Session] | None:
    """The session of every calendar in ROOT_CALENDARS, from pandas-market-calendars; None without the package.

    Importing it (with pandas and exchange_calendars) costs about a second in every process that loads bars, each
    `foxhunt` command and each `prepare` worker, for six small records. So they are kept in the cache folder under
    a key of the installed package's files (path, size, modification times): an upgrade or reinstall reads them anew.
    """
    key = _package_key()
    if key is None:
        return None
    path = cache_dir() / CACHE_FILE
    names = sorted(set(ROOT_CALENDARS.values()))
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved["key"] == key and sorted(saved["sessions"]) == names:
            return {n: Session(**saved["sessions"][n]) for n in names}
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or unreadable: read the calendars
        pass
    try:
        import pandas_market_calendars as mcal
    except ImportError:
        return None
    sessions = {n: _latest_session(n, mcal.get_calendar(n)) for n in names}
    with contextlib.suppress(OSError):  # a read-only home only costs the next run the import
        write_json(path, {"key": key, "sessions": {n: asdict(t) for n, t in sessions.items()}})
    return sessions


def _package_key() -> str | None:
    """What identifies the installed pandas-market-calendars, without importing it; None when it is not installed."""
    try:
        spec = importlib.util.find_spec("pandas_market_calendars")
    except (ImportError, ValueError):  # ValueError: sys.modules holds None for it (import blocked)
        return None
    if spec is None or spec.origin is None:
        return None
    try:
        init, folder = os.stat(spec.origin), os.stat(os.path.dirname(spec.origin))
    except OSError:
        return None
    return f"{spec.origin}:{init.st_size}:{init.st_mtime_ns}:{folder.st_mtime_ns}"


def _latest_session(name: str, cal: Any) -> Session:
    times = cal.regular_market_times
    opens, closes = times["market_open"][-1][1], times["market_close"][-1][1]  # the latest rule of each
    return Session(name, str(cal.tz), opens.hour * 60 + opens.minute, closes.hour * 60 + closes.minute)


def _per_root(root: pl.Expr, field: str) -> pl.Expr:
    """A Session field per row, looked up by root (every table root, so no data is needed to build it)."""
    roots = list(ROOT_CALENDARS)
    values = [getattr(session_for(r), field) for r in roots]
    return root.replace_strict(roots, values, default=getattr(CME_EQUITY, field), return_dtype=pl.Int64)


def session_shift(root: pl.Expr) -> pl.Expr:
    """Minutes from a bar's local time to its trade date, per row (see `Session.shift_min`)."""
    return _per_root(root, "shift_min")


CLOSED_CHUNK = 1 << 18  # bars whose exchange time closed_share takes at a time
WEEK_MIN = 7 * DAY_MIN


def closed_share(df: pl.DataFrame, exchange_tz: str, runs: np.ndarray | None = None) -> float:
    """Share of bars stamped strictly inside a closed period of their root's session: the daily halt or the weekend.

    `df` has columns ts (UTC) and root (null for plain symbols, which are looked up by their symbol). Real bars stamped
    at their start or their end never fall strictly inside: a share above zero means the stamps are shifted, as when
    naive Chicago times are read as UTC (the Sunday-evening bars then land in the weekend, the evening bars in the halt).
    Whether a minute is closed depends only on the session and the minute of the week, so the bars are counted by
    (session, minute of the week) and the counts read against a table of the week's closed minutes per session.
    `runs` (R,): the first row of each run of one symbol, when the caller has them (see `_sessions_by_run`).
    """
    if df.height == 0:
        return 0.0
    sessions, kind = _sessions_by_run(df, runs)  # (S,) distinct sessions, (N,) each bar's (None: all the first)
    closed_minutes = np.concatenate([_closed_minutes(t) for t in sessions])  # (S * WEEK_MIN,)
    ts = df.get_column("ts").dt.epoch("ns").to_numpy()
    counts = np.zeros(len(closed_minutes), dtype=np.int64)
    for lo in range(0, len(ts), CLOSED_CHUNK):  # in slices: the int64 temporaries of all bars would take 100 MB
        sl = slice(lo, lo + CLOSED_CHUNK)
        counts += _week_minute_counts(ts[sl], exchange_tz, None if kind is None else kind[sl], len(closed_minutes))
    closed = int(counts[closed_minutes].sum())
    return float(np.float64(closed) / len(ts))  # as np.mean of the flags: their exact count over N


SEGMENTS_MAX = 64  # runs of one UTC offset in a slice up to which each is counted apart (more: bar by bar)


def _week_minute_counts(ts: np.ndarray, tz: str, kind: np.ndarray | None, size: int) -> np.ndarray:
    """(size,) how many of the bars `ts` (C,) fall on each (session `kind` (C,), minute of the week of their naive
    `tz` time, Monday 00:00 = 0), the minute of the week of `local_ns(ts, tz)`.

    local_ns takes one UTC offset per quarter-hour. With whole-minute offsets (every zone today) the local minute is
    the UTC minute moved by the offset, so the bars of a stretch of one offset (a DST period: a handful per slice of
    bars sorted by symbol and ts) are counted by UTC minute of the week and the counts moved by the offset, without
    a bar-sized offset array; otherwise each bar's wall clock is taken as local_ns gives it.
    """
    # calendar.py imports this module (CME_EQUITY), so its local_ns is imported at call time
    from foxhunt.data.calendar import QUARTER_NS, local_ns

    minute = ts // MIN_NS  # (C,) UTC minutes since the epoch (a Thursday: + 3 days from a Monday)
    key = minute // (QUARTER_NS // MIN_NS)  # (C,) quarter-hours, as local_ns takes its offsets
    starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]])) if len(key) else key  # (Q,)
    probe = key[starts] * QUARTER_NS
    del key
    offset = local_ns(probe, tz) - probe  # (Q,)
    if np.any(offset % MIN_NS):  # an offset of odd seconds (before the zones were standardized)
        minute = (local_ns(ts, tz) // MIN_NS + 3 * DAY_MIN) % WEEK_MIN
        return np.bincount(minute if kind is None else minute + kind * WEEK_MIN, minlength=size)
    move = offset // MIN_NS + 3 * DAY_MIN  # (Q,)
    first = np.flatnonzero(np.concatenate([[True], move[1:] != move[:-1]]))  # (G,) stretches of one offset
    minute %= WEEK_MIN
    if kind is None and len(first) <= SEGMENTS_MAX:
        counts = np.zeros(size, dtype=np.int64)
        bounds = np.append(starts[first], len(ts))
        for lo, hi, by in zip(bounds[:-1], bounds[1:], move[first], strict=True):
            counts += np.roll(np.bincount(minute[lo:hi], minlength=WEEK_MIN), by)
        return counts
    minute += np.repeat(move, run_lengths(starts, len(ts)))
    minute %= WEEK_MIN
    return np.bincount(minute if kind is None else minute + kind * WEEK_MIN, minlength=size)


def _sessions_by_run(df: pl.DataFrame, runs: np.ndarray | None = None) -> tuple[list[Session], np.ndarray | None]:
    """The distinct sessions of `df`'s bars (root, else symbol, else the default) and (N,) the index of each bar's
    among them (None when there is one). Bars come in runs of one symbol: each run's key is looked up once.
    `runs` (R,): the first row of each run of one symbol (`runs.run_starts_of`; root is the symbol's, so a run has
    one root too), when the caller has them: then no column is compared row by row here."""
    names = [c for c in ("root", "symbol") if c in df.columns]
    if runs is not None and "symbol" in names:
        starts = runs  # (R,)
    else:
        change = changes(df.get_column("root"))
        if len(names) > 1 and df.get_column("root").null_count():  # the symbol names the session only without a root
            change |= changes(df.get_column("symbol"))
        starts = np.flatnonzero(change)  # (R,)
    at = df.select(pl.col(names).gather(pl.Series(starts, dtype=pl.get_index_type())))  # (R,) each run's names
    key = at.select(pl.coalesce(names).alias("key")).get_column("key")  # (R,)
    distinct = key.drop_nulls().unique().sort().to_list()
    table = [*map(session_for, distinct), CME_EQUITY]  # the last: a bar with neither root nor symbol
    sessions = list(dict.fromkeys(table))
    if len(sessions) == 1:
        return sessions, None
    kind = np.array([sessions.index(t) for t in table], dtype=np.int64)  # (D + 1,)
    code = key.cast(pl.Enum(distinct)).to_physical().fill_null(len(distinct)).to_numpy()  # (R,)
    return sessions, np.repeat(kind[code], run_lengths(starts, df.height))


def _closed_minutes(session: Session) -> np.ndarray:
    """(WEEK_MIN,) bool: minutes of the week (Monday 00:00 = 0) strictly inside the session's daily halt or weekend."""
    week = np.arange(WEEK_MIN)
    minute, weekday = week % DAY_MIN, week // DAY_MIN + 1  # Monday 1 .. Sunday 7, as polars counts
    open_, close = session.open_min, session.close_min
    halt = (minute > close) & (minute < open_)
    weekend = (weekday == 6) | ((weekday == 5) & (minute > close)) | ((weekday == 7) & (minute < open_))
    return halt | weekend


CLOSED_LIMIT = 0.01  # bars strictly inside closed periods above this share: the timestamps are shifted
KIND_TEXT = {"aware": "timestamps with a zone", "epoch": "epoch timestamps", "date": "dates"}
INTRADAY_MAX_NS = 20 * 3600 * 10**9  # median spacing below this: intraday bars (daily stamps carry no time of day)


def check_session_grid(
    df: pl.DataFrame, files: list[dict], timezone: str | None, exchange_tz: str, step_ns: float | None,
    *, runs: np.ndarray | None = None,
) -> dict:
    """Check intraday bars against their roots' session grid; returns {timezone, closed_share} for the load report.

    `df` has ts, symbol and root; `step_ns` is the median bar spacing (None without two bars of one instrument);
    `files` the read stage's entries (path, timestamps); `runs` (R,) the first row of each run of one symbol, when
    the caller has them. With naive
    timestamps and no `timezone` given, a closed share above CLOSED_LIMIT stops the run (they are most likely local
    exchange times read as UTC); otherwise it is a warning. closed_share is None for daily or coarser bars.
    """
    naive = [f["path"] for f in files if f.get("timestamps") == "naive"]
    zone = timezone or "UTC"
    kinds = {f.get("timestamps") for f in files} - {"naive", None}
    written = ", ".join(KIND_TEXT.get(k, k) for k in sorted(kinds))
    used = f"{zone} (naive timestamps)" if naive else f"UTC ({written or 'timestamps with a zone'})"
    if step_ns is None or step_ns >= INTRADAY_MAX_NS:
        return {"timezone": used, "closed_share": None}
    share = closed_share(df, exchange_tz, runs)
    if share > CLOSED_LIMIT:
        what = (
            f"{100 * share:.1f}% of the bars fall where the exchange is closed (the daily halt or the weekend,"
            f" {exchange_tz} time)"
        )
        if naive and timezone is None:
            raise InputError(
                f"{naive[0]}: {what} when its naive timestamps are read as UTC; if they are exchange time pass"
                " --timezone America/Chicago (or the zone they are in), or --timezone UTC to keep them as UTC"
            )
        log.warning("%s with timestamps read as %s; check --timezone", what, zone)
    return {"timezone": used, "closed_share": share}
