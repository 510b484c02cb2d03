"""Which origins `foxhunt evaluate` scores by default: the ones after the model's validation period.

The model was fitted on its training split, chosen (early stopping) and calibrated (conformal shifts) on its
validation split, so scores on either flatter it. Its split dates are in RUN_DIR/data_summary.json (`train_end`,
`val_end`; without --val-end validation ran to the last training bar, `date_range.end`). Without --start, evaluate
scores the origins whose first forecast bar lies after that period when the bars reach past it, and all of them with
a warning when they do not. An explicit --start earlier than the end of validation is honoured with a warning.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.dataset.windows import id_chunks

log = logging.getLogger("foxhunt.evaluate")


@dataclass(frozen=True)
class ModelSplit:
    """The model's split dates as ISO text and ns: validation is [train_end, held_out)."""

    train_end: str | None
    held_out: str  # the first instant after validation: --val-end, or just after the last training-data bar
    held_out_ns: int


def model_split(model_dir: Path) -> ModelSplit | None:
    """The split saved with the run, or None (a run directory without a readable data_summary.json)."""
    try:
        s = json.loads((Path(model_dir) / "data_summary.json").read_text(encoding="utf-8"))
        if s.get("val_end"):
            return ModelSplit(s.get("train_end"), s["val_end"], _ns(s["val_end"]))
        last = s["date_range"]["end"]
        return ModelSplit(s.get("train_end"), f"after {last}", _ns(last) + 1)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def scoring_start(data: PreparedData, model_dir: Path, start_ns: int | None, end_ns: int | None,
                  start_text: str | None) -> tuple[int | None, str]:
    """(first forecast bar to score in ns or None for all, a sentence saying which period is scored and why)."""
    split = model_split(model_dir)
    if split is None:
        return start_ns, "the requested origins (the run has no data_summary.json to tell its split)"
    seen = f"the model's training and validation period (up to {split.held_out}; validation from {split.train_end})"
    if start_ns is not None:
        if start_ns < split.held_out_ns:
            log.warning("--start %s reaches into %s: those origins were used to fit, select or calibrate the "
                        "model, so their scores flatter it", start_text, seen)
            return start_ns, f"from --start {start_text}: NOT held out, validation ends {split.held_out}"
        return start_ns, f"from --start {start_text}: held out, validation ends {split.held_out}"
    if _scoreable_after(data, split.held_out_ns, end_ns):
        log.info("scoring origins after %s; --start overrides", seen)
        return split.held_out_ns, f"held out: after the validation period, which ends {split.held_out}"
    log.warning("these bars have no scoreable origin after %s: scoring all of them, which may include data the model "
                "was fitted, selected or calibrated on (scores flattered); pass newer bars or --start", seen)
    return None, f"all origins: NOT held out, none after the validation period, which ends {split.held_out}"


def _scoreable_after(data: PreparedData, held_out_ns: int, end_ns: int | None) -> bool:
    """Whether some window's first forecast bar is at or after `held_out_ns` (and before `end_ns`) with an actual;
    read a chunk of windows at a time (`id_chunks`)."""
    w = data.windows
    for part in id_chunks(data.splits["test"]):
        first = w.target_ns(part, extrapolated=True)[:, 0]  # (C,)
        keep = (first >= held_out_ns) & torch.isfinite(w.actual(part)).any(dim=1)
        if end_ns is not None:
            keep &= first < end_ns
        if bool(keep.any()):
            return True
    return False


def _ns(iso: str) -> int:
    return int(np.datetime64(iso.replace("+00:00", "").rstrip("Z"), "ns").astype(np.int64))
