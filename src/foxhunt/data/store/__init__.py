"""The out-of-core feature store: `foxhunt prepare` writes PreparedData once as memory-mappable `.npy` files and a
JSON manifest; `foxhunt train --features STORE` maps them instead of reading the bars. docs/store-format.md."""

from foxhunt.data.store.build import prepare_store
from foxhunt.data.store.read import open_features, open_store, read_manifest, store_data_config
from foxhunt.data.store.write import write_store

__all__ = ["open_features", "open_store", "prepare_store", "read_manifest", "store_data_config", "write_store"]
