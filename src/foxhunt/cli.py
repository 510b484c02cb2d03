"""The `foxhunt` command line. It parses and wires; the work happens in data / train / evaluate.

`main(argv)` runs in-process (tests call it that way) and returns the exit status: 0 done, 2 bad input, 1 a runtime
failure, 3 does not fit in memory, 4 training stopped on non-finite losses or gradients, 130/143 stopped by
SIGINT/SIGTERM; each failure is one line on stderr, with the traceback only under --debug.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer

from foxhunt.allocator import process_settings
from foxhunt.data.config import DataConfig
from foxhunt.errors import InputError, NonFiniteError, RankLost, ResourceError, WriteError
from foxhunt.model.config import ModelConfig
from foxhunt.train.config import TrainConfig

# typer >= 0.20 vendors click; older versions use click itself. Either way this is click's base exception.
ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Temporal Fusion Transformers on futures bars: multi-horizon quantile forecasts that train to the end "
    "without running out of memory.",
)

D, M, T = "Data", "Model", "Training"
# Defaults live in the configuration dataclasses; the CLI shows the same values.
DD, MD, TD = DataConfig(), ModelConfig(), TrainConfig()
QUANTILES_DEFAULT = ",".join(f"{q:g}" for q in MD.quantiles)

# Options shared by several commands (one definition each, reused in signatures).
ParquetFile = Annotated[
    list[str] | None,
    typer.Option("--parquet-file", "-f", help="Bars: a parquet/CSV/DBN file, a directory or a glob; repeatable. "
                 "Default: the bundled ES sample.", rich_help_panel=D),
]
Features = Annotated[str | None, typer.Option(help="A feature store written by `foxhunt prepare`: train from it, "
                                             "memory-mapped, instead of reading the bars. Data options typed with "
                                             "it must equal the store's.", rich_help_panel=D)]
TimestampCol = Annotated[str | None, typer.Option(help="Time column (default: detected).", rich_help_panel=D)]
SymbolCol = Annotated[str | None, typer.Option(help="Symbol column (default: detected).", rich_help_panel=D)]
Timezone = Annotated[str | None, typer.Option(help="Time zone of naive timestamps, e.g. America/Chicago "
                                              "(default: UTC, refused when many bars fall in the session halt).",
                                              rich_help_panel=D)]
Calendar = Annotated[str | None, typer.Option(help="Market hours of every bar: a pandas-market-calendars name (extra: "
                                              "calendars), or 24/7 (no extra), for the closed-bars check, the halt "
                                              "and the forecast grid; saved with the run (default: per futures "
                                              "root, CME Globex).", rich_help_panel=D)]
Since = Annotated[str | None, typer.Option(help="Read only bars at or after this ISO date/time (UTC when naive); "
                                           "hive date= partitions before it are never opened.", rich_help_panel=D)]
Until = Annotated[str | None, typer.Option(help="Read only bars before this ISO date/time (UTC when naive).",
                                           rich_help_panel=D)]
PriceScale = Annotated[float, typer.Option(help="Divide every price by this (100: a file of integer cents). "
                                           "Databento fixed-point prices are scaled without it.", rich_help_panel=D)]
Contracts = Annotated[str, typer.Option(help="auto | continuous | each.", rich_help_panel=D)]
Adjust = Annotated[str, typer.Option(help="Back-adjustment of continuous series: ratio | difference | none.",
                                     rich_help_panel=D)]
RollConfirm = Annotated[int, typer.Option(help="Sessions the next contract must out-trade the front before the "
                                          "series rolls to it (1: the previous session's volume decides).",
                                          rich_help_panel=D)]
Target = Annotated[str, typer.Option(help="log_return | log_range | price_change (close_t - close_t-1 in price units; "
                                       "for prices at or below zero).", rich_help_panel=D)]
EncoderLength = Annotated[int, typer.Option(help="Encoder (look-back) bars.", rich_help_panel=D)]
Horizon = Annotated[int, typer.Option(help="Forecast bars.", rich_help_panel=D)]
TrainEnd = Annotated[str | None, typer.Option(help="ISO date: forecasts starting before it train; needs --val-end "
                                              "(the test period's start) or --test-fraction 0 (no test period).",
                                              rich_help_panel=D)]
ValEnd = Annotated[str | None, typer.Option(help="ISO date: forecasts from --train-end to it validate; later ones "
                                            "are the test split.", rich_help_panel=D)]
ValFraction = Annotated[float, typer.Option(help="Without --train-end: the fraction of time before the test part "
                                            "validates.", rich_help_panel=D)]
TestFraction = Annotated[float, typer.Option(help="Without --train-end: the last fraction of time is the test split, "
                                             "held out of training (0: train / validation only).", rich_help_panel=D)]
Scaling = Annotated[str, typer.Option(help="Target scaling: series (train std per series) | volatility "
                                      "(trailing volatility units).", rich_help_panel=D)]
VolEstimator = Annotated[str, typer.Option(help="Trailing volatility from: returns (EWMA of r^2) | range "
                                          "(EWMA of ln(H/L)^2, a sharper estimate).", rich_help_panel=D)]
VolHalflife = Annotated[float, typer.Option(help="Halflife (bars) of the trailing volatility.", rich_help_panel=D)]
VolFeatures = Annotated[bool, typer.Option(help="Extra observed inputs: shocks in volatility units, fast/slow "
                                           "volatility ratios.", rich_help_panel=D)]
Seasonality = Annotated[bool, typer.Option(help="Intraday bars: the training period's volatility profile by time "
                                           "of day as a known input, trailing volatility divided by it as an "
                                           "observed one (and in volatility scaling).", rich_help_panel=D)]
CalendarFeatures = Annotated[bool, typer.Option(help="CME Globex Equity session features (extra: calendars).",
                                                rich_help_panel=D)]
FillGaps = Annotated[bool, typer.Option(help="Intraday bars on a regular grid: a missing bar inside a session "
                                        "becomes a zero-volume bar at the previous close, flagged as filled "
                                        "(never across the daily halt, a weekend or a missing session).",
                                        rich_help_panel=D)]
HiddenSize = Annotated[int, typer.Option(help="Hidden size d.", rich_help_panel=M)]
Heads = Annotated[int, typer.Option(help="Attention heads.", rich_help_panel=M)]
Dropout = Annotated[float, typer.Option(help="Dropout rate.", rich_help_panel=M)]
LstmLayers = Annotated[int, typer.Option(help="LSTM layers.", rich_help_panel=M)]
Quantiles = Annotated[str, typer.Option(help="Comma-separated quantiles.", rich_help_panel=M)]
ActCkpt = Annotated[bool, typer.Option(help="Recompute VSN/GRN activations in backward (less memory, more compute).",
                                       rich_help_panel=M)]
Device = Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N.", rich_help_panel=T)]
MemoryBudget = Annotated[str | None, typer.Option(help="Memory budget, e.g. 4GiB (enforced on CUDA).",
                                                  rich_help_panel=T)]
OptimizerState = Annotated[str, typer.Option(help="device | cpu (keep AdamW moments in host memory).",
                                             rich_help_panel=T)]
Precision = Annotated[str, typer.Option(help="auto | 32 | bf16 | 16-mixed: autocast precision (auto: bf16 on CUDA "
                                        "devices that support it, else 32).", rich_help_panel=T)]
Threads = Annotated[int, typer.Option(help="CPU threads for torch (0: torch's default).")]
ConfigFile = Annotated[Path | None, typer.Option("--config", help="TOML file supplying any option; flags override.")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Also show the memory plan table, every [MEMORY] "
                                       "record and the full data summary (train.log always holds them).")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Show only warnings, errors and the final line.")]
CONSOLE_FLAGS = {"verbose", "quiet"}
TRACK_FLAGS = {"track", "track_uri"}


def _values(ctx: typer.Context, config: Path | None) -> dict[str, Any]:
    """This command's option values, with --config filling what was not typed."""
    from foxhunt.settings import load_config_file, merge

    values = dict(ctx.params)
    if config is None:
        return values
    return merge(values, load_config_file(config, values.keys()), _explicit(ctx))


