"""Every option shared by several commands, declared once: name, help, default and help panel.

A group is the options of one configuration (data, model, training, console); `attach(...)` extends a command's
signature with the groups it takes, so `train`, `prepare`, `inspect` and `plan-memory` show the very same data
options, and `backtest` / `tune` pass theirs through `train`'s parser. The commands read the values from
`ctx.params` and build the configurations in foxhunt.settings (with --config filling what was not typed).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from foxhunt.data.config import DataConfig
from foxhunt.errors import InputError
from foxhunt.model.config import HEADS, METHODS, ModelConfig
from foxhunt.settings import int_or_auto
from foxhunt.train.config import TrainConfig

F = TypeVar("F", bound=Callable[..., Any])
# The panels of --help, in the order a command shows them (foxhunt.cli.help); options without one are "Options".
DATA, INPUTS, MODEL, TRAINING, FORECASTS, BACKTEST, SEARCH, WORKERS, DEVICE, MEMORY, OUTPUT = (
    "Data", "Your inputs", "Model", "Training", "Forecasts", "Backtest", "Search", "Workers", "Device", "Memory",
    "Output")
PANELS = (DATA, INPUTS, MODEL, TRAINING, FORECASTS, BACKTEST, SEARCH, WORKERS, DEVICE, MEMORY, OUTPUT)
# Defaults live in the configuration dataclasses; the CLI shows the same values.
DD, MD, TD = DataConfig(), ModelConfig(), TrainConfig()
QUANTILES_DEFAULT = ",".join(f"{q:g}" for q in MD.quantiles)
Group = tuple[inspect.Parameter, ...]
# A value's placeholder in --help by its type: short, so that a flag and its help share a line at 80 columns.
METAVARS: dict[Any, str] = {int: "N", float: "X", str: "TEXT", Path: "PATH"}


def opt(name: str, kind: Any, default: Any, help: str, panel: str | None = None, *decls: str,
        **extra: Any) -> inspect.Parameter:
    """One option as a signature parameter: `--name-with-dashes` unless `decls` name it; its help is one line at
    80 columns (tests/cli/test_help_width.py), the longer story is in the docs."""
    base = next((a for a in getattr(kind, "__args__", (kind,)) if a is not type(None)), kind)
    extra.setdefault("metavar", METAVARS.get(getattr(base, "__origin__", base), "TEXT"))
    info = typer.Option(*decls, help=help, rich_help_panel=panel, **extra)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, info])


def count_or_auto(text: str) -> int | str:
    """--epochs' value parsed as settings.int_or_auto parses it from a config file, so a study or a saved run
    holds 2, not "2"; a bad value is click's usage error (exit 2)."""
    try:
        return int_or_auto("--epochs", text)
    except InputError as e:
        raise typer.BadParameter(str(e)) from None


def alias(p: inspect.Parameter) -> Any:
    """The `Annotated[...]` of a shared option, for a command that declares it in its own signature."""
    return p.annotation


def shown(p: inspect.Parameter, default: str) -> Any:
    """`alias(p)` with another default shown in --help: a shared option whose default, in a command that reads a
    trained model, comes from that model (the flag, help and panel stay the one declaration's)."""
    info = copy.copy(p.annotation.__metadata__[0])
    info.show_default = default
    return Annotated[p.annotation.__origin__, info]


OWN = object()  # in attach(...): where the command's own parameters go among the groups


def attach(*groups: Group | object) -> Callable[[F], F]:
    """Extend the decorated command's signature with these option groups (typer reads `__signature__`); the
    command takes them as `**options` and reads them, with the rest, from `ctx.params`."""

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn, eval_str=True)
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in sig.parameters.values()
               if p.kind is not inspect.Parameter.VAR_KEYWORD]
        layout = groups if OWN in groups else (OWN, *groups)
        params = [p for g in layout for p in (own if g is OWN else g)]  # type: ignore[union-attr]
        names = [p.name for p in params]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise TypeError(f"{fn.__name__}: options declared twice: {sorted(dup)}")
        fn.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        fn.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
        return fn

    return decorate


