"""Exchange sessions per futures root: when a root's session opens and closes, and the share of bars that fall
where the exchange is closed (the check that catches local timestamps read as UTC).

A session for trade date d opens at `open_min` (minutes after local midnight) on d-1 and closes at `close_min` on d;
between them lies the daily halt, and from Friday's close to Sunday's open the weekend. The sessions come from
pandas-market-calendars (`pip install 'foxhunt[calendars]'`) through `ROOT_CALENDARS`, read once per install of it
(`calendar_sessions`); without the package, or for a root not in the table, every root gets the CME Globex equity
session, 17:00-16:00 America/Chicago (`CME_EQUITY`). `--calendar NAME` (`calendar_session`) gives every bar the one
session of a pandas-market-calendars calendar instead; `24/7` (`ALWAYS_OPEN`) needs no package: it never closes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
from dataclasses import asdict, dataclass, replace
from functools import cache
from typing import Any

import numpy as np
import polars as pl

from foxhunt.atomic import write_json
from foxhunt.cache import cache_dir
from foxhunt.data.util.clock import DAY_MIN, DAY_NS, INTRADAY_MAX_NS, MIN_NS, QUARTER_NS, WEEK_MIN, local_ns
from foxhunt.data.util.runs import changes, run_lengths
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")


@dataclass(frozen=True)
class Session:
    calendar: str  # the pandas-market-calendars name, or "default"
    tz: str
    open_min: int  # a trade date's session opens this many minutes after local midnight of day `open_day`
    close_min: int  # and closes at this minute of day `close_day`
    open_day: int = -1  # relative to the trade date: -1, the evening before (CME Globex); 0 the same day (NYSE)
    close_day: int = 0  # 1: the next midnight (a 24-hour session)
    weekdays: tuple[int, ...] = (0, 1, 2, 3, 4)  # the trade dates' weekdays, Monday 0
    # ISO dates of the trade dates on `weekdays` with no session (`--calendar`'s, as far as its calendar knows
    # them); empty for the roots' sessions, which only the closed-bars check reads.
    holidays: tuple[str, ...] = ()

    @property
    def shift_min(self) -> int:
        """Minutes to add to a local time so that its date is the trade date (17:00 open: 7 h)."""
        return -self.open_day * DAY_MIN - self.open_min  # the open is the trade date's midnight

    @property
    def length_min(self) -> int:
        """Minutes from a trade date's open to its close (CME Globex: 23 h; XNYS: 6.5 h)."""
        return (self.close_day - self.open_day) * DAY_MIN + self.close_min - self.open_min

    @property
    def always_open(self) -> bool:
        """No minute of the week is closed (24/7)."""
        return len(self.weekdays) == 7 and self.length_min >= DAY_MIN


CME_EQUITY = Session("default", "America/Chicago", 17 * 60, 16 * 60)
ALWAYS_OPEN = Session("24/7", "UTC", 0, 0, open_day=0, close_day=1, weekdays=(0, 1, 2, 3, 4, 5, 6))

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
            return {n: session_of(saved["sessions"][n]) for n in names}
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


def session_of(saved: dict[str, Any]) -> Session:
    """A Session read back from JSON (`dataclasses.asdict`'s: its weekdays and holidays come back as lists)."""
    return Session(**{**saved, "weekdays": tuple(saved["weekdays"]), "holidays": tuple(saved["holidays"])})


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
    opens, closes = times["market_open"][-1], times["market_close"][-1]  # the latest rule of each
    days = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
    mask = str(getattr(cal, "weekmask", "Mon Tue Wed Thu Fri")).split()
    return Session(name, str(cal.tz), opens[1].hour * 60 + opens[1].minute, closes[1].hour * 60 + closes[1].minute,
                   open_day=opens[2] if len(opens) > 2 else 0, close_day=closes[2] if len(closes) > 2 else 0,
                   weekdays=tuple(i for i, d in enumerate(days) if d in mask))


CALENDAR_LIST = "python -c \"import pandas_market_calendars as m; print(m.get_calendar_names())\""


def calendar_session(name: str) -> Session:
    """The session of `--calendar NAME`: 24/7 without any package, else the pandas-market-calendars calendar's
    latest regular hours. One line naming the option when the package is missing or the name is unknown."""
    if name == ALWAYS_OPEN.calendar:
        return ALWAYS_OPEN
    return _named_session(name)


def run_session(calendar: str | None) -> Session | None:
    """The session a run gives every bar (`--calendar`), or None without the option (per root, the default grid)."""
    return None if calendar is None else calendar_session(calendar)


@cache
def _named_session(name: str) -> Session:
    try:
        import pandas_market_calendars as mcal
    except ImportError:
        raise InputError(f"--calendar {name!r} needs pandas-market-calendars: pip install 'foxhunt[calendars]' "
                         "(--calendar 24/7 needs nothing)") from None
    if name not in mcal.get_calendar_names():
        raise InputError(f"--calendar {name!r} is not a pandas-market-calendars name (e.g. 24/7, CME Globex Equity, "
                         f"XNYS); list them with {CALENDAR_LIST}")
    cal = mcal.get_calendar(name)
    session = _latest_session(name, cal)
    return replace(session, holidays=_holidays(cal, session.weekdays))


