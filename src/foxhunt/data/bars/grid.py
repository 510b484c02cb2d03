"""The regular bar grid of a session: where bars may sit, the trade date of a bar, the bar interval, and the
forecast steps after an origin.

The forecast grid (`future_timestamps`, `on_grid`) follows the run's session (`Grid`, from `--calendar`, saved with
the model): its closed minutes of the week, its weekdays and its holidays (trade dates with no session: a daily
forecast from Friday 2016-09-30 on XSHG steps to 10-10, past National Day week). Without --calendar that is CME
Globex Equity's weekly closures in America/Chicago and none elsewhere, no holiday (`default_grid`). --fill-gaps (fill.py) fills bars on this grid, and the known inputs of forecast steps
(features/known.py) are taken on it.
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


def median_spacing_ns(ts_ns: np.ndarray, series_idx: np.ndarray) -> int:
    """Median gap between consecutive bars of the same series (rows sorted by series, ts); 0 if none."""
    gaps = np.diff(ts_ns)  # (N - 1,)
    return median_gap(gaps[(series_idx[1:] == series_idx[:-1]) & (gaps > 0)])


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
    holidays: (H,) int64 sorted days since the epoch: trade dates on an open weekday with no session (a daily bar's
    UTC date; an intraday bar's trade date, so its whole session is skipped). Empty without --calendar.
    Built once per session (`grid_of`); the CME Globex one is one such table, not a case of its own.
    """

    tz: str
    closed: np.ndarray
    wait: np.ndarray
    open_weekdays: np.ndarray
    shift_min: int
    holidays: np.ndarray

    @functools.cached_property
    def closes(self) -> bool:
        """Some minute of the week is closed (not 24/7): once per grid, read at every call of the grid's functions."""
        return bool(self.wait.any())

    def trade_day(self, ts_ns: np.ndarray) -> np.ndarray:
        """Days since the epoch of the trade date of intraday bars at UTC ns `ts_ns`: the date of their wall clock
        moved by `shift_min` (CME: 7 h, so a Sunday-evening bar belongs to Monday)."""
        return self.wall_trade_day(local_ns(ts_ns, self.tz))

    def wall_trade_day(self, wall: np.ndarray) -> np.ndarray:
        """`trade_day` of wall-clock times `wall` (naive ns in `tz`)."""
        return (wall + self.shift_min * MIN_NS) // DAY_NS

    @functools.cached_property
    def _holiday_table(self) -> np.ndarray:
        """(holidays[-1] - holidays[0] + 1,) bool: a day-indexed table of the holidays, read by `holiday` at every
        forecast step (one take, where a search of the sorted days cost half the grid's time)."""
        table = np.zeros(int(self.holidays[-1] - self.holidays[0]) + 1, dtype=bool)
        table[self.holidays - self.holidays[0]] = True
        return table

    def holiday(self, days: np.ndarray) -> np.ndarray:
        """(same shape) bool: days since the epoch `days` that are holidays (trade dates with no session)."""
        if not len(self.holidays):
            return np.zeros(np.shape(days), dtype=bool)
        table = self._holiday_table
        at = days - self.holidays[0]
        return table[np.clip(at, 0, len(table) - 1)] & (at >= 0) & (at < len(table))

    def closed_day(self, days: np.ndarray) -> np.ndarray:
        """(same shape) bool: days (daily bars' UTC dates) with no session: a weekday it never opens, a holiday."""
        return ~self.open_weekdays[weekday(days)] | self.holiday(days)


@functools.cache
def grid_of(session: Session) -> Grid:
    """The forecast grid of a session (`--calendar`'s, or CME Globex Equity's: `default_grid`)."""
    if not session.weekdays:
        raise InputError(f"calendar {session.calendar!r} has no trading weekday: no forecast grid")
    closed = closed_minutes(session, close_open=False)  # (WEEK_MIN,)
    opens = np.flatnonzero(~closed)  # (O,) sorted, not empty: a weekday has a session
    minute = np.arange(WEEK_MIN)
    at = np.searchsorted(opens, minute)  # (WEEK_MIN,) the first open minute at or after each, wrapping the week
    wait = np.where(at < len(opens), opens[np.minimum(at, len(opens) - 1)], opens[0] + WEEK_MIN) - minute
    weekdays = np.isin(np.arange(7), session.weekdays)
    holidays = np.array(session.holidays, dtype="datetime64[D]").astype(np.int64)  # (H,) sorted (sessions._holidays)
    wait = wait.astype(np.int64)
    for a in (closed, wait, weekdays, holidays):
        a.setflags(write=False)
    return Grid(session.tz, closed, wait, weekdays, session.shift_min, holidays)


@functools.cache
def default_grid(exchange_tz: str) -> Grid:
    """The grid without `--calendar`: CME Globex Equity's in America/Chicago, no closure in any other zone
    (intraday); daily bars skip Saturday and Sunday either way."""
    if exchange_tz == CME_EQUITY.tz:
        return grid_of(CME_EQUITY)
    always = grid_of(ALWAYS_OPEN)
    return Grid(exchange_tz, always.closed, always.wait, grid_of(CME_EQUITY).open_weekdays, CME_EQUITY.shift_min,
                always.holidays)


def session_grid(calendar: str | None, exchange_tz: str) -> Grid:
    """The grid of a run's `--calendar NAME` (None: `default_grid` of the zone), as FittedTransform.grid keeps it."""
    session = run_session(calendar)
    return default_grid(exchange_tz) if session is None else grid_of(session)


