"""The one pipeline that prepares a panel: featurize, fit the transform on the training rows, scale, window and
split it, piece by piece, each stage a map of one job over the pieces on a concurrent.futures Executor, the rows
written into a sink (sink.py: arrays in memory, or a store's files).

A piece is a group of whole series. A panel prepared in memory is one piece in this process (entry.py); a store
larger than memory is cut into pieces (plan.py) whose jobs run on worker processes or a Dask cluster (executor.py)
and hand each other their results through a spill folder (spill.py). Between the stages this process gathers what
the jobs send back and decides what is the panel's:
1. read (read_stage.py): where each piece's bars are; in pieces, the files read in chunks, spilled by piece.
2. load (load_stage.py): each piece's bars joined, sorted and featurized; its series, lengths, bar gaps, distinct
   times and the sums of its training rows come back. Here: the bad-rows rule over the panel, the split cuts, the
   bar spacing, the first fit (fit.py) and the known grid over every distinct time (grid.py), computed beside the
   trail stage when the pieces run in this process.
3. trail (write_stage.py): each piece's trailing inputs and their sums; a piece whose scalers are complete is
   written at once where its spills would otherwise be read again. Here: the trailing inputs' scalers.
4. context (--context): each piece joined with the context series' inputs, and their sums; their scalers last.
5. write: the other pieces' rows, windows and splits, with the whole panel's transform.
With a saved model's transform nothing is fitted and nothing is split: every stage runs with the transform as
given, each series gets `horizon` future rows so that its last bar is an origin too, and every window is a test
window (`predict`). Nothing here imports torch: the memory sink does, at the end.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from foxhunt.data.bars import duplicates
from foxhunt.data.bars.bad_rows import AllRowsBad, BadRows, judge_bad_rows
from foxhunt.data.bars.grid import future_timestamps
from foxhunt.data.bars.load import ROLL_REASONS, bar_interval, merge_reports
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.featurize import feature_schema, known_width
from foxhunt.data.dataset.summary import data_summary, merge_facts
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.dataset.windows import SplitResult
from foxhunt.data.features import inputs, static, timed_categories
from foxhunt.data.features.bar_features import own_move_columns
from foxhunt.data.prepare import bar_columns
from foxhunt.data.prepare.executor import run_all
from foxhunt.data.prepare.fit import complete, declared, first_transform
from foxhunt.data.prepare.grid import PanelGrid, key_times, origins, panel_grid, share_grid, share_static
from foxhunt.data.prepare.load_stage import PieceLoaded, fit, load
from foxhunt.data.prepare.read_stage import Read
from foxhunt.data.prepare.recipe import Recipe, recipe_of
from foxhunt.data.prepare.sink import Sink
from foxhunt.data.prepare.spill import Spill
from foxhunt.data.prepare.splits import check_length, check_splits, split_cuts, split_times
from foxhunt.data.prepare.write_stage import PieceSeries, Place, Writing, context, trail, write
from foxhunt.data.store.layout import OWN_DTYPE, SPLITS, WINDOW_ARRAYS, own_array
from foxhunt.data.util import parallel
from foxhunt.data.util.clock import INTRADAY_MAX_NS
from foxhunt.data.util.median import counted_median
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")

ROW_ARRAYS = ("cont", "static_cat", "static_cont", "time_cat", "target_raw", "center", "scale", "ts_ns", "real",
              "series_idx", "known_base")


def run(cfg: DataConfig, read: Read, executor: Executor, spill: Spill, sink: Sink,
        transform: FittedTransform | None = None) -> Any:
    """Prepare the pieces `read` names (read_stage.py) on `executor`, handing results over through `spill`, into
    `sink`; returns `sink.finish`'s result. `transform`: a saved model's, applied as it is (prediction); None: fitted
    on the training rows. None (after a warning that says why) where the pieces cannot be prepared apart: the caller
    prepares the panel as one piece."""
    t0 = time.perf_counter()

    def lap(stage: str) -> None:
        log.debug("prepare: %s done at %.2f s", stage, time.perf_counter() - t0)

    fitting, e, d = transform is None, cfg.encoder_length, cfg.horizon
    src = read.src
    recipe = recipe_of(cfg, transform, src)
    loads = run_all(executor, load, [(cfg, recipe, k, spill, read.spilled, read.expected, read.shares[k])
                                     for k in range(len(read.pieces))], keep=AllRowsBad)
    lap("load")
    loads = _judged(cfg, read, loads)
    if loads is None:
        return None
    if read.spilled is not None and bar_columns.bar_table_of(src) is not None:  # reported of the pieces' tables
        src = bar_columns.held_sources(src, [r.held for r in loads], cfg.categorical)
    names = [n for r in loads for n in r.names]
    lengths = np.concatenate([r.lengths for r in loads])  # (S,)
    check_length(names, lengths, e, d, not fitting)
    if transform is not None:  # said of the series forecast: those with an encoder's bars (the first has no return)
        transform.tell_unseen([n for n, k in zip(names, lengths.tolist(), strict=True) if k > e])
    span = np.array([min(r.lo for r in loads), max(r.hi for r in loads)], dtype=np.int64)
    stamps = [spill.array(f"stamps-{k}") for k in range(len(loads))]
    cuts = split_cuts(cfg, stamps) if fitting else None
    fits = _fits(cfg, recipe, read, loads, executor, spill, cuts, span)
    report = loads[0].report if len(loads) == 1 else merge_reports([r.report for r in loads])
    spacing, intraday = _spacing(loads, fits, transform, [f["path"] for f in report.get("files", ())])
    given = declared(src, loads, names, fitting)
    if fitting:
        transform = first_transform(cfg, names, fits, spacing, intraday, src, given.static_values, report)
    step = transform.bar_spacing_ns or spacing  # the model's bar interval: the grid's step
    future = None if fitting else future_timestamps(np.concatenate([r.last for r in loads]), step, d, intraday,
                                                   transform.exchange_tz, transform.grid)  # (S, D)
    keyed = src is not None and src.events is not None and bool(src.events.keys)
    keys = key_times([r.keys for r in loads], [r.last_keys for r in loads], future) if keyed else None
    # The known grid: where the pieces read it from files, before they run; in memory, on a pool thread while the
    # trail stage and the rows of the write stage run here (the write waits for it).
    pending = parallel.submit(panel_grid, origins(stamps, future), transform, step, d, src, keys)
    del stamps
    spill.drop(*(f"stamps-{k}" for k in range(len(loads))))  # read for the last time
    share_static(spill, transform.inputs, given.static_values, names)
    places = _places(loads, future, e, d)
    sink.allocate(_row_shapes(transform, src, places[-1].row0, places[-1].win0, fitting))
    unseen = None  # the grid's categorical values unseen in training, once it is in the sink
    if spill.in_memory:
        share_grid(spill, pending)
    else:
        panel = _to_sink(pending.result(), sink, places[-1].row0, d)
        share_grid(spill, panel)
        unseen = panel.unseen
        del panel, pending  # the pieces read it from the spill: not held here beside the splits
    lap("grid")
    pieces = [PieceSeries(k, r.names, r.lengths) for k, r in enumerate(loads)]
    writing = Writing(transform, cuts, step, sink)
    trails = run_all(executor, trail, [(recipe, p, spill, cuts, writing, places[k], read.shares[k],
                                        not spill.in_memory) for k, p in enumerate(pieces)])
    lap("trail")
    if fitting:
        joined = None
        if src is not None and src.context:  # as inputs.fit_observed, after the observed columns
            joined = run_all(executor, context, [(recipe, p, spill, cuts, read.shares[k])
                                                 for k, p in enumerate(pieces)])
        transform = complete(transform, names, [t.mom for t in trails], joined, src)
        writing = Writing(transform, cuts, step, sink)
    late = iter(run_all(executor, write, [(recipe, p, spill, writing, places[k], read.shares[k])
                                          for k, (p, t) in enumerate(zip(pieces, trails, strict=True))
                                          if t.written is None]))
    written = [t.written or next(late) for t in trails]
    lap("write")
    if unseen is None:
        unseen = _to_sink(pending.result(), sink).unseen
        del pending
    timed_categories.tell(transform.inputs, [*(w.unseen for w in written), unseen])  # once, for the panel
    return _finish(cfg, recipe, sink, transform, LoadedPanel(loads, names, report, span, cuts, spacing), written, src,
                   given.dropped)


def _judged(cfg: DataConfig, read: Read, loads: list[PieceLoaded | AllRowsBad]) -> list[PieceLoaded] | None:
    """The loaded pieces, the bad rows and duplicates they dropped judged over the panel (when the pieces loaded
    their bars: read_stage.piece_bars), and the rolls they found logged; None, with a warning, where the pieces
    cannot be prepared apart: one's bars are all bad, or their series are not in name order."""
    parts = [r.bad if isinstance(r, AllRowsBad) else r.bad_rows for r in loads]
    bad = BadRows.merge(parts) if read.spilled is not None else None
    if bad is not None and bad.over():  # the 1% is the panel's: it stops here, before a fallback reads it whole
        judge_bad_rows(bad, read.files)
    if bad is not None and bad.duplicates.over(bad.rows):  # so is the 1% of conflicting duplicates
        duplicates.tell(bad.duplicates, bad.rows, read.files, bad.out_of_order, (cfg.timestamp_col, cfg.symbol_col))
    empty = next((k for k, r in enumerate(loads) if isinstance(r, AllRowsBad)), None)
    if empty is not None:  # its series are dropped whole, as in one piece; the other pieces' rows would shift
        log.warning("every bar of the piece of %s is a bad row: preparing the panel in memory, where its memory is "
                    "the whole panel's, not a piece's", ", ".join(read.pieces[empty].symbols))
        return None
    names = [n for r in loads for n in r.names]
    if names != sorted(set(names)):
        at = next(i for i in range(1, len(names)) if names[i] <= names[i - 1])
        log.warning("the pieces' series are not in name order (%s after %s): preparing the panel in memory, where "
                    "its memory is the whole panel's, not a piece's", names[at], names[at - 1])
        return None
    if bad is not None:
        judge_bad_rows(bad, read.files)  # says once what the pieces dropped
        duplicates.tell(bad.duplicates, bad.rows, read.files, bad.out_of_order, (cfg.timestamp_col, cfg.symbol_col))
        for r in (r for load in loads for r in load.rolls):  # what load_raw logs of a panel loaded whole
            why = ROLL_REASONS[r["reason"]].format(n=cfg.roll_confirm, **r)
            log.info("roll %s on %s: %s -> %s (%s), gap %.4g", r["root"], r["trade_date"], r["from"], r["to"], why,
                     r["gap"])
    return loads


