"""`foxhunt.RunConfig` and `foxhunt.fit`: what `foxhunt train` does, callable from Python.

`RunConfig` composes the three option dataclasses (data, model, training), each validated when it is made;
`RunConfig.from_options` and `fit` take the CLI's long option names (`hidden_size=8`, `parquet_file=...`): the
options declared on the fields of those dataclasses and of `SessionConfig` (foxhunt/flags.py), read as the flags
are (settings.py), so a notebook and a shell command describe a run the same way.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foxhunt import flags, settings
from foxhunt.data.config import DataConfig
from foxhunt.errors import InputError
from foxhunt.model.config import ModelConfig
from foxhunt.train.config import SessionConfig, TrainConfig

if TYPE_CHECKING:
    from foxhunt.api.forecaster import Forecaster

CONFIGS = (DataConfig, ModelConfig, TrainConfig)  # what a run is; SessionConfig: how `fit` runs it


@dataclass(frozen=True)
class RunConfig:
    """Everything a training run is built from: `data` (files, splits, features), `model` (architecture) and
    `training` (optimisation, device, run directory). Made with `from_options(**cli_options)` or from the three
    dataclasses; the model's encoder length and horizon must be the data's."""

    data: DataConfig
    model: ModelConfig
    training: TrainConfig

    def __post_init__(self) -> None:
        if not self.data.paths:
            raise InputError("RunConfig: no data files; pass parquet_file=... (a file, directory or glob)")
        d, m = self.data, self.model
        if (m.encoder_length, m.horizon) != (d.encoder_length, d.horizon):
            raise InputError(f"RunConfig: the model's encoder {m.encoder_length} / horizon {m.horizon} differ from "
                             f"the data's {d.encoder_length} / {d.horizon}; build it with RunConfig.from_options")
        if d.anchored and tuple(m.quantiles) != tuple(d.quantiles):
            raise InputError(f"RunConfig: the model's quantiles {list(m.quantiles)} differ from those the data's anchor "
                             f"is computed at {list(d.quantiles)}; build it with RunConfig.from_options")

    @staticmethod
    def from_options(**options: Any) -> RunConfig:
        """From `foxhunt train`'s long option names with underscores (`parquet_file`, `hidden_size`, `epochs`,
        `threads`, ...), each defaulting as the flag does; `parquet_file` may be one path or several (default: the
        bundled ES sample). `features="STORE"` trains from a store written by `foxhunt prepare` instead, with the
        data options it was prepared with (any given here must be the same)."""
        _check_names(options, CONFIGS)
        training = settings.train_config(options)  # every option is checked before any file is read
        if options.get("features"):
            data = _store_data_config(options)
        else:
            data = settings.data_config(options, data_paths(options.get("parquet_file")))
        return RunConfig(data, settings.model_config(options, data), training)

    @staticmethod
    def resumed(run_dir: str | Path, **options: Any) -> RunConfig:
        """The configuration saved in `run_dir` (a run to continue), with the training options given here on top;
        data and model options given must be the run's."""
        _check_names(options, CONFIGS)
        data, model, train_cfg = settings.resumed_configs(Path(run_dir), options)
        return RunConfig(data, model, dataclasses.replace(train_cfg, run_dir=str(run_dir)))

    def to_dict(self) -> dict[str, Any]:
        return {"data": self.data.to_dict(), "model": self.model.to_dict(), "train": self.training.to_dict()}


@dataclass(frozen=True)
class Run:
    """A finished training run: its directory (the model package and logs), the best epoch and the metrics."""

    run_dir: Path
    best_epoch: int  # 0 when no epoch finished
    best_val_loss: float
    baseline_val_loss: float  # training-set quantiles on the same validation windows: the model should beat it
    n_params: int
    metrics: tuple[dict[str, Any], ...]  # one dict per epoch, as metrics.jsonl

    def forecaster(self, device: str = "cpu") -> Forecaster:
        """The trained model, loaded for forecasting."""
        from foxhunt.api.forecaster import Forecaster

        return Forecaster.load(self.run_dir, device)