def _set_verbosity(values: dict[str, Any]) -> None:
    from foxhunt.console import NORMAL, QUIET, VERBOSE, set_verbosity

    if values.get("verbose") and values.get("quiet"):
        raise InputError("--verbose and --quiet contradict each other; pass one of them")
    set_verbosity(VERBOSE if values.get("verbose") else QUIET if values.get("quiet") else NORMAL)


def _explicit(ctx: typer.Context) -> set[str]:
    """The options typed on the command line (not defaults)."""
    return {k for k in ctx.params if (src := ctx.get_parameter_source(k)) is not None and src.name != "DEFAULT"}


def _paths(values: dict[str, Any]) -> tuple[str, ...]:
    from foxhunt.api.training import data_paths

    return data_paths(values.get("parquet_file"))


@app.command()
def train(
    ctx: typer.Context,
    parquet_file: ParquetFile = None,
    features: Features = None,
    timestamp_col: TimestampCol = None,
    symbol_col: SymbolCol = None,
    timezone: Timezone = None,
    calendar: Calendar = None,
    since: Since = None,
    until: Until = None,
    price_scale: PriceScale = DD.price_scale,
    contracts: Contracts = DD.contracts,
    adjust: Adjust = DD.adjust,
    roll_confirm: RollConfirm = DD.roll_confirm,
    target: Target = DD.target,
    encoder_length: EncoderLength = DD.encoder_length,
    horizon: Horizon = DD.horizon,
    train_end: TrainEnd = None,
    val_end: ValEnd = None,
    val_fraction: ValFraction = DD.val_fraction,
    test_fraction: TestFraction = DD.test_fraction,
    scaling: Scaling = DD.scaling,
    vol_estimator: VolEstimator = DD.vol_estimator,
    vol_halflife: VolHalflife = DD.vol_halflife,
    vol_features: VolFeatures = DD.vol_features,
    seasonality: Seasonality = DD.seasonality,
    calendar_features: CalendarFeatures = DD.calendar_features,
    fill_gaps: FillGaps = DD.fill_gaps,
    hidden_size: HiddenSize = MD.hidden_size,
    attention_heads: Heads = MD.attention_heads,
    dropout: Dropout = MD.dropout,
    lstm_layers: LstmLayers = MD.lstm_layers,
    quantiles: Quantiles = QUANTILES_DEFAULT,
    activation_checkpointing: ActCkpt = False,
    epochs: Annotated[int, typer.Option(help="Epochs.", rich_help_panel=T)] = TD.epochs,
    batch_size: Annotated[str, typer.Option(help="Training batch size, or auto (needs --memory-budget); under "
                                            "torchrun the global batch, split evenly over the ranks.",
                                            rich_help_panel=T)] = str(TD.batch_size),
    validation_batch_size: Annotated[str, typer.Option(help="Validation batch size, or auto: the largest that fits.",
                                                       rich_help_panel=T)] = "auto",
    learning_rate: Annotated[float, typer.Option(help="Peak learning rate (AdamW).", rich_help_panel=T)] = TD.learning_rate,
    weight_decay: Annotated[float, typer.Option(help="AdamW weight decay.", rich_help_panel=T)] = TD.weight_decay,
    grad_clip: Annotated[float, typer.Option(help="Gradient-norm clip (0: off).", rich_help_panel=T)] = TD.grad_clip,
    warmup_fraction: Annotated[float, typer.Option(help="Share of steps warming the LR up.", rich_help_panel=T)] = TD.warmup_fraction,
    patience: Annotated[int, typer.Option(help="Early stopping: epochs without improvement.",
                                          rich_help_panel=T)] = TD.patience,
    device: Device = "auto",
    use_gpu: Annotated[bool, typer.Option("--use-gpu", help="Same as --device cuda.", rich_help_panel=T)] = False,
    seed: Annotated[int, typer.Option(help="Random seed (a CPU run repeats bit for bit).", rich_help_panel=T)] = 0,
    seeds: Annotated[int, typer.Option(help="Train N times, with seeds --seed, --seed + 1, ..., and keep the run "
                                       "with the lowest validation loss; seeds.json in the run directory holds "
                                       "every seed's summary and the spread.", rich_help_panel=T)] = 1,
    run_dir: Annotated[str | None, typer.Option(help="Run directory (default runs/<UTC time>).",
                                                rich_help_panel=T)] = None,
    resume: Annotated[bool, typer.Option(help="Continue the run in --run-dir from its checkpoint.pt (the step it "
                                         "stopped at), with its saved options and batch sizes (training flags given "
                                         "now, e.g. --epochs, override them).",
                                         rich_help_panel=T)] = False,
    memory_log_every: Annotated[int, typer.Option(help="A [MEMORY] record every N batches (0: phases only).",
                                                  rich_help_panel=T)] = 0,
    memory_budget: MemoryBudget = None,
    optimizer_state: OptimizerState = "device",
    max_train_batches: Annotated[int, typer.Option(help="Cap training batches per epoch (0: all).",
                                                   rich_help_panel=T)] = 0,
    threads: Annotated[int, typer.Option(help="CPU threads for torch (0: torch's default).",
                                         rich_help_panel=T)] = TD.num_threads,
    precision: Precision = TD.precision,
    window_run: Annotated[int, typer.Option(help="Training batches are runs of N windows one horizon apart, which "
                                            "share their bars' work (1: windows shuffled singly).",
                                            rich_help_panel=T)] = TD.window_run,
    loss_weight: Annotated[str, typer.Option(help="none | scale: each sample's pinball loss times its target "
                                             "scale, so that volatility-scaled training minimises the raw-unit "
                                             "loss q-risk reports.", rich_help_panel=T)] = TD.loss_weight,
    max_bad_steps: Annotated[int, typer.Option(help="Stop after N training steps in a row with a non-finite loss or "
                                               "gradient norm (each is skipped: no update).",
                                               rich_help_panel=T)] = TD.max_bad_steps,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.", rich_help_panel=T)] = True,
    checkpoint_every: Annotated[int, typer.Option(help="Write checkpoint.pt every N optimizer steps (0: about every "
                                                  "10 minutes); always at each epoch end and on SIGINT/SIGTERM.",
                                                  rich_help_panel=T)] = TD.checkpoint_every,
    deterministic: Annotated[bool, typer.Option("--deterministic", help="Deterministic CUDA kernels: a seeded GPU run repeats bit for "
                                                "bit, somewhat slower (CPU runs always do).",
                                                rich_help_panel=T)] = TD.deterministic,
    track: Annotated[list[str] | None, typer.Option(metavar="<name>", help="Also log parameters, per-epoch metrics, memory records and "
                                                    "the run's files to mlflow and/or tensorboard (repeatable or "
                                                    "comma-separated; extra: track). metrics.jsonl stays the record.",
                                                    rich_help_panel=T)] = None,
    track_uri: Annotated[str | None, typer.Option(metavar="<uri>", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                                                  "sqlite:///runs/mlflow.db).", rich_help_panel=T)] = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
    config: ConfigFile = None,
) -> None:
    """Train a Temporal Fusion Transformer; writes the run directory (model, metrics, memory trace, checkpoint)."""
    from foxhunt import settings
    from foxhunt.api.training import TrainConfig as RunConfig
    from foxhunt.api.training import check_run_options
    from foxhunt.api.training import train as train_api

    v = _values(ctx, config)
    _set_verbosity(v)
    if v.get("resume") and not v.get("run_dir"):
        raise InputError("--resume needs --run-dir: the run to continue")
    n_seeds = int(v.get("seeds", 1))
    check_run_options(bool(v.get("resume")), n_seeds, v.get("track"), v.get("track_uri"))
    train_cfg = settings.train_config(v)  # every flag is checked before any file is read
    if v.get("resume"):  # the run's own configuration, with the training flags typed now on top (e.g. more epochs)
        explicit = _explicit(ctx) - CONSOLE_FLAGS - TRACK_FLAGS  # neither the console nor tracking is the run
        train_api(RunConfig.resumed(v["run_dir"], train_cfg, explicit), resume=True,  # run_dir: where it is now
                  seeds=n_seeds, track=v.get("track"), track_uri=v.get("track_uri"))
        return
    if v.get("features"):  # the store's data options; ones typed or in --config must agree
        from_file = set(settings.load_config_file(config, v.keys())) if config is not None else set()
        data_cfg = settings.store_data_config(v, _explicit(ctx) | from_file)
    else:
        data_cfg = dataclasses.replace(settings.data_config(v, ()), paths=_paths(v))
    model_cfg = settings.model_config(v, data_cfg)
    train_api(RunConfig(data_cfg, model_cfg, train_cfg), seeds=n_seeds,
              track=v.get("track"), track_uri=v.get("track_uri"))


