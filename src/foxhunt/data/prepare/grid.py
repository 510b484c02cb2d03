"""What every piece reads of the panel, computed once by the driver and handed to the pieces through the spill: the
known grid over every distinct time of the panel (features/known.py SharedGrid: each time's own known inputs and
the forecast steps after it), with the user's known inputs after the calendar's and a block of the grid per events
key; and the panel's static inputs.

The known inputs of a time are a function of that time alone, so computing them over the panel's distinct times
gives every piece's rows their bits. A prediction's future rows (each series' `horizon` grid steps after its last
bar) are among the times. Events keyed to a series or contract: each piece sends back its rows' first and last
time under each key (events.key_times), and the grid's table gets each key's block (featurize.with_blocks) of the
span those reach; a piece moves its keyed rows into their key's block (featurize.moved).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from foxhunt.data.dataset.featurize import with_blocks
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.features import inputs, static, timed_categories
from foxhunt.data.features.fitted import FittedInputs
from foxhunt.data.features.known import SharedGrid, distinct_union, shared_grid, sorted_distinct
from foxhunt.data.prepare.spill import MemorySpill, Spill

GRID = "grid-"  # the spills of the panel's SharedGrid, one per field (a panel in memory: GRID, the PanelGrid)
STATIC = "static-"  # the spills of the panel's static inputs (static.arrays): static-cont, static-cat
SHIFT = "key-shift"  # the spill of how far each events key's rows move into its block (featurize.with_blocks)


@dataclass(frozen=True)
class PanelGrid:
    """The panel's known grid, the (U, Kc) codes of its table's categorical known inputs and their values unseen in
    training (timed_categories.known_codes), and how far each events key's rows move ((G,); None without keys)."""

    grid: SharedGrid
    known_cat: np.ndarray
    unseen: timed_categories.Unseen
    shift: np.ndarray | None


def origins(stamps: list[np.ndarray], future: np.ndarray | None) -> np.ndarray:
    """(O,) the panel's sorted distinct times: the pieces' `stamps` and a prediction's `future` (S, D) times."""
    return distinct_union([*stamps, *(() if future is None else (sorted_distinct(future.ravel()),))])


def key_times(parts: list[np.ndarray], last_keys: list[np.ndarray] | None, future: np.ndarray | None
              ) -> tuple[np.ndarray, np.ndarray]:
    """(G,) each events key's first and last time over the pieces' rows (`parts`: their (G, 2) key times) and a
    prediction's future rows, which read the key of their series' last bar (`last_keys`: the pieces' (S,))."""
    first, last = (np.stack([p[:, j] for p in parts]) for j in (0, 1))  # (P, G) each
    first, last = first.min(axis=0), last.max(axis=0)
    if future is not None and last_keys is not None:
        keys = np.concatenate(last_keys)  # (S,)
        on = keys >= 0
        np.minimum.at(first, keys[on], future[on, 0])
        np.maximum.at(last, keys[on], future[on, -1])
    return first, last


def panel_grid(times: np.ndarray, transform: FittedTransform, step: int, d: int, src: inputs.Sources | None,
               keys: tuple[np.ndarray, np.ndarray] | None) -> PanelGrid:
    """The PanelGrid of the panel's distinct `times` under `transform` on the grid of `step`; `keys`: the events
    keys' first and last times (`key_times`), with keyed events."""
    tf = transform
    grid = shared_grid(times, step, d, tf.exchange_tz, tf.intraday, tf.session_calendar, tf.scalers.season, tf.grid)
    known_cat, unseen, shift = np.zeros((len(grid.ts), 0), dtype=np.int64), {}, None  # (U, Kc)
    if src is not None:
        user = inputs.known_values(tf.inputs, src, step, tf.event_cap)
        if user is not None:  # each value a function of its time alone: the origins' are the table's and extra's
            user(times)  # read first, so that a time the files do not cover is named as of the bars' own times
            grid = dataclasses.replace(grid, cont=np.concatenate([grid.cont, user(grid.ts)], axis=1),
                                       extra=np.concatenate([grid.extra, user(grid.extra_ts)], axis=1))
        if keys is not None:
            first, last = keys
            spans = {int(g): grid.span(int(first[g]), int(last[g]), d) for g in np.flatnonzero(first <= last)}
            cont, ts, moves = with_blocks(grid.cont, grid.ts, spans, user, src.events.keys)
            grid = dataclasses.replace(grid, cont=cont, ts=ts)
            shift = np.array([moves.get(g, 0) for g in range(len(first))], dtype=np.int64)
        known_cat = timed_categories.known_codes(tf.inputs, src, grid.ts, unseen)
    return PanelGrid(grid, known_cat, unseen, shift)


def share_grid(spill: Spill, panel: PanelGrid | Future[PanelGrid]) -> None:
    """Hand the panel's known grid to the pieces' writes (`spilled_grid`): spilled, or in memory held as it is (a
    Future while it is computed: the write waits for it, so that it is computed beside the stages before)."""
    if isinstance(spill, MemorySpill):
        spill.hold(GRID, panel)
        return
    for f in dataclasses.fields(panel.grid):
        if (value := getattr(panel.grid, f.name)) is not None:
            spill.put_array(GRID + f.name, value)
    if panel.shift is not None:
        spill.put_array(SHIFT, panel.shift)


def spilled_grid(spill: Spill) -> tuple[SharedGrid, np.ndarray | None]:
    """The SharedGrid `share_grid` handed over (mapped from a spill folder) and how far each events key's rows
    move (None without keys)."""
    if isinstance(spill, MemorySpill):
        panel = spill.get(GRID)
        return panel.grid, panel.shift
    grid = SharedGrid(**{f.name: spill.array(GRID + f.name) if spill.has(GRID + f.name) else None
                         for f in dataclasses.fields(SharedGrid)})
    return grid, spill.array(SHIFT) if spill.has(SHIFT) else None


def share_static(spill: Spill, fitted: FittedInputs | None, values: dict[str, list], names: list[str]) -> None:
    """Spill the panel's static inputs (static.arrays: (S, Sr) real, (S, Sc) codes) for the pieces' writes."""
    if not values:
        return
    cont, cat = static.arrays(fitted, values, names)
    spill.put_array(f"{STATIC}cont", cont)
    spill.put_array(f"{STATIC}cat", cat)
