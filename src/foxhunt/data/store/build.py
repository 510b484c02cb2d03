"""`foxhunt prepare`: prepare the bars named by a DataConfig once and write them as a feature store."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.prepare import prepare_data
from foxhunt.data.io.discover import Source, expand_sources
from foxhunt.data.store.crew import Crew, prepare_crew
from foxhunt.data.store.executor import LOCAL, ExecutorCrew, check_executor, dask_crew
from foxhunt.data.store.pieces import MIN_ROWS, PIECE_ROWS, Piece, may_piece, plan_pieces
from foxhunt.data.store.write import refuse_non_store, write_store

log = logging.getLogger("foxhunt.data")


def prepare_store(
    cfg: DataConfig, out: Path, piece_rows: int = PIECE_ROWS, workers: int = 2, min_rows: int = MIN_ROWS,
    pool: Crew | None = None, executor: str = "local",
) -> dict[str, Any]:
    """Featurize, scale, window and split the bars of `cfg.paths` (as `foxhunt train` would) into the store `out`;
    returns its manifest. A panel of `min_rows` bars or more in several series groups of about `piece_rows` bars is
    prepared group by group in `workers` processes (store/pieced.py; 1: in this one), with the same result;
    otherwise (or with `workers` 0) in memory, then written. `pool`: a crew of `workers` processes (crew.prepare_crew)
    the caller started before importing this module; one is started here otherwise. Its workers are ended at once
    when the panel is prepared in memory. `executor`: `local`, or `dask://HOST:PORT` to run the pieces on that
    Dask cluster's workers (store/executor.py; `out`'s folder must be one they all see)."""
    out = Path(out)
    refuse_non_store(out)  # before the bars are read
    if check_executor(executor) != LOCAL:
        pool = None
    sources = expand_sources(cfg.paths)  # listed once (a folder of daily files: ~0.1 s a walk)
    with contextlib.ExitStack() as stack:
        if executor != LOCAL:
            pool = stack.enter_context(dask_crew(executor))
            workers = max(workers, pool.processes + 1)
        if pool is None:  # started before the panel is planned, so that the workers import meanwhile
            pool = stack.enter_context(prepare_crew(workers if workers > 1 and may_piece(cfg, min_rows, sources)
                                                    else 1))
        pieces = plan_pieces(cfg, piece_rows, workers, min_rows, sources) if workers > 0 else []
        if len(pieces) <= 1:
            pool.terminate()
        manifest = _in_pieces(cfg, out, pieces, pool, workers, sources) if len(pieces) > 1 else None
    if manifest is not None:
        return manifest
    if len(pieces) > 1:
        log.info("the symbols do not group into consecutive series: preparing the panel in memory")
    return write_store(prepare_data(cfg), cfg, out)


def _in_pieces(cfg: DataConfig, out: Path, pieces: list[Piece], early: Crew | ExecutorCrew, workers: int, sources: list[Source]
               ) -> dict[str, Any] | None:
    """prepare_pieces in the crew started early, or in one of `workers` processes started now."""
    from foxhunt.data.store.pieced import prepare_pieces

    if early.processes >= workers - 1 or not isinstance(early, Crew):
        return prepare_pieces(cfg, out, pieces, early, sources)
    with prepare_crew(workers) as pool:
        return prepare_pieces(cfg, out, pieces, pool, sources)
