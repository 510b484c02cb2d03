"""`foxhunt prepare` in pieces: each group of series (store/pieces.py) is loaded and featurized on its own, by
`workers` processes (store/crew.py: this one and workers - 1 spawned ones), and its rows are written straight into
the store's preallocated arrays; the panel is never in memory.

What is fitted across series is fitted first, from statistics each piece sends back that add up exactly
(data/features/fitstats.py; the in-memory path fits from the same sums, so both give the same bits). Phases:
0. read: the files are read once, in chunks of consecutive files (read_bars' `sources`), and each chunk's bars are
   spilled to one Arrow IPC file per piece (`_spill`); the raw time span of the chunks gives the split cuts to
   expect.
1. load: each piece's spills are concatenated (in file order: the frame `read_bars` would give for its symbols),
   cleaned and rolled as `load_bars` would; its raw features (computed once) are spilled; its timestamps, series
   index, targets and window starts go to the store at once, placed by the counts of the pieces before it
   (store/early.py); its series, their lengths, its time span, its bar-gap counts (the median spacing) and, under
   the expected cuts, its training statistics (scalers.train_moments) come back, its distinct timestamps through the
   spill folder (`_share`: an array is not sent back through the pool's pipe). The split cuts follow from the span
   of all pieces; the statistics are gathered again (2.) only when cleaning moved the ends of the span, and the cuts
   with them.
2. fit (rarely): the training statistics from the spilled features.
3. trail: with the first scalers fixed, the trailing inputs and their statistics (scalers.vol_moments); the piece's
   series codes go to the store now, and its summary facts come back, its splits through the spill folder. Meanwhile
   this process builds the known-future grid (one table over every distinct timestamp of the panel) and each
   distinct timestamp's calendar inputs, saves the grid's arrays, then takes pieces too. A piece whose series' own
   statistics complete the scalers (each series' trailing inputs are standardized with its own mean and std; only a
   series without training rows or with an undefined std reads the pooled values, which need every piece:
   `_own_scalers`) writes its scaled rows here too, waiting for the grid if it is not built yet; any other spills
   its trailing inputs for 4.
4. write (the pieces 3. could not write): the scaled inputs `prepare_from_bars` gives the piece with the whole
   panel's transform (`_scaled_rows`), from its spilled features and trailing inputs; its calendar inputs and grid
   rows are looked up in the panel's tables (no calendar of its own: the pieces share their timestamps).
Rows go to their offset in the store's arrays from a thread of the process that made them, past the page cache
(store/direct.py), windows and split ids offset by the pieces before; every process's writes are waited for
(`_drained`) before the store is finished.
The data summary is built from what the trail and write jobs saw of each piece's rows and windows
(summary.WindowFacts: counts and extremes that merge), not read again from the written arrays; this process never
imports torch. Memory: a worker holds one chunk or one piece; this process too, besides the distinct timestamps,
the grid and the split ids.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc

from foxhunt.atomic import fsync
from foxhunt.data.bars.grid import DAILY_MIN_SPACING_NS, Grid
from foxhunt.data.bars.load import ROLL_REASONS, load_raw
from foxhunt.data.bars.sessions import run_session
from foxhunt.data.bars.validate import check_log_target
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.prepare import (
    FEATURE_COLUMNS,
    check_length,
    check_splits,
    feature_schema,
    known_width,
    scaled_rows,
    sorted_bars,
    split_cuts,
    train_start_ns,
)
from foxhunt.data.dataset.summary import WindowFacts, data_summary, merge_facts, window_facts
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.dataset.windows import SplitResult, assign_splits, off_grid_windows, window_starts
from foxhunt.data.features.calendar import calendar_columns
from foxhunt.data.features.features import move_columns, own_move_columns, raw_features
from foxhunt.data.features.fitstats import concat, stats
from foxhunt.data.features.known import (
    DecoderKnown,
    distinct_union,
    sorted_distinct,
    stamp_known,
    stamp_rows,
    take_rows,
)
from foxhunt.data.features.scaling import (
    add_vol_stats,
    first_scalers,
    observed_names,
    trailing,
    train_moments,
    vol_columns,
    vol_moments,
)
from foxhunt.data.features.seasonality import minute_of_day
from foxhunt.data.io.discover import Source
from foxhunt.data.io.read import check_bar_sizes, median_spacings, read_bars, rtype_sets
from foxhunt.data.store import early
from foxhunt.data.store.crew import Crew
from foxhunt.data.store.direct import drain, put
from foxhunt.data.store.layout import SPLITS, WINDOW_ARRAYS, own_array, split_file
from foxhunt.data.store.pieces import PIECE_ROWS, Piece, Route, merge_reports, route_of
from foxhunt.data.store.write import filling, finish, make_tmp, manifest_of
from foxhunt.data.util.parallel import serial
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")

PIECE = "__piece"  # each bar's piece, beside the bars of a chunk
CENTER, SCALE = "__center", "__scale"  # the target's center and scale beside the trailing inputs in a spill
MINUTE = "__minute"  # each bar's minute of the day beside its raw features in a spill
GRID_READY = "known-ready"  # made in the spill folder once the grid's tables are all there (`_stamp_tables`)
GRID_FAILED = "known-failed"  # made there when building the grid failed
ROW_ARRAYS = ("cont", "static_cat", "time_cat", "target_raw", "center", "scale", "ts_ns", "real", "series_idx")


def prepare_pieces(cfg: DataConfig, out: Path, pieces: list[Piece], pool: Crew, sources: list[Source]
                   ) -> dict[str, Any] | None:
    """Prepare `cfg` piece by piece into the store `out` with the processes of `pool`; returns its manifest, or None
    when the pieces do not hold consecutive series (the caller then prepares in memory). `sources`: expand_sources'
    list of `cfg.paths`."""
    out = Path(out)
    tmp = make_tmp(out)
    spill = Path(tempfile.mkdtemp(prefix=f".{out.name}.pieces.", dir=out.parent))
    try:
        # The processes take the cores: each runs its stages in one thread (data/util/parallel.py).
        with filling(tmp, out), serial():
            listed = [(f, source) for source in sources for f in source.files]  # (file, its source), in order
            files = [str(f) for f, _ in listed]
            route = route_of(pieces, cfg.contracts)
            chunks = _chunks(files, max(pool.processes + 1, -(-sum(p.rows for p in pieces) // PIECE_ROWS)))
            lap = _Laps()
            reads = pool.starmap(_read, [(cfg, c, i0, _chunk_sources(listed[i0:i1]), route, str(spill))
                                         for c, (i0, i1) in enumerate(chunks)])
            if not all(r["routed"] for r in reads):
                shutil.rmtree(tmp, ignore_errors=True)
                return None
            check_bar_sizes([x for r in reads for x in r["rtypes"]], [x for r in reads for x in r["spacings"]],
                            files)
            entries = [e for r in reads for e in r["files"]]
            expected = split_cuts(cfg, np.array([min(r["lo"] for r in reads), max(r["hi"] for r in reads)]))
            jobs = [(cfg, k, str(spill)) for k in range(len(pieces))]
            lap("read")
            early.make_arrays(tmp, sum(e["rows"] for e in entries), early.early_arrays(cfg.target))  # bars read
            loads = pool.starmap(_load, [(*job, len(chunks), entries, expected, str(tmp)) for job in jobs])
            lap("load")
            manifest = _assemble(cfg, out, tmp, pool, jobs, loads, expected, lap)
    finally:
        with contextlib.suppress(OSError):  # on the way out after an error: this process's writes end first
            drain()
        shutil.rmtree(spill, ignore_errors=True)
    return manifest


def _chunks(files: list[str], n: int) -> list[tuple[int, int]]:
    """[first, end) of `n` (at most one per file) runs of consecutive files of about equal bytes."""
    sizes = np.cumsum([os.path.getsize(f) for f in files])  # (F,)
    n = max(1, min(n, len(files)))
    ends = np.unique(np.searchsorted(sizes, sizes[-1] * np.arange(1, n + 1) / n, side="left") + 1)
    ends = np.minimum(ends, len(files))
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


class _Laps:
    """Logs (debug) the wall and CPU seconds of each phase (CPU: this process's; the pieces' too with workers <= 1)."""

    def __init__(self) -> None:
        self.t = (time.perf_counter(), time.process_time())

    def __call__(self, phase: str) -> None:
        now = (time.perf_counter(), time.process_time())
        log.debug("prepare in pieces: %s %.2f s wall, %.2f s CPU", phase, now[0] - self.t[0], now[1] - self.t[1])
        self.t = now


def _assemble(cfg: DataConfig, out: Path, tmp: Path, pool: Any, jobs: list, loads: list[dict],
              expected: tuple, lap: _Laps) -> dict | None:
    spill = Path(jobs[0][2])
    names = [n for r in loads for n in r["names"]]
    if names != sorted(set(names)):
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    for r in (r for load in loads for r in load["rolls"]):  # what load_raw logs in memory (the workers are quiet)
        why = ROLL_REASONS[r["reason"]].format(n=cfg.roll_confirm, **r)
        log.info("roll %s on %s: %s -> %s (%s), gap %.4g", r["root"], r["trade_date"], r["from"], r["to"], why, r["gap"])
    e, d = cfg.encoder_length, cfg.horizon
    lengths = np.concatenate([r["lengths"] for r in loads])
    check_length(names, lengths, e, d, False)
    span = np.array([min(r["lo"] for r in loads), max(r["hi"] for r in loads)], dtype=np.int64)
    cuts = split_cuts(cfg, span)
    fits = [r["fit"] for r in loads]
    if cuts != expected:
        log.debug("prepare in pieces: cleaning moved the ends of the span, the cuts with them: fitting again")
        fits = pool.starmap(_fit, [(*job, r["names"], r["lengths"], cuts) for job, r in zip(jobs, loads, strict=True)])
    spacing = _median([r["gaps"] for r in loads])
    spacing = _median([f["train_gaps"] for f in fits]) or spacing
    intraday = spacing < DAILY_MIN_SPACING_NS
    season_tz = cfg.exchange_tz if cfg.seasonality and intraday else None
    mom = concat([f["mom"] for f in fits])
    if season_tz is None:
        mom = {k: v for k, v in mom.items() if not k.startswith("season:")}
    scalers = first_scalers(mom, names, cfg.target, cfg.vol_halflife, cfg.vol_estimator, cfg.vol_features,
                            cfg.fill_gaps, season_tz)
    transform = FittedTransform(  # its scalers are completed in place (add_vol_stats) before the pieces are written
        series_vocab=tuple(n for n, ok in zip(names, mom["rows"] > 0, strict=True) if ok), scalers=scalers,
        target=cfg.target, scaling=cfg.scaling, intraday=intraday, calendar_features=cfg.calendar_features,
        exchange_tz=cfg.exchange_tz, bar_spacing_ns=spacing, session=run_session(cfg.calendar),
    )
    rows = np.cumsum([0, *(int(r["lengths"].sum()) for r in loads)])
    wins = np.cumsum([0, *(r["windows"] for r in loads)])
    kr = len(calendar_columns(intraday, cfg.calendar_features)) + bool(scalers.get("season"))
    shapes = {"cont": (rows[-1], kr + len(observed_names(scalers))), "static_cat": (rows[-1], 1),
              "time_cat": (rows[-1], 0)}
    arrays = early.finish_arrays(tmp, int(rows[-1]), int(wins[-1]), early.early_arrays(cfg.target))  # by the loads
    arrays.update({name: _allocate(tmp, name, shapes.get(name, (rows[-1],))) for name in ROW_ARRAYS
                   if name not in arrays})
    arrays["known_base"] = _allocate(tmp, "known_base", (rows[-1],))
    places = [(str(tmp), int(rows[k]), int(wins[k])) for k in range(len(loads))]
    trails = pool.starmap_async(_trail, [(*job, r["names"], r["lengths"], cuts, transform, *at)
                                          for job, r, at in zip(jobs, loads, places, strict=True)])
    # The grid needs the step and the profile only: built here while the workers run the trailing inputs, and
    # saved at once. Files are made now, not once the disk is busy with the store's rows: there a metadata change
    # (creating a file, deleting a spill) can wait ~1 s on the journal, which waits on the data it orders.
    try:
        _check_intraday(loads, intraday)
        origins = distinct_union([_shared(spill, f"stamps-{k}") for k in range(len(loads))])  # (O,) every one
        known = _stamp_tables(origins, spill, cfg, spacing, intraday, scalers.get("season"), transform.grid)
    except BaseException:
        (spill / GRID_FAILED).touch()  # the trail jobs waiting for the grid stop (_grid_built)
        raise
    arrays["known_cont"] = _save(tmp, "known_cont.npy", known.cont)
    arrays["known_cat"] = _save(tmp, "known_cat.npy", np.zeros((len(known.ts), 0), dtype=np.int64))
    arrays["known_ts"] = _save(tmp, "known_ts.npy", known.ts)
    if known.index is not None:
        arrays["known_index"] = _allocate(tmp, "known_index", (rows[-1], d), "int32")
    lap("fit, grid")
    trails = trails.get()
    add_vol_stats(scalers, concat([t["mom"] for t in trails]), names, mom["rows"] > 0)
    split = SplitResult(ids={name: np.concatenate([_shared(spill, f"splits-{k}-{name}") for k in range(len(trails))])
                             for name in SPLITS},
                        purged={k: sum(t["purged"].get(k, 0) for t in trails) for k in trails[0]["purged"]})
    check_splits(split, cuts, cfg, span)
    lap("trail")
    # The pieces whose trail job could not write their scaled rows (see _trail) write them now.
    writes = pool.starmap_async(_write, [(*job, r["names"], r["lengths"], transform, *at[:2]) for job, r, at, t
                                         in zip(jobs, loads, places, trails, strict=True) if t["off_grid"] is None])
    try:  # the split ids are saved while the pieces write; this process takes pieces after
        for k in SPLITS:
            arrays[f"split_{k}"] = _save(tmp, split_file(k), np.asarray(split.ids[k], dtype=np.int64))  # no copy
    finally:
        off_grid = sum(writes.get()) + sum(t["off_grid"] or 0 for t in trails)  # the jobs end before anything leaves
        _drained(pool)
    facts = dataclasses.replace(merge_facts([t["facts"] for t in trails]), off_grid=off_grid)
    lap("write")
    manifest = _finish_store(cfg, out, tmp, loads, trails, arrays, transform, known, cuts, spacing, facts)
    lap("flush")
    return manifest


def _drained(pool: Crew) -> None:
    """Wait until the rows every process of `pool` queued (store/direct.py) are written; raise the first error."""
    pool.everywhere(drain)


def _stamp_tables(origins: np.ndarray, spill: Path, cfg: DataConfig, spacing: int, intraday: bool,
                  season: dict | None, grid: Grid) -> DecoderKnown:
    """The known-future grid over every distinct timestamp `origins` (O,) of the panel (its rows: one per origin),
    and, spilled for the pieces' writes, what maps a row onto it: each origin's calendar inputs (O, Kr), its grid
    row (and steps), and where a timestamp sits among the origins (`_stamp_slots`). Each value is a function of its
    own timestamp (known.known_cont), so computing them once over the panel gives every piece's rows their bits."""
    sk = stamp_known(origins, spacing, cfg.horizon, cfg.exchange_tz, intraday, cfg.calendar_features, season,
                     grid=grid)
    at_origin = np.empty((len(origins), sk.table_cont.shape[1]), dtype=np.float32)  # (O, Kr)
    stamp_rows(sk, at_origin)  # origins are distinct: each its own row
    base, index = sk.base, sk.index
    known = DecoderKnown(cont=sk.table_cont, ts=sk.table, base=base, index=index)
    del sk
    slots = _stamp_slots(origins)
    for name, value in (("cal", at_origin), ("base", base), ("index", index), ("origins", origins if slots is None
                                                                               else None), ("slots", slots),
                        ("ts", known.ts)):
        if value is not None:
            _share(spill, f"known-{name}", value)
    (spill / GRID_READY).touch()  # after every table: a piece's trail job that sees it may read them all
    return known