def _fits(cfg: DataConfig, recipe: Recipe, read: Read, loads: list[PieceLoaded], executor: Executor, spill: Spill,
          cuts: tuple | None, span: np.ndarray) -> list:
    """The pieces' Fits under the panel's `cuts`: those they sent back, which hold where the times before moving them
    onto bars did not move (no row lies between a time and the bar it moves to), or fitted again where cleaning
    moved the ends of the span the read stage expected them from."""
    if cuts is None:
        return []
    if read.expected is None or split_times(cfg, int(span[0]), int(span[1])) == read.expected:
        return [r.fit for r in loads]
    log.debug("prepare: cleaning moved the ends of the span, the cuts with them: fitting again")
    return run_all(executor, fit, [(recipe, k, spill, r.names, r.lengths, cuts) for k, r in enumerate(loads)])


def _spacing(loads: list[PieceLoaded], fits: list, transform: FittedTransform | None,
             paths: list[str]) -> tuple[int, bool]:
    """The bar spacing (the median gap of the training rows, else of all rows) and whether the bars are intraday;
    InputError, naming the files `paths`, where they are not of a saved model's kind (intraday or daily) or, being
    intraday, not of its spacing, or not of the panel's kind (a piece's)."""
    spacing = counted_median([f.train_gaps for f in fits]) if fits else 0
    spacing = spacing or counted_median([r.gaps for r in loads])
    # One bar per series (prediction on a short file) gives no spacing: trust the model's.
    intraday = transform.intraday if transform is not None and spacing == 0 else spacing < INTRADAY_MAX_NS
    if transform is not None:  # a saved model's bars are not split (no fits): all their rows' gaps
        share = model_gap_share([r.gaps for r in loads], transform.bar_spacing_ns)
        check_model_spacing(transform, spacing, intraday, paths, share)
    if len(loads) > 1:
        check_intraday(loads, intraday)
    return spacing, intraday


