"""What the commands share besides their options: the values with --config, the verbosity, the bar paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from foxhunt.errors import InputError


def values(ctx: typer.Context, config: Path | None) -> dict[str, Any]:
    """This command's option values, with --config filling what was not typed."""
    from foxhunt.settings import load_config_file, merge

    given = dict(ctx.params)
    if config is None:
        return given
    return merge(given, load_config_file(config, given.keys()), explicit(ctx))


def given(ctx: typer.Context, config: Path | None) -> dict[str, Any]:
    """The options typed on the command line or set in --config (typed ones win): what a command passes on, the
    rest taking the defaults their fields declare."""
    from foxhunt.settings import load_config_file

    typed = {k: ctx.params[k] for k in explicit(ctx)}
    return typed if config is None else {**load_config_file(config, ctx.params.keys()), **typed}


def explicit(ctx: typer.Context) -> set[str]:
    """The options typed on the command line (not defaults)."""
    return {k for k in ctx.params if (src := ctx.get_parameter_source(k)) is not None and src.name != "DEFAULT"}


def set_verbosity(v: dict[str, Any], every_info: bool = False) -> None:
    """The console's verbosity from -v / -q, the same in every command. Without either, the training commands show
    the NORMAL lines and the others (`every_info`) every INFO record, as they always have."""
    from foxhunt.console import NORMAL, QUIET, VERBOSE
    from foxhunt.console import set_verbosity as set_level

    if v.get("verbose") and v.get("quiet"):
        raise InputError("--verbose and --quiet contradict each other; pass one of them")
    set_level(VERBOSE if v.get("verbose") else QUIET if v.get("quiet") else None if every_info else NORMAL)


def paths(v: dict[str, Any]) -> tuple[str, ...]:
    from foxhunt.api.training import data_paths

    return data_paths(v.get("parquet_file"))


def bars_or_store(parquet_file: list[str] | None, features: Path | None, model: Path | None = None
                  ) -> tuple[str, ...]:
    """The bar paths of predict and evaluate: none with --features, and both inputs at once refused as train
    refuses them; without either, the bars `model` was trained on (predict/bar_range.training_bars)."""
    if features is None and not parquet_file and model is not None:
        from foxhunt.predict.bar_range import training_bars

        return training_bars(model)
    if features is None:
        return paths({"parquet_file": parquet_file})
    if parquet_file:
        from foxhunt.api.training import refuse_both_inputs

        refuse_both_inputs()
    return ()


def set_threads(n: int) -> None:
    if n > 0:
        import torch

        torch.set_num_threads(n)
