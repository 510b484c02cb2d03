"""The user's own inputs (--observed, --known, --events, --static) in a pieced `foxhunt prepare`: fitted in the
`prepare` process from what the pieces send back, as prepare_from_bars fits them over the whole panel.

- observed: each piece joins its bars' columns (jobs.load: inputs.join_observed) and sends back its bars without a
  finite value and its series' moments (inputs.observed_moments), which concatenate into the panel's; the bad-bars
  rule judges the panel's sums.
- known and events: functions of a timestamp, appended to the panel's SharedGrid (its origins' rows and the grid's)
  with the known covariates' mean and std fitted over the training bars' times, which the pieces count.
- static: each piece reads its series' values; they are fitted over the panel's series here, and the (S, Sr) and
  (S, Sc) arrays spilled for the pieces' writes (jobs._write).

--context reads other series' rows, which another piece holds: such a store is prepared in memory (build.py).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np

from foxhunt.data.config import DataConfig
from foxhunt.data.features import inputs, static
from foxhunt.data.features.fitstats import concat
from foxhunt.data.features.known import SharedGrid
from foxhunt.data.store.jobs import STATIC, Fit, PieceLoaded, share


def fit_declared(cfg: DataConfig, src: inputs.Sources, loads: list[PieceLoaded], fits: list[Fit], names: list[str],
                 scalers: dict) -> tuple[dict, dict[str, list], int]:
    """The fitted inputs (FittedTransform.inputs) of the pieces `loads` under their `fits` over the panel's series
    `names`, the observed columns' scalers added to `scalers` (in place), as prepare_from_bars fits them; with the
    series' static values and the bars dropped. InputError where more than inputs.MAX_BAD_FRACTION of the panel's
    bars have no finite observed value."""
    mode = cfg.covariate_scaling
    dropped = 0
    if src.observed:
        counts = sum((Counter(r.dropped) for r in loads), Counter())
        inputs.check_dropped({k: counts[k] for k in (*src.observed, inputs.DROPPED, inputs.BARS)})
        dropped = counts[inputs.DROPPED]
        inputs.scale_observed(concat([f.user for f in fits]), names, src, mode, scalers)
    known_scalers = {}
    if src.known:
        stamps = np.concatenate([f.stamps[0] for f in fits])
        distinct, at = np.unique(stamps, return_inverse=True)
        counts = np.bincount(at, weights=np.concatenate([f.stamps[1] for f in fits])).astype(np.int64)
        known_scalers = inputs.fit_known_counted(src, distinct, counts, mode)
    values = {c: [v for r in loads for v in r.static[c]] for c in src.static}
    static_fit = static.fit(values, names, list(scalers["series"]), src.static_kinds or {})
    fitted = inputs.fitted(src, mode, known_scalers, event_cap=cfg.encoder_length + cfg.horizon,
                           static_fit=static_fit)
    return fitted, values, dropped


def with_known(grid: SharedGrid, origins: np.ndarray, fitted: dict, src: inputs.Sources, step: int) -> SharedGrid:
    """`grid` (of the sorted distinct `origins`) with the user's known inputs (inputs.known_values) of its origins
    and grid rows after the calendar's columns, as featurize.with_user appends them to a panel's rows."""
    user = inputs.known_values(fitted, src, step)
    if user is None:
        return grid
    return dataclasses.replace(grid, cal=np.concatenate([grid.cal, user(origins)], axis=1),
                               cont=np.concatenate([grid.cont, user(grid.ts)], axis=1))


def share_static(spill: Path, fitted: dict, values: dict[str, list], names: list[str]) -> None:
    """Spill the panel's static inputs (static.arrays: (S, Sr) real, (S, Sc) codes) for the pieces' writes."""
    if not values:
        return
    cont, cat = static.arrays(fitted, values, names)
    share(spill, f"{STATIC}cont", cont)
    share(spill, f"{STATIC}cat", cat)
