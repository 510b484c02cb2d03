"""Turn command-line values (and an optional TOML file) into validated, frozen configurations.

Precedence: a flag typed on the command line beats `--config run.toml`, which beats the built-in default. The TOML
file may be flat (`batch-size = 64`) or grouped in any tables (`[train] batch-size = 64`); keys are the long flag
names, with dashes or underscores.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from foxhunt.data.config import DataConfig
from foxhunt.errors import InputError
from foxhunt.model.config import ModelConfig
from foxhunt.train.config import AUTO, TrainConfig, parse_size


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


def int_or_auto(flag: str, value: Any) -> int | str:
    """A count or "auto" (--epochs, --batch-size) as the config holds it: an int, or AUTO."""
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


_D, _M, _T = DataConfig(), ModelConfig(), TrainConfig()


def data_config(v: Mapping[str, Any], paths: tuple[str, ...]) -> DataConfig:
    """A new run's (or store's) data options; --train-end without --val-end is refused unless --test-fraction 0
    (DataConfig.check_test_period)."""
    cfg = _data_config(v, paths)
    cfg.check_test_period()
    return cfg


def _data_config(v: Mapping[str, Any], paths: tuple[str, ...]) -> DataConfig:
    return DataConfig(
        paths=paths,
        timestamp_col=v.get("timestamp_col"),
        symbol_col=v.get("symbol_col"),
        contracts=v.get("contracts", _D.contracts),
        adjust=v.get("adjust", _D.adjust),
        roll_confirm=int(v.get("roll_confirm", _D.roll_confirm)),
        target=v.get("target", _D.target),
        encoder_length=int(v.get("encoder_length", _D.encoder_length)),
        horizon=int(v.get("horizon", _D.horizon)),
        train_end=v.get("train_end"),
        val_end=v.get("val_end"),
        val_fraction=float(v.get("val_fraction", _D.val_fraction)),
        test_fraction=float(v.get("test_fraction", _D.test_fraction)),
        scaling=v.get("scaling", _D.scaling),
        vol_estimator=v.get("vol_estimator", _D.vol_estimator),
        vol_halflife=float(v.get("vol_halflife", _D.vol_halflife)),
        vol_features=bool(v.get("vol_features", _D.vol_features)),
        seasonality=bool(v.get("seasonality", _D.seasonality)),
        calendar_features=bool(v.get("calendar_features", _D.calendar_features)),
        timezone=v.get("timezone") or None,
        date_format=v.get("date_format") or None,
        calendar=v.get("calendar") or None,
        price_scale=float(v.get("price_scale", _D.price_scale)),
        fill_gaps=bool(v.get("fill_gaps", _D.fill_gaps)),
        features=v.get("features") or None,
        since=v.get("since") or None,
        until=v.get("until") or None,
        observed=column_list(v.get("observed")),
        known=column_list(v.get("known")),
        covariates=tuple(v.get("covariates") or ()) if not isinstance(v.get("covariates"), str)
        else (v["covariates"],),
        events=v.get("events") or None,
        context=column_list(v.get("context")),
        static=column_list(v.get("static")),
        categorical=column_list(v.get("categorical")),
        covariate_scaling=v.get("covariate_scaling", _D.covariate_scaling),
    )


def column_list(value: Any) -> tuple[str, ...]:
    """--observed / --known / --static / --categorical: "a,b" (a flag or a TOML string) or ["a", "b"] (a TOML list) as ("a", "b")."""
    if not value:
        return ()
    parts = value.split(",") if isinstance(value, str) else [p for v in value for p in str(v).split(",")]
    return tuple(p.strip() for p in parts if p.strip())


def refuse_both_inputs() -> None:
    """The one line for --parquet-file typed beside --features (train, predict)."""
    raise InputError("--parquet-file and --features both name the data; pass one (the feature store records the "
                     "files it was prepared from)")


def store_data_config(v: Mapping[str, Any], explicit: Iterable[str]) -> DataConfig:
    """`--features STORE`: the data options the store was prepared with. A data option in `explicit` (typed now)
    must equal the store's; --parquet-file cannot be given (the store records its files)."""
    from foxhunt.data.store import store_data_config as from_store

    explicit = set(explicit)
    if v.get("parquet_file") and "parquet_file" in explicit:
        refuse_both_inputs()
    typed = _data_config(v, ())  # only the typed fields are compared: the store's split is its own
    fields = {f.name for f in dataclasses.fields(DataConfig)}
    return from_store(Path(v["features"]), {k: getattr(typed, k) for k in explicit & fields})