def _holidays(cal: Any, weekdays: tuple[int, ...]) -> tuple[str, ...]:
    """ISO dates of the calendar's holidays on its trading weekdays (regular and ad hoc closures: National Day
    week for XSHG, 9/11 for XNYS), sorted: every one it knows, so that a model forecasts past them for as long as
    the calendar knows them (rule-based ones to 2200; XSHG's published list to its last year)."""
    days = np.unique(np.asarray(cal.holidays().holidays, dtype="datetime64[D]"))  # (H,)
    on_weekday = np.isin((days.astype(np.int64) + 3) % 7, weekdays)  # 1970-01-01 was a Thursday
    return tuple(np.datetime_as_string(days[on_weekday]).tolist())


def _per_root(root: pl.Expr, field: str) -> pl.Expr:
    """A Session field per row, looked up by root (every table root, so no data is needed to build it)."""
    roots = list(ROOT_CALENDARS)
    values = [getattr(session_for(r), field) for r in roots]
    return root.replace_strict(roots, values, default=getattr(CME_EQUITY, field), return_dtype=pl.Int64)


def session_shift(root: pl.Expr) -> pl.Expr:
    """Minutes from a bar's local time to its trade date, per row (see `Session.shift_min`)."""
    return _per_root(root, "shift_min")


CLOSED_CHUNK = 1 << 18  # bars whose exchange time closed_share takes at a time


def closed_share(df: pl.DataFrame, exchange_tz: str, runs: np.ndarray | None = None,
                 session: Session | None = None) -> float:
    """Share of bars stamped strictly inside a closed period of their root's session: the daily halt or the weekend.

    `df` has columns ts (UTC) and root (null for plain symbols, which are looked up by their symbol). Real bars stamped
    at their start or their end never fall strictly inside: a share above zero means the stamps are shifted, as when
    naive Chicago times are read as UTC (the Sunday-evening bars then land in the weekend, the evening bars in the halt).
    Whether a minute is closed depends only on the session and the minute of the week, so the bars are counted by
    (session, minute of the week) and the counts read against a table of the week's closed minutes per session.
    `runs` (R,): the first row of each run of one symbol, when the caller has them (see `_sessions_by_run`).
    `session`: every bar's (`--calendar`), instead of its root's.
    """
    if df.height == 0 or (session is not None and session.always_open):
        return 0.0
    # (S,) distinct sessions, (N,) each bar's (None: all the first)
    sessions, kind = ([session], None) if session is not None else _sessions_by_run(df, runs)
    table = np.concatenate([closed_minutes(t) for t in sessions])  # (S * WEEK_MIN,)
    ts = df.get_column("ts").dt.epoch("ns").to_numpy()
    counts = np.zeros(len(table), dtype=np.int64)
    for lo in range(0, len(ts), CLOSED_CHUNK):  # in slices: the int64 temporaries of all bars would take 100 MB
        sl = slice(lo, lo + CLOSED_CHUNK)
        counts += _week_minute_counts(ts[sl], exchange_tz, None if kind is None else kind[sl], len(table))
    closed = int(counts[table].sum())
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


def closed_minutes(session: Session, close_open: bool = True) -> np.ndarray:
    """(WEEK_MIN,) bool: minutes of the week (Monday 00:00 = 0) strictly inside the session's daily halt or weekend:
    in no trade date's session, its open and close minutes counted open (bars stamped at either end are real).
    `close_open=False`: the close minute counted closed, [open, close), as the forecast grid takes it (its bars are
    stamped at their start: the last bar of a 16:00 close starts before 16:00; grid.grid_of)."""
    open_ = np.zeros(WEEK_MIN, dtype=bool)
    for day in session.weekdays:
        start = (day + session.open_day) * DAY_MIN + session.open_min
        end = (day + session.close_day) * DAY_MIN + session.close_min
        open_[np.arange(start, end + close_open) % WEEK_MIN] = True
    return ~open_


CLOSED_LIMIT = 0.01  # bars strictly inside closed periods above this share: the timestamps are shifted
KIND_TEXT = {"aware": "timestamps with a zone", "epoch": "epoch timestamps", "date": "dates"}


