"""Turn command-line values (and an optional TOML file) into validated, frozen configurations.

Precedence: a flag typed on the command line beats `--config run.toml`, which beats the built-in default. The TOML
file may be flat (`batch-size = 64`) or grouped in any tables (`[train] batch-size = 64`); keys are the long flag
names, with dashes or underscores.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from foxhunt.data.config import DataConfig
from foxhunt.errors import InputError
from foxhunt.model.config import ModelConfig
from foxhunt.train.config import AUTO, TrainConfig
from foxhunt.train.plan import parse_size


def load_config_file(path: Path, known: Iterable[str]) -> dict[str, Any]:
    """Read a TOML file into {option_name: value}, rejecting keys that are not options of this command."""
    if not path.exists():
        raise InputError(f"{path}: config file not found")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not valid TOML ({e})") from e
    flat: dict[str, Any] = {}

    def walk(d: Mapping[str, Any]) -> None:
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v)
            else:
                flat[k.replace("-", "_")] = v

    walk(raw)
    known = set(known)
    unknown = sorted(set(flat) - known)
    if unknown:
        raise InputError(f"{path}: unknown option {unknown[0].replace('_', '-')!r}; use the long flag names of this command")
    return flat


def merge(values: dict[str, Any], from_file: dict[str, Any], explicit: set[str]) -> dict[str, Any]:
    """Values typed on the command line win; otherwise the file's; otherwise the defaults already in `values`."""
    out = dict(values)
    for k, v in from_file.items():
        if k not in explicit:
            out[k] = v
    return out


def _opt_int_or_auto(flag: str, value: Any) -> int | str:
    if value is None or str(value).lower() == AUTO:
        return AUTO
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InputError(f"{flag} must be a positive integer or 'auto', got {value!r}") from None


def parse_quantiles(text: str | Iterable[float]) -> tuple[float, ...]:
    if isinstance(text, str):
        try:
            return tuple(float(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise InputError(f"--quantiles must be comma-separated numbers like 0.1,0.5,0.9, got {text!r}") from None
    return tuple(float(x) for x in text)


def data_config(v: Mapping[str, Any], paths: tuple[str, ...]) -> DataConfig:
    return DataConfig(
        paths=paths,
        timestamp_col=v.get("timestamp_col"),
        symbol_col=v.get("symbol_col"),
        contracts=v.get("contracts", "auto"),
        adjust=v.get("adjust", "ratio"),
        target=v.get("target", "log_return"),
        encoder_length=int(v.get("encoder_length", 64)),
        horizon=int(v.get("horizon", 5)),
        train_end=v.get("train_end"),
        val_end=v.get("val_end"),
        val_fraction=float(v.get("val_fraction", 0.2)),
        scaling=v.get("scaling", "series"),
        calendar_features=bool(v.get("calendar_features", False)),
    )


def model_config(v: Mapping[str, Any], data: DataConfig) -> ModelConfig:
    return ModelConfig(
        hidden_size=int(v.get("hidden_size", 32)),
        attention_heads=int(v.get("attention_heads", 4)),
        dropout=float(v.get("dropout", 0.1)),
        lstm_layers=int(v.get("lstm_layers", 1)),
        quantiles=parse_quantiles(v.get("quantiles", "0.1,0.5,0.9")),
        encoder_length=data.encoder_length,
        horizon=data.horizon,
        activation_checkpointing=bool(v.get("activation_checkpointing", False)),
    )


def train_config(v: Mapping[str, Any]) -> TrainConfig:
    device = v.get("device", AUTO)
    if v.get("use_gpu"):
        if device not in (AUTO, "cuda") and not str(device).startswith("cuda"):
            raise InputError(f"--use-gpu contradicts --device {device}; pass one of them")
        device = "cuda" if device == AUTO else device
    budget = v.get("memory_budget")
    return TrainConfig(
        epochs=int(v.get("epochs", 5)),
        batch_size=_opt_int_or_auto("--batch-size", v.get("batch_size", 64)),
        validation_batch_size=_opt_int_or_auto("--validation-batch-size", v.get("validation_batch_size", AUTO)),
        learning_rate=float(v.get("learning_rate", 1e-3)),
        weight_decay=float(v.get("weight_decay", 1e-4)),
        grad_clip=float(v.get("grad_clip", 1.0)),
        warmup_fraction=float(v.get("warmup_fraction", 0.05)),
        patience=int(v.get("patience", 3)),
        device=device,
        seed=int(v.get("seed", 0)),
        run_dir=v.get("run_dir"),
        memory_log_every=int(v.get("memory_log_every", 0)),
        memory_budget=parse_size(str(budget)) if budget not in (None, "") else None,
        optimizer_state=v.get("optimizer_state", "device"),
        max_train_batches=int(v.get("max_train_batches", 0)),
        num_threads=int(v.get("threads", 0)),
        progress=bool(v.get("progress", True)),
    )
