"""The known inputs and the forecast grid of a live stream's timestamps, computed a span at a time.

Both are functions of a timestamp alone (known.py, calendar.py), but each call into them converts time
zones and builds a handful of numpy arrays: about 300 us per bar for the new bar's inputs and the new forecast step.
`KnownGrid` calls them once per span of SPAN grid points instead (one trading day of 1-minute bars) and answers a
bar from two dicts: the known-input row of a timestamp and the grid step after it. A span is the lattice
t, t + step, ..., t + (SPAN - 1) step from the first timestamp that missed, each point's next grid step
(`future_timestamps(., step, 1)`, vectorized over the span) and the known inputs of all of them (`known_columns`):
the same functions on the same timestamps, so the same numbers (tests/data/features/test_known_live.py holds them bit
for bit to single-timestamp calls). Walking the grid one step at a time from a point gives what `future_timestamps`
gives for D steps from it (the same test file). A bar off the lattice starts a new span. The current and
the previous span are kept: memory stays bounded in a process that runs for months.

Legend: N points of a span, Kr known continuous columns, D forecast steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from foxhunt.data.bars.grid import future_timestamps
from foxhunt.data.features.known import known_columns
from foxhunt.data.features.seasonality import Season, profile_at

if TYPE_CHECKING:
    from foxhunt.data.dataset.types import FittedTransform

SPAN = 1440  # grid points per span: a day of 1-minute bars, a few years of daily ones (about 1 ms to compute)


class _Span:
    """One span's tables: `row[ts]` the row of `known` (M, Kr) and `profile` (M,), `next[ts]` the step after ts."""

    def __init__(self, row: dict[int, int], nxt: dict[int, int], known: np.ndarray, profile: np.ndarray | None):
        self.row, self.next, self.known, self.profile = row, nxt, known, profile


class KnownGrid:
    """Known inputs (float32, as the ring and the decoder store them), the time-of-day profile and the next grid
    step of timestamps (int ns UTC), from spans computed on first use."""

    def __init__(self, transform: FittedTransform, season: Season | None, span: int = SPAN):
        self.tf, self.season, self.span = transform, season, span
        self.step = max(int(transform.bar_spacing_ns), 1)
        self.cur: _Span | None = None
        self.old: _Span | None = None

    def _find(self, ts: int, table: str) -> _Span:
        """The span whose `table` ("row" or "next") holds ts, computing one from ts when neither does."""
        for s in (self.cur, self.old):
            if s is not None and ts in getattr(s, table):
                return s
        self._fill(ts)
        assert self.cur is not None
        return self.cur

    def _fill(self, ts: int) -> None:
        tf = self.tf
        lattice = ts + np.arange(self.span, dtype=np.int64) * self.step  # (N,)
        nxt = future_timestamps(lattice, tf.bar_spacing_ns, 1, tf.intraday, tf.exchange_tz, tf.grid)[:, 0]
        points = np.union1d(lattice, nxt)  # (M,) every point a bar or a forecast step may ask about
        cols = known_columns(points, tf.exchange_tz, tf.intraday, tf.session_calendar, self.season)
        known = np.empty((len(points), len(cols)), dtype=np.float32)  # (M, Kr)
        for j, col in enumerate(cols.values()):  # a handful of columns
            known[:, j] = col
        profile = profile_at(points, self.season) if self.season is not None else None
        span = _Span(dict(zip(points.tolist(), range(len(points)), strict=True)),
                     dict(zip(lattice.tolist(), nxt.tolist(), strict=True)), known, profile)
        self.old, self.cur = self.cur, span

    def known(self, ts: int) -> np.ndarray:
        """(Kr,) float32 known inputs at ts (a view: copy before keeping)."""
        s = self._find(ts, "row")
        return s.known[s.row[ts]]

    def profile(self, ts: int) -> float:
        """The fitted time-of-day profile at ts (`profile_at`); only for a model with seasonality."""
        s = self._find(ts, "row")
        assert s.profile is not None
        return float(s.profile[s.row[ts]])

    def steps(self, ts: int, n: int) -> list[int]:
        """The n grid timestamps after origin ts, walked a step at a time: `future_timestamps(ts, step, n)[0]`
        (the forecast steps' times, and where their known inputs are read)."""
        out = []
        for _ in range(n):  # n steps, each a dict look-up
            ts = self._find(ts, "next").next[ts]
            out.append(ts)
        return out

    def decoder(self, ts: int, out: np.ndarray) -> None:
        """Write the known inputs of the D forecast steps after origin ts into `out` (D, Kr)."""
        for k, t in enumerate(self.steps(ts, out.shape[0])):
            out[k] = self.known(t)