def check_session_grid(
    df: pl.DataFrame, files: list[dict], timezone: str | None, exchange_tz: str, step_ns: float | None,
    *, runs: np.ndarray | None = None, calendar: str | None = None, model: bool = False,
) -> dict:
    """Check intraday bars against their roots' session grid (or `calendar`'s, `--calendar`, for every bar);
    returns {timezone, closed_share} for the load report.

    `df` has ts, symbol and root; `step_ns` is the median bar spacing (None without two bars of one instrument);
    `files` the read stage's entries (path, timestamps); `runs` (R,) the first row of each run of one symbol, when
    the caller has them. With naive timestamps and no `timezone` given, a closed share above CLOSED_LIMIT stops
    the run (they are most likely local exchange times read as UTC, or bars of a market with other hours than
    the exchange's); otherwise it is a warning. closed_share is None for daily or coarser bars. `model`: the bars
    are read for a saved model (predict, evaluate, export), whose calendar is its own: the advice names --timezone
    (the zone of the file's naive times), never --calendar.
    """
    naive = [f["path"] for f in files if f.get("timestamps") == "naive"]
    zone = timezone or "UTC"
    kinds = {f.get("timestamps") for f in files} - {"naive", None}
    written = ", ".join(KIND_TEXT.get(k, k) for k in sorted(kinds))
    used = f"{zone} (naive timestamps)" if naive else f"UTC ({written or 'timestamps with a zone'})"
    if step_ns is None or step_ns >= INTRADAY_MAX_NS:
        return {"timezone": used, "closed_share": None}
    session = run_session(calendar)
    share = closed_share(df, exchange_tz, runs, session)
    # End stamps put a bar at the close, not inside the closed hours: shifted bars (a zone misread) fill those too
    if session is not None and share <= CLOSED_LIMIT and stamped_at_end(df.get_column("ts").dt.epoch("ns").to_numpy(),
                                                                         session):
        log.warning("%s: the bars sit at the %s close (%s) and never at its open (%s): they look stamped at their end; "
                    "foxhunt reads a bar's time as its start, so a forecast's first step after the close lands on the "
                    "open: move the stamps back one bar (e.g. timestamp - %s) before reading them",
                    files[0]["path"] if files else "bars", calendar,
                    _hhmm(session.close_min), _hhmm(session.open_min), _span_text(step_ns))
    if share > CLOSED_LIMIT:
        where = f"the {calendar} calendar is closed" if calendar is not None else "the exchange is closed"
        what = f"{100 * share:.1f}% of the bars fall where {where} (the daily halt or the weekend, {exchange_tz} time)"
        hint = _calendar_hint(df, calendar, model)
        if naive and timezone is None:
            raise InputError(
                f"{naive[0]}: {what} when its naive timestamps are read as UTC; {hint}if they are exchange time "
                f"pass --timezone {exchange_tz} (or the zone they are in), or --timezone UTC to keep them as UTC"
            )
        if model:  # the likelier cause first: a naive file written in another zone than the model's bars
            zoned = f"if {naive[0]}'s naive times are in another zone pass --timezone ZONE; " if naive else ""
            log.warning("%s with timestamps read as %s; %s%s", what, zone, zoned, hint.removesuffix("; "))
        else:
            log.warning("%s with timestamps read as %s; %scheck --timezone", what, zone, hint)
    return {"timezone": used, "closed_share": share}


END_STAMP_DAYS = 5  # close-minute bars (and no open-minute one) from which bars are taken as stamped at their end


def stamped_at_end(ts_ns: np.ndarray, session: Session) -> bool:
    """Whether intraday bars of a day session (it opens and closes on the trade date, XNYS's 09:30-16:00) look
    stamped at their end: bars at its closing minute on END_STAMP_DAYS or more days, none at its opening minute.
    A bar stamped at its start never sits at the close (the session is over), one stamped at its end never at the open."""
    if session.always_open or session.open_day != session.close_day:
        return False
    minute = (local_ns(ts_ns, session.tz) % DAY_NS) // MIN_NS  # (N,) minute of the local day
    return int(np.count_nonzero(minute == session.close_min)) >= END_STAMP_DAYS and not (minute == session.open_min).any()


def _hhmm(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def _span_text(step_ns: float) -> str:
    minutes = round(step_ns / MIN_NS)
    return f"{minutes // 60}h" if minutes % 60 == 0 else f"{minutes}m"


WEEKEND_TRADING = 0.1  # bars on Saturdays (UTC) above this share: a market that trades through the weekend


def _calendar_hint(df: pl.DataFrame, calendar: str | None, model: bool = False) -> str:
    """What `--calendar` to try: 24/7 for bars that trade on Saturdays, else a calendar of the market's hours; for
    a saved model (`model`), whose calendar is fixed, a model trained with the market's."""
    saturday = float((df.get_column("ts").dt.weekday() == 6).mean() or 0.0)
    weekend = saturday > WEEKEND_TRADING and calendar != ALWAYS_OPEN.calendar
    if model:
        market = "a market that never closes" if weekend else "another market's hours"
        return f"bars of {market} need a model trained with its calendar; "
    if weekend:
        return (f"{100 * saturday:.0f}% of them are on Saturdays: for a market that never closes pass --calendar "
                "24/7; ")
    other = "another" if calendar is None else "the right"
    return (f"if they follow {other} market's hours pass --calendar NAME (a pandas-market-calendars name, e.g. 24/7, "
            "XNYS, CME Globex Equity); ")
