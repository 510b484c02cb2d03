"""The commands that use a trained model or run: `predict`, `evaluate`, `export`, `memory-report`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from foxhunt.cli.app import app
from foxhunt.cli.options import (
    CONSOLE_OPTIONS,
    EVALUATE_OPTIONS,
    PARQUET_FILE,
    PREDICT_OPTIONS,
    THREADS,
    ModelDir,
    Quiet,
    Threads,
    Timezone,
    Verbose,
    attach,
)
from foxhunt.cli.wiring import bars_or_store, given, set_threads, set_verbosity
from foxhunt.errors import InputError
from foxhunt.flags import DATA, OUTPUT
from foxhunt.train.config import TrainConfig

TD = TrainConfig()


@app.command()
@attach((PARQUET_FILE,), PREDICT_OPTIONS, (THREADS,), CONSOLE_OPTIONS)
def predict(ctx: typer.Context, **options: Any) -> None:
    """Write quantile forecasts for every origin.

    Every origin with a full encoder, including the live one after the last bar (from a feature store, its
    windows' origins); calibrated (--calibration) unless --no-calibration. Reads the bars from the model's
    --since on (its inputs may start there), up to the last bar."""
    from foxhunt.api.forecaster import Forecaster
    from foxhunt.predict.config import PredictConfig
    from foxhunt.train.device import resolve_device

    cfg, paths = _forecast_options(ctx, PredictConfig)
    fc = Forecaster.load(cfg.model, resolve_device(cfg.device), covariates=cfg.covariates, events=cfg.events,
                         since=cfg.since, until=cfg.until, timezone=cfg.timezone, calibration=cfg.method)
    origins, applied = fc.write_forecasts(paths, cfg.out, cfg.start, cfg.end, cfg.batch_size, features=cfg.features)
    how = "uncalibrated" if applied == "none" else f"calibrated ({applied} shifts)"
    typer.echo(f"wrote {origins * fc.horizon:,} forecast rows ({origins:,} origins), {how}, to {cfg.out}")


@app.command()
@attach((PARQUET_FILE,), EVALUATE_OPTIONS, (THREADS,), CONSOLE_OPTIONS)
def evaluate(ctx: typer.Context, **options: Any) -> None:
    """Score forecasts against the target and the baselines.

    The realised target and the baselines on the same origins; writes a report. Without --start, scores only
    origins after the model's validation period when the bars reach past it (the calibration was fitted on that
    period). Reads the bars from the model's --since on, up to the last bar."""
    from foxhunt.data.io.sample_path import is_bundled_sample
    from foxhunt.evaluate.config import EvaluateConfig
    from foxhunt.evaluate.run import evaluate_run
    from foxhunt.evaluate.table import format_results

    cfg, paths = _forecast_options(ctx, EvaluateConfig)
    result = evaluate_run(cfg, paths)
    typer.echo(format_results(result, simulated=is_bundled_sample(paths)))
    typer.echo(f"wrote {cfg.out_dir / 'metrics.json'} and {cfg.out_dir / 'report.html'}")


C = TypeVar("C")


def _forecast_options(ctx: typer.Context, cls: type[C]) -> tuple[C, tuple[str, ...]]:
    """predict's or evaluate's record of its options, validated, and the bar paths (none with --features); the
    console's verbosity and torch's threads set."""
    from foxhunt import settings

    v = given(ctx, None)  # typed: the rest are the fields' defaults
    set_verbosity(v, every_info=True)
    cfg = settings.build(cls, v)  # the options checked before the bars are looked for
    paths = bars_or_store(v.get("parquet_file"), v.get("features"), v.get("model"))
    set_threads(ctx.params["threads"])
    return cfg, paths


@app.command()
def export(
    model: ModelDir,
    out: Annotated[Path, typer.Option("--out", "-o", help="The .onnx file to write (sidecar: .onnx.json).",
                                      metavar="PATH", rich_help_panel=OUTPUT)],
    export_format: Annotated[str, typer.Option("--format", help="onnx (the only format so far).", metavar="FMT",
                                               rich_help_panel=OUTPUT)] = "onnx",
    parquet_file: Annotated[list[str] | None, typer.Option(
        "--parquet-file", "-f", help="Bars to check parity on, besides random inputs.", metavar="PATH",
        rich_help_panel=DATA)] = None,
    timezone: Timezone = None,
    threads: Threads = TD.num_threads,
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> None:
    """Export the model's forward pass to ONNX.

    Scaled inputs in, scaled quantiles out, with a sidecar JSON describing the inputs, scalers and calibration;
    fails (exit 1, nothing written) unless onnxruntime matches PyTorch to 1e-5."""
    from foxhunt.export.onnx import export_onnx, require_onnx
    from foxhunt.export.parity import ParityError, real_cases
    from foxhunt.model.saved import load_model
    from foxhunt.predict.bar_range import in_zone

    if export_format != "onnx":
        raise InputError(f"--format {export_format!r} is not supported; use --format onnx")
    set_verbosity({"verbose": verbose, "quiet": quiet}, every_info=True)
    require_onnx()  # a missing extra stops before the model is read
    set_threads(threads)
    lm = in_zone(load_model(model, "cpu"), timezone)
    real = None
    if parquet_file:
        from foxhunt.predict.origins import prepare_for_model

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



@app.command("memory-report")
def memory_report_cmd(run_dir: Annotated[Path, typer.Argument(help="A run directory with memory.jsonl.",
                                                               metavar="RUN_DIR")]) -> None:
    """Memory per phase (peak, growth) of a run.

    From the run's memory.jsonl; writes memory.png beside it."""
    from foxhunt.evaluate.memory_report import memory_report

    table, png = memory_report(run_dir)
    typer.echo(table)
    typer.echo(f"wrote {png}")