MODEL_GAP_SHARE = 0.05  # gaps of the model's spacing under this share of a file's: bars of another spacing


def model_gap_share(gaps: list[tuple[np.ndarray, np.ndarray]], model_ns: int) -> float:
    """The share of the (values, counts) gaps between a series' bars that are `model_ns` apart (1.0 without gaps)."""
    counts = np.concatenate([c for _, c in gaps]) if gaps else np.zeros(0, dtype=np.int64)
    if not counts.sum():
        return 1.0
    return float(sum(int(c[v == model_ns].sum()) for v, c in gaps) / counts.sum())


def check_model_spacing(transform: FittedTransform, spacing: int, intraday: bool, paths: list[str],
                        share: float = 1.0) -> None:
    """Bars a saved model forecasts are of its kind and, intraday, of its spacing. The median gap between a
    series' bars (`spacing`, ns; 0: unknown, one bar per series), measured over all the rows forecast from (the
    model's own was measured over its training rows), may differ from the model's where bars are missing (thinly
    traded seconds: 1 s bars 2-3 s apart at the median); the bars are of another spacing only where gaps of the
    model's spacing are also rare (`share` of the gaps under MODEL_GAP_SHARE). 30-minute bars into a 15-minute model
    (no gap of 15 minutes) would be forecast on the 15-minute grid, every step's target time a bar such data never
    has."""
    where = f"{', '.join(paths)}: " if paths else ""
    if transform.intraday != intraday:
        want, got = ("intraday", "daily") if transform.intraday else ("daily", "intraday")
        raise InputError(f"{where}the model was trained on {want} bars but these bars are {got}; load {want} bars")
    model = int(transform.bar_spacing_ns)
    if intraday and spacing and model and spacing != model and share < MODEL_GAP_SHARE:
        want, got = bar_interval(model), bar_interval(spacing)
        raise InputError(f"{where}the model was trained on {want} bars but these bars are {got} apart (the median "
                         f"gap between a series' bars; {100 * share:.1f}% of the gaps are {want}); forecast {want} "
                         f"bars with it, or train a model on these {got} bars")


