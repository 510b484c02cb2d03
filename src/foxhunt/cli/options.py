"""Every option shared by several commands, declared once: name, help, default and help panel.

A group is the options of one configuration (data, model, training, console); `attach(...)` extends a command's
signature with the groups it takes, so `train`, `prepare`, `inspect` and `plan-memory` show the very same data
options, and `backtest` / `tune` pass theirs through `train`'s parser. The commands read the values from
`ctx.params` and build the configurations in foxhunt.settings (with --config filling what was not typed).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from foxhunt.data.config import DataConfig
from foxhunt.model.config import ModelConfig
from foxhunt.train.config import TrainConfig

F = TypeVar("F", bound=Callable[..., Any])
DATA, MODEL, TRAINING, OUTPUT = "Data", "Model", "Training", "Output"
# Defaults live in the configuration dataclasses; the CLI shows the same values.
DD, MD, TD = DataConfig(), ModelConfig(), TrainConfig()
QUANTILES_DEFAULT = ",".join(f"{q:g}" for q in MD.quantiles)
Group = tuple[inspect.Parameter, ...]


def opt(name: str, kind: Any, default: Any, help: str, panel: str | None = None, *decls: str,
        **extra: Any) -> inspect.Parameter:
    """One option as a signature parameter: `--name-with-dashes` unless `decls` name it."""
    info = typer.Option(*decls, help=help, rich_help_panel=panel, **extra)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, info])


def alias(p: inspect.Parameter) -> Any:
    """The `Annotated[...]` of a shared option, for a command that declares it in its own signature."""
    return p.annotation


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


DATA_OPTIONS: Group = (
    opt("parquet_file", list[str] | None, None, "Bars: a parquet/CSV/DBN file, a directory or a glob; repeatable. "
        "Default: the bundled ES sample.", DATA, "--parquet-file", "-f"),
    opt("timestamp_col", str | None, None, "Time column (default: detected).", DATA),
    opt("symbol_col", str | None, None, "Symbol column (default: detected).", DATA),
    opt("timezone", str | None, None, "Time zone of naive timestamps, e.g. America/Chicago (default: UTC, refused "
        "when many bars fall in the session halt).", DATA),
    opt("calendar", str | None, None, "Market hours of every bar: a pandas-market-calendars name (extra: "
        "calendars), or 24/7 (no extra), for the closed-bars check, the halt and the forecast grid; saved with the "
        "run (default: per futures root, CME Globex).", DATA),
    opt("since", str | None, None, "Read only bars at or after this ISO date/time (UTC when naive); hive date= "
        "partitions before it are never opened.", DATA),
    opt("until", str | None, None, "Read only bars before this ISO date/time (UTC when naive).", DATA),
    opt("price_scale", float, DD.price_scale, "Divide every price by this (100: a file of integer cents). "
        "Databento fixed-point prices are scaled without it.", DATA),
    opt("contracts", str, DD.contracts, "auto | continuous | each.", DATA),
    opt("adjust", str, DD.adjust, "Back-adjustment of continuous series: ratio | difference | none.", DATA),
    opt("roll_confirm", int, DD.roll_confirm, "Sessions the next contract must out-trade the front before the "
        "series rolls to it (1: the previous session's volume decides).", DATA),
    opt("target", str, DD.target, "log_return | log_range | price_change (close_t - close_t-1 in price units; for "
        "prices at or below zero).", DATA),
    opt("encoder_length", int, DD.encoder_length, "Encoder (look-back) bars.", DATA),
    opt("horizon", int, DD.horizon, "Forecast bars.", DATA),
    opt("train_end", str | None, None, "ISO date: forecasts starting before it train; needs --val-end (the test "
        "period's start) or --test-fraction 0 (no test period).", DATA),
    opt("val_end", str | None, None, "ISO date: forecasts from --train-end to it validate; later ones are the test "
        "split.", DATA),
    opt("val_fraction", float, DD.val_fraction, "Without --train-end: the fraction of time before the test part "
        "validates.", DATA),
    opt("test_fraction", float, DD.test_fraction, "Without --train-end: the last fraction of time is the test "
        "split, held out of training (0: train / validation only).", DATA),
    opt("scaling", str, DD.scaling, "Target scaling: series (train std per series) | volatility (trailing "
        "volatility units).", DATA),
    opt("vol_estimator", str, DD.vol_estimator, "Trailing volatility from: returns (EWMA of r^2) | range (EWMA of "
        "ln(H/L)^2, a sharper estimate).", DATA),
    opt("vol_halflife", float, DD.vol_halflife, "Halflife (bars) of the trailing volatility.", DATA),
    opt("vol_features", bool, DD.vol_features, "Extra observed inputs: shocks in volatility units, fast/slow "
        "volatility ratios.", DATA),
    opt("seasonality", bool, DD.seasonality, "Intraday bars: the training period's volatility profile by time of "
        "day as a known input, trailing volatility divided by it as an observed one (and in volatility scaling).",
        DATA),
    opt("calendar_features", bool, DD.calendar_features, "CME Globex Equity session features (extra: calendars).",
        DATA),
    opt("fill_gaps", bool, DD.fill_gaps, "Intraday bars on a regular grid: a missing bar inside a session becomes "
        "a zero-volume bar at the previous close, flagged as filled (never across the daily halt, a weekend or a "
        "missing session).", DATA),
)
FEATURES = opt("features", str | None, None, "A feature store written by `foxhunt prepare`: train from it, "
               "memory-mapped, instead of reading the bars. Data options typed with it must equal the store's.", DATA)

MODEL_OPTIONS: Group = (
    opt("hidden_size", int, MD.hidden_size, "Hidden size d.", MODEL),
    opt("attention_heads", int, MD.attention_heads, "Attention heads.", MODEL),
    opt("dropout", float, MD.dropout, "Dropout rate.", MODEL),
    opt("lstm_layers", int, MD.lstm_layers, "LSTM layers.", MODEL),
    opt("quantiles", str, QUANTILES_DEFAULT, "Comma-separated quantiles.", MODEL),
    opt("activation_checkpointing", bool, False, "Recompute VSN/GRN activations in backward (less memory, more "
        "compute).", MODEL),
)

# The device and memory options of `train` and `plan-memory` (plan-memory plans for a 4 GiB budget by default).
DEVICE = opt("device", str, "auto", "auto | cpu | cuda | cuda:N.", TRAINING)
MEMORY_BUDGET = opt("memory_budget", str | None, None, "Memory budget, e.g. 4GiB (enforced on CUDA).", TRAINING)
OPTIMIZER_STATE = opt("optimizer_state", str, "device", "device | cpu (keep AdamW moments in host memory).",
                      TRAINING)
PRECISION = opt("precision", str, TD.precision, "auto | 32 | bf16 | 16-mixed: autocast precision (auto: bf16 on "
                "CUDA devices that support it, else 32).", TRAINING)
MEMORY_OPTIONS: Group = (MEMORY_BUDGET.replace(default="4GiB"), DEVICE, OPTIMIZER_STATE, PRECISION)

TRAINING_OPTIONS: Group = (
    opt("epochs", int, TD.epochs, "Epochs.", TRAINING),
    opt("batch_size", str, str(TD.batch_size), "Training batch size, or auto (needs --memory-budget); under "
        "torchrun the global batch, a multiple of the number of ranks, split across them.", TRAINING),
    opt("validation_batch_size", str, "auto", "Validation batch size, or auto: the largest that fits.", TRAINING),
    opt("learning_rate", float, TD.learning_rate, "Peak learning rate (AdamW).", TRAINING),
    opt("weight_decay", float, TD.weight_decay, "AdamW weight decay.", TRAINING),
    opt("grad_clip", float, TD.grad_clip, "Gradient-norm clip (0: off).", TRAINING),
    opt("warmup_fraction", float, TD.warmup_fraction, "Share of steps warming the LR up.", TRAINING),
    opt("patience", int, TD.patience, "Early stopping: epochs without improvement.", TRAINING),
    DEVICE,
    opt("use_gpu", bool, False, "Same as --device cuda.", TRAINING, "--use-gpu"),
    opt("seed", int, 0, "Random seed (a CPU run repeats bit for bit).", TRAINING),
    opt("seeds", int, 1, "Train N times, with seeds --seed, --seed + 1, ..., and keep the run with the lowest "
        "validation loss; seeds.json in the run directory holds every seed's summary and the spread.", TRAINING),
    opt("run_dir", str | None, None, "Run directory (default runs/<UTC time>).", OUTPUT),
    opt("resume", bool, False, "Continue the run in --run-dir from its checkpoint.pt (the step it stopped at), "
        "with its saved options and batch sizes (training flags given now, e.g. --epochs, override them).", OUTPUT),
    opt("memory_log_every", int, 0, "A [MEMORY] record every N batches (0: phases only).", OUTPUT),
    MEMORY_BUDGET,
    OPTIMIZER_STATE,
    opt("max_train_batches", int, 0, "Cap training batches per epoch (0: all).", TRAINING),
    opt("threads", int, TD.num_threads, "CPU threads for torch (0: torch's default).", TRAINING),
    PRECISION,
    opt("window_run", int, TD.window_run, "Training batches are runs of N windows one horizon apart, which share "
        "their bars' work (1: windows shuffled singly).", TRAINING),
    opt("loss_weight", str, TD.loss_weight, "none | scale: each sample's pinball loss times its target scale, so "
        "that volatility-scaled training minimises the raw-unit loss q-risk reports.", TRAINING),
    opt("max_bad_steps", int, TD.max_bad_steps, "Stop after N training steps in a row with a non-finite loss or "
        "gradient norm (each is skipped: no update).", TRAINING),
    opt("progress", bool, True, "Show a progress bar.", OUTPUT),
    opt("checkpoint_every", int, TD.checkpoint_every, "Write checkpoint.pt every N optimizer steps (0: about every "
        "10 minutes); always at each epoch end and on SIGINT/SIGTERM.", OUTPUT),
    opt("deterministic", bool, TD.deterministic, "Deterministic CUDA kernels: a seeded GPU run repeats bit for bit, "
        "somewhat slower (CPU runs always do).", TRAINING, "--deterministic"),
    opt("track", list[str] | None, None, "Also log parameters, per-epoch metrics, memory records and the run's "
        "files to mlflow and/or tensorboard (repeatable or comma-separated; extra: track). metrics.jsonl stays the "
        "record.", OUTPUT, metavar="<name>"),
    opt("track_uri", str | None, None, "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
        "sqlite:///runs/mlflow.db).", OUTPUT, metavar="<uri>"),
)

CONFIG = opt("config", Path | None, None, "TOML file supplying any option; flags override.", None, "--config")
CONSOLE_OPTIONS: Group = (
    opt("verbose", bool, False, "Also show the memory plan table, every [MEMORY] record and the full data summary "
        "(train.log always holds them).", OUTPUT, "--verbose", "-v"),
    opt("quiet", bool, False, "Show only warnings, errors and the final line.", OUTPUT, "--quiet", "-q"),
)
CONSOLE_FLAGS = {p.name for p in CONSOLE_OPTIONS}
TRACK_FLAGS = {"track", "track_uri"}

# Options of the commands that read a trained model (predict, evaluate, export).
ParquetFile = alias(DATA_OPTIONS[0])
Device = alias(DEVICE)
Threads = Annotated[int, typer.Option(help="CPU threads for torch (0: torch's default).")]
ModelDir = Annotated[Path, typer.Option("--model", help="A run directory written by `foxhunt train`.")]
Start = Annotated[str | None, typer.Option(help="First forecast bar on or after this ISO date/time (UTC).")]
End = Annotated[str | None, typer.Option(help="First forecast bar on or before this ISO date (inclusive).")]
NoCalibration = Annotated[bool, typer.Option("--no-calibration", help="The model's own quantiles: skip the conformal "
                                             "calibration fitted on the validation split after training.")]
ConfigFile = alias(CONFIG)
