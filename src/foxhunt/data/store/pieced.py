"""`foxhunt prepare` in pieces: each group of series (store/pieces.py) is loaded and featurized on its own, in worker
processes, and its rows are written straight into the store's preallocated arrays; the panel is never in memory.

What is fitted across series is fitted first, from statistics each piece sends back that add up exactly
(data/fitstats.py; the in-memory path fits from the same sums, so both give the same bits):
1. load: each piece is read (its symbols only, pushed into the parquet scan), cleaned and rolled as `load_bars`
   would; its bars are spilled to an Arrow IPC file; its series, their lengths and its time span come back.
   The split cuts follow from the span of all pieces.
2. fit: per-series training statistics (scalers.train_moments) and the bar-gap counts (the median spacing).
3. trail: with the first scalers fixed, the trailing inputs' statistics (scalers.vol_moments).
4. write: `prepare_from_bars` of the piece with the whole panel's transform and cuts; rows go to their offset in
   the store's arrays (np.lib.format.open_memmap), windows and split ids are offset by the pieces before.
The known-future grid (one table over every distinct timestamp of the panel) and the data summary are then built
from the written arrays. Memory: a worker holds one piece; the parent holds the distinct timestamps and split ids.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl
import torch

from foxhunt.data.calendar import DAILY_MIN_SPACING_NS, calendar_columns
from foxhunt.data.config import DataConfig
from foxhunt.data.features import raw_features
from foxhunt.data.fitstats import concat
from foxhunt.data.known import distinct, distinct_decoder_known
from foxhunt.data.load import ROLL_REASONS, LoadedBars, load_raw
from foxhunt.data.prepare import (
    FittedTransform,
    PreparedData,
    check_length,
    check_splits,
    feature_schema,
    prepare_from_bars,
    sorted_bars,
    split_cuts,
    train_start_ns,
)
from foxhunt.data.read import read_bars
from foxhunt.data.scaling import (
    add_vol_stats,
    first_scalers,
    observed_names,
    trailing,
    train_moments,
    vol_moments,
)
from foxhunt.data.store.layout import SPLITS, WINDOW_ARRAYS, split_file
from foxhunt.data.store.pieces import Piece, merge_reports
from foxhunt.data.store.write import filling, finish, make_tmp, manifest_of, save_array
from foxhunt.data.summary import data_summary
from foxhunt.data.validate import check_log_target
from foxhunt.data.windows import SplitResult, WindowedData, window_starts

log = logging.getLogger("foxhunt.data")

ROW_ARRAYS = ("cont", "static_cat", "time_cat", "target_raw", "center", "scale", "ts_ns", "real", "series_idx")


def prepare_pieces(cfg: DataConfig, out: Path, pieces: list[Piece], workers: int = 2) -> dict[str, Any] | None:
    """Prepare `cfg` piece by piece into the store `out`; returns its manifest, or None when the pieces do not
    hold consecutive series (the caller then prepares in memory)."""
    out = Path(out)
    tmp = make_tmp(out)
    spill = Path(tempfile.mkdtemp(prefix=f".{out.name}.pieces.", dir=out.parent))
    try:
        with filling(tmp, out), _pool(workers) as pool:
            jobs = [(cfg, p.symbols, str(spill / f"{k}.arrow")) for k, p in enumerate(pieces)]
            loads = pool.starmap(_load, jobs)
            manifest = _assemble(cfg, out, tmp, pool, jobs, loads)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    return manifest


class _InProcess:
    """A pool of no worker processes: the pieces one after the other in this process (workers <= 1)."""

    def starmap(self, fn: Any, jobs: list) -> list:
        return [fn(*job) for job in jobs]


@contextlib.contextmanager
def _pool(workers: int) -> Iterator[Any]:
    if workers <= 1:
        yield _InProcess()
        return
    # spawn, not fork: the parent's polars and torch thread pools do not survive a fork. The workers are this
    # process's children, so their CPU time counts in its rusage once the pool is joined.
    pool = mp.get_context("spawn").Pool(workers, initializer=_quiet)
    try:
        yield pool
        pool.close()
    finally:
        pool.terminate()
        pool.join()


def _assemble(cfg: DataConfig, out: Path, tmp: Path, pool: Any, jobs: list, loads: list[dict]) -> dict | None:
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
    fits = pool.starmap(_fit, [(*job, cuts) for job in jobs])
    spacing = _median([f["gaps"] for f in fits])
    spacing = _median([f["train_gaps"] for f in fits]) or spacing
    intraday = spacing < DAILY_MIN_SPACING_NS
    season_tz = cfg.exchange_tz if cfg.seasonality and intraday else None
    mom = concat([f["mom"] for f in fits])
    if season_tz is None:
        mom = {k: v for k, v in mom.items() if not k.startswith("season:")}
    scalers = first_scalers(mom, names, cfg.target, cfg.vol_halflife, cfg.vol_estimator, cfg.vol_features,
                            cfg.fill_gaps, season_tz)
    vol = pool.starmap(_trail, [(*job, cuts, scalers) for job in jobs])
    add_vol_stats(scalers, concat(vol), names, mom["rows"] > 0)
    transform = FittedTransform(
        series_vocab=tuple(n for n, ok in zip(names, mom["rows"] > 0, strict=True) if ok), scalers=scalers,
        target=cfg.target, scaling=cfg.scaling, intraday=intraday, calendar_features=cfg.calendar_features,
        exchange_tz=cfg.exchange_tz, bar_spacing_ns=spacing,
    )
    rows = np.cumsum([0, *(int(r["lengths"].sum()) for r in loads)])
    wins = np.cumsum([0, *(len(window_starts(*_bounds(r["lengths"]), e + d)) for r in loads)])
    series0 = np.cumsum([0, *(len(r["names"]) for r in loads)])
    kr = len(calendar_columns(intraday, cfg.calendar_features)) + bool(scalers.get("season"))
    shapes = {"cont": (rows[-1], kr + len(observed_names(scalers))), "static_cat": (rows[-1], 1),
              "time_cat": (rows[-1], 0), "starts": (wins[-1],)}
    arrays = {name: _allocate(tmp, name, shapes.get(name, (rows[-1],))) for name in (*ROW_ARRAYS, "starts")}
    parts = pool.starmap(_write, [(*job, cuts, transform, str(tmp), int(rows[k]), int(wins[k]), int(series0[k]))
                                  for k, job in enumerate(jobs)])
    return _finish_store(cfg, out, tmp, loads, parts, arrays, transform, cuts, spacing, span)


def _finish_store(cfg: DataConfig, out: Path, tmp: Path, loads: list[dict], parts: list[dict], arrays: dict,
                  transform: FittedTransform, cuts: tuple, spacing: int, span: np.ndarray) -> dict:
    e, d = cfg.encoder_length, cfg.horizon
    step = transform.bar_spacing_ns or spacing
    origins = np.unique(np.concatenate([p["stamps"] for p in parts]))  # (O,) every distinct timestamp
    known = distinct_decoder_known(origins, np.arange(len(origins)), step, d, transform.exchange_tz,
                                   transform.intraday, transform.calendar_features, transform.scalers.get("season"))
    names = [n for r in loads for n in r["names"]]
    maps = {name: np.load(tmp / f"{name}.npy", mmap_mode="r+") for name in arrays}
    ts = maps["ts_ns"]
    _allocate(tmp, "known_base", (len(ts),))
    maps["known_base"] = np.load(tmp / "known_base.npy", mmap_mode="r+")
    if known.index is not None:
        _allocate(tmp, "known_index", (len(ts), d), "int32")
        maps["known_index"] = np.load(tmp / "known_index.npy", mmap_mode="r+")
    for lo in range(0, len(ts), 1 << 22):  # in slices: the parent never holds a whole row array
        at = np.searchsorted(origins, ts[lo:lo + (1 << 22)])
        maps["known_base"][lo:lo + len(at)] = known.base[at]
        if known.index is not None:
            maps["known_index"][lo:lo + len(at)] = known.index[at]
    for name in maps:
        maps[name].flush()
    saved = {name: {"file": f"{name}.npy", "dtype": str(m.dtype), "shape": list(m.shape)} for name, m in maps.items()}
    saved["known_cont"] = save_array(tmp, "known_cont.npy", known.cont)
    saved["known_cat"] = save_array(tmp, "known_cat.npy", np.zeros((len(known.ts), 0), dtype=np.int64))
    saved["known_ts"] = save_array(tmp, "known_ts.npy", known.ts)
    split = SplitResult(
        ids={k: np.concatenate([p["splits"][k] for p in parts]) for k in SPLITS},
        purged={k: sum(p["purged"].get(k, 0) for p in parts) for k in parts[0]["purged"]},
    )
    check_splits(split, cuts, cfg, span)
    for k in SPLITS:
        saved[f"split_{k}"] = save_array(tmp, split_file(k), split.ids[k].astype(np.int64))
    del maps
    view = {name: np.load(tmp / entry["file"], mmap_mode="c") for name, entry in saved.items()}  # no copy
    windows = WindowedData(  # off_grid, for the summary, counts a slice of windows at a time
        **{name: torch.from_numpy(view[name]) if name in view else None for name in WINDOW_ARRAYS},
        encoder_length=e, horizon=d, n_known_cont=view["known_cont"].shape[1], n_known_cat=0,
        series_names=tuple(names),
    )
    schema = feature_schema(transform, e, d, cfg.adjust)
    meta = SimpleNamespace(report=merge_reports([r["report"] for r in loads]), rolls=[x for r in loads
                                                                                      for x in r["rolls"]])
    summary = data_summary(meta, schema, windows, split, cuts, False, sum(p["roll_bars"] for p in parts), spacing)
    data = PreparedData(schema=schema, windows=windows, splits={}, transform=transform, summary=summary,
                        rolls=meta.rolls)
    manifest = manifest_of(data, cfg, {k: saved[k] for k in [*WINDOW_ARRAYS, *(f"split_{s}" for s in SPLITS)]
                                       if k in saved})
    del windows, view, data
    finish(tmp, out, manifest)
    return manifest


def _allocate(folder: Path, name: str, shape: tuple, dtype: str | None = None) -> dict:
    dtype = dtype or WINDOW_ARRAYS[name][0]
    array = np.lib.format.open_memmap(folder / f"{name}.npy", mode="w+", dtype=dtype, shape=tuple(int(s) for s in shape))
    del array
    return {"file": f"{name}.npy", "dtype": dtype, "shape": list(shape)}


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


def _gap_counts(ts: np.ndarray, sidx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, counts) of calendar.median_spacing_ns's gaps (consecutive bars of a series, positive)."""
    gaps = np.diff(ts)[sidx[1:] == sidx[:-1]]
    return np.unique(gaps[gaps > 0], return_counts=True)