def check_intraday(loads: list[PieceLoaded], intraday: bool) -> None:
    """Each piece's bars are of the panel's kind (intraday or daily) by their own median spacing."""
    for r in loads:
        own = counted_median([r.gaps])
        if own and (own < INTRADAY_MAX_NS) != intraday:
            want, got = ("intraday", "daily") if intraday else ("daily", "intraday")
            raise InputError(f"series {r.names[0]} .. {r.names[-1]} hold {got} bars but the panel's bars are "
                             f"{want}; prepare them apart")


def _places(loads: list[PieceLoaded], future: np.ndarray | None, e: int, d: int) -> list[Place]:
    """Each piece's Place, and one past the last (the panel's rows and windows). A prediction's series get their
    `future` (S, D) rows after their bars."""
    extra = 0 if future is None else d
    rows = np.cumsum([0, *(int(r.lengths.sum()) + extra * len(r.names) for r in loads)])
    wins = np.cumsum([0, *(int(np.maximum(r.lengths + extra - (e + d), 0).sum()) for r in loads)])
    series0 = np.cumsum([0, *(len(r.names) for r in loads)])
    return [Place(int(series0[k]), int(rows[k]), int(wins[k]),
                  None if future is None or k == len(loads) else future[series0[k]:series0[k + 1]])
            for k in range(len(loads) + 1)]


