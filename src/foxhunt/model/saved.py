"""A saved model, as plain data: what training writes and what every reader of a model (predict, evaluate,
backtest, export, the Python API) loads, beside the model it rebuilds, so that loading one imports no training code.

- `model.safetensors` + `model.json`: the best weights and everything needed to forecast without the training data
  (architecture, feature schema, scalers, quantiles, data options), and the run's state ("training": finished, or
  stopped at epoch k of n; `save_training_state`): a run stopped part-way leaves its best epoch so far, which a
  reader loading it to forecast is told about in one line.
- `calibration.json`: conformal shifts per quantile and horizon, fitted on the validation split after training
  (model/calibration.py, train/calibrate.py), and the adaptive state as of the end of validation
  (model/adaptive.py, key "adaptive"); loaded with the model when present and matching its weights.

The state for resuming a run (`checkpoint.pt`) is training's own: train/resume.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load, save_file

import foxhunt
from foxhunt.atomic import write_json, write_with
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.saved_format import FORMAT_VERSION, check_format
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.features.schema import FeatureSchema
from foxhunt.errors import InputError
from foxhunt.model.adaptive import AdaptiveCalibration
from foxhunt.model.calibration import Calibration
from foxhunt.model.config import ModelConfig, resolved_method
from foxhunt.model.tft import TemporalFusionTransformer

log = logging.getLogger("foxhunt.model")


def state_to_cpu(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached CPU copy of the weights (kept as the best state without holding device memory)."""
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in model.state_dict().items()}


def save_weights(path: Path, state: dict[str, torch.Tensor]) -> None:
    """One metadata key: safetensors writes its metadata in a hash map's order, which changes from call to call, so
    two keys made the same weights two files at random (and two SHA-256s in calibration.json). The version that
    wrote them is model.json's `foxhunt_version`."""
    write_with(path, lambda tmp: save_file(state, str(tmp), metadata={"format": "pt"}))


def save_model_json(
    path: Path, model_cfg: ModelConfig, schema: FeatureSchema, transform: FittedTransform, data_cfg: DataConfig,
    n_params: int, extra: dict[str, Any] | None = None,
) -> None:
    write_json(
        path,
        {
            "format_version": FORMAT_VERSION,
            "foxhunt_version": foxhunt.__version__,
            "model": model_cfg.to_dict(),
            "input_sizes": schema.sizes.to_dict(),
            "schema": schema.to_dict(),
            "transform": transform.to_dict(),
            "data": data_cfg.to_dict(),
            "quantiles": list(model_cfg.quantiles),
            "n_params": n_params,
            **(extra or {}),
        },
    )


def training_state(finished: bool, epoch: int, epochs: int) -> dict[str, Any]:
    """model.json's "training": whether the run finished (all its epochs, or early stopping, then calibration) or
    where it stands (`epoch` epochs done of at most `epochs`)."""
    return {"finished": finished, "epoch": epoch, "epochs": epochs}


def save_training_state(path: Path, finished: bool, epoch: int, epochs: int) -> None:
    """`training_state` written into model.json, rewritten whole, atomically, at each epoch's end."""
    meta = json.loads(path.read_text(encoding="utf-8"))
    write_json(path, {**meta, "training": training_state(finished, epoch, epochs)})


def stopped_note(root: Path, meta: dict[str, Any]) -> str | None:
    """One line for a run whose training stopped before it finished (None: finished, or from before the state was
    kept)."""
    t = meta.get("training")
    if not isinstance(t, dict) or t.get("finished", True):
        return None
    return (f"{root}: its training stopped at epoch {t.get('epoch', '?')} of {t.get('epochs', '?')}, before it "
            f"finished: this is its best epoch so far, without calibration; finish it with `foxhunt train --run-dir "
            f"{root} --resume`")


@dataclass
class LoadedModel:
    model: TemporalFusionTransformer
    model_cfg: ModelConfig
    schema: FeatureSchema
    transform: FittedTransform
    data_cfg: DataConfig
    meta: dict[str, Any]
    calibration: Calibration | None = None
    calibration_note: str | None = None  # why there is no calibration (no file: a run from before calibration)
    adaptive: AdaptiveCalibration | None = None  # the adaptive state (None: calibration.json from before it)
    root: Path | None = None  # the run directory it was loaded from (None: built in memory)
    weights_sha256: str | None = None  # `weights_digest` of the weights loaded (None: built in memory)

    @property
    def adaptive_won(self) -> bool:
        """Whether the adaptive shifts beat the model's own quantiles on validation (train/calibrate.py): what
        `--calibration auto` applies to an anchored model (model/config.resolved_method)."""
        return self.adaptive is not None and bool(self.adaptive.fitted_on.get("beats_own"))

    def resolved_method(self, method: str) -> str:
        """`method` as it applies to this model (`auto` resolved)."""
        return resolved_method(method, self.model_cfg.anchored, self.adaptive_won)


