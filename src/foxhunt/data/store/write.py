"""Write a PreparedData as a feature store: a directory built beside the target and renamed into place.

A store that exists is complete: the directory is filled under a temporary name, every file is flushed to disk,
and only then renamed to its final name (replacing an older store there; anything else there is refused).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import foxhunt
from foxhunt.atomic import fsync, json_default, umask
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.saved_format import FORMAT_VERSION
from foxhunt.data.dataset.types import FittedTransform, PreparedData, digest_order
from foxhunt.data.features.schema import FeatureSchema
from foxhunt.data.store.fingerprint import input_fingerprint, shaping_options
from foxhunt.data.store.layout import (
    FORMAT,
    MANIFEST,
    OPTIONAL,
    SPLITS,
    WINDOW_ARRAYS,
    WINDOW_FIELDS,
    own_array,
    own_file,
    split_file,
)
from foxhunt.data.store.leftovers import BUILD, OLD, hidden_folder
from foxhunt.data.util.digest import npy_digest
from foxhunt.errors import InputError, WriteError

if TYPE_CHECKING:
    from foxhunt.data.dataset.windows import WindowedData


def write_store(data: PreparedData, cfg: DataConfig, out: Path) -> dict[str, Any]:
    """Write `data` (prepared from `cfg`) to the store directory `out`; returns the manifest."""
    out = Path(out)
    tmp = make_tmp(out)
    with filling(tmp, out):
        arrays = {}
        for name in WINDOW_ARRAYS:
            tensor = getattr(data.windows, name)
            if tensor is None and name in OPTIONAL:
                continue
            arrays[name] = save_array(tmp, f"{name}.npy", tensor.numpy())
        for name in SPLITS:
            arrays[f"split_{name}"] = save_array(tmp, split_file(name), data.splits[name].numpy())
        for name, column in data.own_moves.items():
            arrays[own_array(name)] = save_array(tmp, own_file(name), column)
        manifest = manifest_of(cfg, arrays, window_fields(data.windows), data.schema, data.transform, data.summary,
                               data.rolls)
        finish(tmp, out, manifest)
    return manifest


def make_tmp(out: Path) -> Path:
    """The directory a store for `out` is built in, beside it under a temporary name."""
    refuse_non_store(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return hidden_folder(out, BUILD)
    except OSError as e:
        raise _error(out, e) from None


@contextlib.contextmanager
def filling(tmp: Path, out: Path) -> Iterator[None]:
    """Delete `tmp` when filling it fails; an OSError becomes the one-line WriteError naming `out`."""
    try:
        yield
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _error(out, e) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def finish(tmp: Path, out: Path, manifest: dict[str, Any]) -> None:
    """Add the arrays' `digest` (`store_digest`) to the manifest, write it into `tmp`, flush every file to disk and
    rename `tmp` to `out`."""
    manifest["digest"] = store_digest(tmp, manifest["arrays"])
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, default=json_default) + "\n", encoding="utf-8")
    for f in tmp.iterdir():
        fsync(f)
    os.chmod(tmp, 0o777 & ~umask())  # mkdtemp makes 0700: give the store the permissions mkdir would
    _swap_in(tmp, out)


def store_digest(folder: Path, arrays: dict[str, Any]) -> str:
    """The SHA-256 of the store's arrays in `folder` (the manifest's `arrays`), the same as train/resume.py's
    prepared_digest of the data they hold: computed once here, so that `train --features` reads it from the
    manifest instead of reading every page of the store at the start of each run."""
    return npy_digest((name, folder / arrays[name]["file"]) for name in digest_order(arrays))


def save_array(folder: Path, file: str, array: np.ndarray) -> dict[str, Any]:
    """One store array as .npy (no pickles) and its manifest entry; the in-memory and the pieced writer share it."""
    np.save(folder / file, np.ascontiguousarray(array), allow_pickle=False)
    return {"file": file, "dtype": str(array.dtype), "shape": list(array.shape)}


def window_fields(windows: WindowedData) -> dict[str, Any]:
    """The manifest's "windows": WindowedData's plain fields (WINDOW_FIELDS)."""
    return {k: getattr(windows, k) for k in WINDOW_FIELDS}


def manifest_of(cfg: DataConfig, arrays: dict[str, Any], windows: dict[str, Any], schema: FeatureSchema,
                transform: FittedTransform, summary: dict[str, Any], rolls: list[dict]) -> dict[str, Any]:
    """The manifest of a store prepared from `cfg`: its `arrays` (save_array's entries), the windows' plain fields
    (`window_fields`), schema, transform, data summary and roll table."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "foxhunt_version": foxhunt.__version__,
        "created_utc": dt.datetime.now(dt.UTC).isoformat(),
        "data_options": shaping_options(cfg),
        "paths": list(cfg.paths),
        "inputs": input_fingerprint(summary.get("files") or []),
        "arrays": arrays,
        "windows": {k: list(v) if k == "series_names" else v for k, v in windows.items()},
        "schema": schema.to_dict(),
        "transform": transform.to_dict(),
        "summary": summary,
        "rolls": rolls,
    }


def refuse_non_store(out: Path) -> None:
    if out.exists() and not (out / MANIFEST).is_file():
        raise InputError(f"--out {out} exists and is not a feature store; choose a new path (an older store there "
                         "would be replaced)")


def _swap_in(tmp: Path, out: Path) -> None:
    """Rename `tmp` to `out`; an older store at `out` is moved aside first (leftovers.OLD) and deleted after."""
    old = None
    if out.exists():
        old = hidden_folder(out, OLD)  # named for this process: a kill before the rmtree leaves a leftover it owns
        os.replace(out, old)  # a directory renamed over an empty one replaces it
    os.replace(tmp, out)
    fsync(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _error(out: Path, e: OSError) -> WriteError:
    return WriteError(f"cannot write the feature store {out} ({e.strerror or e}); nothing was written under that "
                      "name: free disk space or choose a writable --out, then run again", e)