@app.command()
def prepare(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", "-o", help="The feature store (a directory) to write; an older store "
                                      "there is replaced.")],
    parquet_file: ParquetFile = None,
    timestamp_col: TimestampCol = None,
    symbol_col: SymbolCol = None,
    timezone: Timezone = None,
    calendar: Calendar = None,
    since: Since = None,
    until: Until = None,
    price_scale: PriceScale = DD.price_scale,
    contracts: Contracts = DD.contracts,
    adjust: Adjust = DD.adjust,
    roll_confirm: RollConfirm = DD.roll_confirm,
    target: Target = DD.target,
    encoder_length: EncoderLength = DD.encoder_length,
    horizon: Horizon = DD.horizon,
    train_end: TrainEnd = None,
    val_end: ValEnd = None,
    val_fraction: ValFraction = DD.val_fraction,
    test_fraction: TestFraction = DD.test_fraction,
    scaling: Scaling = DD.scaling,
    vol_estimator: VolEstimator = DD.vol_estimator,
    vol_halflife: VolHalflife = DD.vol_halflife,
    vol_features: VolFeatures = DD.vol_features,
    seasonality: Seasonality = DD.seasonality,
    calendar_features: CalendarFeatures = DD.calendar_features,
    fill_gaps: FillGaps = DD.fill_gaps,
    workers: Annotated[int, typer.Option(min=0, help="Processes (this one included) preparing groups of "
                                         "series in parallel, so memory is bounded by a group, not the panel; 0 "
                                         "prepares the whole panel in memory. The store is the same.")] = 2,
    executor: Annotated[str, typer.Option(help="Where the groups of series run: `local` (--workers processes "
                                          "here) or `dask://HOST:PORT`, a Dask cluster (the `cluster` extra), "
                                          "whose workers must all see --out's folder: "
                                          "they write the store there.")] = "local",
    config: ConfigFile = None,
) -> None:
    """Compute the features once and write them as a memory-mapped feature store for `foxhunt train --features`
    (and predict, evaluate): the row tensors, window index, splits, scalers, schema, data summary, roll table and
    what the baselines read (docs/store-format.md)."""
    from foxhunt import settings
    from foxhunt.data.store.crew import prepare_crew

    v = _values(ctx, config)
    cfg, workers = settings.data_config(v, _paths(v)), int(v.get("workers", 2))
    executor = str(v.get("executor", "local"))
    with prepare_crew(workers if executor == "local" else 1) as pool:  # its worker imports while this process does
        from foxhunt.data.store import prepare_store

        manifest = prepare_store(cfg, out, workers=workers, pool=pool, executor=executor)
    size = sum(f.stat().st_size for f in out.iterdir())
    typer.echo(f"wrote the feature store {out}: {manifest['summary']['rows']:,} rows, "
               f"{manifest['arrays']['starts']['shape'][0]:,} windows, {size / 2**20:,.1f} MiB; "
               f"train with `foxhunt train --features {out}`")


