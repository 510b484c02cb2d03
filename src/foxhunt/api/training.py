"""`foxhunt.RunConfig` and `foxhunt.train`: what `foxhunt train` does, callable from Python.

`RunConfig` composes the three option dataclasses the CLI builds (data, model, training), each validated when it
is made; `RunConfig.from_options` takes the CLI's long option names (`hidden_size=8`, `parquet_file=...`) and
builds them exactly as the flags do (settings.py), so a notebook and a shell command describe a run the same way.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foxhunt import settings
from foxhunt.data.config import DataConfig
from foxhunt.errors import InputError
from foxhunt.model.config import ModelConfig
from foxhunt.train.config import TrainConfig

if TYPE_CHECKING:
    from foxhunt.api.forecaster import Forecaster
    from foxhunt.train.tracking import TrackingConfig


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

    @staticmethod
    def from_options(**options: Any) -> RunConfig:
        """From `foxhunt train`'s long option names with underscores (`parquet_file`, `hidden_size`, `epochs`,
        `threads`, ...), each defaulting as the flag does; `parquet_file` may be one path or several (default: the
        bundled ES sample). `features="STORE"` trains from a store written by `foxhunt prepare` instead, with the
        data options it was prepared with (any given here must be the same)."""
        _check_names(options)
        if options.get("features"):  # a feature store: its own data options; ones given here must agree
            data = settings.store_data_config(options, options)
        else:
            data = settings.data_config(options, data_paths(options.get("parquet_file")))
        return RunConfig(data, settings.model_config(options, data), settings.train_config(options))

    @staticmethod
    def resumed(run_dir: str | Path, training: TrainConfig, changed: set[str]) -> RunConfig:
        """The configuration saved in `run_dir` (a run to continue), with the training options named in `changed`
        (flag names) taken from `training`; data and model options cannot change."""
        data, model, train_cfg = settings.resumed_configs(Path(run_dir), training, changed)
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


def fit(config: RunConfig | None = None, /, *, resume: bool = False, seeds: int = 1,
          track: str | list[str] | None = None, track_uri: str | None = None, **options: Any) -> Run:
    """Train a Temporal Fusion Transformer, as `foxhunt train` does, and return the run.

    Pass a `RunConfig`, or `foxhunt train`'s options as keywords (`foxhunt.fit(parquet_file="bars.parquet",
    epochs=5)`). `resume=True` continues the run in `run_dir` from its checkpoint with its saved options (training
    options given now, e.g. `epochs`, override them; a config for resuming comes from `RunConfig.resumed`).
    `seeds=N` trains N seeds from the config's seed and keeps the best by validation loss (`seeds.json` holds them
    all); `track="mlflow,tensorboard"` (and `track_uri`) also logs the run there. The final line compares the best
    epoch with every evaluate baseline on validation. Raises foxhunt.errors.InputError for bad options or data."""
    from foxhunt.evaluate.validation import judge_on_validation
    from foxhunt.train.seeds import train_seeds
    from foxhunt.train.session import best_record, train_run
    tracking = check_run_options(resume, seeds, track, track_uri)

    if config is not None and options:
        raise InputError(f"train: pass a RunConfig or options, not both (got {', '.join(sorted(options))})")
    if config is None and resume:
        _check_names(options)
        if not options.get("run_dir"):
            raise InputError("train: resume=True needs run_dir=..., the run to continue")
        config = RunConfig.resumed(options["run_dir"], settings.train_config(options), set(options) - {"run_dir"})
    elif config is None:
        config = RunConfig.from_options(**options)
    if seeds > 1:
        result = train_seeds(config.data, config.model, config.training, seeds, judge_on_validation)
    else:
        result = train_run(config.data, config.model, config.training, resume=resume, judge=judge_on_validation,
                           tracking=tracking)
    best = best_record(result.state)
    return Run(run_dir=Path(result.run.root).resolve(), best_epoch=result.state.best_epoch,
               best_val_loss=float(best["val_loss"]) if best else float("nan"),
               baseline_val_loss=float(result.baseline.loss), n_params=result.n_params,
               metrics=tuple(json.loads(json.dumps(r)) for r in result.state.history))


def check_run_options(resume: bool, seeds: int, track: str | list[str] | None,
                      track_uri: str | None) -> TrackingConfig:
    """The tracking asked for, once the run-level options are known to go together (before any file is read)."""
    from foxhunt.train.tracking import TrackingConfig

    tracking = TrackingConfig.parse(track, track_uri)
    if seeds < 1:
        raise InputError(f"--seeds {seeds}: give the number of trainings to run, 1 or more")
    if seeds > 1 and resume:
        raise InputError("--resume with --seeds is not supported; resume the kept run (--run-dir RUN --resume, "
                         "without --seeds) or a stopped seed's own run (--run-dir RUN/seeds/seed-S --resume)")
    if seeds > 1 and tracking.backends:
        raise InputError("--track with --seeds is not supported; track a single-seed run (--seed S)")
    return tracking


def _check_names(options: Mapping[str, Any]) -> None:
    """Unknown option names are a typo, not a default: name them."""
    known = _train_option_names()
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(f"train: unknown option(s) {', '.join(unknown)}; use `foxhunt train`'s long option names "
                         "with underscores (e.g. hidden_size, parquet_file, epochs)")


def _train_option_names() -> set[str]:
    """`foxhunt train`'s option names that settings.py reads into the three configurations."""
    data = {f.name for f in dataclasses.fields(DataConfig)} - {"paths", "exchange_tz"} | {"parquet_file"}
    model = {f.name for f in dataclasses.fields(ModelConfig)} - {"encoder_length", "horizon"}
    training = {f.name for f in dataclasses.fields(TrainConfig)} - {"num_threads"} | {"threads", "use_gpu"}
    return data | model | training


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
