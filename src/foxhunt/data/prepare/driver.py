"""`foxhunt prepare` in pieces: each group of series (store/pieces.py) is loaded and featurized on its own by the jobs
of store/jobs.py on a concurrent.futures Executor, and its rows are written straight into the store's arrays
(allocated here with open_memmap); the panel is never in memory.

What is fitted across series is fitted from statistics each piece sends back that add up exactly (data/features/fitstats.py;
the in-memory path fits from the same sums, so both give the same bits). The stages, each a map over the executor:
1. read: the files in chunks of consecutive files, each chunk's bars spilled by piece, with the bar files' own
   columns the user's inputs read (features/bar_columns.py: this process holds none of their rows); the bars' raw
   span gives the split cuts to expect.
2. load: each piece's bars cleaned and rolled as load_bars would, its raw features and distinct timestamps
   spilled; its series, lengths, span, bar gaps and training statistics under the expected cuts come back. The
   cuts follow from the span of all pieces; `fit` gathers the statistics again only where cleaning moved them.
   Here: the first scalers, and the known-input grid over every distinct timestamp of the panel (SharedGrid).
3. trail: each piece's trailing inputs and their statistics under the first scalers; the piece written where its
   series' own statistics complete the scalers (scaling.own_scalers) and the run has no --context.
4. context (--context): each piece's rows joined with the context series' inputs, which `trail` spilled from the
   pieces holding them, and their moments over its training rows; their scalers are fitted last.
5. write: the other pieces, with the whole panel's scalers.
A piece is written by the per-series pipeline prepare_from_bars runs over the whole panel (dataset/featurize.py).
The user's --observed, --known, --events, --static and --context inputs, categorical or keyed ones too, are joined
per piece and fitted here from what the pieces send back (store/declared.py).
The data summary merges what the jobs saw of each piece's rows and windows (summary.WindowFacts); this process never
imports torch.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Executor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from foxhunt.data.bars import duplicates
from foxhunt.data.bars.chains import decision
from foxhunt.data.bars.grid import DAILY_MIN_SPACING_NS
from foxhunt.data.bars.load import ROLL_REASONS, merge_reports
from foxhunt.data.bars.sessions import run_session
from foxhunt.data.bars.validate import AllRowsBad, BadRows, judge_bad_rows
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.featurize import known_width
from foxhunt.data.dataset.prepare import (
    check_length,
    check_splits,
    feature_schema,
    split_cuts,
    split_times,
    user_sources,
)
from foxhunt.data.dataset.summary import data_summary, merge_facts
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.dataset.windows import SplitResult
from foxhunt.data.features import inputs, static, timed_categories
from foxhunt.data.features.covariate_files import CovariateTable
from foxhunt.data.features.features import own_move_columns
from foxhunt.data.features.fitstats import concat
from foxhunt.data.features.known import distinct_union, shared_grid
from foxhunt.data.features.scaling import add_vol_stats, first_scalers, observed_names
from foxhunt.data.io.discover import Source
from foxhunt.data.io.read import check_bar_sizes
from foxhunt.data.io.zones import check_zones
from foxhunt.data.prepare import bar_columns
from foxhunt.data.prepare import stages as jobs
from foxhunt.data.prepare.declared import fit_declared, share_static, with_known
from foxhunt.data.prepare.plan import PIECE_ROWS, Piece, route_of
from foxhunt.data.prepare.stages import PieceLoaded, Place, share_grid, shared
from foxhunt.data.store.layout import OWN_DTYPE, SPLITS, WINDOW_ARRAYS, own_array, split_file
from foxhunt.data.store.write import filling, finish, make_tmp, manifest_of, save_array
from foxhunt.data.util.median import counted_median
from foxhunt.data.util.parallel import serial
from foxhunt.errors import InputError, ResourceError

log = logging.getLogger("foxhunt.data")

ROW_ARRAYS = ("cont", "static_cat", "static_cont", "time_cat", "target_raw", "center", "scale", "ts_ns", "real",
              "series_idx", "known_base")


def prepare_pieces(cfg: DataConfig, out: Path, pieces: list[Piece], executor: Executor, workers: int,
                   sources: list[Source]) -> dict[str, Any] | None:
    """Prepare `cfg` piece by piece into the store `out` on `executor` (of `workers` processes); returns its
    manifest, or None when the pieces do not hold consecutive series (the caller then prepares in memory).
    `sources`: expand_sources' list of `cfg.paths`."""
    out = Path(out)
    tmp = make_tmp(out)
    spill = Path(tempfile.mkdtemp(prefix=f".{out.name}.pieces.", dir=out.parent))
    try:
        with filling(tmp, out), serial():  # the processes take the cores: each runs its stages in one thread
            manifest = _prepare(cfg, out, tmp, spill, pieces, executor, workers, sources)
        if manifest is None:
            shutil.rmtree(tmp, ignore_errors=True)
        return manifest
    finally:
        shutil.rmtree(spill, ignore_errors=True)


