"""Stage 6, preparing a panel: one pipeline of stages over pieces of whole series, run on a concurrent.futures
Executor, that fits the transform once and writes the rows either into arrays in memory (`prepare_data`,
`prepare_from_bars`: one piece, in this process) or into a feature store (`prepare_store`: a panel larger than
memory in pieces, on worker processes or a Dask cluster).

Names load on first use, so that `foxhunt prepare` can start its worker processes (executor.py) before this process
imports polars and the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from foxhunt.lazy import lazy_names

if TYPE_CHECKING:
    from foxhunt.data.prepare.entry import prepare_data, prepare_from_bars, prepare_store

__all__ = ["prepare_data", "prepare_from_bars", "prepare_store"]

_LAZY = {name: "foxhunt.data.prepare.entry" for name in __all__}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), __all__)
