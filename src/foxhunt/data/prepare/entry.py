"""The doors into the pipeline (driver.py): a panel prepared in memory (`prepare_data`, `prepare_from_bars`: one
piece in this process, the arrays in memory) and the feature store of `foxhunt prepare` (`prepare_store`: in
pieces on worker processes or a Dask cluster, or as one piece in this process).

With a fitted transform (a saved model's, model.json) the pipeline runs with fitting skipped: the data are featurized
exactly as in training, and `horizon` extrapolated future rows follow each series so that every bar with a full
encoder behind it, the last one included, is a forecast origin.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

import polars as pl

from foxhunt.data.bars.load import LoadedBars, load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import FittedTransform, PreparedData
from foxhunt.data.io.discover import Source, expand_sources
from foxhunt.data.prepare.driver import run
from foxhunt.data.prepare.executor import (
    LOCAL,
    MIN_ROWS,
    InProcess,
    Workers,
    check_executor,
    may_piece,
    open_workers,
)
from foxhunt.data.prepare.plan import PIECE_ROWS, Piece, plan_pieces
from foxhunt.data.prepare.read_stage import given, read_pieces
from foxhunt.data.prepare.sink import MemorySink, StoreSink
from foxhunt.data.prepare.spill import FolderSpill, MemorySpill
from foxhunt.data.store.leftovers import SPILL, hidden_folder, remove_stale
from foxhunt.data.store.write import filling, make_tmp, refuse_non_store
from foxhunt.data.util.parallel import serial
from foxhunt.errors import InputError


def prepare_data(
    cfg: DataConfig, transform: FittedTransform | None = None, for_prediction: bool = False
) -> PreparedData:
    """Load the bars named by `cfg.paths` and prepare them (see `prepare_from_bars`)."""
    step = transform.bar_spacing_ns if transform is not None else None  # --fill-gaps fills to the model's grid
    roots = transform.contract_roots() if transform is not None else None  # and reads the model's series
    return prepare_from_bars(load_bars(cfg, step, roots), cfg, transform, for_prediction)


def prepare_from_bars(
    loaded: LoadedBars,
    cfg: DataConfig,
    transform: FittedTransform | None = None,
    for_prediction: bool = False,
    bar_frame: tuple[str, pl.DataFrame] | None = None,
) -> PreparedData:
    """Featurize, scale, window and split `loaded.bars` (sorted by series, ts; see load.LoadedBars), as one piece in
    this process. `transform`: None fits one on the rows before the train cut; a saved model's is applied with
    `for_prediction` (every bar an origin, nothing split). `bar_frame`: (name, frame) when the bars came from a frame
    in memory: the user's bar-file columns are read from it.

    Raises InputError when no series has enough bars for one window, or when a split ends up empty.
    """
    if for_prediction and transform is None:
        raise InputError("prediction needs the fitted transform saved with the model (model.json)")
    if transform is not None and not for_prediction:
        raise ValueError("a saved model's transform prepares prediction data: pass for_prediction=True")
    spill = MemorySpill()
    read = given(cfg, transform, loaded, spill, bar_frame)
    del loaded  # the spill holds the bars for the load job, which drops them once featurized
    return run(cfg, read, InProcess(), spill, MemorySink(), transform)


def prepare_store(
    cfg: DataConfig, out: Path, piece_rows: int = PIECE_ROWS, workers: int = 2, min_rows: int = MIN_ROWS,
    executor: str = LOCAL, pool: Workers | None = None,
) -> dict[str, Any]:
    """Featurize, scale, window and split the bars of `cfg.paths` (as `foxhunt train` would) into the store `out`;
    returns its manifest. A panel of `min_rows` bars or more in several series groups of about `piece_rows` bars is
    prepared group by group on `workers` processes (1: this one); otherwise (or with `workers` 0) as one piece in
    this process, with the same result. `executor`: `local`, or `dask://HOST:PORT` to run the pieces on that Dask
    cluster's workers (executor.py; `out`'s folder must be one they all see). `pool`: the workers (open_workers)
    when the caller opened them already, to have them import meanwhile."""
    out = Path(out)
    refuse_non_store(out)  # before the bars are read
    remove_stale(out)  # what a `prepare` into the same place left when it was killed
    check_executor(executor)
    sources = expand_sources(cfg.paths)  # listed once: walking a folder of daily files is not free
    with contextlib.ExitStack() as stack:
        pieced = workers > 0 or executor != LOCAL  # --workers 0: in memory, whoever opened workers
        if pieced and pool is None:  # no process is started for a panel kept whole
            pool = stack.enter_context(open_workers(executor, workers if may_piece(cfg, min_rows, sources) else 1))
        pieces = plan_pieces(cfg, piece_rows, pool.size, min_rows, sources) if pieced else []
        if len(pieces) > 1:
            manifest = _in_pieces(cfg, out, pieces, pool, sources)
            if manifest is not None:
                return manifest  # else the read or load stage said why the panel is prepared as one piece
        if pool is not None:
            pool.executor.shutdown(wait=False, cancel_futures=True)  # its processes end while the panel is prepared
    tmp = make_tmp(out)
    with filling(tmp, out):
        spill = MemorySpill()
        return run(cfg, given(cfg, None, load_bars(cfg), spill), InProcess(), spill, StoreSink(tmp, out))


def _in_pieces(cfg: DataConfig, out: Path, pieces: list[Piece], pool: Workers, sources: list[Source]
               ) -> dict[str, Any] | None:
    """The store of `cfg` prepared in `pieces` on `pool`, through a spill folder beside `out`; None when the pieces
    cannot be prepared apart (the caller then prepares the panel as one piece)."""
    tmp = make_tmp(out)
    spill = FolderSpill(hidden_folder(out, SPILL))
    try:
        with filling(tmp, out), serial():  # the processes take the cores: each runs its stages in one thread
            read = read_pieces(cfg, pieces, pool.executor, pool.size, sources, spill)
            manifest = None if read is None else run(cfg, read, pool.executor, spill, StoreSink(tmp, out))
        if manifest is None:
            shutil.rmtree(tmp, ignore_errors=True)
        return manifest
    finally:
        shutil.rmtree(spill.folder, ignore_errors=True)
