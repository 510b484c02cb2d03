"""Spans of time in `Forecaster.update`'s words: how a gap in a stream is said, and `max_gap` read as ns."""

from __future__ import annotations

import datetime as dt

import numpy as np

from foxhunt.durations import MONTHS, UNIT_NS, read_duration
from foxhunt.errors import InputError

DAY_NS = 86_400 * 10**9


def stamp(ts: int) -> str:
    return f"{np.datetime64(int(ts) // 10**9, 's')}Z"


def duration(ns: int) -> str:
    """A span for people: '277.0 days', '5.5 hours', '3 minutes', '40 seconds'."""
    for unit, size in (("day", DAY_NS), ("hour", 3600 * 10**9), ("minute", 60 * 10**9)):
        if ns >= size:
            n = ns / size
            text = f"{n:.0f}" if n == int(n) else f"{n:.1f}"
            return f"{text} {unit}{'' if text == '1' else 's'}"
    return f"{ns / 1e9:g} seconds"


def parse_gap(value: object) -> int | None:
    """`max_gap` as ns: a datetime.timedelta (pandas' Timedelta too), a numpy timedelta64, or text like "36h",
    "3d", "2w", "90m" / "90min", "45s" (foxhunt/durations.py); None: no limit."""
    if value is None:
        return None
    text = read_duration(value)
    if isinstance(value, dt.timedelta):
        ns = value // dt.timedelta(microseconds=1) * 1000
    elif isinstance(value, np.timedelta64):
        ns = int(value.astype("timedelta64[ns]").astype(np.int64))
    elif text is not None and text[1] in MONTHS:
        raise InputError(f"max_gap {value!r} is not a fixed duration (a month or a year has no one length); write "
                         "days or weeks, e.g. '30d'")
    elif text is not None:
        ns = int(text[0] * UNIT_NS[text[1]])
    else:
        raise InputError(f"max_gap {value!r} is not a duration; pass a datetime.timedelta or text like '3d', '36h', "
                         "'90m'")
    if ns <= 0:
        raise InputError(f"max_gap {value!r} must be positive")
    return int(ns)