def on_grid(ts_ns: np.ndarray, intraday: bool, exchange_tz: str, grid: Grid | None = None) -> np.ndarray:
    """(N,) bool: True where a bar of the regular forecast grid may sit.

    Daily bars: the days (UTC date) the session opens, its weekdays less its holidays. Intraday bars: outside its
    closures (`Grid.closed`, wall-clock time in the grid's zone) and its holidays' sessions. `grid` None:
    `default_grid(exchange_tz)`, which knows no holiday.
    """
    grid = grid or default_grid(exchange_tz)
    if not intraday:
        return ~grid.closed_day(ts_ns // DAY_NS)
    if not _jumps(grid):
        return np.ones(ts_ns.shape, dtype=bool)
    return ~_shut(local_ns(ts_ns.ravel(), grid.tz).reshape(ts_ns.shape), grid)


def _jumps(grid: Grid) -> bool:
    """Intraday steps of the grid may jump: it has closures or holidays."""
    return grid.closes or len(grid.holidays) > 0


def _closed(wall: np.ndarray, grid: Grid) -> np.ndarray:
    """The grid's closure at wall-clock times `wall` (naive ns), looked up by the minute of the week."""
    return grid.closed[_week_minute(wall)]


def _shut(wall: np.ndarray, grid: Grid) -> np.ndarray:
    """No session at wall-clock times `wall` (naive ns): a closure of the week, or the trade date a holiday."""
    shut = _closed(wall, grid)
    return shut | grid.holiday(grid.wall_trade_day(wall)) if len(grid.holidays) else shut


def _week_minute(wall: np.ndarray) -> np.ndarray:
    """Minute of the week (Monday 00:00 = 0) of naive ns `wall`: (days + 3) % 7 * 1440 + minute of the day =
    (minutes + 3 * 1440) % WEEK_MIN (floor division; 1970-01-01 was a Thursday)."""
    return (wall // MIN_NS + 3 * 24 * 60) % WEEK_MIN


def _grid_resume(ts_ns: np.ndarray, wall: np.ndarray, grid: Grid) -> np.ndarray:
    """UTC ns of the next open minute of the grid at or after each closed instant (UTC `ts_ns`, wall clock `wall`):
    the end of the halt or, over a weekend, the week's open, from the `wait` table; where that open's trade date
    is a holiday, the start (open) of the trade date after it, which the caller checks again. DST changes fall
    inside closures (Sunday 02:00 for CME), so the offset is taken at a first guess of the resume time and applied
    once more."""
    resume_wall = (wall // MIN_NS + grid.wait[_week_minute(wall)]) * MIN_NS
    if len(grid.holidays):
        day = grid.wall_trade_day(resume_wall)
        resume_wall = np.where(grid.holiday(day), (day + 1) * DAY_NS - grid.shift_min * MIN_NS, resume_wall)
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
    (daily bars skip the days the session does not open: weekdays it never opens and its holidays; intraday bars
    its closures and its holidays' sessions: `grid`, the run's session; None: `default_grid(exchange_tz)`, CME
    Globex's closures in America/Chicago, none elsewhere, no holiday). Coarser than daily: plain multiples of the
    step. Vectorized over origins; one pass per step, an off-grid candidate jumps straight to the first lattice
    point after the closure (after a holiday, the next trade date's open).
    """
    grid = grid or default_grid(exchange_tz)
    step = max(int(step_ns), 1)
    daily = not intraday and step < 1.5 * DAY_NS
    if daily:
        step = DAY_NS
    jumps = intraday and _jumps(grid)
    out = np.empty((len(last_ns), n), dtype=np.int64)  # (S, n)
    cur = np.asarray(last_ns, dtype=np.int64).copy()
    # UTC offset of each origin: it only changes inside a closure (DST switches on Sunday 02:00 for CME), where the
    # candidate is closed and jumps; the offset is then looked up again for those few.
    offset = local_ns(cur, grid.tz) - cur if jumps else None
    for k in range(n):  # the horizon's steps, each vectorized over all origins
        cur = cur + step
        if daily:
            off = grid.closed_day(cur // DAY_NS)
            while off.any():  # twice for a weekend, up to the longest closure (a holiday week and its weekends)
                cur[off] += step
                off[off] = grid.closed_day(cur[off] // DAY_NS)
        elif jumps:
            if not grid.closes:  # holidays but no closure to hold the DST switches: each step's offset afresh
                offset = local_ns(cur, grid.tz) - cur
            off = np.flatnonzero(_shut(cur + offset, grid))
            while len(off):  # the jump lands on the grid (after a holiday, the next trade date's open); re-checked
                wait = _grid_resume(cur[off], cur[off] + offset[off], grid) - cur[off]
                cur[off] += -(-np.maximum(wait, 1) // step) * step  # first lattice point at or after the resume
                offset[off] = local_ns(cur[off], grid.tz) - cur[off]
                off = off[_shut(cur[off] + offset[off], grid)]
        out[:, k] = cur
    return out


def gap_counts(ts: np.ndarray, sidx: np.ndarray, cut: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """(values, counts) of grid.median_spacing_ns's gaps (consecutive bars of a series, positive) of rows sorted
    by series and time: over all rows, and over the rows before `cut` (the training rows'). A series' rows before
    the cut start its run, so their gaps are those whose later bar is before it: one diff serves both."""
    gaps = np.diff(ts)  # (N - 1,)
    kept = (sidx[1:] == sidx[:-1]) & (gaps > 0)
    return value_counts(gaps[kept]), value_counts(gaps[kept & (ts[1:] < cut)])