# The data window: train's, and (defaulting to the model's own) predict's, evaluate's and a backtest's.
SINCE = opt("since", str | None, None, "Read only bars at or after this ISO date/time.", DATA, metavar="DATE")
UNTIL = opt("until", str | None, None, "Read only bars before this ISO date/time.", DATA, metavar="DATE")

DATA_OPTIONS: Group = (
    opt("parquet_file", list[str] | None, None, "Bars: parquet/CSV/DBN files, folders or globs.", DATA,
        "--parquet-file", "-f", metavar="PATH", show_default="the bundled ES sample"),
    opt("timestamp_col", str | None, None, "Time column.", DATA, metavar="NAME", show_default="detected"),
    opt("symbol_col", str | None, None, "Symbol column.", DATA, metavar="NAME", show_default="detected"),
    opt("timezone", str | None, None, "Zone of naive timestamps, e.g. America/Chicago.", DATA, metavar="TZ",
        show_default="UTC"),
    opt("date_format", str | None, None, "How text times are written, e.g. %m/%d/%Y %H:%M.", DATA,
        metavar="FORMAT", show_default="ISO 8601"),
    opt("calendar", str | None, None, "Sessions and holidays: a calendar name, or 24/7.", DATA, metavar="NAME",
        show_default="by futures root"),
    SINCE,
    UNTIL,
    opt("price_scale", float, DD.price_scale, "Divide every price by this (100: integer cents).", DATA),
    opt("contracts", str, DD.contracts, "Series: auto | continuous | each.", DATA, metavar="MODE"),
    opt("adjust", str, DD.adjust, "Roll adjustment: ratio | difference | none.", DATA, metavar="MODE"),
    opt("roll_confirm", int, DD.roll_confirm, "Roll when the next contract out-trades N sessions.", DATA),
    opt("target", str, DD.target, "Target: log_return | log_range | price_change.", DATA, metavar="KIND"),
    opt("encoder_length", int, DD.encoder_length, "Encoder (look-back) bars.", DATA),
    opt("horizon", int, DD.horizon, "Forecast bars.", DATA),
    opt("train_end", str | None, None, "ISO date: training split ends (needs --val-end).", DATA,
        metavar="DATE"),
    opt("val_end", str | None, None, "ISO date: validation ends, the test split starts.", DATA, metavar="DATE"),
    opt("val_fraction", float, DD.val_fraction, "Validation fraction of the time before the test.", DATA),
    opt("test_fraction", float, DD.test_fraction, "Last fraction of time held out as test (0: none).", DATA),
    opt("scaling", str, DD.scaling, "Target scaling: series | volatility.", DATA, metavar="MODE"),
    opt("vol_estimator", str, DD.vol_estimator, "Trailing volatility from: returns | range.", DATA,
        metavar="KIND"),
    opt("vol_halflife", float, DD.vol_halflife, "Halflife (bars) of the trailing volatility.", DATA),
    opt("vol_features", bool, DD.vol_features, "Volatility shocks and fast/slow ratios as inputs.", DATA),
    opt("seasonality", bool, DD.seasonality, "Time-of-day volatility profile as an input.", DATA),
    opt("calendar_features", bool, DD.calendar_features, "Globex Equity session inputs (extra: calendars).",
        DATA),
    opt("fill_gaps", bool, DD.fill_gaps, "Fill missing intraday bars inside a session.", DATA),
)
# The user's own inputs (data/features/inputs.py): data options too, in a panel of their own.
INPUT_OPTIONS: Group = (
    opt("observed", str | None, None, "Columns known from their bar on, e.g. vix,flow.", INPUTS,
        metavar="COLS"),
    opt("known", str | None, None, "Columns known in advance (from --covariates).", INPUTS, metavar="COLS"),
    opt("covariates", list[str] | None, None, "File, folder or glob of more columns (repeatable).", INPUTS,
        metavar="PATH"),
    opt("events", str | None, None, "Events (time, name[, symbol]): known inputs.", INPUTS, metavar="PATH"),
    opt("context", str | None, None, "Series every series also sees, e.g. NQ,ZN.", INPUTS,
        metavar="NAMES"),
    opt("covariate_scaling", str, DD.covariate_scaling, "Your real inputs: series | global | none.", INPUTS,
        metavar="MODE"),
    opt("static", str | None, None, "Columns of one value per series, e.g. sector.", INPUTS, metavar="COLS"),
    opt("categorical", str | None, None, "Input columns of numbers taken as categories.", INPUTS,
        metavar="COLS"),
)
DATA_OPTIONS += INPUT_OPTIONS
FEATURES = opt("features", str | None, None, "A store from `foxhunt prepare`: train from it.", DATA,
               metavar="PATH")

