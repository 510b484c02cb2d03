"""`foxhunt train`, and the commands that start training runs with train's options: `backtest`, `tune`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

from foxhunt.cli.app import app
from foxhunt.cli.options import (
    BACKTEST,
    CONFIG,
    CONSOLE_FLAGS,
    CONSOLE_OPTIONS,
    DATA_OPTIONS,
    FEATURES,
    MODEL_OPTIONS,
    OUTPUT,
    OWN,
    SEARCH,
    TRACK_FLAGS,
    TRAINING_OPTIONS,
    CalibrationMethod,
    ConfigFile,
    attach,
)
from foxhunt.cli.wiring import explicit, paths, set_verbosity, values
from foxhunt.errors import InputError
from foxhunt.model.config import DEFAULT_METHOD


@app.command()
@attach(DATA_OPTIONS[:1], (FEATURES,), DATA_OPTIONS[1:], MODEL_OPTIONS, TRAINING_OPTIONS, CONSOLE_OPTIONS,
        (CONFIG,), OWN)
def train(ctx: typer.Context, **options: Any) -> None:
    """Train a Temporal Fusion Transformer.

    Writes the run directory: model, metrics, memory trace, checkpoint."""
    from foxhunt import settings
    from foxhunt.api.training import RunConfig, check_run_options, fit

    config = options["config"]
    v = values(ctx, config)
    set_verbosity(v)
    if v.get("resume") and not v.get("run_dir"):
        raise InputError("--resume needs --run-dir: the run to continue")
    n_seeds = int(v.get("seeds", 1))
    check_run_options(bool(v.get("resume")), n_seeds, v.get("track"), v.get("track_uri"))
    train_cfg = settings.train_config(v)  # every flag is checked before any file is read
    if v.get("resume"):  # the run's own configuration, with the training flags typed now on top (e.g. more epochs)
        typed = explicit(ctx) - CONSOLE_FLAGS - TRACK_FLAGS  # neither the console nor tracking is the run
        fit(RunConfig.resumed(v["run_dir"], train_cfg, typed), resume=True,  # run_dir: where it is now
                  seeds=n_seeds, track=v.get("track"), track_uri=v.get("track_uri"))
        return
    if v.get("features"):  # the store's data options; ones typed or in --config must agree
        from_file = set(settings.load_config_file(config, v.keys())) if config is not None else set()
        data_cfg = settings.store_data_config(v, explicit(ctx) | from_file)
    else:
        data_cfg = dataclasses.replace(settings.data_config(v, ()), paths=paths(v))
    model_cfg = settings.model_config(v, data_cfg)
    fit(RunConfig(data_cfg, model_cfg, train_cfg), seeds=n_seeds,
              track=v.get("track"), track_uri=v.get("track_uri"))


PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}
# Options the backtest and tune commands set themselves for every run they start.
NOT_PASSED = {"backtest": ("train_end", "val_end", "run_dir", "resume"), "tune": ("run_dir", "resume")}


def _train_options(ctx: typer.Context, config: Path | None, command: str) -> tuple[dict[str, Any], set[str]]:
    """The `foxhunt train` options among this command's extra arguments (parsed by train's own parser, so every
    train flag means the same here), with --config filling what was not typed; and the names given either way."""
    from foxhunt.settings import load_config_file, merge

    train_cmd = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    sub = train_cmd.make_context(ctx.command_path, list(ctx.args))  # errors name this command
    values = dict(sub.params)
    given = explicit(sub)
    if config is not None:
        from_file = load_config_file(config, values.keys())
        values = merge(values, from_file, given)
        given |= set(from_file)
    if "features" in given:
        raise InputError(f"--features is not supported by `foxhunt {command}`: its runs prepare their own splits; "
                         "pass the bars with --parquet-file")
    for name in NOT_PASSED[command]:
        if name in given:
            raise InputError(f"--{name.replace('_', '-')} is set by `foxhunt {command}` for each run it starts; "
                             "drop it")
    return values, given


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
    data_cfg = dataclasses.replace(settings.data_config(v, ()), paths=paths(v))
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
    v, given = _train_options(ctx, config, "tune")
    set_verbosity(v)
    space = load_space(search, v.keys())
    cfg = TuneConfig(out_dir=out_dir, trials=trials, timeout=timeout, storage=storage, study_name=study_name,
                     seed=int(v.get("seed", 0)))
    settings.train_config(v)  # every fixed flag is checked before the first trial
    run_tune(cfg, space, v, paths(v), {k: v[k] for k in given - CONSOLE_FLAGS})
