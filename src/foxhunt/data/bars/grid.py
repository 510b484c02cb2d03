"""The regular bar grid of a session: where bars may sit, the trade date of a bar, the bar interval, and the
forecast steps after an origin.

The forecast grid (`future_timestamps`, `on_grid`) follows the run's session (`Grid`, from `--calendar`, saved with
the model): its closed minutes of the week and, for daily bars, its weekdays. Without --calendar (and for a model
saved before it) that is CME Globex Equity's in America/Chicago and none elsewhere (`default_grid`). --fill-gaps
(fill.py) fills bars on this grid, and the known inputs of forecast steps (features/known.py) are taken on it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from foxhunt.data.bars.sessions import ALWAYS_OPEN, CME_EQUITY, Session, closed_minutes, run_session
from foxhunt.data.util.clock import DAY_NS, MIN_NS, WEEK_MIN, local_ns, weekday
from foxhunt.data.util.median import median_gap, value_counts
from foxhunt.errors import InputError

SESSION_OPEN_MIN = CME_EQUITY.open_min  # minutes after local midnight when the (next day's) session opens
DAILY_MIN_SPACING_NS = 20 * 3600 * 10**9  # median bar spacing at or above this: daily (or coarser) bars


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
    spacing = median_gap(gaps[use])
    return spacing, 0 if cut_ns is None else median_gap(gaps[use & (ts_ns[1:] < cut_ns)])


def trade_day(ts_ns: np.ndarray, intraday: bool, tz: str) -> np.ndarray:
    """Days since the epoch of each bar's trade date: exchange date of ts + 7 h (intraday) or the UTC date (daily)."""
    if not intraday:
        return ts_ns // DAY_NS
    return wall_trade_day(local_ns(ts_ns, tz))


def wall_trade_day(wall: np.ndarray) -> np.ndarray:
    """Days since the epoch of the trade date of wall-clock times `wall` (the exchange date of wall + 7 h)."""
    return (wall + (24 * 60 - SESSION_OPEN_MIN) * MIN_NS) // DAY_NS


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
        return grid.open_weekdays[weekday(ts_ns // DAY_NS)]
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
            off = ~grid.open_weekdays[weekday(cur // DAY_NS)]
            while off.any():  # at most six times (twice for a Monday-Friday session)
                cur[off] += step
                off[off] = ~grid.open_weekdays[weekday(cur[off] // DAY_NS)]
        elif closes:
            off = np.flatnonzero(_closed(cur + offset, grid))
            while len(off):  # the jump lands on the grid at once; the loop only re-checks it
                wait = _grid_resume(cur[off], cur[off] + offset[off], grid) - cur[off]
                cur[off] += -(-np.maximum(wait, 1) // step) * step  # first lattice point at or after the resume
                offset[off] = local_ns(cur[off], grid.tz) - cur[off]
                off = off[_closed(cur[off] + offset[off], grid)]
        out[:, k] = cur
    return out


def gap_counts(ts: np.ndarray, sidx: np.ndarray, cut: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """(values, counts) of grid.median_spacing_ns's gaps (consecutive bars of a series, positive) of rows sorted
    by series and time: over all rows, and over the rows before `cut` (the training rows'). A series' rows before
    the cut start its run, so their gaps are those whose later bar is before it: one diff serves both."""
    gaps = np.diff(ts)  # (N - 1,)
    kept = (sidx[1:] == sidx[:-1]) & (gaps > 0)
    return value_counts(gaps[kept]), value_counts(gaps[kept & (ts[1:] < cut)])