MODEL_OPTIONS: Group = (
    opt("hidden_size", int, MD.hidden_size, "Hidden size d.", MODEL),
    opt("attention_heads", int, MD.attention_heads, "Attention heads.", MODEL),
    opt("dropout", float, MD.dropout, "Dropout rate.", MODEL),
    opt("lstm_layers", int, MD.lstm_layers, "LSTM layers.", MODEL),
    opt("quantiles", str, QUANTILES_DEFAULT, "Comma-separated quantiles.", MODEL, metavar="LIST"),
    opt("quantile_head", str, MD.quantile_head, f"{' | '.join(HEADS)}: tied cannot cross.", MODEL,
        metavar="KIND"),
    opt("activation_checkpointing", bool, False, "Recompute activations in backward: less memory.", MEMORY),
)

# The device and memory options of `train` and `plan-memory` (plan-memory plans for a 4 GiB budget by default).
DEVICE_OPTION = opt("device", str, "auto", "auto | cpu | cuda | cuda:N.", DEVICE, metavar="DEVICE")
MEMORY_BUDGET = opt("memory_budget", str | None, None, "Memory budget, e.g. 4GiB (enforced on CUDA).", MEMORY,
                    metavar="SIZE")
OPTIMIZER_STATE = opt("optimizer_state", str, "device", "device | cpu: where the AdamW moments live.", MEMORY,
                      metavar="WHERE")
PRECISION = opt("precision", str, TD.precision, "auto | 32 | bf16 | 16-mixed (autocast).", DEVICE, metavar="MODE")
THREADS = opt("threads", int, TD.num_threads, "CPU threads for torch (0: torch's default).", DEVICE)
MEMORY_OPTIONS: Group = (MEMORY_BUDGET.replace(default="4GiB"), DEVICE_OPTION, OPTIMIZER_STATE, PRECISION)

