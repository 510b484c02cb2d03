"""The commands that read bars without training: `prepare` (the feature store), `inspect`, `sample`,
`plan-memory`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from foxhunt.cli.app import app
from foxhunt.cli.options import (
    CONFIG,
    CONSOLE_OPTIONS,
    DATA_OPTIONS,
    MEMORY_OPTIONS,
    MODEL_OPTIONS,
    THREADS,
    ConfigFile,
    attach,
)
from foxhunt.cli.wiring import paths, set_threads, set_verbosity, values
from foxhunt.flags import OUTPUT, WORKERS


@app.command()
@attach(DATA_OPTIONS, CONSOLE_OPTIONS)
def prepare(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", "-o", help="The feature store to write (a folder, replaced).",
                                      metavar="PATH", rich_help_panel=OUTPUT)],
    workers: Annotated[int, typer.Option(min=0, help="Processes preparing series groups (0: in memory).",
                                         metavar="N", rich_help_panel=WORKERS)] = 2,
    executor: Annotated[str, typer.Option(help="local, or dask://HOST:PORT (extra: cluster).", metavar="WHERE",
                                          rich_help_panel=WORKERS)] = "local",
    config: ConfigFile = None,
    **options: Any,
) -> None:
    """Compute the features once into a memory-mapped store.

    It is read by `foxhunt train --features` (and predict, evaluate): the row tensors, window index, splits,
    scalers, schema, data summary, roll table and what the baselines read (docs/reference/store-format.md)."""
    from foxhunt import settings
    from foxhunt.data.prepare.executor import may_piece, open_workers

    v = values(ctx, config)
    set_verbosity(v, every_info=True)
    cfg, workers = settings.data_config(v, paths(v)), int(v.get("workers", 2))
    executor = str(v.get("executor", "local"))
    # Started before the command's imports, so that its processes import while this one does; none for a panel
    # prepared whole (small, or kept whole by an option: may_piece, from the files' sizes alone).
    with open_workers(executor, workers if may_piece(cfg) else min(workers, 1)) as pool:
        from foxhunt.data.prepare import prepare_store

        manifest = prepare_store(cfg, out, workers=workers, pool=pool, executor=executor)
    from foxhunt.data.dataset.summary import windows_text

    size = sum(f.stat().st_size for f in out.iterdir())
    typer.echo(f"wrote the feature store {out}: {manifest['summary']['rows']:,} rows, "
               f"{windows_text(manifest['summary'])}; {size / 2**20:,.1f} MiB; "
               f"train with `foxhunt train --features {out}`")



@app.command()
@attach(DATA_OPTIONS, CONSOLE_OPTIONS)
def inspect(
    ctx: typer.Context,
    files: Annotated[list[str] | None, typer.Argument(help="Files, folders or globs (default: the sample).",
                                                           metavar="FILES")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.", rich_help_panel=OUTPUT)]
    = False,
    **options: Any,
) -> None:
    """Show what the loader sees, without training.

    Rows, series, contracts, rolls and windows per split."""
    from foxhunt import settings
    from foxhunt.data.dataset.summary import format_summary
    from foxhunt.data.prepare import prepare_data

    v = dict(ctx.params)
    set_verbosity(v, every_info=True)
    v["parquet_file"] = (files or []) + (v["parquet_file"] or [])
    data = prepare_data(settings.data_config(v, paths(v)))
    if as_json:
        typer.echo(json.dumps({**data.summary, "rolls": data.rolls}, indent=2, default=str))
    else:
        typer.echo(format_summary(data.summary))


@app.command()
def sample(
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the sample parquet.",
                                      metavar="PATH", rich_help_panel=OUTPUT)],
    announcements: Annotated[bool, typer.Option(
        "--announcements", help="Add announced volatility bursts; X.events.parquet beside.",
        rich_help_panel=OUTPUT)] = False,
) -> None:
    """Write the bundled ES 1-minute sample to a parquet file.

    It is in Databento's ohlcv-1m format. Prints the path written (with --announcements: the bars' path, then the
    events file's)."""
    from foxhunt.data.io.sample import events_path, write_sample, write_sample_events

    path = write_sample(out, announcements=announcements)
    typer.echo(str(path))
    if announcements:
        typer.echo(str(write_sample_events(events_path(path))))



@app.command("plan-memory")
@attach(DATA_OPTIONS, MODEL_OPTIONS, MEMORY_OPTIONS, (THREADS,), CONSOLE_OPTIONS, (CONFIG,))
def plan_memory_cmd(ctx: typer.Context, **options: Any) -> None:
    """Peak memory per batch size, and the largest that fits.

    For a training and a validation step."""
    from foxhunt import settings
    from foxhunt.data.prepare import prepare_data
    from foxhunt.model.tft import TemporalFusionTransformer
    from foxhunt.train.batch_sizes import budgeted_plan
    from foxhunt.train.config import parse_size
    from foxhunt.train.device import resolve_device
    from foxhunt.train.precision import resolve_precision

    v = values(ctx, options["config"])
    set_verbosity(v, every_info=True)
    set_threads(int(v["threads"]))
    data_cfg = settings.data_config(v, paths(v))
    model_cfg = settings.model_config(v, data_cfg)
    dev = resolve_device(v["device"])
    precision = resolve_precision(v["precision"], dev)
    data = prepare_data(data_cfg)
    model = TemporalFusionTransformer(data.schema.sizes, model_cfg).to(dev)
    plan = budgeted_plan(model, data.schema.sizes, model_cfg, dev, parse_size(str(v["memory_budget"])),
                         v["optimizer_state"] == "cpu", precision)
    typer.echo(plan.format_table())

