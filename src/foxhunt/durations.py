"""Spans of time written as text: a count and a unit ("45s", "90m" / "90min", "36h", "3d", "2w", "3mo", "1y").

One reading for every flag and argument that takes one (a backtest's fold lengths, a stream's `max_gap`), so the
same text means the same span everywhere. The units are the union of what each accepts; each caller refuses the
units that mean nothing, or two things, where it reads them:
- `mo` and `y` are calendar months / years with no one length in ns: a fold length counts them on the calendar, a
  gap cannot be one.
- `m` is minutes, as in `90m`; a fold length, which also takes months, refuses it (`6m` reads as six months to a
  trader): write `min` or `mo` there.

And the other way: a span or a time as people read it in a stream's messages (`duration`, `stamp`), and a stream's
`max_gap` read as ns (`parse_gap`).
"""

from __future__ import annotations

import datetime as dt
import re

from foxhunt.errors import InputError

UNIT_NS = {"s": 10**9, "m": 60 * 10**9, "min": 60 * 10**9, "h": 3600 * 10**9, "d": 86_400 * 10**9,
           "w": 7 * 86_400 * 10**9}  # fixed spans
MONTHS = {"mo": 1, "y": 12}  # calendar spans: boundaries fall on the first of a month / of January (UTC)
_TEXT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(min|mo|s|m|h|d|w|y)\s*")


def read_duration(text: object) -> tuple[float, str] | None:
    """`text` as (count, unit), the count >= 0 and maybe fractional; None when it is not a count and a unit above."""
    m = _TEXT.fullmatch(text) if isinstance(text, str) else None
    return None if m is None else (float(m.group(1)), m.group(2))


DAY_NS = 86_400 * 10**9


def stamp(ts: int) -> str:
    """ns UTC as ISO 8601 to the second; without numpy, which the CLI does not import before it starts workers."""
    return f"{(dt.datetime(1970, 1, 1) + dt.timedelta(seconds=int(ts) // 10**9)).isoformat()}Z"


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
    elif type(value).__name__ == "timedelta64":  # numpy's, tested by name: the CLI imports no numpy up front
        ns = int(value.astype("timedelta64[ns]").astype("int64"))
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
