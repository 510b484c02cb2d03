"""The --context inputs of bars given to `Forecaster.update`: each context series' own inputs as of a bar's time.

Training joins a context series C's inputs (data/features/inputs.context_inputs: its move, range, volume and
log_vol) to every bar of every series as of the bar's time: C's last bar at or before it, the same-time bar
included, NaN (0 once standardized) before C's first bar (inputs.with_context). C is a series of the model and goes
on forecasting itself, so its live bars come through `update` too: the stream computes C's inputs as it steps C
(bar_features_live.py, the same recursion as the batch pipeline) and records them here, with their times. A bar of series
X then reads C's record at or before its time.

A call's bars are stepped first and their context columns written after (`fill`): C's bar of the same time reaches
X's bar whatever their order in the call, and two context series see each other's bar of that time, as in
training. The last KEEP records of each context series are kept, so a series that lags C by fewer bars still reads
the record of its own time; a bar older than the records kept stops the call before the stream moves (`check`)
rather than read a wrong bar.

Legend: B bars of one call, E encoder steps, F continuous input columns of the stream's ring.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from foxhunt.data.features.inputs import context_inputs
from foxhunt.durations import stamp
from foxhunt.errors import InputError

if TYPE_CHECKING:
    from foxhunt.data.dataset.types import FittedTransform

KEEP = 4096  # records kept per context series (trimmed when twice as many)


class LiveContext:
    """Each context series' recorded inputs (time, values) and where its columns sit in the stream's rows."""

    def __init__(self, series: Sequence[str], target: str, observed: Sequence[str], offset: int):
        self.series = tuple(series)
        cols = context_inputs(target)
        # (observed index, series, index into context_inputs) of each context column the model reads
        self.columns = [(observed.index(f"{c}_{col}"), c, k) for c in self.series for k, col in enumerate(cols)]
        self.offset = offset  # ring column of observed input 0 (after the known ones)
        self.blank = {observed[j]: math.nan for j, _, _ in self.columns}  # what `_advance` writes before `fill`
        self.times: dict[str, list[int]] = {c: [] for c in self.series}
        self.values: dict[str, list[tuple[float, ...]]] = {c: [] for c in self.series}
        self.trimmed: set[str] = set()  # context series whose older records were let go

    @staticmethod
    def of(tf: FittedTransform, observed: Sequence[str], offset: int) -> LiveContext | None:
        """The context of a --context model (None for a model without one)."""
        series = tf.inputs.context if tf.inputs is not None else ()
        return LiveContext(series, tf.target, observed, offset) if series else None

    def check(self, names: Sequence[str], ts_ns: Sequence[int] = ()) -> None:
        """InputError (one line) where a context series has no bar in the stream's records nor in this call's bars
        (`names`, at `ts_ns`): its bars are read from the stream, as predict reads them from the history; or where
        a bar of the call is older than the records kept of a context series (it would read a wrong bar)."""
        for c in self.series:
            if not self.times[c] and c not in names:
                raise InputError(f"update: the model reads --context {c} as of each bar, and no bar of {c} was "
                                 f"given; pass {c}'s bars to update too (or predict on a history that has them)")
            if c in self.trimmed and ts_ns and min(ts_ns) < self.times[c][0]:
                at = int(np.argmin(ts_ns))
                raise InputError(f"update: the bar of {names[at]!r} at {stamp(ts_ns[at])} reads --context {c} as of "
                                 f"its time, more than {KEEP:,} of {c}'s bars back; forecast it with predict on the "
                                 "history instead")

    def prime(self, names: Sequence[str], sidx: np.ndarray, ts: np.ndarray, values: Sequence[np.ndarray]) -> None:
        """Restart the records of the context series among `names` from a history: `sidx` (N,) into `names`, rows
        sorted by (series, time), `ts` (N,) ns, `values` the columns of `context_inputs` (N,) each."""
        for c in self.series:
            if c not in names:
                continue
            rows = np.flatnonzero(sidx == list(names).index(c))  # (Nc,) its bars, in time order
            self.trimmed.discard(c)
            if len(rows) > KEEP:
                rows = rows[-KEEP:]
                self.trimmed.add(c)
            self.times[c] = ts[rows].tolist()
            self.values[c] = list(zip(*(np.asarray(v, dtype=np.float64)[rows].tolist() for v in values), strict=True))

    def record(self, name: str, ts: int, values: tuple[float, ...]) -> None:
        """Record the inputs (`context_inputs` order) of a context series' new bar; other series are not kept."""
        if name in self.times:
            self.times[name].append(int(ts))
            self.values[name].append(values)

    def at(self, c: str, ts: int) -> tuple[float, ...] | None:
        """C's inputs at its last bar at or before ts (None: no bar yet)."""
        i = bisect.bisect_right(self.times[c], ts) - 1
        return self.values[c][i] if i >= 0 else None

    def fill(self, ring: np.ndarray, rows: Sequence[int], ts_ns: Sequence[int], head: np.ndarray, e: int,
             plans: Sequence[Sequence[tuple[str, float | None, float | None]]]) -> None:
        """Write the context columns of the input row each of `rows` (B,) just got (`ring` (S, 2E, F), the slot
        before `head`, and its copy E slots on), standardized as training's with each row's plan (column, mean,
        std): NaN or infinite -> 0. Then trim the records."""
        for r, ts in zip(rows, ts_ns, strict=True):
            slot = (int(head[r]) - 1) % e
            for j, c, k in self.columns:
                got = self.at(c, int(ts))
                v = got[k] if got is not None else math.nan
                _, mean, std = plans[r][j]
                if std is not None:
                    v = (v - mean) / std
                ring[r, slot, self.offset + j] = ring[r, slot + e, self.offset + j] = v if math.isfinite(v) else 0.0
        for c in self.series:
            if len(self.times[c]) > 2 * KEEP:
                del self.times[c][:-KEEP], self.values[c][:-KEEP]
                self.trimmed.add(c)
