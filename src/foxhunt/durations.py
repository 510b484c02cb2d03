"""Spans of time written as text: a count and a unit ("45s", "90m" / "90min", "36h", "3d", "2w", "3mo", "1y").

One reading for every flag and argument that takes one (a backtest's fold lengths, a stream's `max_gap`), so the
same text means the same span everywhere. The units are the union of what each accepts; each caller refuses the
units that mean nothing, or two things, where it reads them:
- `mo` and `y` are calendar months / years with no one length in ns: a fold length counts them on the calendar, a
  gap cannot be one.
- `m` is minutes, as in `90m`; a fold length, which also takes months, refuses it (`6m` reads as six months to a
  trader): write `min` or `mo` there.
"""

from __future__ import annotations

import re

UNIT_NS = {"s": 10**9, "m": 60 * 10**9, "min": 60 * 10**9, "h": 3600 * 10**9, "d": 86_400 * 10**9,
           "w": 7 * 86_400 * 10**9}  # fixed spans
MONTHS = {"mo": 1, "y": 12}  # calendar spans: boundaries fall on the first of a month / of January (UTC)
_TEXT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(min|mo|s|m|h|d|w|y)\s*")


def read_duration(text: object) -> tuple[float, str] | None:
    """`text` as (count, unit), the count >= 0 and maybe fractional; None when it is not a count and a unit above."""
    m = _TEXT.fullmatch(text) if isinstance(text, str) else None
    return None if m is None else (float(m.group(1)), m.group(2))
