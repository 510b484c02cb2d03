"""Known-future calendar covariates from bar timestamps: where in the week and in the session each bar sits.

Everything here is a function of the timestamp alone, so it is known for future bars too (the TFT's known inputs).
Missing bars (halts, weekends, holidays) are not invented in the data (only `--fill-gaps` does, see bars/fill.py):
the gaps stay, and these features tell the model where in the week and in the session each bar sits. At forecast
steps the features are those of the regular grid after the origin (`grid.future_timestamps`, used through known.py),
never those of the bars that follow.

Conventions (CME Globex, which foxhunt is built for):
- The session for trade date d opens at 17:00 exchange time on d-1 and runs 23 h; the trade date of an intraday bar
  is the exchange-time date of `ts + 7 h` (so Sunday-evening bars belong to Monday, `grid.trade_day`). The time of
  day and session position use the CME equity session (sessions.CME_EQUITY) for every series; the loader's trade
  dates and rolls use each root's own.
- The session inputs (`--calendar-features`: holidays, early closes, minutes to close) follow one
  pandas-market-calendars calendar: the run's `--calendar`, CME Globex Equity without one (`features_calendar`);
  its own session gives the trade dates, the regular close and the session's length.
- Daily bars are labelled by their UTC date, which the readers make their local date where they were stamped
  (data/io/dates.py). Converting a midnight-UTC daily stamp to Chicago time would move it to the previous day, so
  daily features never use `exchange_tz`.
- Where the forecast steps lie (the run's session grid) is bars/grid.py's.
"""

from __future__ import annotations

import math

import numpy as np

from foxhunt.data.bars.grid import SESSION_OPEN_MIN, wall_trade_day
from foxhunt.data.bars.sessions import ALWAYS_OPEN, calendar_session
from foxhunt.data.util.clock import DAY_NS, MIN_NS, local_ns, weekday
from foxhunt.errors import InputError

SESSION_LEN_MIN = 23 * 60
SESSION_CALENDAR = "CME Globex Equity"  # the session inputs' calendar without --calendar

INTRADAY_COLUMNS = ("tod_sin", "tod_cos", "dow_sin", "dow_cos", "session_elapsed")
DAILY_COLUMNS = ("dow_sin", "dow_cos", "month_sin", "month_cos")
INTRADAY_SESSION_COLUMNS = ("to_close", "early_close", "pre_holiday", "post_holiday")
DAILY_SESSION_COLUMNS = ("early_close", "pre_holiday", "post_holiday")


def calendar_columns(intraday: bool, sessions: bool) -> tuple[str, ...]:
    """Names of the per-row calendar features, in the order `calendar_features` returns them."""
    base = INTRADAY_COLUMNS if intraday else DAILY_COLUMNS
    extra = (INTRADAY_SESSION_COLUMNS if intraday else DAILY_SESSION_COLUMNS) if sessions else ()
    return base + extra


def _cyc(out: dict[str, np.ndarray], name: str, x: np.ndarray, period: float) -> None:
    ang = x * (2.0 * math.pi / period)
    out[f"{name}_sin"], out[f"{name}_cos"] = np.sin(ang), np.cos(ang)


def features_calendar(calendar: str | None) -> str:
    """The calendar the session inputs of a run with `--calendar calendar` follow: that one, CME Globex Equity
    without one. (A market that never closes has no holidays: DataConfig refuses them with `--calendar 24/7`.)"""
    return SESSION_CALENDAR if calendar in (None, ALWAYS_OPEN.calendar) else calendar


def calendar_features(ts_ns: np.ndarray, exchange_tz: str, intraday: bool, sessions: str | None = None) -> dict:
    """Calendar features (float64 arrays named by `calendar_columns`, in that order) for UTC ns timestamps.

    Intraday: time of day and trade-date weekday (sin/cos), minutes since the 17:00 session open / 23 h in [0, 1].
    Daily: weekday and month of the UTC date (sin/cos). `sessions`, a pandas-market-calendars name, adds that
    calendar's schedule features (None: none).
    """
    return calendar_at(ts_ns, local_ns(ts_ns, exchange_tz) if intraday else None, sessions)


