"""`foxhunt prepare`: prepare the bars named by a DataConfig once and write them as a feature store."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data
from foxhunt.data.store.pieces import MIN_ROWS, PIECE_ROWS, plan_pieces
from foxhunt.data.store.write import refuse_non_store, write_store

log = logging.getLogger("foxhunt.data")


def prepare_store(
    cfg: DataConfig, out: Path, piece_rows: int = PIECE_ROWS, workers: int = 2, min_rows: int = MIN_ROWS
) -> dict[str, Any]:
    """Featurize, scale, window and split the bars of `cfg.paths` (as `foxhunt train` would) into the store `out`;
    returns its manifest. A panel of `min_rows` bars or more in several series groups of about `piece_rows` bars is
    prepared group by group in `workers` processes (store/pieced.py; 1: in this one), with the same result;
    otherwise (or with `workers` 0) in memory, then written."""
    out = Path(out)
    refuse_non_store(out)  # before the bars are read
    pieces = plan_pieces(cfg, piece_rows, workers, min_rows) if workers > 0 else []
    if len(pieces) > 1:
        from foxhunt.data.store.pieced import prepare_pieces

        manifest = prepare_pieces(cfg, out, pieces, workers)
        if manifest is not None:
            return manifest
        log.info("the symbols do not group into consecutive series: preparing the panel in memory")
    return write_store(prepare_data(cfg), cfg, out)