@app.command()
def inspect(
    ctx: typer.Context,
    files: Annotated[list[str] | None, typer.Argument(help="Files, directories or globs (default: the sample).")] = None,
    parquet_file: ParquetFile = None,
    timestamp_col: TimestampCol = None,
    symbol_col: SymbolCol = None,
    timezone: Timezone = None,
    calendar: Calendar = None,
    since: Since = None,
    until: Until = None,
    price_scale: PriceScale = DD.price_scale,
    contracts: Contracts = DD.contracts,
    adjust: Adjust = DD.adjust,
    roll_confirm: RollConfirm = DD.roll_confirm,
    target: Target = DD.target,
    encoder_length: EncoderLength = DD.encoder_length,
    horizon: Horizon = DD.horizon,
    train_end: TrainEnd = None,
    val_end: ValEnd = None,
    val_fraction: ValFraction = DD.val_fraction,
    test_fraction: TestFraction = DD.test_fraction,
    scaling: Scaling = DD.scaling,
    vol_estimator: VolEstimator = DD.vol_estimator,
    vol_halflife: VolHalflife = DD.vol_halflife,
    vol_features: VolFeatures = DD.vol_features,
    seasonality: Seasonality = DD.seasonality,
    calendar_features: CalendarFeatures = DD.calendar_features,
    fill_gaps: FillGaps = DD.fill_gaps,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Show what the loader sees (rows, series, contracts, rolls, windows per split) without training."""
    from foxhunt import settings
    from foxhunt.data.prepare import prepare_data
    from foxhunt.data.summary import format_summary

    v = dict(ctx.params)
    v["parquet_file"] = (files or []) + (parquet_file or [])
    data = prepare_data(settings.data_config(v, _paths(v)))
    if as_json:
        typer.echo(json.dumps({**data.summary, "rolls": data.rolls}, indent=2, default=str))
    else:
        typer.echo(format_summary(data.summary))


@app.command()
def sample(out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the sample parquet.")]) -> None:
    """Write the bundled ES 1-minute sample (Databento ohlcv-1m parquet format) to a file."""
    from foxhunt.data.sample import write_sample

    path = write_sample(out)
    typer.echo(str(path))


@app.command("plan-memory")
def plan_memory_cmd(
    ctx: typer.Context,
    parquet_file: ParquetFile = None,
    timestamp_col: TimestampCol = None,
    symbol_col: SymbolCol = None,
    timezone: Timezone = None,
    calendar: Calendar = None,
    since: Since = None,
    until: Until = None,
    price_scale: PriceScale = DD.price_scale,
    contracts: Contracts = DD.contracts,
    adjust: Adjust = DD.adjust,
    roll_confirm: RollConfirm = DD.roll_confirm,
    target: Target = DD.target,
    encoder_length: EncoderLength = DD.encoder_length,
    horizon: Horizon = DD.horizon,
    train_end: TrainEnd = None,
    val_end: ValEnd = None,
    val_fraction: ValFraction = DD.val_fraction,
    test_fraction: TestFraction = DD.test_fraction,
    scaling: Scaling = DD.scaling,
    vol_estimator: VolEstimator = DD.vol_estimator,
    vol_halflife: VolHalflife = DD.vol_halflife,
    vol_features: VolFeatures = DD.vol_features,
    seasonality: Seasonality = DD.seasonality,
    calendar_features: CalendarFeatures = DD.calendar_features,
    fill_gaps: FillGaps = DD.fill_gaps,
    hidden_size: HiddenSize = MD.hidden_size,
    attention_heads: Heads = MD.attention_heads,
    dropout: Dropout = MD.dropout,
    lstm_layers: LstmLayers = MD.lstm_layers,
    quantiles: Quantiles = QUANTILES_DEFAULT,
    activation_checkpointing: ActCkpt = False,
    memory_budget: MemoryBudget = "4GiB",
    device: Device = "auto",
    optimizer_state: OptimizerState = "device",
    precision: Precision = "auto",
    config: ConfigFile = None,
) -> None:
    """Predict the peak memory of a training and a validation step per batch size, and the largest that fits."""
    from foxhunt import settings
    from foxhunt.data.prepare import prepare_data
    from foxhunt.model.tft import TemporalFusionTransformer
    from foxhunt.train.config import parse_size
    from foxhunt.train.device import resolve_device
    from foxhunt.train.plan import plan_memory
    from foxhunt.train.precision import resolve_precision

    v = _values(ctx, config)
    data_cfg = settings.data_config(v, _paths(v))
    model_cfg = settings.model_config(v, data_cfg)
    dev = resolve_device(v["device"])
    precision = resolve_precision(v["precision"], dev)
    data = prepare_data(data_cfg)
    model = TemporalFusionTransformer(data.schema.sizes, model_cfg).to(dev)
    plan = plan_memory(model, data.schema.sizes, model_cfg, dev, parse_size(str(v["memory_budget"])),
                       optimizer_state_on_cpu=v["optimizer_state"] == "cpu", precision=precision)
    typer.echo(plan.format_table())


@app.command("memory-report")
def memory_report_cmd(run_dir: Annotated[Path, typer.Argument(help="A run directory with memory.jsonl.")]) -> None:
    """Memory per phase (peak, growth) from a run's memory.jsonl; writes memory.png beside it."""
    from foxhunt.evaluate.memory_report import memory_report

    table, png = memory_report(run_dir)
    typer.echo(table)
    typer.echo(f"wrote {png}")


ModelDir = Annotated[Path, typer.Option("--model", help="A run directory written by `foxhunt train`.")]
Start = Annotated[str | None, typer.Option(help="First forecast bar on or after this ISO date/time (UTC).")]
End = Annotated[str | None, typer.Option(help="First forecast bar on or before this ISO date (inclusive).")]
NoCalibration = Annotated[bool, typer.Option("--no-calibration", help="The model's own quantiles: skip the conformal "
                                             "calibration fitted on the validation split after training.")]


@app.command()
def predict(
    model: ModelDir,
    out: Annotated[Path, typer.Option("--out", "-o", help="Forecasts parquet to write.")],
    parquet_file: ParquetFile = None,
    features: Annotated[Path | None, typer.Option(
        help="A feature store written by `foxhunt prepare` with the model's data options: forecast its windows, "
        "memory-mapped, instead of reading the bars. A store's windows end where its targets do: no live origin.",
        rich_help_panel=D)] = None,
    start: Start = None,
    end: End = None,
    batch_size: Annotated[int, typer.Option(help="Windows per forward pass.")] = 1024,
    device: Device = "cpu",
    threads: Threads = TD.num_threads,
    no_calibration: NoCalibration = False,
) -> None:
    """Quantile forecasts for every origin with a full encoder, including the live one after the last bar (from a
    feature store, its windows' origins); calibrated on the validation split unless --no-calibration."""
    from foxhunt.api.forecaster import Forecaster
    from foxhunt.train.device import resolve_device

    paths = _bars_or_store(parquet_file, features)
    _set_threads(threads)
    fc = Forecaster.load(model, resolve_device(device))
    origins, calibrated = fc.write_forecasts(paths, out, start, end, batch_size, calibrated=not no_calibration,
                                             features=features)
    typer.echo(f"wrote {origins * fc.horizon:,} {'calibrated' if calibrated else 'uncalibrated'} forecast rows "
               f"({origins:,} origins) to {out}")


@app.command()
def evaluate(
    model: ModelDir,
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where metrics.json, report.html etc. go.")],
    parquet_file: ParquetFile = None,
    features: Annotated[Path | None, typer.Option(
        help="A feature store written by `foxhunt prepare` with the model's data options: score the model and every "
        "baseline on its windows, memory-mapped, instead of reading the bars.", rich_help_panel=D)] = None,
    start: Annotated[str | None, typer.Option(help="First forecast bar on or after this ISO date/time (UTC). "
                                              "Default: after the model's validation period when the bars reach "
                                              "past it (held out from fitting and calibration), else all.")] = None,
    end: End = None,
    forecasts: Annotated[Path | None, typer.Option(help="Score these forecasts instead of predicting.")] = None,
    batch_size: Annotated[int, typer.Option(help="Windows per forward pass.")] = 1024,
    device: Device = "cpu",
    threads: Threads = TD.num_threads,
    no_calibration: NoCalibration = False,
) -> None:
    """Score forecasts against the realised target and the baselines on the same origins; write a report.

    Without --start, scores only origins after the model's validation period when the bars reach past it (the
    calibration was fitted on that period)."""
    from foxhunt.evaluate.run import evaluate_run
    from foxhunt.evaluate.table import format_results
    from foxhunt.train.device import resolve_device

    paths = _bars_or_store(parquet_file, features)
    _set_threads(threads)
    result = evaluate_run(model, paths, out_dir, start, end, batch_size, resolve_device(device), forecasts,
                          calibrate=not no_calibration, features=features)
    typer.echo(format_results(result))
    typer.echo(f"wrote {out_dir / 'metrics.json'} and {out_dir / 'report.html'}")


def _bars_or_store(parquet_file: list[str] | None, features: Path | None) -> tuple[str, ...]:
    """The bar paths of predict and evaluate: none with --features (the bundled sample is not resolved then), and
    both inputs at once refused as train refuses them."""
    if features is None:
        return _paths({"parquet_file": parquet_file})
    if parquet_file:
        from foxhunt.settings import refuse_both_inputs

        refuse_both_inputs()
    return ()


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
    given = _explicit(sub)
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
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where the folds, forecasts.parquet, backtest.json and "
                                          "report.html go; run again with the same options to resume.")],
    folds: Annotated[int, typer.Option(help="Test periods, one after another, ending with the data.")] = 5,
    test_length: Annotated[str, typer.Option(help="Each fold's test period: a count and a unit, min | h | d | w "
                                             "(fixed spans ending just after the last bar) or mo | y (calendar "
                                             "months / years; the last fold is the period holding the last bar).")]
    = "1y",
    val_length: Annotated[str | None, typer.Option(help="Each fold's validation period, just before its test "
                                                   "period (epoch selection, calibration). Default: --test-length.")]
    = None,
    refit: Annotated[str, typer.Option(help="every: each fold trains its own model. once: fold 1 trains (on the "
                                       "data before its validation period) and its model, with its calibration, "
                                       "forecasts every later fold. K (a number): folds 1, 1+K, 1+2K, ... train; "
                                       "each fold between uses the latest of those models.")] = "every",
    window: Annotated[str, typer.Option(help="expanding: each fold trains on everything before its validation "
                                        "period | rolling: on the --train-length before it.")] = "expanding",
    train_length: Annotated[str | None, typer.Option(help="--window rolling: the training period's length (units "
                                                     "as --test-length).")] = None,
    jobs: Annotated[int, typer.Option(help="Train fold models in N processes at once, fewer when the memory plan "
                                      "says they do not fit; the --threads are split between them.")] = 1,
    config: ConfigFile = None,
) -> None:
    """Walk-forward backtest: each fold trains on the data before its validation and test periods (purged as in
    `train`), picks its epoch on validation and forecasts its test period; scores the model and every baseline of
    `evaluate` per fold and overall. Every other option is `foxhunt train`'s (--parquet-file, model and training
    flags), except --train-end, --val-end, --run-dir and --resume, which each fold sets."""
    from foxhunt import settings
    from foxhunt.backtest.config import BacktestConfig
    from foxhunt.backtest.run import run_backtest

    v, _ = _train_options(ctx, config, "backtest")
    _set_verbosity(v)
    bt = BacktestConfig.parse(out_dir, folds, refit, test_length, val_length, window, train_length, jobs)
    train_cfg = settings.train_config(v)
    data_cfg = dataclasses.replace(settings.data_config(v, ()), paths=_paths(v))
    run_backtest(bt, data_cfg, settings.model_config(v, data_cfg), train_cfg)


