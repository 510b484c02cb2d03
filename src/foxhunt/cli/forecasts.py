"""The commands that use a trained model or run: `predict`, `evaluate`, `export`, `memory-report`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from foxhunt.cli.app import app
from foxhunt.cli.options import (
    BatchSize,
    CalibrationMethod,
    Covariates,
    Device,
    End,
    Events,
    ModelDir,
    NoCalibration,
    ParquetFile,
    Quiet,
    Since,
    Start,
    Threads,
    Until,
    Verbose,
)
from foxhunt.cli.wiring import bars_or_store, calibration_method, set_threads, set_verbosity
from foxhunt.errors import InputError
from foxhunt.flags import DATA, FORECASTS, OUTPUT
from foxhunt.model.config import DEFAULT_METHOD
from foxhunt.train.config import TrainConfig

TD = TrainConfig()


@app.command()
def predict(
    model: ModelDir,
    out: Annotated[Path, typer.Option("--out", "-o", help="Forecasts parquet to write.", metavar="PATH",
                                      rich_help_panel=OUTPUT)],
    parquet_file: ParquetFile = None,
    features: Annotated[Path | None, typer.Option(help="Forecast a `foxhunt prepare` store's windows.",
                                                  metavar="PATH", rich_help_panel=DATA)] = None,
    since: Since = None,
    until: Until = None,
    start: Start = None,
    end: End = None,
    batch_size: BatchSize = 1024,
    device: Device = "cpu",
    threads: Threads = TD.num_threads,
    calibration: CalibrationMethod = DEFAULT_METHOD,
    no_calibration: NoCalibration = False,
    covariates: Covariates = None,
    events: Events = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> None:
    """Write quantile forecasts for every origin.

    Every origin with a full encoder, including the live one after the last bar (from a feature store, its
    windows' origins); calibrated (--calibration) unless --no-calibration. Reads the bars from the model's
    --since on (its inputs may start there), up to the last bar."""
    from foxhunt.api.forecaster import Forecaster
    from foxhunt.evaluate.window import refuse_window
    from foxhunt.train.device import resolve_device

    set_verbosity({"verbose": verbose, "quiet": quiet}, every_info=True)
    paths = bars_or_store(parquet_file, features)
    if features is not None:
        refuse_window(since, until)
    method = calibration_method(calibration, no_calibration)
    set_threads(threads)
    fc = Forecaster.load(model, resolve_device(device), covariates=covariates, events=events, since=since,
                         until=until, calibration=method)
    origins, applied = fc.write_forecasts(paths, out, start, end, batch_size, features=features)
    how = "uncalibrated" if applied == "none" else f"calibrated ({applied} shifts)"
    typer.echo(f"wrote {origins * fc.horizon:,} forecast rows ({origins:,} origins), {how}, to {out}")


@app.command()
def evaluate(
    model: ModelDir,
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where metrics.json, report.html etc. go.",
                                          metavar="PATH", rich_help_panel=OUTPUT)],
    parquet_file: ParquetFile = None,
    features: Annotated[Path | None, typer.Option(help="Score on a `foxhunt prepare` store's windows.",
                                                  metavar="PATH", rich_help_panel=DATA)] = None,
    since: Since = None,
    until: Until = None,
    start: Annotated[str | None, typer.Option(help="First forecast bar on or after this ISO date/time.",
                                              metavar="DATE", rich_help_panel=FORECASTS,
                                              show_default="after validation")] = None,
    end: End = None,
    forecasts: Annotated[Path | None, typer.Option(help="Score these forecasts instead of predicting.",
                                                   metavar="PATH", rich_help_panel=FORECASTS)] = None,
    batch_size: BatchSize = 1024,
    device: Device = "cpu",
    threads: Threads = TD.num_threads,
    calibration: CalibrationMethod = DEFAULT_METHOD,
    no_calibration: NoCalibration = False,
    covariates: Covariates = None,
    events: Events = None,
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> None:
    """Score forecasts against the target and the baselines.

    The realised target and the baselines on the same origins; writes a report. Without --start, scores only
    origins after the model's validation period when the bars reach past it (the calibration was fitted on that
    period). Reads the bars from the model's --since on, up to the last bar."""
    from foxhunt.data.io.sample_path import is_bundled_sample
    from foxhunt.evaluate.run import evaluate_run
    from foxhunt.evaluate.table import format_results
    from foxhunt.train.device import resolve_device

    set_verbosity({"verbose": verbose, "quiet": quiet}, every_info=True)
    paths = bars_or_store(parquet_file, features)
    method = calibration_method(calibration, no_calibration)
    set_threads(threads)
    result = evaluate_run(model, paths, out_dir, start, end, batch_size, resolve_device(device), forecasts,
                          calibration=method, features=features,
                          covariates=tuple(covariates) if covariates else None, events=events, since=since,
                          until=until)
    typer.echo(format_results(result, simulated=is_bundled_sample(paths)))
    typer.echo(f"wrote {out_dir / 'metrics.json'} and {out_dir / 'report.html'}")



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
    threads: Threads = TD.num_threads,
    verbose: Verbose = False,
    quiet: Quiet = False,
) -> None:
    """Export the model's forward pass to ONNX.

    Scaled inputs in, scaled quantiles out, with a sidecar JSON describing the inputs, scalers and calibration;
    fails (exit 1, nothing written) unless onnxruntime matches PyTorch to 1e-5."""
    from foxhunt.export.onnx import export_onnx, require_onnx
    from foxhunt.export.parity import ParityError, real_cases
    from foxhunt.train.checkpoint import load_model

    if export_format != "onnx":
        raise InputError(f"--format {export_format!r} is not supported; use --format onnx")
    set_verbosity({"verbose": verbose, "quiet": quiet}, every_info=True)
    require_onnx()  # a missing extra stops before the model is read
    set_threads(threads)
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



@app.command("memory-report")
def memory_report_cmd(run_dir: Annotated[Path, typer.Argument(help="A run directory with memory.jsonl.",
                                                               metavar="RUN_DIR")]) -> None:
    """Memory per phase (peak, growth) of a run.

    From the run's memory.jsonl; writes memory.png beside it."""
    from foxhunt.evaluate.memory_report import memory_report

    table, png = memory_report(run_dir)
    typer.echo(table)
    typer.echo(f"wrote {png}")