TRAINING_OPTIONS: Group = (
    opt("epochs", Any, TD.epochs, "Epochs, or auto: 3-30 by data size.", TRAINING, metavar="N",
        parser=count_or_auto),
    opt("batch_size", str, str(TD.batch_size), "Batch size, or auto (needs --memory-budget).", TRAINING,
        metavar="N"),
    opt("validation_batch_size", str, "auto", "Validation batch, or auto: the largest that fits.", TRAINING,
        metavar="N"),
    opt("learning_rate", float, TD.learning_rate, "Peak learning rate (AdamW).", TRAINING),
    opt("weight_decay", float, TD.weight_decay, "AdamW weight decay.", TRAINING),
    opt("grad_clip", float, TD.grad_clip, "Gradient-norm clip (0: off).", TRAINING),
    opt("warmup_fraction", float, TD.warmup_fraction, "Share of steps warming the LR up.", TRAINING),
    opt("patience", int, TD.patience, "Early stopping: epochs without improvement.", TRAINING),
    DEVICE_OPTION,
    opt("use_gpu", bool, False, "Same as --device cuda.", DEVICE, "--use-gpu"),
    opt("seed", int, 0, "Random seed (a CPU run repeats bit for bit).", TRAINING),
    opt("seeds", int, 1, "Train N seeds from --seed; keep the best.", TRAINING),
    opt("run_dir", str | None, None, "Run directory.", OUTPUT, metavar="PATH", show_default="runs/<UTC time>"),
    opt("resume", bool, False, "Continue the run in --run-dir from its checkpoint.", OUTPUT),
    opt("memory_log_every", int, 0, "[MEMORY] record every N batches (0: phases only).", MEMORY),
    MEMORY_BUDGET,
    OPTIMIZER_STATE,
    opt("max_train_batches", int, 0, "Cap training batches per epoch (0: all).", TRAINING),
    THREADS,
    PRECISION,
    opt("window_run", int, TD.window_run, "Batches as runs of N windows one horizon apart.", TRAINING),
    opt("loss_weight", str, TD.loss_weight, "none | scale: pinball loss times target scale.", TRAINING,
        metavar="MODE"),
    opt("max_bad_steps", int, TD.max_bad_steps, "Stop after N non-finite steps in a row.", TRAINING),
    opt("progress", bool, True, "Show a progress bar.", OUTPUT),
    opt("checkpoint_every", int, TD.checkpoint_every, "Checkpoint every N steps (0: about every 10 min).",
        OUTPUT),
    opt("deterministic", bool, TD.deterministic, "Deterministic CUDA kernels (slower, repeatable).", DEVICE,
        "--deterministic"),
    opt("track", list[str] | None, None, "Also log to mlflow | tensorboard (extra: track).", OUTPUT,
        metavar="NAME"),
    opt("track_uri", str | None, None, "MLflow tracking URI.", OUTPUT, metavar="URI",
        show_default="$MLFLOW_TRACKING_URI"),
)

CONFIG = opt("config", Path | None, None, "TOML file supplying any option; flags override.", None, "--config")
CONSOLE_OPTIONS: Group = (
    opt("verbose", bool, False, "Also show the memory plan and every [MEMORY] line.", OUTPUT, "--verbose", "-v"),
    opt("quiet", bool, False, "Show only warnings, errors and the result.", OUTPUT, "--quiet", "-q"),
)
CONSOLE_FLAGS = {p.name for p in CONSOLE_OPTIONS}
TRACK_FLAGS = {"track", "track_uri"}

# Options of the commands that read a trained model (predict, evaluate, export).
ParquetFile = alias(DATA_OPTIONS[0])
Verbose, Quiet = (alias(p) for p in CONSOLE_OPTIONS)
Device = alias(DEVICE_OPTION)
Threads = alias(THREADS)
ModelDir = Annotated[Path, typer.Option("--model", help="A run directory written by `foxhunt train`.",
                                        metavar="PATH", rich_help_panel=MODEL)]
Start = Annotated[str | None, typer.Option(help="First forecast bar on or after this ISO date/time.",
                                           metavar="DATE", rich_help_panel=FORECASTS)]
End = Annotated[str | None, typer.Option(help="First forecast bar on or before this ISO date.", metavar="DATE",
                                         rich_help_panel=FORECASTS)]
NoCalibration = Annotated[bool, typer.Option("--no-calibration", help="Use the model's own quantiles, uncalibrated.",
                                             rich_help_panel=FORECASTS)]
CalibrationMethod = Annotated[str, typer.Option(
    "--calibration", help=f"Quantile calibration: {' | '.join(METHODS)}.", metavar="HOW",
    rich_help_panel=FORECASTS)]
BatchSize = Annotated[int, typer.Option(help="Windows per forward pass.", metavar="N", rich_help_panel=FORECASTS)]
ConfigFile = alias(CONFIG)
# The bars read (predict, evaluate): from the model's own --since unless given; forecasts reach the newest bar.
Since = shown(SINCE, "the model's")
Until = shown(UNTIL, "the last bar")
Covariates = Annotated[list[str] | None, typer.Option(
    help="Your --covariates files (repeatable).", metavar="PATH", rich_help_panel=INPUTS,
    show_default="the training run's")]
Events = Annotated[str | None, typer.Option(help="Your --events calendar.", metavar="PATH", rich_help_panel=INPUTS,
                                            show_default="the model's")]