@app.command(context_settings=PASS_THROUGH)
def tune(
    ctx: typer.Context,
    trials: Annotated[int, typer.Option(help="Trials in the study in total (finished or pruned, counting earlier "
                                        "runs of the same study): run again to continue a killed search.")],
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where trials/, study.db, best.toml, trials.csv and "
                                          "summary.json go.")] = Path("tune"),
    search: Annotated[Path | None, typer.Option(help="Search space TOML: one table per train option, with "
                                                "choices = [...] or low, high (log, step). Default: the README's.")]
    = None,
    timeout: Annotated[float | None, typer.Option(help="Stop starting trials after this many seconds.")] = None,
    storage: Annotated[str | None, typer.Option(help="Optuna storage URL, shared by processes or machines working "
                                                "on one study. Default: sqlite:///OUT_DIR/study.db.")] = None,
    study_name: Annotated[str, typer.Option(help="The study's name in the storage.")] = "foxhunt",
    config: ConfigFile = None,
) -> None:
    """Hyperparameter search (Optuna, extra `tune`): TPE sampling, median pruning on each epoch's validation loss;
    trials train and validate only, never on the test period. Writes best.toml (`foxhunt train --config best.toml`)
    and a table of trials with parameter importance. Every other option is `foxhunt train`'s: the fixed settings
    of every trial (--parquet-file, --train-end / --val-end or --test-fraction, --epochs, ...)."""
    from foxhunt import settings
    from foxhunt.tune.run import TuneConfig, import_optuna, run_tune
    from foxhunt.tune.space import load_space

    import_optuna()  # the one-line install hint before anything else
    v, given = _train_options(ctx, config, "tune")
    _set_verbosity(v)
    space = load_space(search, v.keys())
    cfg = TuneConfig(out_dir=out_dir, trials=trials, timeout=timeout, storage=storage, study_name=study_name,
                     seed=int(v.get("seed", 0)))
    settings.train_config(v)  # every fixed flag is checked before the first trial
    run_tune(cfg, space, v, _paths(v), {k: v[k] for k in given - CONSOLE_FLAGS})


