"""Scheduled announcements for the bundled sample (`foxhunt sample --announcements`): when, and how they move vol.

The sample's daily profile already has a 07:30 CT bump on every day, which time-of-day features learn. An
announcement is different: four a week on irregular weekdays, at one of a few clock times, each followed by a
volatility burst. Which days carry one cannot be told from the clock, only from the calendar, so the option gives a
known answer for the event-calendar inputs (`--events`): a model that reads the calendar forecasts the burst, one
that does not cannot.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from zoneinfo import ZoneInfo

import numpy as np

CT = ZoneInfo("America/Chicago")
CLOCK_TIMES = (dt.time(7, 30), dt.time(9, 0), dt.time(13, 0))  # CT: data releases, a late morning, a Fed-style 13:00
PER_WEEK = 4  # 16 in the sample: enough in each split for a model to learn the burst from the calendar
PEAK = 30.0  # extra variance in the announcement minute: x31 variance, x5.6 sd, as in a CPI minute on ES
DECAY_MIN = 10.0  # e-folding time of the extra variance, minutes: x12 after 10 minutes, x2.5 after 30
CALM_MIN, CALM = 15, 0.5  # the quarter hour before: variance halved while the market waits
AFTER_MIN = 30  # an announcement needs this many minutes of session after it (none just before a close)
EVENT_NAME = "announcement"
MINUTE_NS = 60 * 10**9


def schedule(rng: np.random.Generator, sessions: Sequence[tuple[dt.date, dt.datetime]]) -> np.ndarray:
    """(n,) sorted int64 ns UTC announcement times: PER_WEEK per ISO week, on distinct random weekdays of that week,
    each at a random one of CLOCK_TIMES that leaves AFTER_MIN minutes before the session's close.

    `sessions` is each trade day with its close; a week with fewer usable days gets fewer announcements.
    """
    weeks: dict[tuple[int, int], list[tuple[dt.date, dt.datetime]]] = {}
    for day, close in sessions:
        weeks.setdefault(day.isocalendar()[:2], []).append((day, close))
    out = []
    for days in weeks.values():  # a loop over ~4 weeks
        picked = 0
        for i in rng.permutation(len(days)):
            day, close = days[i]
            at = dt.datetime.combine(day, CLOCK_TIMES[rng.integers(len(CLOCK_TIMES))], tzinfo=CT)
            if picked < PER_WEEK and at + dt.timedelta(minutes=AFTER_MIN) <= close:
                out.append(int(at.timestamp()) * 10**9)
                picked += 1
    return np.sort(np.array(out, dtype=np.int64))


def variance_multiplier(ts: np.ndarray, times: np.ndarray) -> np.ndarray:
    """(n,) factor on each bar's variance for bar starts `ts` (n,): 1 + PEAK e^(-k / DECAY_MIN) k minutes after the
    last announcement at or before the bar's start, times CALM in the CALM_MIN minutes before the next one."""
    if times.size == 0:
        return np.ones(ts.size)
    i = np.searchsorted(times, ts, side="right")  # (n,) announcements at or before each bar start
    since = (ts - times[np.maximum(i - 1, 0)]) / MINUTE_NS  # (n,) minutes, valid where i > 0
    burst = np.where(i > 0, PEAK * np.exp(-np.where(i > 0, since, 0.0) / DECAY_MIN), 0.0)
    until = (times[np.minimum(i, times.size - 1)] - ts) / MINUTE_NS  # (n,) minutes, valid where i < size
    calm = np.where((i < times.size) & (until <= CALM_MIN), CALM, 1.0)
    return (1.0 + burst) * calm
