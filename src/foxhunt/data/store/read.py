"""Open a feature store: every array memory-mapped, the rest from the manifest, as the PreparedData it was made from.

Arrays are mapped copy-on-write (`np.load(mmap_mode="c")`): torch gets writable arrays, so no tensor is copied to
silence its warning about read-only memory, and nothing is ever written back to the store. A batch indexes the
mapping: the pages it reads are the OS page cache's, counted in the process's RSS as file pages (RssFile) while
mapped, never as its own memory (RssAnon), and the kernel reclaims them when memory is short, so a store larger than
RAM trains in flat anonymous memory (benchmarks/RESULTS.md, the memory tricks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.saved_format import check_format
from foxhunt.data.dataset.types import FittedTransform, PreparedData
from foxhunt.data.dataset.windows import WindowedData
from foxhunt.data.features.bar_features import own_move_columns
from foxhunt.data.features.schema import FeatureSchema
from foxhunt.data.store.fingerprint import refuse_other_options, shaping_options, warn_if_inputs_changed
from foxhunt.data.store.layout import (
    FORMAT,
    MANIFEST,
    OPTIONAL,
    SPLITS,
    WINDOW_ARRAYS,
    WINDOW_FIELDS,
    own_array,
)
from foxhunt.errors import InputError


def read_manifest(store: Path) -> dict[str, Any]:
    """The store's manifest.json; InputError (one line) when `store` is not a foxhunt feature store of this format
    (saved_format.FORMAT_VERSION): another is to be prepared again."""
    path = Path(store) / MANIFEST
    if not path.is_file():
        raise InputError(f"--features {store}: no {MANIFEST} there; give a directory written by `foxhunt prepare`")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not readable JSON ({e}); run `foxhunt prepare` again") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(f"{path}: not a {FORMAT} manifest; give a directory written by `foxhunt prepare`")
    check_format(path, manifest, "prepare the store again with this foxhunt (`foxhunt prepare`)")
    return manifest


def store_data_config(store: Path, given: Mapping[str, Any]) -> DataConfig:
    """The DataConfig a store was prepared with (its parquet paths included, `features` pointing at it), after
    refusing any option in `given` (field name -> value typed now) that differs from the store's."""
    manifest = read_manifest(store)
    refuse_other_options(store, manifest["data_options"], given)
    return manifest_config(store, manifest)


def manifest_config(store: Path, manifest: Mapping[str, Any]) -> DataConfig:
    """The DataConfig the store was prepared with, as its manifest records it (`features` pointing at it)."""
    return DataConfig.from_dict({**manifest["data_options"], "paths": manifest["paths"], "features": str(store)})


def manifest_digest(store: Path) -> str | None:
    """The digest of the store's arrays its manifest holds (write.store_digest); None for a store written before
    foxhunt kept it."""
    digest = read_manifest(store).get("digest")
    return digest if isinstance(digest, str) else None


def open_features(cfg: DataConfig) -> PreparedData:
    """The prepared data of the feature store `cfg.features`, mapped; refused (InputError) when a data option of
    `cfg` differs from the store's, with a warning when its input files changed since."""
    store = Path(cfg.features or "")
    manifest = read_manifest(store)
    refuse_other_options(store, manifest["data_options"], shaping_options(cfg))
    warn_if_inputs_changed(store, manifest.get("inputs", []))
    return open_store(store, manifest)


def open_store(store: Path, manifest: dict[str, Any] | None = None) -> PreparedData:
    """The PreparedData saved in `store`, its tensors backed by the mapped files."""
    import torch

    store = Path(store)
    manifest = manifest if manifest is not None else read_manifest(store)
    arrays = manifest["arrays"]
    maps = {name: _mapped(store, arrays[name]) for name in WINDOW_ARRAYS if name in arrays}
    tensors = {name: torch.from_numpy(maps[name]) if name in maps else None
               for name in WINDOW_ARRAYS if name in maps or name in OPTIONAL}
    missing = sorted(set(WINDOW_ARRAYS) - OPTIONAL - set(tensors))
    if missing:
        raise InputError(f"{store / MANIFEST}: no entry for the array {missing[0]!r}; run `foxhunt prepare` again")
    fields = dict(manifest["windows"])
    fields["series_names"] = tuple(fields["series_names"])
    windows = WindowedData(**tensors, **{k: fields[k] for k in WINDOW_FIELDS})
    splits = {name: _mapped(store, arrays[f"split_{name}"]) for name in SPLITS}
    cfg = manifest_config(store, manifest)
    own = {name: _mapped(store, _entry(store, arrays, own_array(name))) for name in own_move_columns(cfg.target)}
    return PreparedData(
        schema=FeatureSchema.from_dict(manifest["schema"]),
        windows=windows,
        splits={name: torch.from_numpy(array) for name, array in splits.items()},
        transform=FittedTransform.from_dict(manifest["transform"], cfg),
        summary=manifest["summary"],
        rolls=list(manifest.get("rolls", [])),
        own_moves=own,
    )


def _entry(store: Path, arrays: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """The manifest's entry of the array `name`; InputError where it has none."""
    if name not in arrays:
        raise InputError(f"{store / MANIFEST}: no entry for the array {name!r}; run `foxhunt prepare` again")
    return arrays[name]


def _mapped(store: Path, entry: Mapping[str, Any]) -> np.ndarray:
    """One array of the store, mapped copy-on-write and checked against the manifest's dtype and shape."""
    path = store / entry["file"]
    try:
        array = np.load(path, mmap_mode="c", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot be mapped ({e}); the store is damaged: run `foxhunt prepare` again") from None
    if str(array.dtype) != entry["dtype"] or list(array.shape) != list(entry["shape"]):
        raise InputError(f"{path}: holds {array.dtype} {list(array.shape)} where the manifest says {entry['dtype']} "
                         f"{entry['shape']}; the store is damaged: run `foxhunt prepare` again")
    return array