SLOTS_PER_ORIGIN = 8  # a lattice table of more slots than this per origin (and 1M) is not built: searchsorted then


def _stamp_slots(origins: np.ndarray) -> np.ndarray | None:
    """[first, step, origin index of each lattice point first + i * step or -1] for sorted distinct `origins`, so
    that a row finds its origin with a subtraction, a division and a take where a binary search over all origins
    cost 50 ns a row; None when the lattice (the origins' greatest common spacing) is too fine for their span."""
    if not len(origins):
        return None
    offset = origins - origins[0]  # (O,)
    step = int(np.gcd.reduce(offset)) or 1
    size = int(offset[-1] // step) + 1
    if size > SLOTS_PER_ORIGIN * len(origins) + (1 << 20):
        return None
    slots = np.full(size + 2, -1, dtype=np.int64)  # (2 + size,)
    slots[:2] = origins[0], step
    slots[2 + offset // step] = np.arange(len(origins))
    return slots


def _origin_rows(spill: Path, ts: np.ndarray) -> np.ndarray:
    """(n,) the index among the panel's origins of each timestamp `ts` (n,), every one of them an origin."""
    if (spill / "known-slots.npy").exists():
        slots = _shared(spill, "known-slots")
        return slots[2:][(ts - slots[0]) // slots[1]]
    return np.searchsorted(_shared(spill, "known-origins"), ts)


def _check_intraday(loads: list[dict], intraday: bool) -> None:
    """Each piece's bars are of the panel's kind (intraday or daily) by their own median spacing, as
    prepare_from_bars checks a piece against the transform."""
    for r in loads:
        own = _median([r["gaps"]])
        if own and (own < DAILY_MIN_SPACING_NS) != intraday:
            want, got = ("intraday", "daily") if intraday else ("daily", "intraday")
            raise InputError(f"series {r['names'][0]} .. {r['names'][-1]} hold {got} bars but the panel's bars are "
                             f"{want}; prepare them apart")


def _finish_store(cfg: DataConfig, out: Path, tmp: Path, loads: list[dict], trails: list[dict], arrays: dict,
                  transform: FittedTransform, known: Any, cuts: tuple, spacing: int, facts: WindowFacts) -> dict:
    """The manifest of the written store; the store flushed and renamed to `out`."""
    e, d = cfg.encoder_length, cfg.horizon
    names = [n for r in loads for n in r["names"]]
    # The arrays are final: flushed to disk while the manifest is built (finish's fsync then finds them clean).
    flushing = threading.Thread(target=_flush, args=([tmp / entry["file"] for entry in arrays.values()],), daemon=True)
    flushing.start()
    schema = feature_schema(transform, e, d, cfg.adjust)
    meta = SimpleNamespace(report=merge_reports([r["report"] for r in loads]), rolls=[x for r in loads
                                                                                      for x in r["rolls"]])
    # From what each piece's trail and write saw of its rows and windows, not from the written arrays (1.5-2 s over
    # 20M rows, in this process alone while the workers wait).
    summary = data_summary(meta, schema, facts, names, cuts, False, sum(t["roll_bars"] for t in trails), spacing)
    fields = {"encoder_length": e, "horizon": d, "n_known_cont": known.cont.shape[1], "n_known_cat": 0,
              "series_names": names}
    order = [*WINDOW_ARRAYS, *(f"split_{s}" for s in SPLITS), *(own_array(c) for c in own_move_columns(cfg.target))]
    manifest = manifest_of(cfg, {k: arrays[k] for k in order if k in arrays}, fields, schema, transform, summary,
                           meta.rolls)  # in write_store's order
    flushing.join()
    finish(tmp, out, manifest)
    return manifest


def _flush(paths: list[Path]) -> None:
    """fsync `paths`, ahead of `finish` (which fsyncs them again, and says what failed)."""
    with contextlib.suppress(OSError):
        for path in paths:
            fsync(path)


def _allocate(folder: Path, name: str, shape: tuple, dtype: str | None = None) -> dict:
    """The empty .npy array `name` of `shape` in `folder` (a sparse file) and its manifest entry (save_array's)."""
    dtype = dtype or WINDOW_ARRAYS[name][0]
    array = np.lib.format.open_memmap(folder / f"{name}.npy", mode="w+", dtype=dtype, shape=tuple(int(s) for s in shape))
    del array
    return {"file": f"{name}.npy", "dtype": dtype, "shape": [int(s) for s in shape]}


def _save(folder: Path, file: str, value: np.ndarray) -> dict:
    """write.save_array's file and entry, written as the rows are (store/direct.py): on disk by the time the writes
    are drained, so that `finish`'s flush has next to nothing left to write."""
    entry = _allocate(folder, file.removesuffix(".npy"), value.shape, str(value.dtype))
    put(folder / file, 0, value)
    return entry


def _bounds(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    end = np.cumsum(lengths)
    return end - lengths, end


def _median(counted: list[tuple[np.ndarray, np.ndarray]]) -> int:
    """`int(np.median(gaps))` of all pieces' gaps from their (values, counts); 0 without a gap."""
    values = np.concatenate([v for v, _ in counted])
    counts = np.concatenate([c for _, c in counted])
    if not counts.sum():
        return 0
    order = np.argsort(values, kind="stable")
    values, cum = values[order], np.cumsum(counts[order])
    n = int(cum[-1])
    lo = values[np.searchsorted(cum, (n - 1) // 2, side="right")]
    hi = values[np.searchsorted(cum, n // 2, side="right")]
    return int(np.mean(np.array([lo, hi], dtype=np.float64)))


def _gap_counts(ts: np.ndarray, sidx: np.ndarray, cut: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """(values, counts) of grid.median_spacing_ns's gaps (consecutive bars of a series, positive) of rows sorted
    by series and time: over all rows, and over the rows before `cut` (the training rows'). A series' rows before
    the cut start its run, so their gaps are those whose later bar is before it: one diff serves both."""
    gaps = np.diff(ts)  # (N - 1,)
    kept = (sidx[1:] == sidx[:-1]) & (gaps > 0)
    return value_counts(gaps[kept]), value_counts(gaps[kept & (ts[1:] < cut)])


MODE_SAMPLE = 1024  # values value_counts looks at to guess the most common one


def value_counts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, counts) of the distinct values of int64 `x` (N,), by value. The most common value (guessed from a
    sample: the bar spacing, for nearly every gap of regular bars) is counted by one comparison and only the rest is
    sorted: 2M gaps of 1-minute bars in 4-5 ms where sorting them all took 11-14."""
    if not len(x):
        return x[:0], np.zeros(0, dtype=np.int64)
    sample = np.sort(x[:: max(1, len(x) // MODE_SAMPLE)])
    first = np.flatnonzero(np.r_[True, sample[1:] != sample[:-1]])
    mode = sample[first[np.argmax(np.diff(np.r_[first, len(sample)]))]]
    common = x == mode  # (N,)
    rest = np.sort(x[~common])
    first = np.flatnonzero(np.r_[True, rest[1:] != rest[:-1]]) if len(rest) else np.zeros(0, dtype=np.int64)
    values, counts = rest[first], np.diff(np.r_[first, len(rest)])
    at = int(np.searchsorted(values, mode))
    return np.insert(values, at, mode), np.insert(counts, at, int(np.count_nonzero(common)))


# --- in the workers -----------------------------------------------------------------------------------------------


def _read(cfg: DataConfig, chunk: int, first: int, sources: list[Source], route: Route, spill: str) -> dict:
    """Read the files of `sources` (the panel's from index `first` on) and spill their bars by piece (`route`) to
    raw-CHUNK-PIECE.arrow, file_idx counted over the whole panel's files. Returns the files' entries, their bar sizes
    (read.rtype_sets, read.median_spacings) and the raw time span; `routed` False when a symbol is missing (the
    in-memory path names the rows)."""
    raw, entries = read_bars(cfg.paths, cfg.timestamp_col, cfg.symbol_col, cfg.timezone, cfg.price_scale,
                             sources=sources)
    rtypes = rtype_sets(raw, len(entries))
    spacings = [0] * len(entries) if all(rtypes) else median_spacings(raw, len(entries))
    ts = raw.get_column("ts")
    symbol = raw.get_column("symbol")
    out = {"files": entries, "rtypes": rtypes, "spacings": spacings, "routed": not symbol.null_count(),
           "lo": int(ts.dt.epoch("ns").min()), "hi": int(ts.dt.epoch("ns").max())}
    if not out["routed"]:
        return out
    # The symbols as codes of the ones the plan saw (a few hundred categories): routed through a table, spilled as
    # codes (the strings are hashed once, here; the partition moves 1-4 bytes a row where it moved a string).
    seen = list(route.pieces)
    codes = symbol.cast(pl.Enum(seen), strict=False)  # (N,) null where the plan's sample missed the symbol
    if codes.null_count():  # coded once more with those too, and spilled as strings (`_raw_frame`)
        unseen = symbol.filter(codes.is_null()).unique().to_list()
        seen, codes = [*seen, *unseen], symbol.cast(pl.Enum([*seen, *unseen]))
    else:
        symbol = codes
    piece = np.array([route.piece_of(s) for s in seen], dtype=np.int64)[codes.to_physical().to_numpy()]  # (N,)
    # One frame chunk (the scan gives one a file): partition_by over a hundred is ~40% slower than the copy and it.
    raw = raw.with_columns(symbol, pl.col("file_idx") + first, pl.Series(PIECE, piece)).rechunk()
    # One pass over the rows (rows keep their order within a piece), cheaper than a filter per piece.
    for (k,), part in raw.partition_by(PIECE, maintain_order=True, include_key=False, as_dict=True).items():
        _spill(part, Path(spill) / f"raw-{chunk}-{k}.arrow")
    return out


def _load(cfg: DataConfig, k: int, spill: str, chunks: int, entries: list[dict], cuts: tuple, store: str) -> dict:
    """Load piece `k` from its chunks' spills; spill its raw features; write its early rows into `store` (see the
    module doc)."""
    try:
        return _loaded(cfg, k, Path(spill), chunks, entries, cuts, Path(store))
    except BaseException:
        early.failed(Path(spill), k)  # the pieces after it stop waiting for its counts
        raise


def _loaded(cfg: DataConfig, k: int, spill: Path, chunks: int, entries: list[dict], cuts: tuple, store: Path
            ) -> dict:
    paths = [p for c in range(chunks) if (p := spill / f"raw-{c}-{k}.arrow").exists()]
    raw, distinct = _raw_frame([_read_spill(p) for p in paths])
    counts = np.bincount(raw.get_column("file_idx").to_numpy(), minlength=len(entries))
    loaded = load_raw(raw, [dict(e, rows=int(n)) for e, n in zip(entries, counts, strict=True)], cfg, consume=True,
                      distinct=distinct)
    del raw
    _delete(paths)
    bars, names, sidx, ts = sorted_bars(loaded.bars)
    lengths = np.bincount(sidx, minlength=len(names))
    starts = window_starts(*_bounds(lengths), cfg.encoder_length + cfg.horizon)  # (w,)
    early.publish(spill, k, len(names), len(ts), len(starts))  # as soon as known: the pieces after wait for it
    check_log_target(bars, cfg.target)
    keep = _feature_columns(cfg)
    feats = raw_features(bars, cfg.adjust, cfg.target, columns=keep).select(keep)
    del bars
    # Each bar's minute of the day, for the seasonality: computed once, read by the fit and the trail (~30 ms a
    # million bars each time, the time zone's offsets looked up).
    minute = minute_of_day(ts, cfg.exchange_tz).astype(np.uint16) if cfg.seasonality else None  # (N,)
    # Spilled without what reading it back restores exactly: `target` (a copy of its move column) and the 0/1 `roll`
    # as a bit: a third fewer bytes to write, read twice and delete.
    _spill(feats.drop("target").with_columns(pl.col("roll").cast(pl.Boolean),
                                             *(() if minute is None else (pl.Series(MINUTE, minute),))),
           spill / f"feats-{k}.arrow")
    gaps, train_gaps = _gap_counts(ts, sidx, cuts[0])
    fit = {"mom": _moments(cfg, feats, len(names), sidx, ts, cuts, minute), "train_gaps": train_gaps}
    early.write_rows(store, *early.place(spill, k), ts, sidx, feats["target"].to_numpy(), starts,
                     {c: feats[c].to_numpy() for c in own_move_columns(cfg.target)})
    _share(spill, f"stamps-{k}", sorted_distinct(ts))
    return {"names": names, "lengths": lengths, "windows": len(starts), "lo": int(ts.min()), "hi": int(ts.max()),
            "report": loaded.report, "rolls": loaded.rolls, "gaps": gaps, "fit": fit}


def _share(spill: Path, name: str, value: np.ndarray) -> None:
    """Write the array `value` to the spill folder for another process of the crew (`_shared`). What a job hands
    back goes this way, not with its result: a result comes back through the pool's pipe, read 64 KiB at a time by a
    thread of the `prepare` process that needs the GIL for each read while that process runs its own job (a
    piece's 9 MB of timestamps took ~0.1 s, the worker idle meanwhile, after each of its jobs)."""
    with open(spill / f"{name}.npy", "xb") as f:
        np.save(f, value)


def _shared(spill: Path, name: str) -> np.ndarray:
    """An array `_share` wrote, mapped: read from the page cache as it is used."""
    return np.load(spill / f"{name}.npy", mmap_mode="r")


def _raw_frame(parts: list[pl.DataFrame]) -> tuple[pl.DataFrame, pl.Series]:
    """The frame read_bars gives for a piece's bars (symbols as strings) from its chunks' spills `parts`, and its
    distinct symbols: from the codes of a chunk that spilled codes (`_present`, without hashing every row), hashed in
    a chunk that spilled strings (symbols the plan's sample missed)."""
    present = [_present(p.get_column("symbol")) if isinstance(p.schema["symbol"], pl.Enum)
               else p.get_column("symbol").unique() for p in parts]
    raw = pl.concat([p.with_columns(pl.col("symbol").cast(pl.Utf8)) for p in parts], rechunk=False)
    return raw, pl.concat(present).unique(maintain_order=True)


def _present(codes: pl.Series) -> pl.Series:
    """The distinct values of the Enum series `codes` (no nulls), as strings: counted from its codes, where hashing
    each row's string cost ~20 ms a million rows."""
    categories = codes.dtype.categories  # (C,)
    present = np.flatnonzero(np.bincount(codes.to_physical().to_numpy(), minlength=len(categories)))
    return categories.gather(pl.Series(present, dtype=pl.get_index_type())).alias(codes.name)


def _spill(frame: pl.DataFrame, path: Path) -> None:
    """Write `frame` to the new Arrow IPC file `path` through a file this process opens, never through polars' own
    open of a path: polars opens a path twice, the second time with O_TRUNC, and ext4 takes a truncated file closed
    after writing for a file replaced in place (auto_da_alloc), so it starts writing it to disk at close. Every
    spill then went to disk (2.4 GB of them over 20M bars, beside the store's 1.9 GB, at ~400 MB/s), though each is
    read back from the page cache and deleted within seconds; written this way, most are deleted before the kernel
    writes them at all, and a write of 1 GB takes 0.4 s where it took 0.9."""
    with open(path, "xb") as f:
        frame.write_ipc(f)


def _read_spill(path: Path) -> pl.DataFrame:
    """The frame `_spill` wrote to `path`, its columns the file's pages, mapped: nothing copied. pl.read_ipc copies
    every column out of the mapped file into fresh memory (1.25M bars of 12 columns: 50-130 ms and ~28,000 page
    faults the first time, against 9-20 ms and ~500 this way); a spill is read once or twice and deleted."""
    with pa.memory_map(str(path)) as source:
        return pl.from_arrow(pa.ipc.open_file(source).read_all(), rechunk=False)


def _delete(paths: list[Path]) -> None:
    """Delete spills read for the last time, in a thread of their own: where the kernel has begun writing a spill to
    disk, deleting it waits for the disk (0.2-3 s over 20M bars' spills, CPU 0.3 s), which the piece's work need
    not. What is left when the process ends goes with the spill folder."""

    def delete() -> None:
        for path in paths:
            with contextlib.suppress(OSError):
                path.unlink()

    threading.Thread(target=delete, daemon=True).start()


def _feature_columns(cfg: DataConfig) -> list[str]:
    """What the later phases read of raw_features' output, in prepare_from_bars' order."""
    return list(dict.fromkeys((*FEATURE_COLUMNS, *move_columns(cfg.target), *(("filled",) if cfg.fill_gaps else ()))))


def _spilled(cfg: DataConfig, spill: str, k: int, lengths: np.ndarray
             ) -> tuple[pl.DataFrame, np.ndarray, np.ndarray, np.ndarray | None]:
    """Piece `k`'s spilled raw features (as raw_features gave them), each row's series index (N,), timestamp in ns
    (N,) and minute of the day (N,) (None without --seasonality)."""
    spilled = _read_spill(Path(spill) / f"feats-{k}.arrow")
    minute = spilled.get_column(MINUTE).to_numpy() if MINUTE in spilled.columns else None
    feats = spilled.with_columns(pl.col("roll").cast(pl.Float64), pl.col(cfg.target).alias("target")).select(
        _feature_columns(cfg))
    sidx = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    return feats, sidx, feats.get_column("ts").dt.epoch("ns").to_numpy(), minute


def _moments(cfg: DataConfig, feats: pl.DataFrame, s: int, sidx: np.ndarray, ts: np.ndarray, cuts: tuple,
             minute: np.ndarray | None) -> dict[str, np.ndarray]:
    """scalers.train_moments of a piece's training rows under `cuts`."""
    keep = (ts < cuts[0]) & (ts >= train_start_ns(cfg)) & ~feats["first"].to_numpy()
    return train_moments(feats, sidx, s, keep, cfg.target, cfg.exchange_tz if cfg.seasonality else None,
                         minute=minute)


def _fit(cfg: DataConfig, k: int, spill: str, names: list[str], lengths: np.ndarray, cuts: tuple) -> dict:
    """A piece's training statistics under `cuts` from its spilled features: what its load job returned as "fit"
    under the cuts it expected."""
    feats, sidx, ts, minute = _spilled(cfg, spill, k, lengths)
    return {"mom": _moments(cfg, feats, len(names), sidx, ts, cuts, minute),
            "train_gaps": _gap_counts(ts, sidx, cuts[0])[1]}


def _trail(cfg: DataConfig, k: int, spill: str, names: list[str], lengths: np.ndarray, cuts: tuple,
           transform: FittedTransform, store: str, row0: int, win0: int) -> dict:
    """Piece `k`'s trailing inputs under the first scalers (`transform`'s) and their statistics; its series codes
    (static_cat), written now (at `row0`) so that the disk takes them while the pieces are still at work (its other
    scaler-free rows went in the load: store/early.py); its windows' splits (offset by `win0`) and summary facts.

    Its scaled rows too (`_scaled_rows`, returning the off-grid count) when its series' own statistics complete the
    scalers (`_own_scalers`), once the grid is built (`_grid_built`): otherwise the trailing inputs are spilled for
    `_write`, which runs once the whole panel's are in ("off_grid" None)."""
    e, d = cfg.encoder_length, cfg.horizon
    scalers = transform.scalers
    feats, sidx, ts, minute = _spilled(cfg, spill, k, lengths)
    starts = window_starts(*_bounds(lengths), e + d)  # (w,)
    code, real = transform.code(names)[sidx], np.ones(len(ts), dtype=bool)  # (n,) each
    put(Path(store) / "static_cat.npy", row0, code[:, None])  # first: the disk takes them while the rest is computed
    roll_bars = int(feats["roll"].sum())
    keep = (ts < cuts[0]) & (ts >= train_start_ns(cfg)) & ~feats["first"].to_numpy()
    if scalers.get("season") and scalers["season"]["tz"] != cfg.exchange_tz:
        minute = None  # the spilled minutes are in the exchange's zone: trailing computes the profile's own
    trail = trailing(feats, names, sidx, scalers, cfg.target, cfg.scaling, minute=minute)  # (derived, center, scale)
    mom = vol_moments(trail[0], sidx, len(names), keep, scalers)
    del keep
    own = _own_scalers(scalers, mom, names)
    off_grid = None
    if own is not None and _grid_built(Path(spill)):
        off_grid = _scaled_rows(cfg, spill, names, starts, sidx, ts, feats, trail,
                                dataclasses.replace(transform, scalers=own), store, row0)
        _delete([Path(spill) / f"feats-{k}.arrow"])  # read for the last time
    else:  # the write reads them again: they depend on what the first scalers hold only, fixed by now
        _spill(pl.DataFrame({**trail[0], CENTER: trail[1], SCALE: trail[2]}), Path(spill) / f"trail-{k}.arrow")
    del trail, feats
    split = assign_splits(ts[starts + e], ts[starts + e + d - 1], *cuts, train_start_ns(cfg))
    for name in SPLITS:
        _share(Path(spill), f"splits-{k}-{name}", split.ids[name] + win0)
    return {
        "mom": mom,
        "off_grid": off_grid,
        "purged": dict(split.purged),
        "roll_bars": roll_bars,
        "facts": window_facts(ts, real, sidx, code, starts, len(names), e, split, 0),
    }


def _grid_built(spill: Path) -> bool:
    """Wait until this process has built the grid (`_stamp_tables`); False when building it failed. The first
    pieces' trail jobs get here while it is still at it: waiting (well under a second, once) costs less than
    spilling their trailing inputs and writing their rows in a phase of their own (4 pieces of 16 on 20M bars:
    ~0.5 s each)."""
    return early.wait_for(spill / GRID_READY, (spill / GRID_FAILED).exists)


def _own_scalers(scalers: dict, mom: dict[str, np.ndarray], names: list[str]) -> dict | None:
    """The first `scalers` completed with the trailing inputs' statistics of the piece's series `names` alone (`mom`:
    their vol_moments), which are what add_vol_stats gives those series from the whole panel's: each series' mean
    and std are its own. None where a series would read pooled values, which need every piece: one without training
    rows, or a trailing input whose std is undefined or zero (fitstats.stats)."""
    cols = vol_columns(scalers)
    if not all(n in scalers["series"] for n in names):
        return None
    for c in cols:
        n, m2 = mom[f"{c}:n"], mom[f"{c}:m2"]
        with np.errstate(divide="ignore", invalid="ignore"):
            std = np.sqrt(m2 / (n - 1))
        if not np.all((n > 1) & np.isfinite(std) & (std > 0)):
            return None
    per, _ = stats(mom, cols, names, np.ones(len(names), dtype=bool))
    own = {**scalers, "series": {**scalers["series"]}}
    for name in names:
        own["series"][name] = {**scalers["series"][name], **per[name]}
    return own


def _write(cfg: DataConfig, k: int, spill: str, names: list[str], lengths: np.ndarray, transform: FittedTransform,
           store: str, row0: int) -> int:
    """Piece `k`'s scaled rows of the store (`_scaled_rows`) from its spilled features and trailing inputs, with the
    whole panel's transform: for the pieces `_trail` could not write. Returns its windows' off-grid count."""
    feats, sidx, ts, _ = _spilled(cfg, spill, k, lengths)
    trail = _read_spill(Path(spill) / f"trail-{k}.arrow")
    derived = {c: trail.get_column(c).to_numpy() for c in trail.columns if c not in (CENTER, SCALE)}
    trail = (derived, trail.get_column(CENTER).to_numpy(), trail.get_column(SCALE).to_numpy())
    starts = window_starts(*_bounds(lengths), cfg.encoder_length + cfg.horizon)  # (w,)
    _delete([Path(spill) / f"{name}-{k}.arrow" for name in ("trail", "feats")])  # read for the last time
    return _scaled_rows(cfg, spill, names, starts, sidx, ts, feats, trail, transform, store, row0)


def _scaled_rows(cfg: DataConfig, spill: str, names: list[str], starts: np.ndarray, sidx: np.ndarray, ts: np.ndarray,
                 feats: pl.DataFrame, trail: tuple, transform: FittedTransform, store: str, row0: int) -> int:
    """Write a piece's scaled rows at row `row0` of the store: what prepare_from_bars gives it with `transform`, from
    its raw features and trailing inputs, with its calendar inputs and grid rows looked up in the panel's tables
    (`_stamp_tables`). Returns how many of its windows `starts` are off the grid (off_grid_windows)."""
    e, d = cfg.encoder_length, cfg.horizon
    kr = known_width(transform)
    cont, center, scale = scaled_rows(feats, names, sidx, transform, trail)
    del feats, trail
    at = _origin_rows(Path(spill), ts)  # (n,)
    take_rows(_shared(Path(spill), "known-cal"), at, cont[:, :kr])
    for name, value in (("cont", cont), ("center", center), ("scale", scale)):
        put(Path(store) / f"{name}.npy", row0, value)
    del cont, center, scale
    base = _shared(Path(spill), "known-base")[at]  # (n,)
    put(Path(store) / "known_base.npy", row0, base)
    index = None
    if (Path(spill) / "known-index.npy").exists():
        index = _shared(Path(spill), "known-index")[at]  # (n, D)
        put(Path(store) / "known_index.npy", row0, index)
    grid = _shared(Path(spill), "known-ts")
    return off_grid_windows(starts, ts, grid, e, d, base, None if index is None else index[:, -1])
