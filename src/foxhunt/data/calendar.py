"""Known-future calendar covariates from bar timestamps, and extrapolated timestamps for bars not yet seen.

Everything here is a function of the timestamp alone, so it is known for future bars too (the TFT's known inputs).
Missing bars (halts, weekends, holidays) are not invented in the data (only `--fill-gaps` does, see fill.py): the gaps
stay, and these features tell the model where in the week and in the session each bar sits. At forecast steps the
features are those of the regular grid after the origin (`future_timestamps`, used through known.py), never those of
the bars that follow.

Conventions (CME Globex, which foxhunt is built for):
- The session for trade date d opens at 17:00 exchange time on d-1 and runs 23 h; the trade date of an intraday bar
  is the exchange-time date of `ts + 7 h` (so Sunday-evening bars belong to Monday). These features use the CME
  equity session (sessions.CME_EQUITY) for every series; the loader's trade dates and rolls use each root's own.
- Daily bars are labelled by their UTC date. Converting a midnight-UTC daily stamp to Chicago time would move it to
  the previous day, so daily features never use `exchange_tz`.
- The forecast grid (`future_timestamps`, `on_grid`) follows the run's session (`Grid`, from `--calendar`, saved
  with the model): its closed minutes of the week and, for daily bars, its weekdays. Without --calendar (and for a
  model saved before it) that is CME Globex Equity's in America/Chicago and none elsewhere (`default_grid`).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from dataclasses import dataclass
from zoneinfo import ZoneInfo

import numpy as np
import polars as pl

from foxhunt.data.median import exact_median
from foxhunt.data.runs import run_lengths
from foxhunt.data.sessions import ALWAYS_OPEN, CME_EQUITY, Session, closed_minutes, run_session
from foxhunt.errors import InputError

SESSION_OPEN_MIN = CME_EQUITY.open_min  # minutes after local midnight when the (next day's) session opens
SESSION_LEN_MIN = 23 * 60
HALT_START_MIN = 16 * 60  # CME's regular close (16:00 CT): an earlier one is an early close
WEEK_MIN = 7 * 24 * 60
DAILY_MIN_SPACING_NS = 20 * 3600 * 10**9  # median bar spacing at or above this: daily (or coarser) bars
SESSION_CALENDAR = "CME Globex Equity"
DAY_NS = 86_400 * 10**9
MIN_NS = 60 * 10**9
QUARTER_NS = 15 * MIN_NS

INTRADAY_COLUMNS = ("tod_sin", "tod_cos", "dow_sin", "dow_cos", "session_elapsed")
DAILY_COLUMNS = ("dow_sin", "dow_cos", "month_sin", "month_cos")
INTRADAY_SESSION_COLUMNS = ("to_close", "early_close", "pre_holiday", "post_holiday")
DAILY_SESSION_COLUMNS = ("early_close", "pre_holiday", "post_holiday")


def calendar_columns(intraday: bool, sessions: bool) -> tuple[str, ...]:
    """Names of the per-row calendar features, in the order `calendar_features` returns them."""
    base = INTRADAY_COLUMNS if intraday else DAILY_COLUMNS
    extra = (INTRADAY_SESSION_COLUMNS if intraday else DAILY_SESSION_COLUMNS) if sessions else ()
    return base + extra


def median_spacing_ns(ts_ns: np.ndarray, series_idx: np.ndarray) -> int:
    """Median gap between consecutive bars of the same series (rows sorted by series, ts); 0 if none."""
    return median_spacings_ns(ts_ns, series_idx)[0]


def median_spacings_ns(ts_ns: np.ndarray, series_idx: np.ndarray, cut_ns: int | None = None) -> tuple[int, int]:
    """`median_spacing_ns` of all rows and of the rows before `cut_ns` (0 without it), from one pass of gaps.

    Rows sorted by (series, ts): a series' rows before the cut are a prefix of its rows, so two consecutive ones of
    them are consecutive rows, and their gaps are the gaps whose later bar is before the cut."""
    same = series_idx[1:] == series_idx[:-1]
    gaps = np.diff(ts_ns)  # (N - 1,)
    use = same & (gaps > 0)
    spacing = _median(gaps[use])
    return spacing, 0 if cut_ns is None else _median(gaps[use & (ts_ns[1:] < cut_ns)])


def _median(gaps: np.ndarray) -> int:
    return int(exact_median(gaps)) if len(gaps) else 0


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


def _weekday(days: np.ndarray) -> np.ndarray:
    return (days + 3) % 7  # 1970-01-01 was a Thursday; Monday 0 .. Sunday 6


def _cyc(out: dict[str, np.ndarray], name: str, x: np.ndarray, period: float) -> None:
    ang = x * (2.0 * math.pi / period)
    out[f"{name}_sin"], out[f"{name}_cos"] = np.sin(ang), np.cos(ang)


def _trade_day(ts_ns: np.ndarray, intraday: bool, tz: str) -> np.ndarray:
    """Days since the epoch of each bar's trade date: exchange date of ts + 7 h (intraday) or the UTC date (daily)."""
    if not intraday:
        return ts_ns // DAY_NS
    return _wall_trade_day(local_ns(ts_ns, tz))