# --- in the workers -----------------------------------------------------------------------------------------------


def _quiet() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    logging.getLogger("foxhunt.data").setLevel(logging.WARNING)  # the parent logs; rolls would print twice


def _load(cfg: DataConfig, symbols: tuple[str, ...], spill: str) -> dict:
    raw, files = read_bars(cfg.paths, cfg.timestamp_col, cfg.symbol_col, cfg.timezone, cfg.price_scale,
                           since=cfg.since, until=cfg.until, symbols=symbols)
    loaded = load_raw(raw, files, cfg)
    del raw
    bars, names, sidx, ts = sorted_bars(loaded.bars)
    bars.write_ipc(spill)
    return {"names": names, "lengths": np.bincount(sidx, minlength=len(names)), "lo": int(ts.min()),
            "hi": int(ts.max()), "report": loaded.report, "rolls": loaded.rolls}


def _features(cfg: DataConfig, spill: str) -> tuple[pl.DataFrame, pl.DataFrame, list[str], np.ndarray, np.ndarray]:
    bars = pl.read_ipc(spill)
    bars, names, sidx, ts = sorted_bars(bars)
    return bars, raw_features(bars, cfg.adjust, cfg.target), names, sidx, ts


def _fit(cfg: DataConfig, symbols: tuple, spill: str, cuts: tuple) -> dict:
    bars, feats, names, sidx, ts = _features(cfg, spill)
    check_log_target(bars, cfg.target)
    keep = (ts < cuts[0]) & (ts >= train_start_ns(cfg)) & ~feats["first"].to_numpy()
    mom = train_moments(feats, sidx, len(names), keep, cfg.target, cfg.exchange_tz if cfg.seasonality else None)
    before = ts < cuts[0]
    return {"mom": mom, "gaps": _gap_counts(ts, sidx), "train_gaps": _gap_counts(ts[before], sidx[before])}


