"""The per-series pipeline with a fitted transform: from whole series' raw features to the rows, windows, splits and
known inputs a model reads, and their schema. The write stage of data/prepare runs it over each piece of a panel
with the panel's transform, split cuts and known grid (one piece for a panel in memory). It needs no torch.

Legend: N rows, S series, W windows, Kr known columns stored per row, Or observed inputs, U grid rows, D steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from foxhunt.allocator import release_freed_memory
from foxhunt.data.baselines.anchor import anchor_rows
from foxhunt.data.dataset.summary import WindowFacts, window_facts
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.dataset.windows import (
    SplitResult,
    assign_splits,
    off_grid_windows,
    series_bounds,
    window_starts,
)
from foxhunt.data.features import static, timed_categories
from foxhunt.data.features.bar_features import own_move_columns
from foxhunt.data.features.calendar import calendar_columns
from foxhunt.data.features.inputs import KnownValues, known_names
from foxhunt.data.features.known import DecoderKnown, grid_width
from foxhunt.data.features.scaling import standardize
from foxhunt.data.features.schema import UNKNOWN_SERIES, Feature, FeatureSchema, Kind, Role
from foxhunt.data.util import parallel

OWN = "own_"  # the row key (and the store's file name) of an own move column: own_log_range, own_log_return
# Fills the known columns (N, Kr) of rows at timestamps (N,) under their events' keys ((N,) or None: `keyed`) and
# gives their grid (known.DecoderKnown).
KnownRows = Callable[[np.ndarray, np.ndarray, np.ndarray | None], DecoderKnown]
EVENT_KEY = "event_key"  # the row array of each row's events key (events.row_keys), present with keyed events


@dataclass(frozen=True)
class SeriesRows:
    """Whole series' rows sorted by (series, time), their windows and splits (window ids from 0), as numpy arrays:
    what WindowedData holds as tensors and a store holds as files."""

    cont: np.ndarray  # (N, Kr + Or) float32: known columns, then observed inputs
    target: np.ndarray  # (N,) float32 unscaled
    center: np.ndarray  # (N,) float32
    scale: np.ndarray  # (N,) float32
    ts: np.ndarray  # (N,) int64 ns
    sidx: np.ndarray  # (N,) int64 index into the caller's names
    real: np.ndarray  # (N,) bool: False on the future rows of a prediction
    codes: np.ndarray  # (N,) int64 static series codes (FittedTransform.code)
    starts: np.ndarray  # (W,) int64 first row of each window
    known: DecoderKnown
    own: dict[str, np.ndarray]  # features.own_move_columns -> (N,) float32
    split: SplitResult
    facts: WindowFacts
    roll_bars: int
    anchor: np.ndarray | None = None  # (N, D * Q) float32 the anchor's quantiles at each row as an origin (--anchor)


def series_rows(feats: pl.DataFrame, names: list[str], sidx: np.ndarray, ts: np.ndarray, tf: FittedTransform,
                trail: tuple) -> dict[str, np.ndarray]:
    """The row arrays of raw features `feats` (N rows; `sidx` (N,) into `names`, timestamps `ts` (N,)) under `tf`:
    the observed inputs standardized straight into the last Or columns of "cont" (its first Kr, the known columns,
    are filled by `windowed_rows`), the target, its center and scale, the own moves, and "roll_bars". `trail`:
    scaling.trailing's output under `tf` (the trail stage's)."""
    kr = known_width(tf)
    cont = np.empty((len(sidx), kr + len(tf.observed_names)), dtype=np.float32)  # (N, Kr + Or)
    _, center, scale = standardize(feats, names, sidx, tf.scalers, tf.data, *trail, out=cont[:, kr:])
    anchor = {}
    if tf.anchor is not None:
        anchor["anchor"] = anchor_rows(tf.anchor, names, sidx, feats["target"].to_numpy(), feats["first"].to_numpy(),
                                       center, scale, tf.data.horizon, tf.data.quantiles)  # (N, D * Q)
    return {
        "cont": cont,
        "target": feats[tf.target].to_numpy().astype(np.float32),
        "center": center,
        "scale": scale,
        "ts": ts,
        "sidx": sidx,
        "real": np.ones(len(sidx), dtype=bool),
        **{OWN + c: feats[c].to_numpy().astype(np.float32) for c in own_move_columns(tf.target)},
        "roll_bars": np.int64(feats["roll"].sum()),
        **anchor,
    }


def windowed_rows(rows: dict[str, np.ndarray], names: list[str], tf: FittedTransform, e: int, d: int,
                  cuts: tuple[int, int | None] | None, train_start: int, known: KnownRows,
                  future: np.ndarray | None = None) -> SeriesRows:
    """`series_rows`' arrays (consumed) with their known inputs (`known`), windows of `e` + `d` rows and splits
    under `cuts` (None: a prediction, every window is test). `future` (S, d): timestamps of the rows appended after
    each series for a prediction (`extend`), so that its last bar is an origin too."""
    roll_bars = int(rows.pop("roll_bars"))
    first, end = series_bounds(rows["sidx"])
    if future is not None:
        rows = extend(rows, first, end, d, future)
        first, end = series_bounds(rows["sidx"])  # each series now ends d rows later
    # The windows and their splits follow from the timestamps alone: on a second thread while the known inputs fill.
    planned = None if cuts is None else parallel.submit(
        window_splits, rows["ts"], first, end, e, d, cuts, train_start)
    cont = rows.pop("cont")  # (N, Kr + Or)
    grid = known(rows["ts"], cont[:, :known_width(tf)], rows.get(EVENT_KEY))
    release_freed_memory()  # the grid's and the calendar's temporaries, before the last row arrays (what it saves: allocator.py)
    codes = tf.code(names)[rows["sidx"]]  # (N,)
    if planned is None:
        starts = window_starts(first, end, e + d)
        split = SplitResult(ids={"train": np.empty(0, np.int64), "val": np.empty(0, np.int64),
                                 "test": np.arange(len(starts))}, purged={"train": 0, "val": 0})
    else:
        starts, split = planned.result()
        del planned
    # Counted over the windows of the splits, which the summary counts, so that the count is a share of them:
    # purged windows (and those before a rolling window's start) are in none.
    used = starts if cuts is None else starts[np.concatenate(list(split.ids.values()))]
    gaps = parallel.submit(off_grid_windows, used, rows["ts"], grid.ts, e, d, grid.base,
                           None if grid.index is None else grid.index[:, -1])
    facts = window_facts(rows["ts"], rows["real"], rows["sidx"], codes, starts, len(names), e, split, 0)
    facts = dataclasses.replace(facts, off_grid=gaps.result())
    return SeriesRows(cont=cont, target=rows["target"], center=rows["center"], scale=rows["scale"], ts=rows["ts"],
                      sidx=rows["sidx"], real=rows["real"], codes=codes, starts=starts, known=grid,
                      own={c: rows[OWN + c] for c in own_move_columns(tf.target)}, split=split, facts=facts,
                      roll_bars=roll_bars, anchor=rows.get("anchor"))


def key_groups(keys: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """[(key, its rows (Ng,), ascending)] of the rows under a key (`keys` (N,), -1: none), from one stable sort:
    a scan of every row per key took seconds with hundreds of contract keys on tens of millions of rows."""
    order = np.argsort(keys, kind="stable")  # (N,)
    ranked = keys[order]
    first = int(np.searchsorted(ranked, 0))  # the rows under no key (-1) sort first
    found, starts = np.unique(ranked[first:], return_index=True)
    if not len(found):
        return []
    ends = np.append(starts[1:], len(ranked) - first)
    return [(int(g), order[first + a:first + b]) for g, a, b in zip(found, starts, ends, strict=True)]


def with_blocks(cont: np.ndarray, ts: np.ndarray, spans: dict[int, tuple[int, int]], user: KnownValues,
                names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, dict[int, int]]:
    """The grid table (`cont` (U, Kr), `ts` (U,)) with a block per key of `spans` appended in key order: its rows
    [first, end), their user columns under the key (`names`); and how far each key's rows move (`move_keyed`)."""
    ku = user(ts[:0]).shape[1]  # the user's known columns, the last of the table's
    conts, stamps, size, shift = [cont], [ts], len(ts), {}
    for g, (lo, hi) in sorted(spans.items()):
        block = cont[lo:hi].copy()  # (hi - lo, Kr)
        block[:, -ku:] = user(ts[lo:hi], names[g])
        shift[g] = size - lo
        conts.append(block)
        stamps.append(ts[lo:hi])
        size += hi - lo
    return np.concatenate(conts), np.concatenate(stamps), shift