def _prepare(cfg: DataConfig, out: Path, tmp: Path, spill: Path, pieces: list[Piece], executor: Executor,
             workers: int, sources: list[Source]) -> dict[str, Any] | None:
    t0 = time.perf_counter()

    def lap(stage: str) -> None:
        log.debug("prepare in pieces: %s done at %.2f s", stage, time.perf_counter() - t0)

    listed = [(f, source) for source in sources for f in source.files]  # (file, its source), in order
    files = [str(f) for f, _ in listed]
    route = route_of(pieces, cfg.contracts)
    chunks = _chunks(files, max(workers, -(-sum(p.rows for p in pieces) // PIECE_ROWS)))
    reads: list[jobs.ChunkRead] = []

    def read(columns: list[str], real: set[str]) -> CovariateTable | None:  # the bars, and their `columns`
        reads[:] = _map(executor, jobs.read, [(cfg, c, i0, _chunk_sources(listed[i0:i1]), route, str(spill),
                                               tuple(columns), frozenset(real)) for c, (i0, i1) in enumerate(chunks)])
        return bar_columns.empty_table([r.columns for r in reads], columns, ", ".join(cfg.paths)) if columns else None

    src = user_sources(cfg, None, bar_reader=read)  # the user's inputs: the bar files' columns read in `read`
    if not reads:
        read([], set())
    lap("read")
    if not all(r.routed for r in reads):
        log.warning("a bar has no symbol, so the panel cannot be cut by series: preparing it in memory, where its "
                    "memory is the whole panel's, not a piece's")
        return None
    check_bar_sizes([x for r in reads for x in r.rtypes], [x for r in reads for x in r.spacings], files)
    entries = [e for r in reads for e in r.files]
    check_zones(entries, cfg.timezone)  # files of two chunks: each chunk's read checked its own
    expected = split_times(cfg, min(r.lo for r in reads), max(r.hi for r in reads))  # before cleaning, off bars
    shares = [inputs.restricted(src, lambda key, k=k: route.piece_of(key) == k) for k in range(len(pieces))]
    loads: list[PieceLoaded] = _map(executor, jobs.load, [(cfg, k, str(spill), len(chunks), entries, expected,
                                                           shares[k]) for k in range(len(pieces))], keep=AllRowsBad)
    lap("load")
    bad = BadRows.merge([r.bad if isinstance(r, AllRowsBad) else r.bad_rows for r in loads])
    if bad.over():  # the 1% is the panel's, as in memory: it stops here, before a fallback reads the panel whole
        judge_bad_rows(bad, files)
    if bad.duplicates.over(bad.rows):  # so is the 1% of conflicting duplicates
        duplicates.tell(bad.duplicates, bad.rows, files, bad.out_of_order)
    empty = next((k for k, r in enumerate(loads) if isinstance(r, AllRowsBad)), None)
    if empty is not None:  # its series are dropped whole, as in memory; the other pieces' rows would shift
        log.warning("every bar of the piece of %s is a bad row: preparing the panel in memory, where its memory is "
                    "the whole panel's, not a piece's", ", ".join(pieces[empty].symbols))
        return None
    names = [n for r in loads for n in r.names]
    if names != sorted(set(names)):
        at = next(i for i in range(1, len(names)) if names[i] <= names[i - 1])
        log.warning("the pieces' series are not in name order (%s after %s): preparing the panel in memory, where "
                    "its memory is the whole panel's, not a piece's", names[at], names[at - 1])
        return None
    judge_bad_rows(bad, files)  # says once what the pieces dropped
    duplicates.tell(bad.duplicates, bad.rows, files, bad.out_of_order)
    for r in (r for load in loads for r in load.rolls):  # what load_raw logs in memory (the jobs are quiet)
        why = ROLL_REASONS[r["reason"]].format(n=cfg.roll_confirm, **r)
        log.info("roll %s on %s: %s -> %s (%s), gap %.4g", r["root"], r["trade_date"], r["from"], r["to"], why, r["gap"])
    if bar_columns.bar_table_of(src) is not None:  # what is reported and checked of the pieces' tables
        src = bar_columns.held_sources(src, [r.held for r in loads], cfg.categorical)
    e, d = cfg.encoder_length, cfg.horizon
    check_length(names, np.concatenate([r.lengths for r in loads]), e, d, False)
    span = np.array([min(r.lo for r in loads), max(r.hi for r in loads)], dtype=np.int64)
    # The cuts on the bars of every piece, as in memory; the fits under `expected` hold where the times before
    # moving them onto bars did not move: no row lies between a time and the bar it moves to.
    cuts = split_cuts(cfg, [shared(spill, f"stamps-{k}") for k in range(len(loads))])
    fits = [r.fit for r in loads]
    if split_times(cfg, int(span[0]), int(span[1])) != expected:
        log.debug("prepare in pieces: cleaning moved the ends of the span, the cuts with them: fitting again")
        fits = _map(executor, jobs.fit, [(cfg, k, str(spill), r.names, r.lengths, cuts) for k, r in enumerate(loads)])
    spacing = counted_median([f.train_gaps for f in fits]) or counted_median([r.gaps for r in loads])
    intraday = spacing < DAILY_MIN_SPACING_NS
    check_intraday(loads, intraday)
    season_tz = cfg.exchange_tz if cfg.seasonality and intraday else None
    mom = concat([f.mom for f in fits])
    if season_tz is None:
        mom = {k: v for k, v in mom.items() if not k.startswith("season:")}
    scalers = first_scalers(mom, names, cfg.target, cfg.vol_halflife, cfg.vol_estimator, cfg.vol_features,
                            cfg.fill_gaps, season_tz)
    fitted, static_values, dropped = (None, {}, 0) if src is None else fit_declared(cfg, src, loads, fits, names,
                                                                                    scalers)
    report = merge_reports([r.report for r in loads])
    transform = FittedTransform(  # its scalers are completed in place (add_vol_stats) before the pieces are written
        series_vocab=tuple(n for n, ok in zip(names, mom["rows"] > 0, strict=True) if ok), scalers=scalers,
        target=cfg.target, scaling=cfg.scaling, intraday=intraday, calendar_features=cfg.calendar_features,
        exchange_tz=cfg.exchange_tz, bar_spacing_ns=spacing, session=run_session(cfg.calendar), inputs=fitted,
        **decision(report, cfg.contracts),
    )
    rows, wins = (np.cumsum([0, *counts]) for counts in ([int(r.lengths.sum()) for r in loads],
                                                         [r.windows for r in loads]))
    series0 = np.cumsum([0, *(len(r.names) for r in loads)])
    origins = distinct_union([shared(spill, f"stamps-{k}") for k in range(len(loads))])  # (O,) every one
    grid = shared_grid(origins, spacing, d, cfg.exchange_tz, intraday, cfg.calendar_features, scalers.get("season"),
                       transform.grid)
    known_cat, unseen = np.zeros((len(grid.ts), 0), dtype=np.int64), {}  # (U, Kc)
    if src is not None:
        grid, known_cat, unseen = with_known(spill, grid, origins, fitted, src, spacing, loads, d)
        share_static(spill, fitted, static_values, names)
    share_grid(spill, grid)
    lap("grid")
    timed = len(timed_categories.known_columns(fitted)) + len(timed_categories.observed_columns(fitted))
    context = 0 if src is None else len(src.context_columns)  # fitted after `trail`: observed_names' last columns
    arrays = _allocate(tmp, int(rows[-1]), int(wins[-1]), known_width(transform) + len(observed_names(scalers))
                       + context, d, cfg.target, grid.index is not None, static.real_columns(fitted),
                       static.categorical_columns(fitted), timed)
    for name, value in (("known_cont", grid.cont), ("known_cat", known_cat), ("known_ts", grid.ts)):
        arrays[name] = save_array(tmp, f"{name}.npy", value)
    del grid, origins  # the jobs read the grid from its spill
    places = [Place(str(tmp), int(series0[k]), int(rows[k]), int(wins[k])) for k in range(len(loads))]
    args = [(cfg, k, str(spill), r.names, r.lengths, cuts, transform, places[k], shares[k])
            for k, r in enumerate(loads)]
    trails = _map(executor, jobs.trail, args)
    lap("trail")
    add_vol_stats(scalers, concat([t.mom for t in trails]), names, mom["rows"] > 0)  # the transform's, in place
    if context:  # --context: as inputs.fit_observed, after the observed columns
        joined = _map(executor, jobs.context, [(cfg, k, str(spill), r.names, r.lengths, cuts, shares[k])
                                               for k, r in enumerate(loads)])
        inputs.scale_observed(concat(joined), names, src.context_columns, cfg.covariate_scaling, scalers)
        lap("context")
    late = iter(_map(executor, jobs.write, [a for a, t in zip(args, trails, strict=True) if t.written is None]))
    written = [t.written or next(late) for t in trails]
    lap("write")
    timed_categories.tell(fitted, [*(w.unseen for w in written), unseen])  # as the in-memory path says them, once
    facts = merge_facts([w.facts for w in written])
    split = SplitResult(ids={name: np.concatenate([w.splits[name] for w in written]) for name in SPLITS},
                        purged=facts.purged)
    check_splits(split, cuts, cfg, span)
    for k in SPLITS:
        arrays[f"split_{k}"] = save_array(tmp, split_file(k), np.asarray(split.ids[k], dtype=np.int64))
    schema = feature_schema(transform, e, d, cfg.adjust)
    meta = SimpleNamespace(report=report, rolls=[x for r in loads for x in r.rolls])
    summary = data_summary(meta, schema, facts, names, cuts, False, sum(w.roll_bars for w in written), spacing,
                           calendar=cfg.calendar)
    if src is not None:
        summary["inputs"] = inputs.summary(src, dropped)
    fields = {"encoder_length": e, "horizon": d, "n_known_cont": known_width(transform),
              "n_known_cat": known_cat.shape[1],
              "series_names": names}
    order = [*WINDOW_ARRAYS, *(f"split_{s}" for s in SPLITS), *(own_array(c) for c in own_move_columns(cfg.target))]
    manifest = manifest_of(cfg, {k: arrays[k] for k in order if k in arrays}, fields, schema, transform, summary,
                           meta.rolls)  # in write_store's order
    finish(tmp, out, manifest)
    lap("finish")
    return manifest


def _map(executor: Executor, fn: Callable, jobs_args: list[tuple], keep: type[Exception] | None = None) -> list:
    """`[fn(*args) for args in jobs_args]` on `executor`; once every job has ended, the first error is raised, but a
    job that raises `keep` gives that exception as its result."""
    futures = [executor.submit(fn, *args) for args in jobs_args]
    wait(futures)
    for f in futures:
        if isinstance(f.exception(), BrokenProcessPool):
            raise ResourceError("a `prepare` worker process died before its piece was done (most often killed for "
                                "memory; from a script, the spawned workers also need its code under `if __name__ "
                                "== '__main__':`): run with fewer --workers, or --workers 0 if the panel fits in "
                                "memory") from f.exception()
        if f.exception() is not None and not (keep is not None and isinstance(f.exception(), keep)):
            raise f.exception()
    return [f.exception() or f.result() for f in futures]


def _allocate(tmp: Path, rows: int, windows: int, width: int, d: int, target: str, index: bool, real: list[str],
              cat: list[str], timed: int) -> dict[str, dict]:
    """The empty arrays the jobs write rows into (sparse files made by open_memmap), with their manifest entries;
    `real`, `cat`: the --static inputs of each kind (static_cont's columns, static_cat's after the series code);
    `timed`: the categorical known and observed inputs (time_cat's columns)."""
    shapes = {"cont": (rows, width), "static_cat": (rows, 1 + len(cat)), "static_cont": (rows, len(real)),
              "time_cat": (rows, timed),
              "starts": (windows,),
              **({"known_index": (rows, d)} if index else {})}
    names = [*ROW_ARRAYS, "starts", *(("known_index",) if index else ()), *map(own_array, own_move_columns(target))]
    entries = {}
    for name in names:
        dtype, shape = WINDOW_ARRAYS[name][0] if name in WINDOW_ARRAYS else OWN_DTYPE, shapes.get(name, (rows,))
        array = np.lib.format.open_memmap(tmp / f"{name}.npy", mode="w+", dtype=dtype, shape=shape)
        del array  # the file stays, sparse: the jobs write its rows
        entries[name] = {"file": f"{name}.npy", "dtype": dtype, "shape": list(shape)}
    return entries


def check_intraday(loads: list[PieceLoaded], intraday: bool) -> None:
    """Each piece's bars are of the panel's kind (intraday or daily) by their own median spacing, as
    prepare_from_bars checks a piece against the transform."""
    for r in loads:
        own = counted_median([r.gaps])
        if own and (own < DAILY_MIN_SPACING_NS) != intraday:
            want, got = ("intraday", "daily") if intraday else ("daily", "intraday")
            raise InputError(f"series {r.names[0]} .. {r.names[-1]} hold {got} bars but the panel's bars are "
                             f"{want}; prepare them apart")


def _chunks(files: list[str], n: int) -> list[tuple[int, int]]:
    """[first, end) of `n` (at most one per file) runs of consecutive files of about equal bytes."""
    sizes = np.cumsum([os.path.getsize(f) for f in files])  # (F,)
    n = max(1, min(n, len(files)))
    ends = np.minimum(np.unique(np.searchsorted(sizes, sizes[-1] * np.arange(1, n + 1) / n, side="left") + 1),
                      len(files))
    bounds = np.unique(np.r_[0, ends])
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _chunk_sources(listed: list[tuple[Path, Source]]) -> list[Source]:
    """The Sources holding just the files of `listed` ((file, its source) of consecutive files), for read_bars."""
    groups: list[tuple[Source, list[Path]]] = []
    for path, source in listed:
        if not groups or groups[-1][0] is not source:
            groups.append((source, []))
        groups[-1][1].append(path)
    return [dataclasses.replace(source, files=files) for source, files in groups]
