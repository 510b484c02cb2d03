"""The feature store's layout on disk: one `.npy` file per row tensor, window index and split, and manifest.json.

`.npy` (numpy's own format: a short header, then the raw C-ordered array) is read with `np.load(mmap_mode="c")`, so
a tensor is a view of the mapped file: pages come in through the OS page cache as batches touch them and are never
copied into the process's own memory. docs/reference/store-format.md describes every file and manifest key.
"""

from __future__ import annotations

FORMAT = "foxhunt-feature-store"
# Its manifest's "format_version" is saved_format.FORMAT_VERSION: every array below is written (but known_index),
# the transform's every key, the options once in "data_options". A store of another format is refused.
MANIFEST = "manifest.json"

# WindowedData's tensors: name -> (dtype, number of dimensions). `known_index` is optional (absent when the forecast
# grid is one lattice). Each is stored as `<name>.npy`.
WINDOW_ARRAYS: dict[str, tuple[str, int]] = {
    "cont": ("float32", 2),  # (N, F)
    "static_cat": ("int64", 2),  # (N, Sc)
    "time_cat": ("int64", 2),  # (N, Kc + Oc)
    "target_raw": ("float32", 1),  # (N,)
    "center": ("float32", 1),  # (N,)
    "scale": ("float32", 1),  # (N,)
    "ts_ns": ("int64", 1),  # (N,)
    "real": ("bool", 1),  # (N,)
    "series_idx": ("int64", 1),  # (N,)
    "starts": ("int64", 1),  # (W,)
    "known_cont": ("float32", 2),  # (U, Kr)
    "known_cat": ("int64", 2),  # (U, Kc)
    "known_ts": ("int64", 1),  # (U,)
    "known_base": ("int64", 1),  # (N,)
    "known_index": ("int32", 2),  # (N, D), optional
    "static_cont": ("float32", 2),  # (N, Sr): --static real inputs (N x 0 without them)
    "anchor": ("float32", 2),  # (N, D * Q): the anchor's quantiles at each row as an origin (--anchor), optional
}
OPTIONAL = frozenset({"known_index", "anchor"})
# PreparedData.own_moves: each contract's own moves the baselines read, (N,) float32 each, stored as `own_<name>.npy`
# (features.own_move_columns: log_range, and log_return for a log_range target).
OWN_DTYPE = "float32"
SPLITS = ("train", "val", "test")  # window ids, stored as `split_<name>.npy` (int64)

# WindowedData's plain fields, kept in the manifest under "windows".
WINDOW_FIELDS = ("encoder_length", "horizon", "n_known_cont", "n_known_cat", "series_names")

# DataConfig fields that do not shape the prepared data: where the bars came from and where the store is.
NOT_SHAPING = frozenset({"paths", "features"})


def split_file(name: str) -> str:
    return f"split_{name}.npy"


def own_array(column: str) -> str:
    """The store's array name of an own move column (PreparedData.own_moves): `own_log_range`."""
    return f"own_{column}"


def own_file(column: str) -> str:
    return f"{own_array(column)}.npy"