def calendar_at(ts_ns: np.ndarray, wall: np.ndarray | None, sessions: str | None = None) -> dict:
    """`calendar_features` given the wall-clock times `wall` (local_ns in the exchange zone; None: daily bars)."""
    out: dict[str, np.ndarray] = {}
    intraday = wall is not None
    if intraday:
        minute = (wall % DAY_NS) / MIN_NS
        _cyc(out, "tod", minute, 24 * 60)
        _cyc(out, "dow", weekday(wall_trade_day(wall)), 7)
        out["session_elapsed"] = np.clip(
            ((minute - SESSION_OPEN_MIN) % (24 * 60)) / SESSION_LEN_MIN, 0.0, 1.0
        )
    else:
        _cyc(out, "dow", weekday(ts_ns // DAY_NS), 7)
        _cyc(out, "month", ts_ns.astype("datetime64[ns]").astype("datetime64[M]").astype(np.int64) % 12, 12)
    if sessions:
        out.update(session_features(ts_ns, intraday, sessions))
    return {c: out[c] for c in calendar_columns(intraday, bool(sessions))}


def _load_calendar(name: str):
    try:
        import pandas_market_calendars as mcal
    except ImportError:
        raise InputError(
            "--calendar-features needs pandas-market-calendars: pip install 'foxhunt[calendars]' "
            "(or drop --calendar-features)"
        ) from None
    return mcal.get_calendar(name)


def session_schedule(first_ns: int, last_ns: int, calendar: str = SESSION_CALENDAR) -> dict[str, np.ndarray]:
    """`calendar`'s sessions around [first, last], sorted: day (trade date, days since the epoch), close_ns,
    early_close, pre_holiday, post_holiday.

    A holiday is a trading weekday with no session; `pre_holiday` / `post_holiday` mark the sessions right before and
    after one (weekends are not holidays). `early_close` is a close before the calendar's regular one (12:00 CT on
    Presidents' Day for CME Globex Equity, whose regular close is 16:00 CT).
    """
    cal, regular = _load_calendar(calendar), calendar_session(calendar)
    lo = np.datetime64(int(first_ns), "ns").astype("datetime64[D]") - 14
    hi = np.datetime64(int(last_ns), "ns").astype("datetime64[D]") + 14
    sched = cal.schedule(str(lo), str(hi))
    dates = sched.index.values.astype("datetime64[D]")
    close_ns = sched["market_close"].dt.tz_convert(None).to_numpy().astype("datetime64[ns]").astype(np.int64)
    close_min = (local_ns(close_ns, regular.tz) % DAY_NS) // MIN_NS
    weekmask = [int(d in regular.weekdays) for d in range(7)]
    next_wd = np.busday_offset(dates, 1, roll="forward", weekmask=weekmask)
    prev_wd = np.busday_offset(dates, -1, roll="backward", weekmask=weekmask)
    return {
        "day": dates.astype(np.int64),
        "close_ns": close_ns,
        "early_close": (close_min < regular.close_min).astype(np.float64),
        "pre_holiday": (~np.isin(next_wd, dates) & (next_wd <= dates[-1])).astype(np.float64),
        "post_holiday": (~np.isin(prev_wd, dates) & (prev_wd >= dates[0])).astype(np.float64),
    }


def session_features(ts_ns: np.ndarray, intraday: bool, calendar: str = SESSION_CALENDAR) -> dict[str, np.ndarray]:
    """`calendar`'s schedule features for each timestamp; bars outside any session (Sunday daily stubs, a day the
    calendar has no session) get zeros.

    Intraday adds `to_close`: minutes until the session close over the regular session's length (CME: 23 h), in
    [0, 1]; an intraday bar's trade date is its date in the calendar's zone moved by the session's shift (CME: 7 h).
    """
    sched, regular = session_schedule(int(ts_ns.min()), int(ts_ns.max()), calendar), calendar_session(calendar)
    day = (local_ns(ts_ns, regular.tz) + regular.shift_min * MIN_NS) // DAY_NS if intraday else ts_ns // DAY_NS
    pos = np.clip(np.searchsorted(sched["day"], day), 0, len(sched["day"]) - 1)
    hit = sched["day"][pos] == day  # (N,) the bar's trade date is a session
    out = {c: np.where(hit, sched[c][pos], 0.0) for c in DAILY_SESSION_COLUMNS}
    if intraday:
        left = (sched["close_ns"][pos] - ts_ns) / (MIN_NS * regular.length_min)
        out["to_close"] = np.where(hit, np.clip(left, 0.0, 1.0), 0.0)
    return out


