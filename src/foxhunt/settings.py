"""Turn option values (flags, a TOML file, `foxhunt.fit`'s keywords) into validated, frozen configurations.

Every option is declared once, on its configuration field (foxhunt/flags.py); this module reads values by those
declarations and names no option itself. Precedence: a flag typed on the command line beats `--config run.toml`,
which beats the field's default. The TOML file may be flat (`batch-size = 64`) or grouped in any tables
(`[train] batch-size = 64`); keys are the long flag names, with dashes or underscores.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from foxhunt.data.config import DataConfig, same_option
from foxhunt.data.dataset.saved_format import check_format
from foxhunt.errors import InputError
from foxhunt.flags import options, read_fields
from foxhunt.model.config import ModelConfig
from foxhunt.train.config import TrainConfig

C = TypeVar("C")


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


def build(cls: type[C], values: Mapping[str, Any], **fields: Any) -> C:
    """`cls` from option values by name (a flag's text, a config file's value or a keyword's); an option not in
    `values` takes its field's default, names that are not options of `cls` are left alone, `fields` are set as
    they are."""
    return cls(**{**read_fields(cls, values), **fields})


def data_config(values: Mapping[str, Any], paths: tuple[str, ...]) -> DataConfig:
    """A new run's (or store's) data options; a split that holds out no test period is refused
    (DataConfig.check_test_period)."""
    model = build(ModelConfig, values)  # the anchor is computed at the model's quantiles, for its head
    cfg = build(DataConfig, values, paths=paths, quantiles=model.quantiles, quantile_head=model.quantile_head)
    cfg.check_test_period()
    return cfg


def model_config(values: Mapping[str, Any], data: DataConfig) -> ModelConfig:
    return build(ModelConfig, values, encoder_length=data.encoder_length, horizon=data.horizon,
                 anchored=data.anchored)


def train_config(values: Mapping[str, Any]) -> TrainConfig:
    return build(TrainConfig, values)


def resumed_configs(run_dir: Path, values: Mapping[str, Any]) -> tuple[DataConfig, ModelConfig, TrainConfig]:
    """The configuration saved in RUN_DIR/config.json with the training options in `values` (given now) on top;
    a data or model option given must equal the run's (the checkpoint's weights and the data windows depend on
    them)."""
    path = run_dir / "config.json"
    if not path.exists():
        raise InputError(f"{path}: not found; --resume needs the --run-dir of a run started by `foxhunt train`")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        check_format(path, saved, "it cannot be resumed; train again in a new --run-dir")
        # a run from before paths were saved absolute resolves them here, as reading them would
        data, model = DataConfig.from_dict(saved["data"]).with_absolute_paths(), ModelConfig.from_dict(saved["model"])
        train = TrainConfig.from_dict(saved["train"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise InputError(f"{path}: not a foxhunt run configuration ({e}); start a new run instead") from e
    for cfg in (data, model):
        given = read_fields(type(cfg), values)
        for o in options(type(cfg)):  # a run saves the files it read as absolute paths (same_option)
            if o.field in given and not same_option(o.field, given[o.field], getattr(cfg, o.field)):
                raise InputError(f"{o.flag} cannot change when resuming (the run was built with "
                                 f"{o.flag} {getattr(cfg, o.field)!r}); drop it or start a new run")
    return data, model, dataclasses.replace(train, **read_fields(TrainConfig, values))
