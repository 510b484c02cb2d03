"""`foxhunt train`, and the commands that start training runs with train's options: `backtest`, `tune`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from foxhunt.cli.app import app
from foxhunt.cli.options import (
    CLI_ONLY,
    CONFIG,
    CONSOLE_FLAGS,
    CONSOLE_OPTIONS,
    MODEL_OPTIONS,
    OWN,
    TRAIN_DATA_OPTIONS,
    TRAINING_OPTIONS,
    CalibrationMethod,
    ConfigFile,
    attach,
)
from foxhunt.cli.wiring import given, paths, set_verbosity
from foxhunt.errors import InputError
from foxhunt.flags import BACKTEST, OUTPUT, SEARCH
from foxhunt.model.config import DEFAULT_METHOD


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


def _train_options(ctx: typer.Context, config: Path | None, command: str) -> tuple[dict[str, Any], set[str]]:
    """The `foxhunt train` options typed among this command's extra arguments (parsed by train's own parser, so
    every train flag means the same here) or set in --config; and the names of all of train's options."""
    train_cmd = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    sub = train_cmd.make_context(ctx.command_path, list(ctx.args))  # errors name this command
    v = given(sub, config)
    if "features" in v:
        raise InputError(f"--features is not supported by `foxhunt {command}`: its runs prepare their own splits; "
                         "pass the bars with --parquet-file")
    for name in NOT_PASSED[command]:
        if name in v:
            raise InputError(f"--{name.replace('_', '-')} is set by `foxhunt {command}` for each run it starts; "
                             "drop it")
    return v, set(sub.params)


@app.command(context_settings=PASS_THROUGH)
def backtest(
    ctx: typer.Context,
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Folds, forecasts and report go here (resumable).",
                                          metavar="PATH", rich_help_panel=OUTPUT)],
    folds: Annotated[int, typer.Option(help="Test periods in a row, ending with the data.", metavar="N",
                                       rich_help_panel=BACKTEST)] = 5,
    test_length: Annotated[str, typer.Option(help="Each fold's test period: N min|h|d|w|mo|y.", metavar="SPAN",
                                             rich_help_panel=BACKTEST)] = "1y",
    val_length: Annotated[str | None, typer.Option(help="Each fold's validation period, before its test.",
                                                   metavar="SPAN", rich_help_panel=BACKTEST,
                                                   show_default="--test-length")] = None,
    refit: Annotated[str, typer.Option(help="every | once | K: which folds train a model.", metavar="WHEN",
                                       rich_help_panel=BACKTEST)] = "every",
    window: Annotated[str, typer.Option(help="Training window: expanding | rolling.", metavar="MODE",
                                        rich_help_panel=BACKTEST)] = "expanding",
    train_length: Annotated[str | None, typer.Option(help="--window rolling: the training period's length.",
                                                     metavar="SPAN", rich_help_panel=BACKTEST)] = None,
    jobs: Annotated[int, typer.Option(help="Fold models trained at once, if memory allows.", metavar="N",
                                      rich_help_panel=BACKTEST)] = 1,
    calibration: CalibrationMethod = DEFAULT_METHOD,
    config: ConfigFile = None,
) -> None:
    """Walk-forward backtest: train, forecast and score per fold.

    Each fold trains on the data before its validation and test periods (purged as in
    `train`), picks its epoch on validation and forecasts its test period; scores the model and every baseline of
    `evaluate` per fold and overall. Every other option is `foxhunt train`'s (--parquet-file, model and training
    flags), except --train-end, --val-end, --run-dir and --resume, which each fold sets."""
    from foxhunt import settings
    from foxhunt.backtest.config import BacktestConfig
    from foxhunt.backtest.run import run_backtest

    v, _ = _train_options(ctx, config, "backtest")
    set_verbosity(v)
    bt = BacktestConfig.parse(out_dir, folds, refit, test_length, val_length, window, train_length, jobs, calibration)
    train_cfg = settings.train_config(v)
    data_cfg = settings.data_config(v, paths(v))
    run_backtest(bt, data_cfg, settings.model_config(v, data_cfg), train_cfg)


@app.command(context_settings=PASS_THROUGH)
def tune(
    ctx: typer.Context,
    trials: Annotated[int, typer.Option(help="Trials in the study in total (run again to go on).", metavar="N",
                                        rich_help_panel=SEARCH)],
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where trials/, study.db, best.toml etc. go.",
                                          metavar="PATH", rich_help_panel=OUTPUT)] = Path("tune"),
    search: Annotated[Path | None, typer.Option(help="Search space TOML.", metavar="PATH", rich_help_panel=SEARCH,
                                                show_default="the README's")] = None,
    timeout: Annotated[float | None, typer.Option(help="Stop starting trials after this many seconds.",
                                                  metavar="S", rich_help_panel=SEARCH)] = None,
    storage: Annotated[str | None, typer.Option(help="Optuna storage URL, shared across processes.", metavar="URL",
                                                rich_help_panel=SEARCH,
                                                show_default="sqlite:///OUT_DIR/study.db")] = None,
    study_name: Annotated[str, typer.Option(help="The study's name in the storage.", metavar="NAME",
                                            rich_help_panel=SEARCH)] = "foxhunt",
    config: ConfigFile = None,
) -> None:
    """Hyperparameter search with Optuna (extra: tune).

    TPE sampling, median pruning on each epoch's validation loss;
    trials train and validate only, never on the test period. Writes best.toml (`foxhunt train --config best.toml`)
    and a table of trials with parameter importance. Every other option is `foxhunt train`'s: the fixed settings
    of every trial (--parquet-file, --train-end / --val-end or --test-fraction, --epochs, ...)."""
    from foxhunt import settings
    from foxhunt.tune.run import TuneConfig, import_optuna, run_tune
    from foxhunt.tune.space import load_space

    import_optuna()  # the one-line install hint before anything else
    v, known = _train_options(ctx, config, "tune")
    set_verbosity(v)
    space = load_space(search, known)
    train_cfg = settings.train_config(v)  # every fixed flag is checked before the first trial
    cfg = TuneConfig(out_dir=out_dir, trials=trials, timeout=timeout, storage=storage, study_name=study_name,
                     seed=train_cfg.seed)
    run_tune(cfg, space, v, paths(v), {k: x for k, x in v.items() if k not in CONSOLE_FLAGS})
