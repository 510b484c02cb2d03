"""What a run leaves behind, as plain data.

- `model.safetensors` + `model.json`: the best weights and everything needed to forecast without the training data
  (architecture, feature schema, scalers, quantiles, data options).
- `checkpoint.pt`: the last state for resuming (weights, optimizer, scheduler, step, epoch, RNG, early-stopping
  state); only tensors and plain values, so it loads with `weights_only=True`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

import foxhunt
from foxhunt.atomic import write_json, write_with
from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import FittedTransform
from foxhunt.data.schema import FeatureSchema
from foxhunt.errors import InputError
from foxhunt.model.config import ModelConfig
from foxhunt.model.tft import TemporalFusionTransformer


def state_to_cpu(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached CPU copy of the weights (kept as the best state without holding device memory)."""
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in model.state_dict().items()}


def save_weights(path: Path, state: dict[str, torch.Tensor]) -> None:
    write_with(path, lambda tmp: save_file(state, str(tmp), metadata={"format": "pt", "foxhunt": foxhunt.__version__}))


def save_model_json(
    path: Path, model_cfg: ModelConfig, schema: FeatureSchema, transform: FittedTransform, data_cfg: DataConfig,
    n_params: int, extra: dict[str, Any] | None = None,
) -> None:
    write_json(
        path,
        {
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


@dataclass
class LoadedModel:
    model: TemporalFusionTransformer
    model_cfg: ModelConfig
    schema: FeatureSchema
    transform: FittedTransform
    data_cfg: DataConfig
    meta: dict[str, Any]


def load_model(run_dir: str | Path, device: torch.device | str = "cpu") -> LoadedModel:
    """Rebuild the trained model from RUN_DIR/model.json + model.safetensors; no training data needed."""
    root = Path(run_dir)
    meta_path, weights_path = root / "model.json", root / "model.safetensors"
    for p in (meta_path, weights_path):
        if not p.exists():
            raise InputError(f"{p}: not found; --model must be a run directory written by `foxhunt train`")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        model_cfg = ModelConfig.from_dict(meta["model"])
        schema = FeatureSchema.from_dict(meta["schema"])
        transform = FittedTransform.from_dict(meta["transform"])
        data_cfg = DataConfig.from_dict(meta["data"])
    except (KeyError, ValueError, TypeError) as e:
        raise InputError(f"{meta_path}: not a foxhunt model description ({e}); retrain or point --model elsewhere") from e
    model = TemporalFusionTransformer(schema.sizes, model_cfg)
    try:
        model.load_state_dict(load_file(str(weights_path)))
    except (RuntimeError, OSError) as e:
        raise InputError(f"{weights_path}: weights do not match model.json ({str(e).splitlines()[0]})") from e
    model.to(device).eval()
    return LoadedModel(model, model_cfg, schema, transform, data_cfg, meta)


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    write_with(path, lambda tmp: torch.save(state, tmp))


def load_checkpoint(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise InputError(f"{path}: no checkpoint to resume from; start a new run without --resume")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign file
        raise InputError(f"{path}: unreadable checkpoint ({type(e).__name__}); start a new run") from e
