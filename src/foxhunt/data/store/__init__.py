"""The out-of-core feature store: `foxhunt prepare` writes PreparedData once as memory-mappable `.npy` files and a
JSON manifest; `foxhunt train --features STORE` maps them instead of reading the bars. docs/reference/store-format.md.

Names load on first use, so that `foxhunt prepare` can start its worker processes (store/executor.py) before this
process imports polars and the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from foxhunt.lazy import lazy_names

if TYPE_CHECKING:
    from foxhunt.data.store.build import prepare_store
    from foxhunt.data.store.read import open_features, open_store, read_manifest, store_data_config
    from foxhunt.data.store.write import write_store

__all__ = ["open_features", "open_store", "prepare_store", "read_manifest", "store_data_config", "write_store"]

_LAZY = {"prepare_store": "foxhunt.data.store.build", "open_features": "foxhunt.data.store.read",
         "open_store": "foxhunt.data.store.read", "read_manifest": "foxhunt.data.store.read",
         "store_data_config": "foxhunt.data.store.read", "write_store": "foxhunt.data.store.write"}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), __all__)