def _row_shapes(transform: FittedTransform, src: inputs.Sources | None, rows: int, windows: int,
                fitting: bool) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The row and window arrays the jobs write into: `rows` rows of the known columns, the observed inputs (the
    --context columns, fitted last, among them) and the --static and categorical inputs; `windows` window starts."""
    fitted = transform.inputs
    context = len(src.context_columns) if fitting and src is not None else 0  # not yet in the first scalers
    width = known_width(transform) + len(transform.observed_names) + context
    timed = len(timed_categories.known_columns(fitted)) + len(timed_categories.observed_columns(fitted))
    shapes = {"cont": (rows, width), "static_cat": (rows, 1 + len(static.categorical_columns(fitted))),
              "static_cont": (rows, len(static.real_columns(fitted))), "time_cat": (rows, timed),
              "starts": (windows,)}
    out = {name: (WINDOW_ARRAYS[name][0], shapes.get(name, (rows,))) for name in (*ROW_ARRAYS, "starts")}
    if transform.anchor is not None:
        data = transform.data
        out["anchor"] = (WINDOW_ARRAYS["anchor"][0], (rows, data.horizon * len(data.quantiles)))
    return out | {own_array(c): (OWN_DTYPE, (rows,)) for c in own_move_columns(transform.target)}


def _to_sink(panel: PanelGrid, sink: Sink, rows: int | None = None, d: int = 0) -> PanelGrid:
    """`panel`, its known grid saved to the sink; `rows`: the panel's, before the pieces write them (each row
    keeps its forecast steps' grid rows where the grid is not one lattice); None: a piece that wrote its rows
    already wrote those whole."""
    grid = panel.grid
    if rows is not None and grid.index is not None:
        sink.allocate({"known_index": (WINDOW_ARRAYS["known_index"][0], (rows, d))})
    for name, value in (("known_cont", grid.cont), ("known_cat", panel.known_cat), ("known_ts", grid.ts)):
        sink.save(name, value)
    return panel


@dataclass(frozen=True)
class LoadedPanel:
    """What the load stage found of the whole panel, which its summary reports: the pieces' results, their series
    in order, the merged load report, the bars' time span (2,) int64 ns, the split cuts (None: prediction) and the
    bar spacing (ns)."""

    loads: list[PieceLoaded]
    names: list[str]
    report: dict
    span: np.ndarray
    cuts: tuple | None
    spacing: int


def _finish(cfg: DataConfig, recipe: Recipe, sink: Sink, transform: FittedTransform, panel: LoadedPanel,
            written: list, src: inputs.Sources | None, dropped: int) -> Any:
    """The splits, the schema and the data summary of the written pieces, and the sink's result."""
    names, cuts = panel.names, panel.cuts
    facts = merge_facts([w.facts for w in written])
    split = SplitResult(ids={name: np.concatenate([w.splits[name] for w in written]) for name in SPLITS},
                        purged=facts.purged)
    if cuts is not None:
        check_splits(split, cuts, cfg, panel.span)
    for k in SPLITS:
        sink.save(f"split_{k}", np.asarray(split.ids[k], dtype=np.int64))
    schema = feature_schema(transform, cfg.encoder_length, cfg.horizon, cfg.adjust)
    rolls = [x for r in panel.loads for x in r.rolls]
    summary = data_summary(SimpleNamespace(report=panel.report, rolls=rolls), schema, facts, names, cuts,
                           recipe.prediction, sum(w.roll_bars for w in written), panel.spacing,
                           calendar=None if transform.session is None else transform.session.calendar)
    if src is not None:
        summary["inputs"] = inputs.summary(src, dropped)
    fields = {"encoder_length": cfg.encoder_length, "horizon": cfg.horizon, "n_known_cont": known_width(transform),
              "n_known_cat": len(timed_categories.known_columns(transform.inputs)), "series_names": tuple(names)}
    return sink.finish(cfg, fields, schema, transform, summary, rolls)