def fit(config: RunConfig | None = None, /, **options: Any) -> Run:
    """Train a Temporal Fusion Transformer, as `foxhunt train` does, and return the run.

    Pass a `RunConfig`, or `foxhunt train`'s options as keywords (`foxhunt.fit(parquet_file="bars.parquet",
    epochs=5)`; `inspect.signature(foxhunt.fit)` lists them all). `resume=True` continues the run in `run_dir`
    from its checkpoint with its saved options (training options given now, e.g. `epochs`, override them).
    `seeds=N` trains N seeds from the config's seed and keeps the best by validation loss (`seeds.json` holds them
    all); `track="mlflow,tensorboard"` (and `track_uri`) also logs the run there. With a `RunConfig`, only these
    session options may be given beside it. The final line compares the best epoch with every evaluate baseline on
    validation. Raises foxhunt.errors.InputError for bad options or data."""
    from foxhunt.evaluate.validation import judge_on_validation
    from foxhunt.train.seeds import train_seeds
    from foxhunt.train.session import best_record, train_run

    _check_names(options, (*CONFIGS, SessionConfig))
    session = settings.build(SessionConfig, options)
    run_options = {k: v for k, v in options.items() if k not in flags.names(SessionConfig)}
    if config is not None and run_options:
        got = sorted(run_options)
        raise InputError(f"foxhunt.fit: pass a RunConfig or options, not both (got {', '.join(got)}); a RunConfig "
                         f"takes them when it is made: RunConfig.from_options(..., {got[0]}=...)")
    if config is None and session.resume:
        run_dir = run_options.pop("run_dir", None)
        if not run_dir:
            raise InputError("--resume needs --run-dir (run_dir=...): the run to continue")
        config = RunConfig.resumed(run_dir, **run_options)
    elif config is None:
        config = RunConfig.from_options(**run_options)
    if session.seeds > 1:
        result = train_seeds(config.data, config.model, config.training, session.seeds, judge_on_validation)
    else:
        result = train_run(config.data, config.model, config.training, resume=session.resume,
                           judge=judge_on_validation, tracking=session.tracking)
    best = best_record(result.state)
    return Run(run_dir=Path(result.run.root).resolve(), best_epoch=result.state.best_epoch,
               best_val_loss=float(best["val_loss"]) if best else float("nan"),
               baseline_val_loss=float(result.baseline.loss), n_params=result.n_params,
               metrics=tuple(json.loads(json.dumps(r)) for r in result.state.history))


# The keywords `fit` takes, for help() and inspect.signature: every option of the four dataclasses.
fit.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter("config", inspect.Parameter.POSITIONAL_ONLY, default=None, annotation="RunConfig | None"),
     *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
       for cls in (*CONFIGS, SessionConfig) for o in flags.options(cls)
       for name, default in ((o.name, o.text_default), *([(o.switch.name, False)] if o.switch else [])))],
    return_annotation="Run")


def _check_names(given: Mapping[str, Any], classes: tuple[type, ...]) -> None:
    """Unknown option names are a typo, not a default: name them."""
    known = flags.names(*classes)
    unknown = sorted(set(given) - set(known))
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InputError(f"unknown option(s) {', '.join(unknown)}{hint}; use `foxhunt train`'s long option "
                         "names with underscores (e.g. hidden_size, parquet_file, epochs)")


def _store_data_config(given: Mapping[str, Any]) -> DataConfig:
    """`features=STORE`: the data options the store was prepared with; a data option given must equal the
    store's, and the bars cannot be named as well (the store records its files)."""
    from foxhunt.data.store import store_data_config

    if given.get("parquet_file"):
        refuse_both_inputs()
    # Only the options given are compared (the store's split is its own), in the form the store saved them (lists).
    typed = settings.build(DataConfig, given).to_dict()
    return store_data_config(Path(given["features"]),
                             {o.field: typed[o.field] for o in flags.options(DataConfig) if o.name in given})


def refuse_both_inputs() -> None:
    """The one line for --parquet-file typed beside --features (train, predict, evaluate)."""
    raise InputError("--parquet-file and --features both name the data; pass one (the feature store records the "
                     "files it was prepared from)")


def data_paths(files: Any) -> tuple[str, ...]:
    """The bar files to read: `files` (one path or several), or the bundled ES sample when none (said once)."""
    if isinstance(files, str | Path):
        files = [files]
    if files:
        return tuple(str(f) for f in files)
    from foxhunt.data.io.sample import bundled_sample_path

    path = bundled_sample_path()
    logging.getLogger("foxhunt").info("no --parquet-file given: using the bundled ES sample %s", path)
    return (str(path),)
