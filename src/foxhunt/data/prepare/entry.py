"""`foxhunt prepare`: prepare the bars named by a DataConfig once and write them as a feature store."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.prepare import prepare_data
from foxhunt.data.io.discover import expand_sources
from foxhunt.data.prepare.executor import LOCAL, MIN_ROWS, Workers, check_executor, may_piece, open_workers
from foxhunt.data.prepare.plan import PIECE_ROWS, plan_pieces
from foxhunt.data.store.write import refuse_non_store, write_store


def prepare_store(
    cfg: DataConfig, out: Path, piece_rows: int = PIECE_ROWS, workers: int = 2, min_rows: int = MIN_ROWS,
    executor: str = LOCAL, pool: Workers | None = None,
) -> dict[str, Any]:
    """Featurize, scale, window and split the bars of `cfg.paths` (as `foxhunt train` would) into the store `out`;
    returns its manifest. A panel of `min_rows` bars or more in several series groups of about `piece_rows` bars is
    prepared group by group on `workers` processes (store/pieced.py; 1: this one), with the same result; otherwise
    (or with `workers` 0) in memory, then written. `executor`: `local`, or `dask://HOST:PORT` to run the pieces on
    that Dask cluster's workers (store/executor.py; `out`'s folder must be one they all see). `pool`: the workers (open_workers) when the caller opened them already, to
    have them import meanwhile."""
    out = Path(out)
    refuse_non_store(out)  # before the bars are read
    check_executor(executor)
    sources = expand_sources(cfg.paths)  # listed once: walking a folder of daily files is not free
    with contextlib.ExitStack() as stack:
        pieced = workers > 0 or executor != LOCAL  # --workers 0: in memory, whoever opened workers
        if pieced and pool is None:  # no process is started for a panel kept whole
            pool = stack.enter_context(open_workers(executor, workers if may_piece(cfg, min_rows, sources) else 1))
        pieces = plan_pieces(cfg, piece_rows, pool.size, min_rows, sources) if pieced else []
        if len(pieces) > 1:
            from foxhunt.data.prepare.driver import prepare_pieces

            manifest = prepare_pieces(cfg, out, pieces, pool.executor, pool.size, sources)
            if manifest is not None:
                return manifest  # else prepare_pieces said why the panel is prepared in memory
        if pool is not None:
            pool.executor.shutdown(wait=False, cancel_futures=True)  # its processes end while the panel is prepared
    return write_store(prepare_data(cfg), cfg, out)
