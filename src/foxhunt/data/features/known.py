"""Known inputs at forecast steps, computed from the origin alone: what `predict` can know when it forecasts.

A forecast step k of an origin bar sits at `grid.future_timestamps(origin, step, D)[k]`: the k-th bar of the
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

import functools
import math
from dataclasses import dataclass

import numpy as np

from foxhunt.allocator import release_freed_memory
from foxhunt.data.bars.grid import Grid, future_timestamps
from foxhunt.data.features.calendar import calendar_at, calendar_columns
from foxhunt.data.features.seasonality import Season, profile_at, profile_of_minute, wall_minute
from foxhunt.data.util.clock import local_ns

CHUNK_CELLS = 1 << 24  # grid timestamps (origins x steps) computed at a time: at most 128 MiB of int64 at once
CHUNK_ROWS = 1 << 16  # timestamps whose known inputs (or distinct ranks) are computed at a time (512 KiB a column)


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


def decoder_timestamps(origin_ns: np.ndarray, step_ns: int, horizon: int, intraday: bool, exchange_tz: str,
                       grid: Grid | None = None) -> np.ndarray:
    """(M, D) int64 timestamps of the D forecast steps of each origin (M,): the grid, see `future_timestamps`
    (`grid`: the run's session, FittedTransform.grid; None: the zone's default)."""
    return future_timestamps(origin_ns, step_ns, horizon, intraday, exchange_tz, grid)


def known_columns(
    ts_ns: np.ndarray, exchange_tz: str, intraday: bool, sessions: str | None, season: Season | None = None,
) -> dict[str, np.ndarray]:
    """The known continuous inputs of timestamps `ts_ns`: the calendar (with `sessions`, a calendar's name, its
    session inputs: FittedTransform.session_calendar), then (with a fitted time-of-day profile, seasonality.py)
    `tod_vol`, the log relative volatility of the profile at each timestamp."""
    wall = local_ns(ts_ns, exchange_tz) if intraday else None  # once, for the calendar and the profile
    cal = calendar_at(ts_ns, wall, sessions)
    if season is not None:
        same = wall is not None and season.tz == exchange_tz
        cal["tod_vol"] = np.log(profile_of_minute(wall_minute(wall), season) if same else profile_at(ts_ns, season))
    return cal


def decoder_features(
    origin_ns: np.ndarray, step_ns: int, horizon: int, exchange_tz: str, intraday: bool, sessions: str | None,
    season: Season | None = None, grid: Grid | None = None,
) -> np.ndarray:
    """(M, D, Kr) float32 known inputs of the D forecast steps of each origin, straight from the definition.

    `decoder_known` stores the same values deduplicated; this direct form is the reference the tests hold it to.
    """
    steps = decoder_timestamps(origin_ns, step_ns, horizon, intraday, exchange_tz, grid)  # (M, D)
    cal = known_columns(steps.ravel(), exchange_tz, intraday, sessions, season)
    return np.stack(list(cal.values()), axis=-1).astype(np.float32).reshape(*steps.shape, len(cal))


def decoder_known(
    ts_ns: np.ndarray, step_ns: int, horizon: int, exchange_tz: str, intraday: bool, sessions: str | None,
    season: Season | None = None, grid: Grid | None = None,
) -> DecoderKnown:
    """The decoder's known inputs for every bar `ts_ns` (N,) as an origin, deduplicated (see the module doc).

    The grid of an origin depends on its timestamp alone, so it is computed once per distinct timestamp (series
    that trade the same minutes share them: a few times fewer than bars) and handed back to every bar.
    """
    return distinct_decoder_known(*distinct(ts_ns), step_ns, horizon, exchange_tz, intraday, sessions, season, grid)


def distinct_decoder_known(
    origins: np.ndarray, inverse: np.ndarray, step_ns: int, horizon: int, exchange_tz: str, intraday: bool,
    sessions: str | None, season: Season | None = None, grid: Grid | None = None,
) -> DecoderKnown:
    """`decoder_known` of the bars `origins[inverse]`, given their distinct timestamps (see `distinct`)."""
    table, base, index = decoder_grid(origins, step_ns, horizon, exchange_tz, intraday, grid)
    cont = known_cont(table, exchange_tz, intraday, sessions, season)
    return DecoderKnown(cont=cont, ts=table, base=base[inverse], index=None if index is None else index[inverse])


def decoder_grid(
    origins: np.ndarray, step_ns: int, horizon: int, exchange_tz: str, intraday: bool, grid: Grid | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The grid table of distinct origins `origins` (O,), sorted: (U,) its timestamps, (O,) the row of each origin's
    step 1, and (O, D) int32 the rows of every step when the grid is not one lattice (else None); see DecoderKnown."""
    n = len(origins)
    rows = max(1, CHUNK_CELLS // max(horizon, 1))
    chunks = [slice(i, min(i + rows, n)) for i in range(0, n, rows)]

    kept = decoder_timestamps(origins, step_ns, horizon, intraday, exchange_tz, grid) if len(chunks) == 1 else None

    def at(sl: slice) -> np.ndarray:  # (M, D) grid of the origins in `sl`; kept when there is one chunk
        return kept if kept is not None else decoder_timestamps(origins[sl], step_ns, horizon, intraday, exchange_tz,
                                                                grid)

    # Each step's column rises with the origin: laid out step by step, the grid is D sorted runs (see sorted_distinct).
    parts = [sorted_distinct(at(sl).T) for sl in chunks]  # each sorted and distinct: one needs no second pass
    table = (parts[0] if len(parts) == 1 else sorted_distinct(np.concatenate(parts))) if n else np.empty(0, np.int64)
    base = np.searchsorted(table, origins, side="right").astype(np.int64)  # (O,) first grid point after each
    # One lattice: every origin's steps are the table rows right after it (no other grid point falls between). The
    # steps are distinct table values after the origin, so that holds when the last one sits D - 1 rows after base.
    last = np.minimum(base + horizon - 1, len(table) - 1)
    lattice = all(np.array_equal(table[last[sl]], at(sl)[:, -1]) for sl in chunks) if horizon else True
    index = None if lattice else np.concatenate([np.searchsorted(table, at(sl)).astype(np.int32) for sl in chunks])
    return table, base, index


def grid_width(intraday: bool, sessions: bool, seasonal: bool) -> int:
    """How many columns `known_columns` gives: the calendar's (with or without the session inputs), and `tod_vol`
    with a time-of-day profile."""
    return len(calendar_columns(intraday, sessions)) + seasonal


def known_cont(
    ts_ns: np.ndarray, exchange_tz: str, intraday: bool, sessions: str | None, season: Season | None = None,
) -> np.ndarray:
    """(U, Kr) float32 `known_columns` of timestamps `ts_ns` (U,), computed CHUNK_ROWS at a time so that the
    float64 columns stay small. Each value is a function of its own timestamp: any order, any chunking."""
    kr = grid_width(intraday, bool(sessions), season is not None)
    cont = np.empty((len(ts_ns), kr), dtype=np.float32)  # (U, Kr)
    for lo in range(0, len(ts_ns), CHUNK_ROWS):
        sl = slice(lo, min(lo + CHUNK_ROWS, len(ts_ns)))
        cols = known_columns(ts_ns[sl], exchange_tz, intraday, sessions, season)
        for j, col in enumerate(cols.values()):
            cont[sl, j] = col
    return cont


def distinct(ts_ns: np.ndarray, dtype: type = np.intp) -> tuple[np.ndarray, np.ndarray]:
    """(O,) sorted distinct values of `ts_ns` (N,), and (N,) the position of each value among them, as `dtype`
    (np.int32 halves what it holds while it waits to be used).

    Rows sorted by (series, ts) are a few sorted runs, which a stable (merge) sort takes in about one pass; each
    row's position is the rank of its value, scattered back through the sort order (no search of the values)."""
    if len(ts_ns) == 0:
        return np.sort(ts_ns), np.zeros(0, dtype=dtype)
    order = np.argsort(ts_ns, kind="stable")  # (N,)
    new = np.empty(len(order), dtype=bool)  # (N,) first of its value in sorted order
    new[0] = True
    for lo in range(1, len(order), CHUNK_ROWS):  # the sorted values a piece at a time: no (N,) sorted copy
        ordered = ts_ns[order[lo - 1 : lo + CHUNK_ROWS]]
        np.not_equal(ordered[1:], ordered[:-1], out=new[lo : lo + CHUNK_ROWS])
    inverse = np.empty(len(order), dtype=dtype)
    rank = -1
    for lo in range(0, len(order), CHUNK_ROWS):  # each row's rank, scattered back through the order
        ranks = np.cumsum(new[lo : lo + CHUNK_ROWS]) + rank
        inverse[order[lo : lo + CHUNK_ROWS]] = ranks
        rank = int(ranks[-1])
    return ts_ns[order[new]], inverse


def sorted_distinct(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values of int64 `x`, read in C order (a sort and a compare: many times faster than
    np.unique's hashing). The stable sort is a merge sort that takes runs
    already sorted as they come (a grid laid out step by step, the stamps of consecutive pieces)."""
    x = np.sort(x, axis=None, kind="stable")
    return x[np.concatenate([[True], x[1:] != x[:-1]])] if len(x) else x


LATTICE_SLOTS = 8  # distinct_union marks a lattice of up to this many slots per value of its largest part (and 1M)


def distinct_union(parts: list[np.ndarray]) -> np.ndarray:
    """`sorted_distinct(np.concatenate(parts))` for sorted distinct int64 `parts` (a panel's pieces' timestamps),
    without sorting their concatenation: where the values sit on one lattice (bars aligned to a step: the usual
    case), each part marks its slots in a table of the lattice, read back in order (a few times faster than sorting their
    concatenation, and without its fresh arrays)."""
    parts = [p for p in parts if len(p)]
    if len(parts) <= 1:
        return parts[0] if parts else np.empty(0, dtype=np.int64)
    lo, hi = min(int(p[0]) for p in parts), max(int(p[-1]) for p in parts)
    step = 0  # a divisor of every offset from lo: each part's first offset and its least gap
    for p in parts:
        step = math.gcd(step, int(p[0]) - lo, int(np.diff(p).min()) if len(p) > 1 else 0)
    size = (hi - lo) // step + 1 if step else 1
    if size > LATTICE_SLOTS * max(len(p) for p in parts) + (1 << 20):
        return sorted_distinct(np.concatenate(parts))
    marked = np.zeros(size, dtype=bool)  # (size,) the lattice's slots some part holds
    for p in parts:
        offset = p - lo  # (n,)
        slot = offset // step if step else offset
        if step and not np.array_equal(slot * step, offset):  # a value off the lattice: not the greatest divisor
            return sorted_distinct(np.concatenate(parts))
        marked[slot] = True
    return lo + np.flatnonzero(marked) * max(step, 1)


TAKE_ROWS = 1 << 16  # rows take_rows gathers into a contiguous buffer before copying them into place


def take_rows(src: np.ndarray, idx: np.ndarray, out: np.ndarray, via: np.ndarray | None = None) -> None:
    """out[i] = src[idx[i]] for float32 rows `src` (U, K) into `out` (N, K), columns of a wider C-order array: each
    row is taken as one opaque K * 4-byte item, with no (N, K) temporary. `via`: src[via[idx[i]]] instead, `via`
    read TAKE_ROWS rows at a time (no (N,) index to hold); an index past `src` takes its last row.

    np.take writes a strided `out` through a contiguous copy of all of it (copied in, then written back: 2M rows,
    twice 44 MB); TAKE_ROWS rows at a time into one small buffer, each then copied into place, cost half the time."""
    row = np.dtype((np.void, src.shape[1] * 4))
    items = np.ascontiguousarray(src).view(row)[:, 0]  # (U,)
    dest = out.view(np.uint8).view(row)[:, 0]  # (N,) strided
    if dest.flags.c_contiguous and via is None:
        np.take(items, idx, out=dest, mode="clip")
        return
    buf = np.empty(min(len(idx), TAKE_ROWS), dtype=row)
    for lo in range(0, len(idx), TAKE_ROWS):
        part = buf[: min(len(idx) - lo, TAKE_ROWS)]
        at = idx[lo : lo + len(part)]
        np.take(items, at if via is None else via[at], out=part, mode="clip")
        dest[lo : lo + len(part)] = part


@dataclass(frozen=True)
class SharedGrid:
    """The known-future grid over every distinct timestamp of a panel (`shared_grid`), for rows that look theirs up
    by timestamp: each piece of a panel (data/prepare), the pieces sharing most of their timestamps, so that the
    grid is computed once. Each value is a function of its own timestamp (known_cont), so computing them over all of
    them gives every row its bits.

    ts: (U,), cont: (U, Kr) the grid's table; row: (O,) each origin's row in it, or -1 - its row in `extra` (E, Kr),
    the known inputs of the origins no forecast step lands on (at `extra_ts` (E,)); base: (O,), index: (O, D) or
    None, each origin's grid rows (DecoderKnown's); lattice, slots: the origins' origin_table, or None (then
    `origins` (O,) is searched)."""

    ts: np.ndarray
    cont: np.ndarray
    row: np.ndarray
    extra_ts: np.ndarray
    extra: np.ndarray
    base: np.ndarray
    index: np.ndarray | None
    lattice: np.ndarray | None
    slots: np.ndarray | None
    origins: np.ndarray | None

    def rows(self, ts: np.ndarray, out: np.ndarray, keys: np.ndarray | None = None) -> DecoderKnown:
        """Fill `out` (n, Kr) with the known inputs of rows at `ts` (n,), each one of the origins; their grid.
        `keys`: None; rows under an events key move to their key's block apart (featurize.moved)."""
        assert keys is None, "keyed rows: featurize.moved"
        base = np.empty(len(ts), dtype=self.base.dtype)  # (n,)
        index = None if self.index is None else np.empty((len(ts), self.index.shape[1]), dtype=self.index.dtype)
        for lo in range(0, len(ts), CHUNK_ROWS):  # CHUNK_ROWS rows at a time: no (n,) temporaries beside the rows
            sl = slice(lo, lo + CHUNK_ROWS)
            at = origin_rows(self.lattice, self.slots, self.origins, ts[sl])  # (c,)
            row = self.row[at]  # (c,)
            take_rows(self.cont, row, out[sl])  # an origin of `extra` takes row 0 here, then its own:
            apart = np.flatnonzero(row < 0)
            if len(apart):
                out[sl][apart] = self.extra[-1 - row[apart]]
            np.take(self.base, at, out=base[sl])
            if index is not None:
                np.take(self.index, at, axis=0, out=index[sl])
        return DecoderKnown(cont=self.cont, ts=self.ts, base=base, index=index)

    def span(self, first: int, last: int, d: int) -> tuple[int, int]:
        """[first, end) of the table rows the `d` forecast steps of the origins `first` .. `last` (two of them)
        reach: from the first one's first step to the last one's last (the steps grow with the origin, as the
        grid's table is sorted): the span of the rows of an events key whose first and last times are those two
        (prepare/grid.py)."""
        a, b = origin_rows(self.lattice, self.slots, self.origins, np.array([first, last], dtype=np.int64))
        if self.index is None:
            return int(self.base[a]), int(self.base[b]) + d
        return int(self.index[a].min()), int(self.index[b].max()) + 1


def shared_grid(origins: np.ndarray, step: int, horizon: int, tz: str, intraday: bool, sessions: str | None,
                season: Season | None, grid: Grid) -> SharedGrid:
    """The SharedGrid of sorted distinct `origins` (O,): every timestamp of the panel. An origin is nearly always a
    grid point of an earlier one, so the origins take their known inputs from the grid's table; only those no
    forecast step lands on (the first one at least) have rows of their own. Functions of the times, the grid step
    and the calendar settings alone."""
    table, base, index = decoder_grid(origins, step, horizon, tz, intraday, grid)  # (U,), (O,), (O, D) | None
    cal = functools.partial(known_cont, exchange_tz=tz, intraday=intraday, sessions=sessions, season=season)
    cont = cal(table)  # (U, Kr): after the grid, whose temporaries are the larger
    at = base - 1  # (O,) an origin in the table sits right before the grid's first step after it
    found = (at >= 0) & (table[np.maximum(at, 0)] == origins) if len(table) else np.zeros(len(origins), dtype=bool)
    missing = np.flatnonzero(~found)  # (E,)
    row = at.astype(np.int64 if max(len(table), len(missing)) >= 2**31 else np.int32)
    row[missing] = -1 - np.arange(len(missing))
    lattice = origin_table(origins)
    out = SharedGrid(ts=table, cont=cont, row=row, extra_ts=origins[missing], extra=cal(origins[missing]), base=base,
                     index=index, lattice=None if lattice is None else lattice[0],
                     slots=None if lattice is None else lattice[1], origins=origins if lattice is None else None)
    release_freed_memory()  # the grid's temporaries (what it saves: allocator.py)
    return out


SLOTS_PER_ORIGIN = 8  # a lattice table of more slots than this per origin (and 1M) is not built: searchsorted then


def origin_table(origins: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """((first, step) int64, (size,) the origin index of each lattice point first + i * step or -1) for sorted
    distinct `origins`, so that a timestamp finds its origin with a subtraction, a division and a take
    (`origin_rows`) rather than a binary search over all origins; None when the lattice (their greatest common
    spacing) is too fine for their span."""
    if not len(origins):
        return None
    offset = origins - origins[0]  # (O,)
    step = int(np.gcd.reduce(offset)) or 1
    size = int(offset[-1] // step) + 1
    if size > SLOTS_PER_ORIGIN * len(origins) + (1 << 20):
        return None
    slots = np.full(size, -1, dtype=np.int32 if len(origins) < 2**31 else np.int64)  # (size,)
    slots[offset // step] = np.arange(len(origins))
    return np.array([origins[0], step], dtype=np.int64), slots


def origin_rows(lattice: np.ndarray | None, slots: np.ndarray | None, origins: np.ndarray | None, ts: np.ndarray
                ) -> np.ndarray:
    """(n,) the index among the origins of each timestamp `ts` (n,), every one of them an origin: through the
    `origin_table` (`lattice`, `slots`) where there is one, else by binary search in `origins`."""
    if slots is not None:
        return slots[(ts - lattice[0]) // lattice[1]]
    return np.searchsorted(origins, ts)
