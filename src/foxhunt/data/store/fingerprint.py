"""What a store was made from: its input files (path, size, modification time) and the data options that shaped it.

Size and modification time identify a file without reading it (hashing gigabytes of parquet would cost as much as
preparing them); a file rewritten in place gets a new modification time. A store whose inputs changed still holds
the features as prepared, so using it is allowed with a warning; a store asked for with other data options is
refused, since its windows, scalers and splits would not be the ones asked for.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from foxhunt.data.config import DataConfig, same_option
from foxhunt.data.store.layout import NOT_SHAPING
from foxhunt.data.util.listing import listing
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")


def input_fingerprint(files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """[{path, size_bytes, mtime_ns}] of the files a preparation read (the summary's "files": path and size)."""
    out = []
    for f in files or []:
        path = str(f["path"])
        try:
            st = os.stat(path)
            out.append({"path": path, "size_bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
        except OSError:  # not a local file (a URL): recorded without a fingerprint
            out.append({"path": path, "size_bytes": f.get("size_bytes"), "mtime_ns": None})
    return out


def changed_inputs(inputs: list[dict[str, Any]]) -> list[str]:
    """The recorded input files that are gone or differ now in size or modification time ("path (why)")."""
    changed = []
    for f in inputs:
        if f.get("mtime_ns") is None:
            continue
        try:
            st = os.stat(f["path"])
        except OSError:
            changed.append(f"{f['path']} (gone)")
            continue
        if (st.st_size, st.st_mtime_ns) != (f["size_bytes"], f["mtime_ns"]):
            changed.append(f"{f['path']} (modified)")
    return changed


def warn_if_inputs_changed(store: Path, inputs: list[dict[str, Any]]) -> None:
    changed = changed_inputs(inputs)
    if changed:
        log.warning("%s: an input file changed since `foxhunt prepare`: %s; training uses the features as "
                    "prepared; run `foxhunt prepare` again to include the change", store, listing(changed, 1))


def shaping_options(cfg: DataConfig) -> dict[str, Any]:
    """The data options that shaped a store: every DataConfig field but where the bars and the store are."""
    return {k: v for k, v in cfg.to_dict().items() if k not in NOT_SHAPING}


def flag(name: str, value: Any) -> str:
    """The command-line spelling of option `name` set to `value` (`--horizon 5`, `--no-seasonality`, `no
    --train-end`)."""
    dashed = name.replace("_", "-")
    if value is None:
        return f"no --{dashed}"
    if isinstance(value, bool):
        return f"--{dashed}" if value else f"--no-{dashed}"
    return f"--{dashed} {value}"


def refuse_other_options(store: Path, saved: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """InputError naming the first option in `given` (field name -> value) whose value differs from the store's."""
    for name in sorted(given):
        if name in NOT_SHAPING or name not in saved or same_option(name, given[name], saved[name]):
            continue  # (a path option: the same files, one as typed, one as a run saves them)
        asked, had = flag(name, given[name]), flag(name, saved[name])
        raise InputError(f"{asked} differs from the feature store {store}, prepared with {had}; drop "
                         f"--{name.replace('_', '-')} to use the store as prepared, or run `foxhunt prepare` "
                         f"with {asked} into a new store")