@app.command()
def export(
    model: ModelDir,
    out: Annotated[Path, typer.Option("--out", "-o", help="The .onnx file to write; its sidecar goes next to it "
                                      "(model.onnx.json).")],
    export_format: Annotated[str, typer.Option("--format", help="onnx (the only format so far).")] = "onnx",
    parquet_file: Annotated[list[str] | None, typer.Option(
        "--parquet-file", "-f", help="Bars to check parity on (real windows, besides random ones); repeatable. "
        "Default: random inputs only.")] = None,
    threads: Threads = TD.num_threads,
) -> None:
    """Export the forward pass to ONNX (scaled inputs in, scaled quantiles out) with a sidecar JSON describing the
    inputs, scalers and calibration; fails (exit 1, nothing written) unless onnxruntime matches PyTorch to 1e-5."""
    from foxhunt.export.onnx import export_onnx, require_onnx
    from foxhunt.export.parity import ParityError, real_cases
    from foxhunt.train.checkpoint import load_model

    if export_format != "onnx":
        raise InputError(f"--format {export_format!r} is not supported; use --format onnx")
    require_onnx()  # a missing extra stops before the model is read
    _set_threads(threads)
    lm = load_model(model, "cpu")
    real = None
    if parquet_file:
        from foxhunt.evaluate.predict import prepare_for_model

        real = real_cases(prepare_for_model(lm, tuple(parquet_file)))
    try:
        result = export_onnx(lm, model, out, real)
    except ParityError as e:
        typer.echo(f"foxhunt: error: {e}; nothing was written to {out}", err=True)
        raise typer.Exit(ParityError.exit_code) from None
    p = result.parity
    typer.echo(f"wrote {result.path} and {result.sidecar}; onnxruntime matches PyTorch on "
               f"{', '.join(label for label, _ in p.cases)} windows: max relative error {p.max_relative_error:.2g} "
               f"(limit {p.to_dict()['limit']:g})")


