"""The user's own inputs (--observed, --known, --events, --static, --context) in a pieced `foxhunt prepare`: fitted in the
`prepare` process from what the pieces send back, as prepare_from_bars fits them over the whole panel.

- observed: each piece joins its bars' columns (jobs.load: inputs.join_observed) and sends back its bars without a
  finite value and its series' moments (inputs.observed_moments), which concatenate into the panel's; the bad-bars
  rule judges the panel's sums.
- known and events: functions of a timestamp, appended to the panel's SharedGrid (its origins' rows and the grid's)
  with the known covariates' mean and std fitted over the training bars' times, which the pieces count. Events
  keyed to a series or contract: each piece sends back its rows' first and last time under each key
  (events.key_times), and the grid's table gets each key's block (featurize.with_blocks) of the span those reach;
  a piece moves its keyed rows into their key's block (featurize.moved), as featurize.keyed does over the panel.
- categorical observed and known (timed_categories.py): the vocabularies fitted from each piece's training values
  (timed_categories.seen) and the training times; each piece writes its rows' codes, the grid's are coded here,
  and the values unseen in training the pieces count are said once for the panel (timed_categories.tell).
- static: each piece reads its series' values; they are fitted over the panel's series here, and the (S, Sr) and
  (S, Sc) arrays spilled for the pieces' writes (jobs._write).

- context: each series reads a context series' inputs (its moves, volume and log_vol under the first scalers), which
  the piece holding it spills in `trail` (inputs.context_of); each piece joins them as of its rows
  (inputs.join_context) and sends back their moments (jobs.context), whose scalers store/pieced.py fits last, after
  the trailing inputs', as prepare_from_bars does; so no piece is written before `write`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np

from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.featurize import with_blocks
from foxhunt.data.features import inputs, static, timed_categories
from foxhunt.data.features.fitstats import concat
from foxhunt.data.features.known import SharedGrid
from foxhunt.data.prepare.stages import SHIFT, STATIC, Fit, PieceLoaded, share


def fit_declared(cfg: DataConfig, src: inputs.Sources, loads: list[PieceLoaded], fits: list[Fit], names: list[str],
                 scalers: dict) -> tuple[dict, dict[str, list], int]:
    """The fitted inputs (FittedTransform.inputs) of the pieces `loads` under their `fits` over the panel's series
    `names`, the observed columns' scalers added to `scalers` (in place), as prepare_from_bars fits them; with the
    series' static values and the bars dropped. InputError where more than inputs.MAX_BAD_FRACTION of the panel's
    bars have no finite observed value."""
    mode = cfg.covariate_scaling
    dropped = 0
    inputs.check_context(src.context, names)
    if src.observed:
        counts = sum((Counter(r.dropped) for r in loads), Counter())
        inputs.check_dropped({k: counts[k] for k in (*src.observed, inputs.DROPPED, inputs.BARS)})
        dropped = counts[inputs.DROPPED]
        inputs.scale_observed(concat([f.user for f in fits]), names, src.observed, mode, scalers)
    if src.events is not None and src.events.keys:  # event_keys' check, of the whole panel
        inputs.check_keyed(src.events, any((r.keys[:, 0] <= r.keys[:, 1]).any() for r in loads), lambda: names)
    known_scalers, distinct = {}, np.zeros(0, dtype=np.int64)
    if src.known or src.known_cat:
        stamps = np.concatenate([f.stamps[0] for f in fits])
        distinct, at = np.unique(stamps, return_inverse=True)
        counts = np.bincount(at, weights=np.concatenate([f.stamps[1] for f in fits])).astype(np.int64)
        known_scalers = inputs.fit_known_counted(src, distinct, counts, mode) if src.known else {}
    values = {c: [v for r in loads for v in r.static[c]] for c in src.static}
    static_fit = static.fit(values, names, list(scalers["series"]), src.static_kinds or {})
    fitted = inputs.fitted(src, mode, known_scalers, event_cap=cfg.encoder_length + cfg.horizon,
                           static_fit=static_fit,
                           timed_vocab=timed_categories.fit_seen(src, [f.seen or {} for f in fits], distinct))
    return fitted, values, dropped


def with_known(spill: Path, grid: SharedGrid, origins: np.ndarray, fitted: dict, src: inputs.Sources, step: int,
               loads: list[PieceLoaded], d: int) -> tuple[SharedGrid, np.ndarray, timed_categories.Unseen]:
    """`grid` (of the sorted distinct `origins`) with the user's known inputs (inputs.known_values) of its origins
    and grid rows after the calendar's columns, as featurize.with_user appends them to a panel's rows, and with the
    blocks of the events' keys the pieces' rows hold appended to its table (how far each key's rows move spilled
    for the pieces: jobs.SHIFT); with the (U, Kc) codes of its table's categorical known inputs and their values
    unseen in training (timed_categories.known_codes)."""
    user = inputs.known_values(fitted, src, step)
    if user is not None:
        grid = dataclasses.replace(grid, cal=np.concatenate([grid.cal, user(origins)], axis=1),
                                   cont=np.concatenate([grid.cont, user(grid.ts)], axis=1))
    if src.events is not None and src.events.keys:
        first, last = (np.stack([r.keys[:, j] for r in loads]) for j in (0, 1))  # (P, G) each
        first, last = first.min(axis=0), last.max(axis=0)
        spans = {int(g): grid.span(int(first[g]), int(last[g]), d) for g in np.flatnonzero(first <= last)}
        cont, ts, shift = with_blocks(grid.cont, grid.ts, spans, user, src.events.keys)
        grid = dataclasses.replace(grid, cont=cont, ts=ts)
        share(spill, SHIFT, np.array([shift.get(g, 0) for g in range(len(first))], dtype=np.int64))
    unseen: timed_categories.Unseen = {}
    return grid, timed_categories.known_codes(fitted, src, grid.ts, unseen), unseen


def share_static(spill: Path, fitted: dict, values: dict[str, list], names: list[str]) -> None:
    """Spill the panel's static inputs (static.arrays: (S, Sr) real, (S, Sc) codes) for the pieces' writes."""
    if not values:
        return
    cont, cat = static.arrays(fitted, values, names)
    share(spill, f"{STATIC}cont", cont)
    share(spill, f"{STATIC}cat", cat)
