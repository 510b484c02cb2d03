"""`checkpoint.pt`: the last state for resuming a run (weights, optimizer, step, epoch, the position inside the
epoch, every RNG state, early-stopping state); only tensors and plain values, so it loads with `weights_only=True`.
A run resumes only on the data it started on (`refuse_changed_data`).
The model a run leaves for forecasting (model.json, model.safetensors, calibration.json) is model/saved.py's.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

import foxhunt
from foxhunt.atomic import write_with
from foxhunt.data.dataset.types import PreparedData, digest_order
from foxhunt.data.util.digest import tensor_digest
from foxhunt.errors import InputError

# Format of checkpoint.pt: 1 per epoch only; 2 adds the position inside an epoch, the format and version keys.
CHECKPOINT_FORMAT = 2


class DataChanged(InputError):
    """--resume on other data than the run started on: `source` (the input data, a store) and `detail`, what
    changed, apart, so that a backtest words its own way out."""

    def __init__(self, message: str, source: str = "", detail: str = ""):
        super().__init__(message)
        self.source, self.detail = source, detail


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Written to a temporary file and renamed: the previous checkpoint stays whole until the new one is."""
    write_with(path, lambda tmp: torch.save(state, tmp))


def load_checkpoint(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise InputError(f"{path}: no checkpoint to resume from; start a new run without --resume")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign file
        raise InputError(f"{path}: unreadable checkpoint, truncated or not written by foxhunt "
                         f"({type(e).__name__}); restore it or start a new run in another --run-dir") from e
    if not isinstance(state, dict) or "fit_state" not in state or "model" not in state:
        raise InputError(f"{path}: not a foxhunt checkpoint; restore it or start a new run in another --run-dir")
    fmt = state.get("format", 1)
    if not isinstance(fmt, int) or fmt > CHECKPOINT_FORMAT:
        raise InputError(f"{path}: checkpoint format {fmt} written by foxhunt {state.get('foxhunt_version', '?')}, "
                         f"newer than this foxhunt {foxhunt.__version__} reads (format {CHECKPOINT_FORMAT}); "
                         "upgrade foxhunt to resume it")
    return state


def data_fingerprint(data: PreparedData, digest: str | None) -> dict[str, Any]:
    """config.json's "data_fingerprint": the summary's files (path, size, rows), series, dates and window counts, for
    people, and `digest` (`prepared_digest`; a store's from its manifest; left out where None), which
    `refuse_changed_data` compares on --resume."""
    s = data.summary
    keys = ("files", "rows_read", "series", "date_range", "bar_interval", "windows")
    return {**{k: s[k] for k in keys if k in s}, **({"digest": digest} if digest is not None else {})}


def prepared_digest(data: PreparedData) -> str:
    """A SHA-256 of the prepared data itself: every array the windows are gathered from and the three splits' window
    ids (types.digest_order), as a store's manifest holds it for the same data (store/write.store_digest). It covers
    what training reads, not the file's bytes or modification time: a file rewritten with the same bars (or a store
    prepared again from them) resumes; one whose bars, dates or options' results differ does not. It reads every
    byte (about 1 s a GB): computed for data prepared in memory, a store's is read from its manifest."""
    tensors = {f.name: getattr(data.windows, f.name) for f in dataclasses.fields(data.windows)}
    tensors.update({f"split_{name}": t for name, t in data.splits.items()})
    arrays = {k: t.detach().cpu().numpy() for k, t in tensors.items() if isinstance(t, torch.Tensor)}
    return tensor_digest((name, arrays[name]) for name in digest_order(arrays))


def refuse_changed_data(config: Path, now: dict[str, Any], source: str) -> None:
    """--resume: DataChanged (one line) when the prepared data's fingerprint `now` (`data_fingerprint`) differs from
    the one the run started on (config.json's, by its `digest`), naming what changed: the resumed epochs would train
    on other windows, and "best" would compare validation losses of two validation sets. A run from before the
    digest, or data without one now (a store written before its manifest kept it; a torchrun rank but the first,
    which leaves the check to rank 0), resumes unchecked."""
    try:
        saved = json.loads(config.read_text(encoding="utf-8"))["data_fingerprint"]
        before = saved["digest"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if now.get("digest") in (None, before):
        return
    detail = _what_changed(saved, now)
    raise DataChanged(f"{config.parent}: {source} changed since this run started ({detail}); "
                     "resuming would train on other windows and compare validation losses of two validation sets; "
                     f"start a new run with another --run-dir (add --init-from {config.parent} to start it from this "
                     "run's weights)", source, detail)


def _what_changed(before: dict[str, Any], now: dict[str, Any]) -> str:
    """The first differences a person can read: files, rows read, dates, window counts; else the values alone."""
    said = []
    old_files = {f.get("path"): f for f in before.get("files") or []}
    for f in now.get("files") or []:
        old = old_files.pop(f.get("path"), None)
        if old is None:
            said.append(f"{f.get('path')} added")
        elif (old.get("size_bytes"), old.get("rows")) != (f.get("size_bytes"), f.get("rows")):
            said.append(f"{f.get('path')} {_change(old, f)}")
    said += [f"{path} gone" for path in old_files]
    range_before, range_now = before.get("date_range") or {}, now.get("date_range") or {}
    if range_before != range_now:
        said.append(f"dates {range_before.get('start')} to {range_before.get('end')} now {range_now.get('start')} "
                    f"to {range_now.get('end')}")
    w_before, w_now = before.get("windows") or {}, now.get("windows") or {}
    if w_before != w_now:
        said.append("windows train/val/test " + "/".join(f"{w_before.get(k, 0):,}" for k in ("train", "val", "test"))
                    + " now " + "/".join(f"{w_now.get(k, 0):,}" for k in ("train", "val", "test")))
    return "; ".join(said) or "the same files, dates and window counts, other values"


def _change(old: dict[str, Any], new: dict[str, Any]) -> str:
    """`715,866 now 500,000 bytes, 62,756 now 41,000 rows`."""
    def n(v: Any) -> str:
        return "?" if v is None else f"{v:,}"
    return (f"{n(old.get('size_bytes'))} now {n(new.get('size_bytes'))} bytes, "
            f"{n(old.get('rows'))} now {n(new.get('rows'))} rows")