def move_keyed(grid: DecoderKnown, ts: np.ndarray, keys: np.ndarray, out: np.ndarray, user: KnownValues,
               names: tuple[str, ...], shift: dict[int, int]) -> DecoderKnown:
    """`grid` with the rows under a key (`keys`) reading their key's events in `out` at their own times (`ts`)
    and their grid rows moved by `shift` into their key's block (`with_blocks`), in place."""
    ku = user(ts[:0]).shape[1]
    for g, rows in key_groups(keys):
        out[rows, -ku:] = user(ts[rows], names[g])
        grid.base[rows] += shift[g]
        if grid.index is not None:
            grid.index[rows] += shift[g]
    return grid


def moved(known: KnownRows, user: KnownValues, names: tuple[str, ...], shift: dict[int, int]) -> KnownRows:
    """`known` (the panel's known.SharedGrid.rows, whose table holds the keys' blocks: `with_blocks`) with the rows
    under a key moved into their key's block (`move_keyed`)."""
    def rows(ts: np.ndarray, out: np.ndarray, keys: np.ndarray | None = None) -> DecoderKnown:
        grid = known(ts, out)
        return grid if keys is None else move_keyed(grid, ts, keys, out, user, names, shift)
    return rows


def known_width(tf: FittedTransform) -> int:
    """Kr: the calendar columns, tod_vol with a seasonality profile and the user's known inputs (the known inputs
    stored per row)."""
    return grid_width(tf.intraday, tf.calendar_features, tf.scalers.season is not None) + len(known_names(tf.inputs))