def model_config(v: Mapping[str, Any], data: DataConfig) -> ModelConfig:
    return ModelConfig(
        hidden_size=int(v.get("hidden_size", _M.hidden_size)),
        attention_heads=int(v.get("attention_heads", _M.attention_heads)),
        dropout=float(v.get("dropout", _M.dropout)),
        lstm_layers=int(v.get("lstm_layers", _M.lstm_layers)),
        quantiles=parse_quantiles(v.get("quantiles", _M.quantiles)),
        encoder_length=data.encoder_length,
        horizon=data.horizon,
        activation_checkpointing=bool(v.get("activation_checkpointing", False)),
        quantile_head=str(v.get("quantile_head", _M.quantile_head)),
    )


def train_config(v: Mapping[str, Any]) -> TrainConfig:
    device = v.get("device", AUTO)
    if v.get("use_gpu"):
        if device not in (AUTO, "cuda") and not str(device).startswith("cuda"):
            raise InputError(f"--use-gpu contradicts --device {device}; pass one of them")
        device = "cuda" if device == AUTO else device
    budget = v.get("memory_budget")
    return TrainConfig(
        epochs=int_or_auto("--epochs", v.get("epochs", _T.epochs)),
        batch_size=int_or_auto("--batch-size", v.get("batch_size", _T.batch_size)),
        validation_batch_size=int_or_auto("--validation-batch-size", v.get("validation_batch_size", AUTO)),
        learning_rate=float(v.get("learning_rate", _T.learning_rate)),
        weight_decay=float(v.get("weight_decay", _T.weight_decay)),
        grad_clip=float(v.get("grad_clip", _T.grad_clip)),
        warmup_fraction=float(v.get("warmup_fraction", _T.warmup_fraction)),
        patience=int(v.get("patience", _T.patience)),
        device=device,
        seed=int(v.get("seed", _T.seed)),
        run_dir=v.get("run_dir"),
        memory_log_every=int(v.get("memory_log_every", 0)),
        memory_budget=parse_size(str(budget)) if budget not in (None, "") else None,
        optimizer_state=v.get("optimizer_state", "device"),
        max_train_batches=int(v.get("max_train_batches", 0)),
        num_threads=int(v.get("threads", 0)),
        window_run=int(v.get("window_run", _T.window_run)),
        loss_weight=str(v.get("loss_weight", _T.loss_weight)),
        max_bad_steps=int(v.get("max_bad_steps", _T.max_bad_steps)),
        precision=str(v.get("precision", _T.precision)),
        progress=bool(v.get("progress", True)),
        checkpoint_every=int(v.get("checkpoint_every", _T.checkpoint_every)),
        deterministic=bool(v.get("deterministic", _T.deterministic)),
    )


# Flags whose TrainConfig field has another name.
_TRAIN_FIELD = {"threads": "num_threads", "use_gpu": "device"}
_RESUME_IGNORES = {"resume", "run_dir", "config"}


def resumed_configs(run_dir: Path, flags: TrainConfig, explicit: set[str]) -> tuple[DataConfig, ModelConfig, TrainConfig]:
    """The configuration saved in RUN_DIR/config.json; training flags typed now override it, data and model flags
    cannot change (the checkpoint's weights and the data windows depend on them)."""
    path = run_dir / "config.json"
    if not path.exists():
        raise InputError(f"{path}: not found; --resume needs the --run-dir of a run started by `foxhunt train`")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        data, model = DataConfig.from_dict(saved["data"]), ModelConfig.from_dict(saved["model"])
        train = TrainConfig.from_dict(saved["train"])
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{path}: not a foxhunt run configuration ({e}); start a new run instead") from e
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    overrides = {}
    for flag in sorted(explicit - _RESUME_IGNORES):
        field = _TRAIN_FIELD.get(flag, flag)
        if field not in train_fields:
            raise InputError(f"--{flag.replace('_', '-')} cannot change when resuming (the run was built with it); "
                             "drop it or start a new run")
        overrides[field] = getattr(flags, field)
    return data, model, dataclasses.replace(train, **overrides)
