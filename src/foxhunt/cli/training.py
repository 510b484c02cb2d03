"""`foxhunt train`, and the commands that start training runs with train's options: `backtest`, `tune`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from foxhunt.cli.app import app
from foxhunt.cli.options import (
    BACKTEST_OPTIONS,
    CLI_ONLY,
    CONFIG,
    CONSOLE_FLAGS,
    CONSOLE_OPTIONS,
    MODEL_OPTIONS,
    OWN,
    TRAIN_DATA_OPTIONS,
    TRAINING_OPTIONS,
    TUNE_OPTIONS,
    attach,
)
from foxhunt.cli.wiring import given, paths, set_verbosity
from foxhunt.errors import InputError


@app.command()
@attach(TRAIN_DATA_OPTIONS, MODEL_OPTIONS, TRAINING_OPTIONS, CONSOLE_OPTIONS, (CONFIG,), OWN)
def train(ctx: typer.Context, **options: Any) -> None:
    """Train a Temporal Fusion Transformer.

    Writes the run directory: model, metrics, memory trace, checkpoint."""
    from foxhunt.api.training import fit

    v = given(ctx, options["config"])  # typed or in --config: the rest are the options' defaults
    set_verbosity(v)
    fit(**{k: x for k, x in v.items() if k not in CLI_ONLY})


PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}
# Options the backtest and tune commands set themselves for every run they start.
NOT_PASSED = {"backtest": ("train_end", "val_end", "run_dir", "resume"), "tune": ("run_dir", "resume")}


def _options(ctx: typer.Context, config: Path | None, command: str) -> tuple[dict[str, Any], dict[str, Any],
                                                                          set[str]]:
    """This command's own options, and the `foxhunt train` options among its extra arguments (parsed by train's
    own parser, so every train flag means the same here), each typed or set in --config (typed ones win); and the
    names of all of train's options."""
    from foxhunt.settings import load_config_file

    train_cmd = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    sub = train_cmd.make_context(ctx.command_path, list(ctx.args))  # errors name this command
    from_file = load_config_file(config, {*ctx.params, *sub.params}) if config is not None else {}
    own = {k: x for k, x in from_file.items() if k in ctx.params} | given(ctx, None)
    v = {k: x for k, x in from_file.items() if k in sub.params} | given(sub, None)
    if "features" in v:
        raise InputError(f"--features is not supported by `foxhunt {command}`: its runs prepare their own splits; "
                         "pass the bars with --parquet-file")
    for name in NOT_PASSED[command]:
        if name in v:
            raise InputError(f"--{name.replace('_', '-')} is set by `foxhunt {command}` for each run it starts; "
                             "drop it")
    return own, v, set(sub.params)


@app.command(context_settings=PASS_THROUGH)
@attach(BACKTEST_OPTIONS, (CONFIG,), OWN)
def backtest(ctx: typer.Context, **options: Any) -> None:
    """Walk-forward backtest: train, forecast and score per fold.

    Each fold trains on the data before its validation and test periods (purged as in
    `train`), picks its epoch on validation and forecasts its test period; scores the model and every baseline of
    `evaluate` per fold and overall. Every other option is `foxhunt train`'s (--parquet-file, model and training
    flags), except --train-end, --val-end, --run-dir and --resume, which each fold sets."""
    from foxhunt import settings
    from foxhunt.backtest.config import BacktestConfig
    from foxhunt.backtest.run import run_backtest

    own, v, _ = _options(ctx, options["config"], "backtest")
    set_verbosity(v)
    bt = settings.build(BacktestConfig, own)
    train_cfg = settings.train_config(v)
    data_cfg = settings.data_config(v, paths(v))
    run_backtest(bt, data_cfg, settings.model_config(v, data_cfg), train_cfg)


@app.command(context_settings=PASS_THROUGH)
@attach(TUNE_OPTIONS, (CONFIG,), OWN)
def tune(ctx: typer.Context, **options: Any) -> None:
    """Hyperparameter search with Optuna (extra: tune).

    TPE sampling, median pruning on each epoch's validation loss;
    trials train and validate only, never on the test period. Writes best.toml (`foxhunt train --config best.toml`)
    and a table of trials with parameter importance. Every other option is `foxhunt train`'s: the fixed settings
    of every trial (--parquet-file, --train-end / --val-end or --test-fraction, --epochs, ...); one the search
    space holds is then not searched."""
    from foxhunt import settings
    from foxhunt.tune.config import TuneConfig
    from foxhunt.tune.run import import_optuna, run_tune
    from foxhunt.tune.space import load_space, space_name

    import_optuna()  # the one-line install hint before anything else
    own, v, known = _options(ctx, options["config"], "tune")
    set_verbosity(v)
    train_cfg = settings.train_config(v)  # every fixed flag is checked before the first trial
    cfg = settings.build(TuneConfig, own, seed=train_cfg.seed)
    space = load_space(cfg.search, known)
    run_tune(cfg, space, v, paths(v), {k: x for k, x in v.items() if k not in CONSOLE_FLAGS}, space_name(cfg.search))