def window_splits(
    ts_ns: np.ndarray, first: np.ndarray, end: np.ndarray, e: int, d: int, cuts: tuple[int, int | None],
    train_start: int,
) -> tuple[np.ndarray, SplitResult]:
    """(W,) the start row of every window of the series' rows [first, end) (window_starts), and the windows' splits
    under `cuts` (assign_splits) from the timestamps `ts_ns` (N,) of their first and last forecast bars."""
    starts = window_starts(first, end, e + d)
    # ts_ns[starts + k] read as ts_ns[k:][starts]: no (W,) sum of rows to hold
    return starts, assign_splits(ts_ns[e:][starts], ts_ns[e + d - 1 :][starts], *cuts, train_start)


def extend(rows: dict, first: np.ndarray, end: np.ndarray, d: int, future_ns: np.ndarray) -> dict:
    """Append `d` future rows after each series (S, d timestamps in `future_ns`): NaN target, zero inputs, not real."""
    s = len(first)
    # Real rows of series i move down by i * d rows, making room for the future rows of the series before it.
    shift = np.repeat(np.arange(s, dtype=np.int64) * d, end - first)  # (N,)
    real_pos = np.arange(len(rows["ts"]), dtype=np.int64) + shift
    fut_pos = ((end + np.arange(s) * d)[:, None] + np.arange(d)).ravel()  # (S * d,)
    n = len(rows["ts"]) + s * d
    fill = {"cont": 0.0, "target": np.nan, "center": 0.0, "scale": 1.0, "real": False, "anchor": 0.0,
            **{OWN + c: np.nan for c in own_move_columns("log_range")}}
    out = {}
    for key, arr in rows.items():
        new = np.empty((n, *arr.shape[1:]), dtype=arr.dtype)
        new[real_pos] = arr
        if key == "ts":
            new[fut_pos] = future_ns.ravel()
        elif key == "sidx":
            new[fut_pos] = np.repeat(np.arange(s), d)
        elif key == EVENT_KEY:  # the steps after a series' last bar read the key it holds there
            new[fut_pos] = np.repeat(arr[end - 1], d)
        else:
            new[fut_pos] = fill[key]
        out[key] = new
    return out


def feature_schema(tf: FittedTransform, e: int, d: int, adjust: str) -> FeatureSchema:
    season = ("tod_vol",) if tf.scalers.season is not None else ()
    known = [*calendar_columns(tf.intraday, tf.calendar_features), *season, *known_names(tf.inputs),
             "relative_time"]
    vocab = tf.inputs.static_vocab if tf.inputs is not None else {}
    timed = tf.inputs.timed_vocab if tf.inputs is not None else {}
    features = (
        Feature("series", Role.STATIC, Kind.CATEGORICAL, cardinality=len(tf.series_vocab) + 1),
        *(Feature(n, Role.STATIC, Kind.CATEGORICAL, cardinality=len(vocab[n]) + 1)
          for n in static.categorical_columns(tf.inputs)),
        *(Feature(n, Role.STATIC, Kind.CONTINUOUS) for n in static.real_columns(tf.inputs)),
        *(Feature(n, Role.KNOWN, Kind.CATEGORICAL, cardinality=len(timed[n]) + 1)
          for n in timed_categories.known_columns(tf.inputs)),
        *(Feature(n, Role.KNOWN, Kind.CONTINUOUS) for n in known),
        *(Feature(n, Role.OBSERVED, Kind.CATEGORICAL, cardinality=len(timed[n]) + 1)
          for n in timed_categories.observed_columns(tf.inputs)),
        *(Feature(n, Role.OBSERVED, Kind.CONTINUOUS) for n in tf.observed_names),
    )
    extra = {
        "scaling": tf.scaling,
        "vol_halflife": float(tf.data.vol_halflife),
        "vol_estimator": tf.data.vol_estimator,
        "intraday": tf.intraday,
        "calendar_features": tf.calendar_features,
        "exchange_tz": tf.exchange_tz,
        "unknown_series_code": UNKNOWN_SERIES,
        "adjust": adjust,
    }
    return FeatureSchema(features=features, target=tf.target, encoder_length=e, horizon=d, extra=extra)