def _wall_trade_day(wall: np.ndarray) -> np.ndarray:
    """Days since the epoch of the trade date of wall-clock times `wall` (the exchange date of wall + 7 h)."""
    return (wall + (24 * 60 - SESSION_OPEN_MIN) * MIN_NS) // DAY_NS


def calendar_features(ts_ns: np.ndarray, exchange_tz: str, intraday: bool, sessions: bool = False) -> dict:
    """Calendar features (float64 arrays named by `calendar_columns`, in that order) for UTC ns timestamps.

    Intraday: time of day and trade-date weekday (sin/cos), minutes since the 17:00 session open / 23 h in [0, 1].
    Daily: weekday and month of the UTC date (sin/cos). `sessions` adds CME Globex Equity schedule features.
    """
    return calendar_at(ts_ns, local_ns(ts_ns, exchange_tz) if intraday else None, sessions)


def calendar_at(ts_ns: np.ndarray, wall: np.ndarray | None, sessions: bool = False) -> dict:
    """`calendar_features` given the wall-clock times `wall` (local_ns in the exchange zone; None: daily bars)."""
    out: dict[str, np.ndarray] = {}
    intraday = wall is not None
    if intraday:
        minute = (wall % DAY_NS) / MIN_NS
        _cyc(out, "tod", minute, 24 * 60)
        _cyc(out, "dow", _weekday(_wall_trade_day(wall)), 7)
        out["session_elapsed"] = np.clip(
            ((minute - SESSION_OPEN_MIN) % (24 * 60)) / SESSION_LEN_MIN, 0.0, 1.0
        )
    else:
        _cyc(out, "dow", _weekday(ts_ns // DAY_NS), 7)
        _cyc(out, "month", ts_ns.astype("datetime64[ns]").astype("datetime64[M]").astype(np.int64) % 12, 12)
    if sessions:
        out.update(session_features(ts_ns, intraday))
    return {c: out[c] for c in calendar_columns(intraday, sessions)}


def _load_calendar():
    try:
        import pandas_market_calendars as mcal
    except ImportError:
        raise InputError(
            "--calendar-features needs pandas-market-calendars: pip install 'foxhunt[calendars]' "
            "(or drop --calendar-features)"
        ) from None
    return mcal.get_calendar(SESSION_CALENDAR)


def session_schedule(first_ns: int, last_ns: int) -> dict[str, np.ndarray]:
    """CME Globex Equity sessions around [first, last], sorted: day (trade date, days since the epoch), close_ns,
    early_close, pre_holiday, post_holiday.

    A holiday is a weekday with no session; `pre_holiday` / `post_holiday` mark the sessions right before and after
    one (weekends are not holidays). `early_close` is a close before 16:00 CT (e.g. 12:00 on Presidents' Day).
    """
    cal = _load_calendar()
    lo = np.datetime64(int(first_ns), "ns").astype("datetime64[D]") - 14
    hi = np.datetime64(int(last_ns), "ns").astype("datetime64[D]") + 14
    sched = cal.schedule(str(lo), str(hi))
    dates = sched.index.values.astype("datetime64[D]")
    close_ns = sched["market_close"].dt.tz_convert(None).to_numpy().astype("datetime64[ns]").astype(np.int64)
    close_min = (local_ns(close_ns, str(cal.tz)) % DAY_NS) // MIN_NS
    next_wd = np.busday_offset(dates, 1, roll="forward")
    prev_wd = np.busday_offset(dates, -1, roll="backward")
    return {
        "day": dates.astype(np.int64),
        "close_ns": close_ns,
        "early_close": (close_min < HALT_START_MIN).astype(np.float64),
        "pre_holiday": (~np.isin(next_wd, dates) & (next_wd <= dates[-1])).astype(np.float64),
        "post_holiday": (~np.isin(prev_wd, dates) & (prev_wd >= dates[0])).astype(np.float64),
    }


def session_features(ts_ns: np.ndarray, intraday: bool) -> dict[str, np.ndarray]:
    """Schedule features for each timestamp; bars outside any session (e.g. Sunday daily stubs) get zeros.

    Intraday adds `to_close`: minutes until the session close / 23 h, in [0, 1].
    """
    sched = session_schedule(int(ts_ns.min()), int(ts_ns.max()))
    day = _trade_day(ts_ns, intraday, "America/Chicago")
    pos = np.clip(np.searchsorted(sched["day"], day), 0, len(sched["day"]) - 1)
    hit = sched["day"][pos] == day  # (N,) the bar's trade date is a session
    out = {c: np.where(hit, sched[c][pos], 0.0) for c in DAILY_SESSION_COLUMNS}
    if intraday:
        left = (sched["close_ns"][pos] - ts_ns) / (MIN_NS * SESSION_LEN_MIN)
        out["to_close"] = np.where(hit, np.clip(left, 0.0, 1.0), 0.0)
    return out


@dataclass(frozen=True, eq=False)
class Grid:
    """Where the forecast grid's bars may sit: the closures of one session, as tables by minute of the week.

    closed: (WEEK_MIN,) bool, minutes of the week (Monday 00:00 = 0) of wall-clock time in `tz` with no session,
    [open, close) of each trade date (`sessions.closed_minutes(., close_open=False)`): the daily halt, the weekend.
    wait: (WEEK_MIN,) int64 minutes from each minute of the week to the next open one (0 where open): how far a
    closed candidate jumps. open_weekdays: (7,) bool, daily bars (UTC date, Monday 0): the weekdays with a session.
    shift_min: minutes from a wall-clock time to its trade date (`Session.shift_min`; --fill-gaps' sessions).
    Built once per session (`grid_of`); the CME Globex one is one such table, not a case of its own.
    """

    tz: str
    closed: np.ndarray
    wait: np.ndarray
    open_weekdays: np.ndarray
    shift_min: int

    @functools.cached_property
    def closes(self) -> bool:
        """Some minute of the week is closed (not 24/7): once per grid, read at every call of the grid's functions."""
        return bool(self.wait.any())

    def trade_day(self, ts_ns: np.ndarray) -> np.ndarray:
        """Days since the epoch of the trade date of intraday bars at UTC ns `ts_ns`: the date of their wall clock
        moved by `shift_min` (CME: 7 h, so a Sunday-evening bar belongs to Monday)."""
        return (local_ns(ts_ns, self.tz) + self.shift_min * MIN_NS) // DAY_NS


@functools.cache
def grid_of(session: Session) -> Grid:
    """The forecast grid of a session (`--calendar`'s, or CME Globex Equity's for a model saved before it)."""
    if not session.weekdays:
        raise InputError(f"calendar {session.calendar!r} has no trading weekday: no forecast grid")
    closed = closed_minutes(session, close_open=False)  # (WEEK_MIN,)
    opens = np.flatnonzero(~closed)  # (O,) sorted, not empty: a weekday has a session
    minute = np.arange(WEEK_MIN)
    at = np.searchsorted(opens, minute)  # (WEEK_MIN,) the first open minute at or after each, wrapping the week
    wait = np.where(at < len(opens), opens[np.minimum(at, len(opens) - 1)], opens[0] + WEEK_MIN) - minute
    weekdays = np.isin(np.arange(7), session.weekdays)
    for a in (closed, wait, weekdays):
        a.setflags(write=False)
    return Grid(session.tz, closed, wait.astype(np.int64), weekdays, session.shift_min)


@functools.cache
def default_grid(exchange_tz: str) -> Grid:
    """The grid without `--calendar` (and of every model saved before it): CME Globex Equity's in America/Chicago,
    no closure in any other zone (intraday); daily bars skip Saturday and Sunday either way."""
    if exchange_tz == CME_EQUITY.tz:
        return grid_of(CME_EQUITY)
    always = grid_of(ALWAYS_OPEN)
    return Grid(exchange_tz, always.closed, always.wait, grid_of(CME_EQUITY).open_weekdays, CME_EQUITY.shift_min)


def session_grid(calendar: str | None, exchange_tz: str) -> Grid:
    """The grid of a run's `--calendar NAME` (None: `default_grid` of the zone), as FittedTransform.grid keeps it."""
    session = run_session(calendar)
    return default_grid(exchange_tz) if session is None else grid_of(session)


def on_grid(ts_ns: np.ndarray, intraday: bool, exchange_tz: str, grid: Grid | None = None) -> np.ndarray:
    """(N,) bool: True where a bar of the regular forecast grid may sit.

    Daily bars: the weekdays (UTC date) the session opens. Intraday bars: outside its closures (`Grid.closed`,
    wall-clock time in the grid's zone). `grid` None: `default_grid(exchange_tz)`. Holidays are not known here and
    stay on it.
    """
    grid = grid or default_grid(exchange_tz)
    if not intraday:
        return grid.open_weekdays[_weekday(ts_ns // DAY_NS)]
    if not grid.closes:
        return np.ones(ts_ns.shape, dtype=bool)
    return ~_closed(local_ns(ts_ns.ravel(), grid.tz).reshape(ts_ns.shape), grid)


def _closed(wall: np.ndarray, grid: Grid) -> np.ndarray:
    """The grid's closure at wall-clock times `wall` (naive ns), looked up by the minute of the week."""
    return grid.closed[_week_minute(wall)]


def _week_minute(wall: np.ndarray) -> np.ndarray:
    """Minute of the week (Monday 00:00 = 0) of naive ns `wall`: (days + 3) % 7 * 1440 + minute of the day =
    (minutes + 3 * 1440) % WEEK_MIN (floor division; 1970-01-01 was a Thursday)."""
    return (wall // MIN_NS + 3 * 24 * 60) % WEEK_MIN


def _grid_resume(ts_ns: np.ndarray, wall: np.ndarray, grid: Grid) -> np.ndarray:
    """UTC ns of the next open minute of the grid at or after each closed instant (UTC `ts_ns`, wall clock `wall`):
    the end of the halt or, over a weekend, the week's open, from the `wait` table. DST changes fall inside
    closures (Sunday 02:00 for CME), so the offset is taken at a first guess of the resume time and applied once
    more."""
    resume_wall = (wall // MIN_NS + grid.wait[_week_minute(wall)]) * MIN_NS
    guess = resume_wall - (wall - ts_ns)
    return resume_wall - (local_ns(guess, grid.tz) - guess)


def future_timestamps(
    last_ns: np.ndarray, step_ns: int, n: int, intraday: bool, exchange_tz: str, grid: Grid | None = None
) -> np.ndarray:
    """(S, n) int64 timestamps of the next n grid bars after each timestamp `last_ns` (S,): the known future.

    This is the one definition of where the forecast steps of an origin lie. Training windows and `predict` both
    take the decoder's known inputs from it (see `WindowedData`), so they depend on the origin's timestamp, the bar
    interval and the step index only, never on which later bars happen to exist.

    The grid: bars every `step_ns` (the training data's median spacing) from the origin, keeping those `on_grid`
    (daily bars skip the weekdays the session never opens, intraday bars its closures: `grid`, the run's session;
    None: `default_grid(exchange_tz)`, CME Globex in America/Chicago, none elsewhere). Coarser than daily: plain
    multiples of the step. Vectorized over origins; one pass per step, an off-grid candidate jumps straight to the
    first lattice point after the closure.
    """
    grid = grid or default_grid(exchange_tz)
    step = max(int(step_ns), 1)
    daily = not intraday and step < 1.5 * DAY_NS
    if daily:
        step = DAY_NS
    closes = intraday and grid.closes
    out = np.empty((len(last_ns), n), dtype=np.int64)  # (S, n)
    cur = np.asarray(last_ns, dtype=np.int64).copy()
    # UTC offset of each origin: it only changes inside a closure (DST switches on Sunday 02:00 for CME), where the
    # candidate is closed and jumps; the offset is then looked up again for those few.
    offset = local_ns(cur, grid.tz) - cur if closes else None
    for k in range(n):  # the horizon's steps, each vectorized over all origins
        cur = cur + step
        if daily:
            off = ~grid.open_weekdays[_weekday(cur // DAY_NS)]
            while off.any():  # at most six times (twice for a Monday-Friday session)
                cur[off] += step
                off[off] = ~grid.open_weekdays[_weekday(cur[off] // DAY_NS)]
        elif closes:
            off = np.flatnonzero(_closed(cur + offset, grid))
            while len(off):  # the jump lands on the grid at once; the loop only re-checks it
                wait = _grid_resume(cur[off], cur[off] + offset[off], grid) - cur[off]
                cur[off] += -(-np.maximum(wait, 1) // step) * step  # first lattice point at or after the resume
                offset[off] = local_ns(cur[off], grid.tz) - cur[off]
                off = off[_closed(cur[off] + offset[off], grid)]
        out[:, k] = cur
    return out
