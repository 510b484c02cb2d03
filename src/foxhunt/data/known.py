"""Known inputs at forecast steps, computed from the origin alone: what `predict` can know when it forecasts.

A forecast step k of an origin bar sits at `calendar.future_timestamps(origin, step, D)[k]`: the k-th bar of the
regular grid after the origin. The decoder's known inputs are the calendar features of those grid timestamps, never
of the bars that actually follow the origin. Taking them from the real next bars (as foxhunt once did) tells the
model how long the coming gaps are (thin hours, 1-second data, halts), which it cannot know when it forecasts; and
prediction, which can only extrapolate the grid, then saw different inputs than training.

Storage stays O(rows): the grid timestamps of all origins are deduplicated into one table (for regular data it is
about as long as the data). When every grid point lies on one lattice (bars aligned to the step: the usual case),
the steps of an origin are consecutive table rows and only the row of its first step is stored per bar; otherwise
a (N, D) int32 index is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from foxhunt.data.calendar import calendar_features, future_timestamps
from foxhunt.data.seasonality import profile_at

CHUNK_CELLS = 1 << 24  # grid timestamps (origins x steps) computed at a time: at most 128 MiB of int64 at once


@dataclass(frozen=True)
class DecoderKnown:
    """The decoder's known inputs for every bar taken as an origin.

    cont: (U, Kr) float32 calendar features of each distinct grid timestamp, columns as `calendar_columns`.
    ts: (U,) int64 the grid timestamps, sorted.
    base: (N,) int64 table row of step 1 of an origin at each bar; step k is row base + k - 1 when `index` is None.
    index: (N, D) int32 table rows of every step, only when the grid is not one lattice.
    """

    cont: np.ndarray
    ts: np.ndarray
    base: np.ndarray
    index: np.ndarray | None


def decoder_timestamps(origin_ns: np.ndarray, step_ns: int, horizon: int, intraday: bool, exchange_tz: str) -> np.ndarray:
    """(M, D) int64 timestamps of the D forecast steps of each origin (M,): the grid, see `future_timestamps`."""
    return future_timestamps(origin_ns, step_ns, horizon, intraday, exchange_tz)


def known_columns(
    ts_ns: np.ndarray, exchange_tz: str, intraday: bool, sessions: bool, season: dict | None = None
) -> dict[str, np.ndarray]:
    """The known continuous inputs of timestamps `ts_ns`: the calendar, then (with a fitted time-of-day profile,
    seasonality.py) `tod_vol`, the log relative volatility of the profile at each timestamp."""
    cal = calendar_features(ts_ns, exchange_tz, intraday, sessions)
    if season:
        cal["tod_vol"] = np.log(profile_at(ts_ns, season))
    return cal


def decoder_features(
    origin_ns: np.ndarray, step_ns: int, horizon: int, exchange_tz: str, intraday: bool, sessions: bool,
    season: dict | None = None,
) -> np.ndarray:
    """(M, D, Kr) float32 known inputs of the D forecast steps of each origin, straight from the definition.

    `decoder_known` stores the same values deduplicated; this direct form is the reference the tests hold it to.
    """
    grid = decoder_timestamps(origin_ns, step_ns, horizon, intraday, exchange_tz)  # (M, D)
    cal = known_columns(grid.ravel(), exchange_tz, intraday, sessions, season)
    return np.stack(list(cal.values()), axis=-1).astype(np.float32).reshape(*grid.shape, len(cal))


def decoder_known(
    ts_ns: np.ndarray, step_ns: int, horizon: int, exchange_tz: str, intraday: bool, sessions: bool,
    season: dict | None = None,
) -> DecoderKnown:
    """The decoder's known inputs for every bar `ts_ns` (N,) as an origin, deduplicated (see the module doc)."""
    n = len(ts_ns)
    rows = max(1, CHUNK_CELLS // max(horizon, 1))
    chunks = [slice(i, min(i + rows, n)) for i in range(0, n, rows)]

    kept = decoder_timestamps(ts_ns, step_ns, horizon, intraday, exchange_tz) if len(chunks) == 1 else None

    def grid(sl: slice) -> np.ndarray:  # (M, D) grid of the origins in `sl`; kept when there is one chunk
        return kept if kept is not None else decoder_timestamps(ts_ns[sl], step_ns, horizon, intraday, exchange_tz)

    table = _unique(np.concatenate([_unique(grid(sl)) for sl in chunks])) if n else np.empty(0, np.int64)
    base = np.searchsorted(table, ts_ns, side="right").astype(np.int64)  # (N,) first grid point after each bar
    steps = np.arange(horizon, dtype=np.int64)
    # One lattice: every origin's steps are the table rows right after it (no other grid point falls between).
    lattice = all(
        np.array_equal(table[np.minimum(base[sl, None] + steps, len(table) - 1)], grid(sl)) for sl in chunks
    )
    index = None if lattice else np.concatenate([np.searchsorted(table, grid(sl)).astype(np.int32) for sl in chunks])
    cal = known_columns(table, exchange_tz, intraday, sessions, season)
    cont = np.empty((len(table), len(cal)), dtype=np.float32)  # (U, Kr)
    for j, col in enumerate(cal.values()):  # a handful of columns
        cont[:, j] = col
    return DecoderKnown(cont=cont, ts=table, base=base, index=index)


def _unique(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values of int64 `x` (a sort and a compare: several times faster than np.unique's hashing)."""
    x = np.sort(x, axis=None)
    return x[np.concatenate([[True], x[1:] != x[:-1]])] if len(x) else x