def _trail(cfg: DataConfig, symbols: tuple, spill: str, cuts: tuple, scalers: dict) -> dict:
    _, feats, names, sidx, ts = _features(cfg, spill)
    keep = (ts < cuts[0]) & (ts >= train_start_ns(cfg)) & ~feats["first"].to_numpy()
    derived = trailing(feats, names, sidx, scalers, cfg.target, cfg.scaling)[0]
    return vol_moments(derived, sidx, len(names), keep, scalers)


def _write(cfg: DataConfig, symbols: tuple, spill: str, cuts: tuple, transform: FittedTransform, store: str,
           row0: int, win0: int, series0: int) -> dict:
    bars = pl.read_ipc(spill)
    data = prepare_from_bars(LoadedBars(bars=bars, rolls=[], report={}), cfg, transform, cuts=cuts)
    del bars
    w = data.windows
    n = len(w.ts_ns)
    for name in ROW_ARRAYS:
        target = np.load(Path(store) / f"{name}.npy", mmap_mode="r+")
        value = w.series_idx.numpy() + series0 if name == "series_idx" else getattr(w, name).numpy()
        target[row0:row0 + n] = value
        target.flush()
        del target
    starts = np.load(Path(store) / "starts.npy", mmap_mode="r+")
    starts[win0:win0 + len(w.starts)] = w.starts.numpy() + row0
    starts.flush()
    return {
        "splits": {k: data.splits[k].numpy() + win0 for k in SPLITS},
        "purged": data.summary["purged"],
        "roll_bars": data.summary["roll_bars"],
        "stamps": distinct(w.ts_ns.numpy())[0],
    }
