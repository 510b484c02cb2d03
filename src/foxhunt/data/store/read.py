"""Open a feature store: every array memory-mapped, the rest from the manifest, as the PreparedData it was made from.

Arrays are mapped copy-on-write (`np.load(mmap_mode="c")`): torch gets writable arrays, so no tensor is copied to
silence its warning about read-only memory, and nothing is ever written back to the store. A batch reads its rows
with `pread` (gather.py), and every other read lets go of the pages it mapped in, so the process's RSS holds about
one batch of the store, whose pages stay in the OS page cache (which the kernel can drop under memory pressure).
"""

from __future__ import annotations

import json
import mmap
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.batch import Batch
from foxhunt.data.dataset.saved_format import check_format
from foxhunt.data.dataset.types import FittedTransform, PreparedData
from foxhunt.data.dataset.windows import WindowedData
from foxhunt.data.features.bar_features import own_move_columns
from foxhunt.data.features.schema import FeatureSchema
from foxhunt.data.store.fingerprint import refuse_other_options, shaping_options, warn_if_inputs_changed
from foxhunt.data.store.gather import RowReader, pread_batch
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

if TYPE_CHECKING:  # imported where tensors are made: prepare's worker processes never need it
    import torch

T = TypeVar("T")


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
    windows = MappedWindows(**tensors, **{k: fields[k] for k in WINDOW_FIELDS})
    splits = {name: _mapped(store, arrays[f"split_{name}"]) for name in SPLITS}
    cfg = manifest_config(store, manifest)
    own = {name: _mapped(store, _entry(store, arrays, own_array(name))) for name in own_move_columns(cfg.target)}
    windows.maps = [*maps.values(), *splits.values(), *own.values()]  # their pages are let go with the rest
    windows.readers = {name: RowReader(store / arrays[name]["file"], array) for name, array in maps.items()}
    weakref.finalize(windows, _close, list(windows.readers.values()))
    return PreparedData(
        schema=FeatureSchema.from_dict(manifest["schema"]),
        windows=windows,
        splits={name: torch.from_numpy(array) for name, array in splits.items()},
        transform=FittedTransform.from_dict(manifest["transform"], cfg),
        summary=manifest["summary"],
        rolls=list(manifest.get("rolls", [])),
        own_moves=own,
    )


class MappedWindows(WindowedData):
    """WindowedData over a store's mapped files that maps none of the store's pages for long.

    A batch is read with `pread` (gather.py): indexing the mapping would map the page cache's whole folio around
    each row (up to 2 MB), tens of MiB a batch for about 1 MiB of rows. Every other read by window ids goes through
    the mapping and unmaps what it mapped once done (madvise MADV_DONTNEED), as does a batch for the reads of others
    before it: otherwise, each read fault mapping a run of neighbouring pages, the mapping would grow over an epoch
    to the whole store and count in the process's RSS. The pages stay in the OS page cache, which keeps what memory
    allows, so the next read of them is a minor fault. Safe because nothing writes to the mapped tensors (a write
    would be a private copy, dropped here).
    """

    maps: list[np.ndarray] | None = None  # the mapped arrays behind the tensors and the splits (np.memmap)
    readers: dict[str, RowReader] | None = None  # field name -> pread of its file, for batches

    # Every read by window ids copies what it reads (index_select, advanced indexing), so each lets go of the pages
    # it mapped in once done: a loop over chunks of windows (training quantiles, calibration) keeps one chunk's.
    def batch(self, ids: torch.Tensor) -> Batch:
        if self.readers is None:
            return self._released(super().batch(ids))
        return self._released(pread_batch(self, self.readers, ids))  # its rows read without mapping them

    def series_code(self, ids: torch.Tensor) -> torch.Tensor:
        return self._released(super().series_code(ids))

    def series_index(self, ids: torch.Tensor) -> torch.Tensor:
        return self._released(super().series_index(ids))

    def actual(self, ids: torch.Tensor) -> torch.Tensor:
        return self._released(super().actual(ids))

    def origin_ns(self, ids: torch.Tensor) -> torch.Tensor:
        return self._released(super().origin_ns(ids))

    def origin_target(self, ids: torch.Tensor) -> torch.Tensor:
        return self._released(super().origin_target(ids))

    def target_ns(self, ids: torch.Tensor, extrapolated: bool = False) -> torch.Tensor:
        return self._released(super().target_ns(ids, extrapolated))

    def decoder_ns(self, ids: torch.Tensor) -> torch.Tensor:
        return self._released(super().decoder_ns(ids))

    def at_targets(self, ids: torch.Tensor, column: int) -> torch.Tensor:
        return self._released(super().at_targets(ids, column))

    def check_codes(self, schema: FeatureSchema, whose: str = "the data") -> None:
        self._released(super().check_codes(schema, whose))  # reads every row's codes

    def _released(self, out: T) -> T:
        self.release()
        return out

    def release(self) -> None:
        """Unmap every page of the store this process has mapped in (they stay in the page cache)."""
        for array in self.maps or ():
            backing = getattr(array, "_mmap", None)
            if backing is not None and len(backing):
                backing.madvise(mmap.MADV_DONTNEED)


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


def _close(readers: list[RowReader]) -> None:
    for reader in readers:
        reader.close()
