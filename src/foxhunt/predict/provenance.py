"""What a forecasts file says about itself, in its parquet key-value metadata under "foxhunt": what its quantile
columns hold (the target, its units, the quantiles, the horizon), which model made them (its directory and the
SHA-256 of its weights: model/saved.weights_digest, the digest calibration.json and the ONNX sidecar carry), from
bars of which spacing, and how they are calibrated. A reader needs no other file to know what p10 means, and
`evaluate --forecasts` refuses a file that another model made, or that was made from bars of another spacing.

A backtest's file joins its folds' (backtest/summary.py): the same keys where the folds agree, each fold's model and
calibration under "folds", and per-row columns `fold` and `calibration`."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

import foxhunt
from foxhunt.data.bars.load import bar_interval
from foxhunt.data.dataset.types import PreparedData
from foxhunt.errors import InputError
from foxhunt.model.adaptive import Runner
from foxhunt.model.calibration import Calibration
from foxhunt.model.config import quantile_label
from foxhunt.model.saved import LoadedModel

log = logging.getLogger("foxhunt.evaluate")

KEY = b"foxhunt"
# What one unit of the quantile and actual columns is, per --target (data/features/bar_features.py computes them).
TARGET_UNITS = {
    "log_return": "natural log of a bar's close over the previous bar's close of the same contract (a log return "
                  "per bar, not in percent; a roll bar's return excludes the roll's price ratio)",
    "log_range": "natural log of a bar's high over its low (per bar)",
    "price_change": "a bar's close minus the previous bar's close of the same contract, in the bars' price units "
                    "(as read, divided by --price-scale; a roll bar's change excludes the roll's price gap)",
}


def calibration_info(cal: Calibration | Runner | None) -> dict[str, Any]:
    """Whether the quantile columns are calibrated, and with what ("calibration": method, mode, fitted_on)."""
    info: dict[str, Any] = {"calibrated": cal is not None}
    if isinstance(cal, Runner):
        info["calibration"] = {"method": "adaptive", "mode": cal.mode, "fitted_on": cal.cal.fitted_on}
    elif cal is not None:
        info["calibration"] = {"method": "fixed", "mode": cal.mode, "fitted_on": cal.fitted_on}
    return info


def forecast_metadata(lm: LoadedModel, data: PreparedData, cal: Calibration | Runner | None) -> dict[bytes, bytes]:
    """The parquet key-value metadata of forecasts `lm` made from `data`, calibrated with `cal`."""
    qs = lm.model_cfg.quantiles
    info = {
        **calibration_info(cal),
        "target": lm.schema.target,
        "units": TARGET_UNITS.get(lm.schema.target, lm.schema.target),
        "quantiles": {quantile_label(q): q for q in qs},
        "horizon": lm.model_cfg.horizon,
        "bar_interval": data.summary.get("bar_interval"),  # of the bars forecast from
        "model_bar_interval": bar_interval(lm.transform.bar_spacing_ns),  # of the bars the model was trained on
        "model_dir": None if lm.root is None else str(Path(lm.root).resolve()),
        "weights_sha256": lm.weights_sha256,
        "times": "origin: the last bar the forecast saw; target_time: the bar forecast; both UTC",
        "foxhunt_version": foxhunt.__version__,
    }
    return {KEY: json.dumps(info).encode()}


def read_metadata(path: Path) -> dict[str, Any] | None:
    """A forecasts file's "foxhunt" metadata (None: written without it, or unreadable)."""
    try:  # a file that is not parquet says nothing here; its reader names what is wrong with it
        meta = pq.read_schema(path).metadata or {}
        info = json.loads(meta[KEY]) if KEY in meta else None
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def is_calibrated(info: dict[str, Any] | None) -> bool | None:
    """What a forecasts file's metadata (`read_metadata`) says about its calibration (None: it does not say, or its
    rows differ: a backtest's)."""
    value = (info or {}).get("calibrated")
    return value if isinstance(value, bool) else None


def check_made_by(path: Path, info: dict[str, Any] | None, lm: LoadedModel, data: PreparedData) -> None:
    """Refuse (InputError) forecasts another model made, or made from bars of another spacing than `data`'s, by the
    file `path`'s metadata `info` (`read_metadata`); a file that does not say (written before forecast files did)
    gets a warning and is scored as given."""
    info = info or {}
    made_by = {f.get("weights_sha256") for f in info.get("folds", [])} or {info.get("weights_sha256")}
    made_by.discard(None)
    if not made_by or "bar_interval" not in info:
        log.warning("%s does not say which model made it or from which bars (written before foxhunt's forecast "
                    "files did, or by another program): scored as given", path)
        return
    own = lm.weights_sha256
    if own is not None and made_by != {own}:
        who = info.get("model_dir") or ", ".join(sorted({str(f.get("model_dir")) for f in info.get("folds", [])}))
        raise InputError(f"{path}: made by another model ({who}, weights sha256 {sorted(made_by)[0][:12]}...) than "
                         f"--model {lm.root} ({own[:12]}...); evaluate it with the model that made it, or forecast "
                         "again with this one")
    theirs, ours = info["bar_interval"], data.summary.get("bar_interval")
    if theirs and ours and theirs != ours:
        raise InputError(f"{path}: forecast from {theirs} bars, but these bars are {ours}; evaluate it on the bars it "
                         "was made from")


def folds_metadata(folds: list[tuple[int, dict[str, Any] | None]]) -> dict[bytes, bytes]:
    """A backtest's file's metadata from its folds' (fold index, their metadata): the keys every fold gives the same
    value, "folds" with each fold's model and calibration, and "calibrated" only where every fold agrees."""
    infos = [info or {} for _, info in folds]
    shared = {k: v for k, v in infos[0].items() if all(i.get(k) == v for i in infos[1:])}
    own = ("model_dir", "weights_sha256", "calibrated", "calibration")
    info = {k: v for k, v in shared.items() if k not in own}
    info["calibrated"] = shared.get("calibrated")  # None: the folds differ; the `calibration` column says per row
    info["folds"] = [{"fold": n, **{k: i.get(k) for k in own}} for (n, _), i in zip(folds, infos, strict=True)]
    info["columns"] = {"fold": "the backtest fold whose model made the row",
                       "calibration": "how the row is calibrated: adaptive, fixed or none"}
    return {KEY: json.dumps(info).encode()}


def row_calibration(info: dict[str, Any] | None) -> str | None:
    """A fold file's calibration method, for its rows: adaptive, fixed, none (None: its file does not say)."""
    if not info or not isinstance(info.get("calibrated"), bool):
        return None
    return info.get("calibration", {}).get("method", "fixed") if info["calibrated"] else "none"
