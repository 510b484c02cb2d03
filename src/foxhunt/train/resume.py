"""`checkpoint.pt`: the last state for resuming a run (weights, optimizer, step, epoch, the position inside the
epoch, every RNG state, early-stopping state); only tensors and plain values, so it loads with `weights_only=True`.
The model a run leaves for forecasting (model.json, model.safetensors, calibration.json) is model/saved.py's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

import foxhunt
from foxhunt.atomic import write_with
from foxhunt.errors import InputError

# Format of checkpoint.pt: 1 per epoch only; 2 adds the position inside an epoch, the format and version keys.
CHECKPOINT_FORMAT = 2


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
