"""`foxhunt prepare`: prepare the bars named by a DataConfig once and write them as a feature store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data
from foxhunt.data.store.write import refuse_non_store, write_store


def prepare_store(cfg: DataConfig, out: Path) -> dict[str, Any]:
    """Featurize, scale, window and split the bars of `cfg.paths` (as `foxhunt train` would) into the store `out`;
    returns its manifest. The whole panel is prepared in memory, then written."""
    refuse_non_store(Path(out))  # before the bars are read
    return write_store(prepare_data(cfg), cfg, Path(out))
