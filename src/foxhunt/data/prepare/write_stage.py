"""The trail, context and write stages: a piece's trailing inputs and their sums, its --context inputs' sums, and
its rows, windows and splits written into the sink at its place by the per-series pipeline (dataset/featurize.py)
under the panel's transform, split cuts and known grid.

`trail` writes the piece at once where its series' own sums complete the scalers (scaling.own_scalers) and its
spills would otherwise be read again from files (`early`); `write` writes the others once the panel's scalers are
complete. With a saved model's transform the scalers are complete from the start, nothing is summed, and each
series gets `horizon` future rows (`future`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import polars as pl

from foxhunt.data.dataset.featurize import EVENT_KEY, moved, series_rows, windowed_rows
from foxhunt.data.dataset.summary import WindowFacts
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.features import inputs, timed_categories
from foxhunt.data.features.scaling import own_scalers, trailing, vol_moments
from foxhunt.data.prepare.grid import STATIC, spilled_grid
from foxhunt.data.prepare.load_stage import Side, spilled_features, training_rows
from foxhunt.data.prepare.recipe import Recipe
from foxhunt.data.prepare.sink import Sink
from foxhunt.data.prepare.spill import Spill
from foxhunt.data.store.layout import SPLITS, own_array

CENTER, SCALE = "__center", "__scale"  # the target's center and scale beside the trailing inputs in a spill
CONTEXT = "context-"  # the spill of the I-th --context series' inputs (inputs.context_of), one per series


@dataclass(frozen=True)
class Place:
    """Where a piece's rows go: the series, rows and windows of the pieces before it, and its series' future times
    ((S, D), a prediction's: `featurize.extend`; None otherwise)."""

    series0: int
    row0: int
    win0: int
    future: np.ndarray | None = None


@dataclass(frozen=True)
class PieceSeries:
    """What every job of a piece after the load stage is given: which piece, its series and their lengths."""

    k: int
    names: list[str]
    lengths: np.ndarray  # (S,)


@dataclass(frozen=True)
class PieceWritten:
    """A written piece's windows' splits (ids in the panel), summary facts and bars at a roll."""

    splits: dict[str, np.ndarray]
    facts: WindowFacts
    roll_bars: int
    unseen: timed_categories.Unseen | None = None  # its categorical inputs' values unseen in training (`tell`)


@dataclass(frozen=True)
class PieceTrailed:
    """A piece's trailing inputs' statistics (scaling.vol_moments; None without a fit), and the piece written when
    its scalers are complete (None: left for `write`; see `trail`)."""

    mom: dict[str, np.ndarray] | None
    written: PieceWritten | None


@dataclass(frozen=True)
class Writing:
    """What a write needs besides the piece: the panel's transform (complete for the piece's series), split cuts
    (None: a prediction), the grid's step, and where the rows go."""

    transform: FittedTransform
    cuts: tuple[int, int | None] | None
    step: int
    sink: Sink


def trail(recipe: Recipe, piece: PieceSeries, spill: Spill, cuts: tuple | None, writing: Writing, place: Place,
          src: inputs.Sources | None, early: bool) -> PieceTrailed:
    """The piece's trailing inputs under the first scalers (`writing.transform`'s) and their statistics over its
    training rows (none in a prediction). The piece is written now (`_write`) when `early` and its scalers are
    complete: its series' own statistics complete them, or the transform is a saved model's, and the run has no
    --context (whose scalers need every piece's join); otherwise its trailing inputs are spilled for `write`.
    `src`: the user's inputs; the inputs of a --context series of the piece are spilled for every piece's join."""
    tf, names = writing.transform, piece.names
    scalers = tf.scalers
    feats, sidx, ts, side = spilled_features(recipe, spill, piece.k, piece.lengths)
    minute = side.minute
    if scalers.season is not None and scalers.season.tz != recipe.season_tz:
        minute = None  # the spilled minutes are in the exchange's zone: trailing computes the profile's own
    derived = trailing(feats, names, sidx, scalers, tf.data, minute=minute)  # (derived, center, scale)
    mom = None
    if cuts is not None and recipe.fitting:
        mom = vol_moments(derived[0], sidx, len(names), training_rows(recipe, feats, ts, cuts), scalers, tf.data)
    for i, c in enumerate(src.context if src is not None else ()):  # its context series' inputs, for every piece
        if c in names:
            spill.put_frame(f"{CONTEXT}{i}", inputs.context_of(feats, derived[0]["log_vol"],
                                                               np.flatnonzero(sidx == names.index(c)), ts,
                                                               recipe.target))
    own = None
    if early and not (src is not None and src.context):
        own = own_scalers(scalers, tf.data, mom, names) if recipe.fitting else scalers
    if own is None:  # what `write` reads back depends on the first scalers only, fixed by now
        spill.put_columns(f"trail-{piece.k}", {**derived[0], CENTER: derived[1], SCALE: derived[2]})
        return PieceTrailed(mom, None)
    spill.drop(f"feats-{piece.k}")  # read for the last time
    writing = dataclasses.replace(writing, transform=dataclasses.replace(writing.transform, scalers=own))
    rows = _rows(feats, piece.names, sidx, ts, writing.transform, derived, side)
    del feats, derived  # not read past here: gone before the known inputs and the windows
    return PieceTrailed(mom, _write(recipe, spill, piece, rows, writing, place, side, src))


def context(recipe: Recipe, piece: PieceSeries, spill: Spill, cuts: tuple, src: inputs.Sources) -> dict[str, np.ndarray]:
    """The piece's moments of the --context columns over its training rows (inputs.observed_moments), its rows
    joined with the context series' inputs `trail` spilled."""
    feats, sidx, ts, _ = spilled_features(recipe, spill, piece.k, piece.lengths, _context(spill, src), minute=False)
    return inputs.observed_moments(feats, piece.names, sidx, training_rows(recipe, feats, ts, cuts),
                                   src.context_columns)


def write(recipe: Recipe, piece: PieceSeries, spill: Spill, writing: Writing, place: Place,
          src: inputs.Sources | None) -> PieceWritten:
    """The piece written (`_write`) from its spilled features and trailing inputs with the whole panel's transform:
    the pieces `trail` did not write."""
    feats, sidx, ts, side = spilled_features(recipe, spill, piece.k, piece.lengths, _context(spill, src), minute=False)
    spilled = spill.columns(f"trail-{piece.k}")
    derived = ({c: v for c, v in spilled.items() if c not in (CENTER, SCALE)}, spilled[CENTER], spilled[SCALE])
    del spilled
    spill.drop(f"trail-{piece.k}", f"feats-{piece.k}")  # a file stays readable until unmapped
    rows = _rows(feats, piece.names, sidx, ts, writing.transform, derived, side)
    del feats, derived  # not read past here: gone before the known inputs and the windows
    return _write(recipe, spill, piece, rows, writing, place, side, src)


def _context(spill: Spill, src: inputs.Sources | None) -> dict[str, pl.DataFrame] | None:
    """The --context series' inputs `trail` spilled, by series."""
    if src is None or not src.context:
        return None
    return {c: spill.frame(f"{CONTEXT}{i}") for i, c in enumerate(src.context)}


def _rows(feats: pl.DataFrame, names: list[str], sidx: np.ndarray, ts: np.ndarray, transform: FittedTransform,
          derived: tuple, side: Side) -> dict[str, np.ndarray]:
    """The piece's row arrays (featurize.series_rows) of its raw features and trailing inputs `derived`, with each
    row's events key; the caller drops its features once they are made."""
    rows = series_rows(feats, names, sidx, ts, transform, derived)
    if side.keys is not None:
        rows[EVENT_KEY] = side.keys
    return rows


def _write(recipe: Recipe, spill: Spill, piece: PieceSeries, rows: dict[str, np.ndarray], writing: Writing,
           place: Place, side: Side, src: inputs.Sources | None) -> PieceWritten:
    """Run the rest of the per-series pipeline (dataset/featurize.py) over a piece's `rows` (`_rows`, consumed) with
    the panel's known grid (its rows under an events key moved into their key's block, which the grid's table
    holds), and write its rows and their categorical codes into the sink at its place."""
    transform, names, e, d = writing.transform, piece.names, recipe.encoder_length, recipe.horizon
    grid, shift = spilled_grid(spill)  # a panel in memory: waits here for its grid, computed meanwhile
    known = grid.rows
    if side.keys is not None:
        user = inputs.known_values(transform.inputs, src, writing.step, transform.event_cap)
        known = moved(known, user, src.events.keys, dict(enumerate(shift.tolist())))
    out = windowed_rows(rows, names, transform, e, d, writing.cuts, recipe.train_start, known, place.future)
    del rows
    time_cat, unseen = None, {}
    if src is not None and transform.inputs is not None and (src.observed_cat or src.known_cat):
        # the grid's known codes are the panel's
        time_cat = timed_categories.arrays(transform.inputs, src, side.cats, out.ts, out.real, out.ts[:0], unseen)[0]
    codes, static_cont = out.codes[:, None], None  # (n, 1): a view of the fresh codes
    if spill.has(f"{STATIC}cat"):  # --static: (S, Sc) and (S, Sr) of the panel's series
        at = out.sidx + place.series0
        codes = np.concatenate([codes, spill.array(f"{STATIC}cat")[at]], axis=1)  # (n, 1 + Sc)
        static_cont = spill.array(f"{STATIC}cont")[at]  # (n, Sr)
    arrays = {"cont": out.cont, "static_cat": codes, "static_cont": static_cont, "time_cat": time_cat,
              "target_raw": out.target, "center": out.center, "scale": out.scale, "ts_ns": out.ts, "real": out.real,
              "series_idx": out.sidx + place.series0 if place.series0 else out.sidx,
              "known_base": out.known.base, "known_index": out.known.index, "anchor": out.anchor,
              **{own_array(c): v for c, v in out.own.items()}}
    sink = writing.sink
    for name, value in arrays.items():
        if value is not None:
            sink.put(name, place.row0, value)
    sink.put("starts", place.win0, out.starts + place.row0 if place.row0 else out.starts)
    return PieceWritten({name: out.split.ids[name] + place.win0 for name in SPLITS}, out.facts, out.roll_bars,
                        unseen)