def _set_threads(n: int) -> None:
    if n > 0:
        import torch

        torch.set_num_threads(n)


def _setup_logging() -> None:
    """One console handler on the `foxhunt` logger, showing every INFO record until a command sets a verbosity."""
    from foxhunt.console import ConsoleHandler, console_handler, set_verbosity

    logger = logging.getLogger("foxhunt")
    if console_handler() is None:
        logger.addHandler(ConsoleHandler())
    set_verbosity(None)  # main() may run many commands in one process (tests): each starts from the default
    logger.setLevel(logging.INFO)
    logger.propagate = False


DEBUG_FLAG = "--debug"


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option(DEBUG_FLAG, help="Show the Python traceback of an error (accepted anywhere "
                                        "on the command line).")] = False,
) -> None:
    """Temporal Fusion Transformers on futures bars."""


def main(argv: list[str] | None = None) -> int:
    """Run the CLI in-process; returns the exit status instead of raising SystemExit.

    0 done; 2 bad input; 1 a runtime failure (a file that cannot be written, an unexpected error); 3 does not fit in
    memory; 128 + N stopped by signal N (130 SIGINT, 143 SIGTERM). Each failure is one line on stderr, with the
    traceback only under --debug."""
    args = sys.argv[1:] if argv is None else list(argv)
    debug = DEBUG_FLAG in args
    args = [a for a in args if a != DEBUG_FLAG]
    process_settings(args[0] if args else "")  # OpenMP and polars' allocator: before a command imports torch, polars
    _setup_logging()
    logging.raiseExceptions = debug  # a log line that cannot be written (full disk) must not print a traceback
    from foxhunt.console import highlight
    from foxhunt.train.interrupt import Interrupted

    def fail(line: str, e: BaseException, code: int) -> int:
        if debug:
            traceback.print_exception(e, file=sys.stderr)
        print(highlight(f"foxhunt: {line}", "ERROR", sys.stderr), file=sys.stderr)
        return code

    try:
        result = app(args=args, prog_name="foxhunt", standalone_mode=False)
        return int(result) if isinstance(result, int) else 0
    except InputError as e:
        return fail(f"error: {e}", e, InputError.exit_code)
    except ResourceError as e:
        return fail(f"out of memory: {e}", e, ResourceError.exit_code)
    except NonFiniteError as e:
        return fail(f"not finite: {e}", e, NonFiniteError.exit_code)
    except WriteError as e:
        return fail(f"error: {e}", e, WriteError.exit_code)
    except Interrupted as e:
        return fail(str(e), e, e.exit_code)
    except RankLost as e:  # its line is on the console already: logged when the peer was lost, in case torchrun's
        if debug:  # SIGTERM to the remaining ranks ends this process before it gets here
            traceback.print_exception(e, file=sys.stderr)
        return RankLost.exit_code
    except KeyboardInterrupt as e:
        return fail("interrupted (a training run says how to resume; other commands leave no partial output)", e,
                    130)
    except typer.Exit as e:
        return int(e.exit_code or 0)
    except typer.Abort:
        return 1
    except ClickException as e:  # usage errors (unknown flag, bad value): click prints them itself
        e.show()
        return int(getattr(e, "exit_code", 2) or 2)
    except OSError as e:  # reading or writing outside the atomic writers (permissions, a vanished file)
        where = f"{e.filename}: " if e.filename else ""
        return fail(f"error: {where}{e.strerror or e}; check the path and its permissions", e, 1)
    except Exception as e:  # a bug: still one line, the traceback with --debug
        first = str(e).splitlines()[0] if str(e) else ""
        return fail(f"internal error: {type(e).__name__}: {first} (rerun with {DEBUG_FLAG} for the traceback)", e, 1)
