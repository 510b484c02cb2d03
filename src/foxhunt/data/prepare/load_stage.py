"""The load stage: a piece's bars joined with the user's observed inputs, sorted by series and time, their raw
features spilled for the later stages, and what the panel's fit needs of them sent back: the piece's series, their
lengths, bar gaps and static values, its distinct times (spilled), and the sums of its training rows (`Fit`).

The sums are per-series sufficient statistics that concatenate over pieces of consecutive series
(features/fitstats.py), so the panel's scalers are fitted from them (fit.py) bit for bit as from all of its rows
at once. A saved model's transform needs no sums: its pieces send back none.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from foxhunt.data.bars.bad_rows import BadRows
from foxhunt.data.bars.grid import gap_counts
from foxhunt.data.bars.validate import check_log_target
from foxhunt.data.baselines.anchor import AnchorFit, fit_anchor
from foxhunt.data.config import ANCHORS, DataConfig
from foxhunt.data.features import inputs, static, timed_categories
from foxhunt.data.features.bar_features import move_columns, raw_features
from foxhunt.data.features.covariate_files import Held
from foxhunt.data.features.events import key_times
from foxhunt.data.features.known import sorted_distinct
from foxhunt.data.features.scaling import train_moments
from foxhunt.data.features.seasonality import minute_of_day
from foxhunt.data.prepare.read_stage import Spilled, piece_bars, piece_sources
from foxhunt.data.prepare.recipe import Recipe
from foxhunt.data.prepare.spill import Spill
from foxhunt.data.prepare.splits import split_cuts
from foxhunt.data.util.order import run_starts, sort_keys
from foxhunt.data.util.runs import run_lengths

# What scaling and the row tensors read of raw_features' output for every target (log_range: the seasonal profile),
# besides the target's own move columns (features.move_columns) and, with --fill-gaps, `filled`.
FEATURE_COLUMNS = ("ts", "first", "roll", "target", "log_range", "log_volume")
# What raw_features reads of loaded bars that carry their contracts' own prices (bars without them: also PRICES).
FEATURE_INPUTS = ("series", "ts", "contract", "volume", "own_high", "own_low", "own_close", "roll_log_ratio", "roll_gap",
                  "filled")
PRICES = ("high", "low", "close")
MINUTE, CAT, KEY = "__minute", "__cat:", "__key"  # a spill's side columns (Side): a minute, a category, a key
NO_CUT = np.iinfo(np.int64).min  # the train cut of a run that fits nothing: no row is a training row


@dataclass(frozen=True)
class Fit:
    """A piece's training statistics under the split cuts (scaling.train_moments) and its training rows' gaps."""

    mom: dict[str, np.ndarray]
    train_gaps: tuple[np.ndarray, np.ndarray]  # (values, counts)
    user: dict[str, np.ndarray] | None = None  # the --observed columns' moments (inputs.observed_moments)
    stamps: tuple[np.ndarray, np.ndarray] | None = None  # the training bars' distinct times, counts (--known)
    seen: dict[str, list[str]] | None = None  # categorical --observed: timed_categories.seen of its training rows
    anchor: AnchorFit | None = None  # its series' anchor (--anchor), fitted on their training rows


@dataclass(frozen=True)
class PieceLoaded:
    """A loaded piece: its series, their lengths and last times, its time span, load report and rolls, its bar gaps,
    and its fit under the cuts it was given (None: a saved model's transform). Its sorted distinct timestamps are in
    the spill (`stamps-K`): not held in the `prepare` process beside every other piece's."""

    names: list[str]
    lengths: np.ndarray  # (S,)
    last: np.ndarray  # (S,) int64 ns: each series' last bar
    lo: int
    hi: int
    report: dict[str, Any]
    rolls: list[dict]
    gaps: tuple[np.ndarray, np.ndarray]  # (values, counts)
    fit: Fit | None
    dropped: dict[str, int] | None = None  # inputs.join_observed's counts (--observed)
    static: dict[str, list] | None = None  # static.series_values of its series (--static)
    keys: np.ndarray | None = None  # (G, 2) its rows' first and last time under each events key (events.key_times)
    last_keys: np.ndarray | None = None  # (S,) the events key each series' last bar reads (-1: none)
    held: Held | None = None  # its share of the bar files' columns, as the `prepare` process reports them
    bad_rows: BadRows | None = None  # the bad rows it dropped, judged over the panel's (validate.judge_bad_rows)


@dataclass(frozen=True)
class Side:
    """A piece's columns spilled beside its raw features: each row's minute of the day (a profile to fit),
    categorical --observed values as joined, and events key (events.row_keys, with keyed --events)."""

    minute: np.ndarray | None
    cats: dict[str, pl.Series]
    keys: np.ndarray | None


def load(cfg: DataConfig, recipe: Recipe, k: int, spill: Spill, spilled: Spilled | None,
         expected: tuple[int, int | None] | None, src: inputs.Sources | None = None) -> PieceLoaded:
    """Load piece `k` (read_stage.piece_bars) and spill its raw features for the later jobs; its Fit under the cuts
    `expected` (None: those of its own bars, when it is the whole panel). `src`: its share of the user's inputs, whose
    observed columns join the bars before their rows are numbered and whose static values are read per series."""
    loaded = piece_bars(cfg, k, spill, spilled)
    src, held = piece_sources(k, spill, spilled, src)
    dropped = None
    if src is not None and (src.observed or src.observed_cat):
        joined, dropped = inputs.join_observed(loaded.bars, src)
        loaded = dataclasses.replace(loaded, bars=joined)
        del joined
    bars, names, sidx, ts = sorted_bars(loaded.bars)
    report, rolls, bad_rows = loaded.report, loaded.rolls, loaded.bad_rows
    del loaded  # the caller's bars, when this held the last reference: dropped before the features take memory
    values = None if src is None else static.series_values(bars, names, src.static, src.tables,
                                                           src.static_kinds or {})
    lengths = np.bincount(sidx, minlength=len(names))
    check_log_target(bars, recipe.target)
    side = Side(None, {c: bars.get_column(c) for c in (() if src is None else src.observed_cat)},
                inputs.event_keys(src, bars, strict=False))  # the panel is checked by the driver (fit.py)
    # Only what features read goes on: the bars' other columns go before the features take memory.
    bars = bars.select(c for c in bars.columns if c in FEATURE_INPUTS or c in recipe.observed
                       or ("own_close" not in bars.columns and c in PRICES))
    keep = [*feature_columns(recipe.target, recipe.fill_gaps), *recipe.observed]
    feats = raw_features(bars, recipe.adjust, recipe.target, columns=keep).select(keep)
    del bars
    if recipe.season_tz is not None:  # (N,) read by the fit and the trail stage
        side = dataclasses.replace(side, minute=minute_of_day(ts, recipe.season_tz).astype(np.uint16))
    # Spilled without what reading it back restores exactly: `target` (a copy of its move column), and in a file
    # `roll` as a bit (in memory as it is: not cast back at each read).
    roll = pl.col("roll") if spill.in_memory else pl.col("roll").cast(pl.Boolean)
    spill.put_frame(f"feats-{k}", feats.drop("target").with_columns(roll, *(
        pl.Series(name, v) for name, v in ((MINUTE, side.minute), (KEY, side.keys)) if v is not None),
        *(v.alias(CAT + c) for c, v in side.cats.items())))
    stamps = sorted_distinct(ts)
    spill.put_array(f"stamps-{k}", stamps)
    cuts = None if recipe.prediction else expected if expected is not None else split_cuts(cfg, [stamps])
    gaps, train_gaps = gap_counts(ts, sidx, NO_CUT if cuts is None else cuts[0])
    end = np.cumsum(lengths)
    return PieceLoaded(names, lengths, ts[end - 1], int(ts.min()), int(ts.max()), report, rolls, gaps,
                       None if cuts is None else _fit(recipe, feats, names, sidx, ts, cuts, side, train_gaps), dropped,
                       values, None if side.keys is None else key_times(side.keys, ts, len(src.events.keys)),
                       None if side.keys is None else side.keys[end - 1], held, bad_rows)


def fit(recipe: Recipe, k: int, spill: Spill, names: list[str], lengths: np.ndarray, cuts: tuple) -> Fit:
    """Piece `k`'s Fit under `cuts`, from its spilled features: where cleaning moved the cuts `load` expected."""
    feats, sidx, ts, side = spilled_features(recipe, spill, k, lengths)
    return _fit(recipe, feats, names, sidx, ts, cuts, side, gap_counts(ts, sidx, cuts[0])[1])


def spilled_features(recipe: Recipe, spill: Spill, k: int, lengths: np.ndarray,
                     context: dict[str, pl.DataFrame] | None = None, minute: bool = True
                     ) -> tuple[pl.DataFrame, np.ndarray, np.ndarray, Side]:
    """Piece `k`'s spilled raw features (as raw_features gave them), each row's series index (N,), timestamp in ns
    (N,) and its Side columns (`minute`: with the minutes, where spilled). `context`: the --context series' inputs
    (inputs.context_of), joined to the rows."""
    spilled = spill.frame(f"feats-{k}")
    have = spilled.columns
    side = Side(spilled.get_column(MINUTE).to_numpy() if minute and MINUTE in have else None,
                {c.removeprefix(CAT): spilled.get_column(c) for c in have if c.startswith(CAT)},
                spilled.get_column(KEY).to_numpy() if KEY in have else None)
    feats = spilled.with_columns(pl.col("roll").cast(pl.Float64), pl.col(recipe.target).alias("target")).select(
        *feature_columns(recipe.target, recipe.fill_gaps), *recipe.observed)
    sidx = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    ts = feats.get_column("ts").dt.epoch("ns").to_numpy()
    if context:
        feats = inputs.join_context(feats, ts, context)
    return feats, sidx, ts, side


def training_rows(recipe: Recipe, feats: pl.DataFrame, ts: np.ndarray, cuts: tuple) -> np.ndarray:
    """(n,) the rows the scalers are fitted on: before the train cut, from --train-start on, not a series' first."""
    return (ts < cuts[0]) & (ts >= recipe.train_start) & ~feats["first"].to_numpy()


def _fit(recipe: Recipe, feats: pl.DataFrame, names: list[str], sidx: np.ndarray, ts: np.ndarray, cuts: tuple,
         side: Side, train_gaps: tuple) -> Fit:
    """A piece's Fit under `cuts`, with its user inputs' statistics where the run declares them."""
    keep = training_rows(recipe, feats, ts, cuts)
    mom = train_moments(feats, sidx, len(names), keep, recipe.target, recipe.season_tz, minute=side.minute)
    user = stamps = None
    if recipe.observed:  # the categorical ones are a Side's
        user = inputs.observed_moments(feats, names, sidx, keep, recipe.observed)
    span = (ts < cuts[0]) & (ts >= recipe.train_start)  # as fit_known's: the series' first bars included
    if recipe.known_stamps:
        stamps = np.unique(ts[span], return_counts=True)
    anchor = None
    if recipe.anchor != ANCHORS[0]:  # fitting one
        anchor = fit_anchor(recipe.anchor, feats["target"].to_numpy(), sidx, keep, names)
    return Fit(mom, train_gaps, user, stamps, timed_categories.seen(side.cats, span) if side.cats else None, anchor)


def feature_columns(target: str, fill_gaps: bool) -> list[str]:
    """What scaling and the row tensors read of raw_features' output, in order."""
    return list(dict.fromkeys((*FEATURE_COLUMNS, *move_columns(target), *(("filled",) if fill_gaps else ()))))


def sorted_bars(bars: pl.DataFrame) -> tuple[pl.DataFrame, list[str], np.ndarray, np.ndarray]:
    """Bars sorted by (series, ts) (sorted only if they are not already), the series names in that order, each
    row's index into the names (N,) and its timestamp in ns (N,)."""
    sidx, names = _ranked_series(bars)  # (N,) 0..S-1 in sorted name order (writable: a tensor shares it)
    ts_ns = bars["ts"].dt.epoch("ns").to_numpy()
    later, same = sidx[1:] >= sidx[:-1], sidx[1:] == sidx[:-1]  # (N - 1,) compared, not differenced: bools
    if not (later.all() and np.all(~same | (ts_ns[1:] >= ts_ns[:-1]))):
        order = np.lexsort((ts_ns, sidx))
        bars, sidx, ts_ns = bars.select(pl.all().gather(order)), sidx[order], ts_ns[order]
    if names is None:
        names = sorted(bars["series"].unique().to_list())
    return bars, names, sidx, ts_ns


def series_index(bars: pl.DataFrame) -> np.ndarray:
    """(N,) int64 rank of each bar's series among the sorted names (see `_ranked_series`)."""
    return _ranked_series(bars)[0]


def _ranked_series(bars: pl.DataFrame) -> tuple[np.ndarray, list[str] | None]:
    """(N,) int64 rank of each bar's series among the sorted names, and those names when the runs gave them (None
    otherwise). Loaded bars come sorted by series, one run each: the few run names are ranked and repeated, where
    ranking every bar's name would cast millions of strings (and listing the distinct names hash them)."""
    starts = np.flatnonzero(run_starts(bars, ("series",)))  # (R,)
    run_names = bars.get_column("series").gather(starts).to_list()
    if len(set(run_names)) < len(run_names) or None in run_names:  # not one run per series: rank every bar
        return sort_keys(bars, ("series",))[0].copy(), None
    names = sorted(run_names)
    rank = {n: i for i, n in enumerate(names)}
    return np.repeat(np.array([rank[n] for n in run_names], dtype=np.int64), run_lengths(starts, bars.height)), names