def load_model(run_dir: str | Path, device: torch.device | str = "cpu", calibration: bool = True,
               flag: str = "--model") -> LoadedModel:
    """Rebuild the trained model from RUN_DIR/model.json + model.safetensors; no training data needed. With
    `calibration` (a model loaded to forecast with), RUN_DIR/calibration.json too when it is there and was fitted on
    these weights, and a warning when the run stopped before it finished (`stopped_note`).

    Every way a directory can fail to be a usable model (not a run, a run that has not finished an epoch, a file cut
    short, from an older run format or a newer foxhunt) is an InputError naming the file and what to do; `flag` is
    the option that named the directory (train's --init-from reads a model too)."""
    root = Path(run_dir)
    meta_path, weights_path = root / "model.json", root / "model.safetensors"
    if root.exists() and not root.is_dir():
        raise InputError(f"{flag} {root}: not a directory; point {flag} at a run directory written by "
                         "`foxhunt train`")
    missing = [p for p in (meta_path, weights_path) if not p.exists()]
    if missing and (root / "checkpoint.pt").exists():
        raise InputError(f"{flag} {root}: training has not finished an epoch yet ({missing[0].name} is missing); "
                         f"continue it with `foxhunt train --run-dir {root} --resume`")
    if missing:
        raise InputError(f"{missing[0]}: not found; {flag} must be a run directory written by `foxhunt train`")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        check_version(meta_path, meta.get("foxhunt_version"))
        check_format(meta_path, meta, f"retrain the model with this foxhunt (`foxhunt train`) and point {flag} at "
                                      "the new run")
        model_cfg = ModelConfig.from_dict(meta["model"])
        schema = FeatureSchema.from_dict(meta["schema"])
        data_cfg = DataConfig.from_dict(meta["data"])
        transform = FittedTransform.from_dict(meta["transform"], data_cfg)
    except (KeyError, ValueError, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise InputError(f"{meta_path}: not a foxhunt model description ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}); retrain or point {flag} elsewhere") from e
    model = TemporalFusionTransformer(schema.sizes, model_cfg)
    data = weights_path.read_bytes()  # read once: the weights loaded are the weights the digest describes
    try:
        model.load_state_dict(load(data))
    except Exception as e:  # safetensors raises its own error type for a file cut short
        raise InputError(f"{weights_path}: unreadable or does not match model.json ({str(e).splitlines()[0]}); "
                         f"retrain or point {flag} elsewhere") from e
    model.to(device).eval()
    digest = weights_digest(data)
    lm = LoadedModel(model, model_cfg, schema, transform, data_cfg, meta, root=root, weights_sha256=digest)
    if calibration:
        lm.calibration, lm.calibration_note, lm.adaptive = load_calibration(root, model_cfg, digest)
        stopped = stopped_note(root, meta)
        if stopped is not None:
            log.warning(stopped)
            if lm.calibration is None:
                lm.calibration_note = f"{root}: its training stopped before calibration"
    return lm


def load_calibration(root: Path, model_cfg: ModelConfig, weights_sha256: str
                     ) -> tuple[Calibration | None, str | None, AdaptiveCalibration | None]:
    """(calibration, None, adaptive state or None for a file from before it), or (None, why not, None): no file (a
    run from before calibration, or too few validation windows) or a file fitted on other weights than those whose
    digest is `weights_sha256` (a resumed run stopped before it refitted). A file that cannot be read is an
    InputError naming it."""
    path = root / "calibration.json"
    if not path.exists():
        return None, f"{root} has no calibration.json (trained before calibration, or too few validation windows)", None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        cal = Calibration.from_dict(saved)
        adaptive = AdaptiveCalibration.from_dict(saved["adaptive"]) if "adaptive" in saved else None
    except (KeyError, ValueError, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not a foxhunt calibration ({type(e).__name__}); delete it to forecast without "
                         "calibration, or retrain") from e
    if cal.quantiles != tuple(model_cfg.quantiles) or cal.horizon != model_cfg.horizon:
        raise InputError(f"{path}: fitted for quantiles {list(cal.quantiles)} and horizon {cal.horizon}, the model "
                         f"has {list(model_cfg.quantiles)} and {model_cfg.horizon}; delete it or retrain")
    digest = cal.fitted_on.get("weights_sha256")
    if digest and digest != weights_sha256:
        return None, f"{path} was fitted on other weights than model.safetensors (stale); ignored", None
    if adaptive is not None and adaptive.rule.shape[1:] != cal.shifts.shape:
        raise InputError(f"{path}: its adaptive state does not match its shifts; delete it or retrain")
    return cal, None, adaptive


def weights_digest(weights: Path | bytes) -> str:
    """SHA-256 of a weights file (its path, or the bytes read from it): ties calibration.json, a forecasts file and
    the ONNX sidecar to the weights they were made with."""
    data = weights.read_bytes() if isinstance(weights, Path) else weights
    return hashlib.sha256(data).hexdigest()


def check_version(path: Path, written_by: Any) -> None:
    """Files from a newer foxhunt may hold what this one cannot read: say so rather than fail obscurely."""
    if written_by is None:
        return
    if _version_tuple(str(written_by)) > _version_tuple(foxhunt.__version__):
        raise InputError(f"{path}: written by foxhunt {written_by}, newer than this foxhunt "
                         f"{foxhunt.__version__}; upgrade foxhunt to read it")


def _version_tuple(v: str) -> tuple[int, ...]:
    parts = []
    for p in v.split("."):
        digits = "".join(ch for ch in p if ch.isdigit()) if not p.isdigit() else p
        parts.append(int(digits) if digits else 0)
    return tuple(parts)
