"""Stage 5, the out-of-core feature store: the format `foxhunt prepare` writes (memory-mappable `.npy` files and a
JSON manifest, docs/reference/store-format.md), read back mapped by `foxhunt train --features STORE` instead of the
bars. The pipeline that prepares the data into it is data/prepare.

Names load on first use, so that `foxhunt prepare` can start its worker processes (prepare/executor.py) before this
process imports polars and the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from foxhunt.lazy import lazy_names

if TYPE_CHECKING:
    from foxhunt.data.store.read import (
        manifest_digest,
        open_features,
        open_store,
        read_manifest,
        store_data_config,
    )
    from foxhunt.data.store.write import write_store

__all__ = ["manifest_digest", "open_features", "open_store", "read_manifest", "store_data_config", "write_store"]

_LAZY = {"manifest_digest": "foxhunt.data.store.read", "open_features": "foxhunt.data.store.read", "open_store": "foxhunt.data.store.read",
         "read_manifest": "foxhunt.data.store.read", "store_data_config": "foxhunt.data.store.read",
         "write_store": "foxhunt.data.store.write"}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), __all__)
