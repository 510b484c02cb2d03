"""The bars a saved model reads: from its training run's --since unless --since says otherwise, up to the newest bar
unless --until says otherwise.

A run trained with --since saw bars from then on only: an input of its own may have no value before then (a
covariate that starts years after the bars), and its trailing volatilities started there, so reading from the same
bar gives every origin of its period the inputs it was trained on. Its --until bounded what it trained on, not what
it forecasts: new bars are what forecasts are for. A run whose window is read as saved (`load_model` alone: a
backtest fold's, whose --since / --until are the backtest's, or export's parity bars) keeps both bounds.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import polars as pl
import torch

from foxhunt.data.bars.load import LoadedBars
from foxhunt.data.dataset.summary import iso
from foxhunt.data.dataset.types import PreparedData
from foxhunt.errors import InputError
from foxhunt.model.saved import LoadedModel

log = logging.getLogger("foxhunt.evaluate")
MODELS = "the model's "


def with_window(lm: LoadedModel, since: str | None = None, until: str | None = None,
                timezone: str | None = None) -> LoadedModel:
    """`lm` reading bars from `since` (None: the model's own --since) up to before `until` (None: the newest bar),
    their naive times (and those of the --covariates files, as in training) in `timezone` (None: the model's own
    --timezone). Bad dates or zones are an InputError naming the flag (DataConfig)."""
    cfg = in_zone(lm, timezone).data_cfg
    return dataclasses.replace(lm, data_cfg=dataclasses.replace(cfg, since=since or cfg.since, until=until or None))


def in_zone(lm: LoadedModel, timezone: str | None) -> LoadedModel:
    """`lm` reading naive times in `timezone` (--timezone of predict, evaluate and export: a file written in another
    zone than the model's bars); `lm` itself for None. A bad zone is an InputError naming --timezone."""
    if timezone is None:
        return lm
    return dataclasses.replace(lm, data_cfg=dataclasses.replace(lm.data_cfg, timezone=timezone))


def check_saved_paths(paths: tuple[str, ...], lead: str, fix: str) -> None:
    """Paths a model's run saved (an option of its training run, as model.json holds it) can be read; else one line:
    `lead`, the paths not found and why (an absolute path: moved or deleted since training; an older run's relative
    one: relative to where training ran, read from here), and `fix`, which names the flag that points elsewhere."""
    from foxhunt.data.io.discover import expand_sources

    missing = []
    for path in paths:
        try:
            expand_sources([path])
        except InputError:
            missing.append(path)
    if missing:
        why = ("moved or deleted since training" if all(Path(p).is_absolute() for p in missing) else
               f"as typed, relative to where training ran; not found from {Path.cwd()}")
        raise InputError(f"{lead}: {', '.join(missing)} ({why}); {fix}")


def training_bars(model_dir: Path) -> tuple[str, ...]:
    """The bars to read when none are named: the files the model's run was trained on (model.json's data paths,
    absolute since runs save them so; an older run's relative ones from the working directory), said in one line;
    the bundled sample for a model trained on it. InputError when those files are gone. () when the directory holds
    no readable model.json: loading the model says what is wrong with it."""
    from foxhunt.data.io.sample_path import is_bundled_sample

    try:
        paths = tuple(json.loads((Path(model_dir) / "model.json").read_text(encoding="utf-8"))["data"]["paths"])
    except (OSError, ValueError, KeyError, TypeError):
        return ()
    if is_bundled_sample(paths):
        from foxhunt.data.io.sample import bundled_sample_path

        path = bundled_sample_path()  # made again where this cache has none: the sample is seeded
        log.info("no --parquet-file given: the model was trained on the bundled ES sample; reading it (%s)", path)
        return (str(path),)
    check_saved_paths(paths, "no --parquet-file given, and the bars the model was trained on are not found",
                      "they are its run's --parquet-file; pass --parquet-file PATH with the bars to read")
    log.info("no --parquet-file given: reading the bars the model was trained on, %s (its run's --parquet-file)",
             ", ".join(paths))
    return paths


def trained_window(lm: LoadedModel) -> tuple[str | None, str | None]:
    """The --since / --until the model's run was trained with (model.json), whatever `lm` reads now."""
    saved = lm.meta.get("data", {})
    return saved.get("since"), saved.get("until")


def since_text(lm: LoadedModel) -> str:
    """'the model's --since 2014-01-06' or '--since 2016-01-04': the first bar read, and who chose it."""
    since = lm.data_cfg.since
    return f"{MODELS if since == trained_window(lm)[0] else ''}--since {since}"


def window_note(lm: LoadedModel) -> str | None:
    """The console's line about which bars `lm` reads (`window_text`, against the model's own window)."""
    return window_text(lm.data_cfg.since, lm.data_cfg.until, *trained_window(lm))


def window_text(since: str | None, until: str | None, model_since: str | None = None,
                model_until: str | None = None) -> str | None:
    """'reading bars since 2014-01-06 (the model's --since)', '... until 2019-01-01 (--until)', or that the model's
    --until does not bound them; None when every bar is read."""
    parts = []
    if since:
        own = since == model_since
        theirs = f"; {MODELS.strip()}: {model_since}" if model_since and not own else ""
        parts.append(f"since {since} ({MODELS if own else ''}--since{theirs})")
    if until:
        parts.append(f"until {until} ({MODELS if until == model_until else ''}--until)")
    elif model_until:
        parts.append(f"to the last bar (the model's --until {model_until} bounded its training, not its forecasts)")
    return f"reading bars {' '.join(parts)}" if parts else None


def check_history(loaded: LoadedBars, lm: LoadedModel) -> None:
    """One line naming --since when the bars since it leave no series an encoder's worth (the first bar has no
    return, so E + 1 bars); without --since the dataset's own length check speaks."""
    cfg = lm.data_cfg
    if cfg.since is None:
        return
    need = cfg.encoder_length + 1
    counts = loaded.bars.group_by("series").agg(pl.len().alias("n"), pl.col("ts").min().alias("first"),
                                                 pl.col("ts").max().alias("last"))
    longest = counts.sort(["n", "series"], descending=[True, False]).row(0, named=True)
    if longest["n"] >= need:
        return
    raise InputError(
        f"{since_text(lm)} leaves {longest['n']} bars in the longest series, {longest['series']} "
        f"({longest['first']:%Y-%m-%d} .. {longest['last']:%Y-%m-%d}), fewer than the {need} a forecast needs "
        f"(the model's encoder {cfg.encoder_length} + 1: the first bar has no return); pass an earlier --since")


def check_start(data: PreparedData, start_ns: int | None, start: str | None, lm: LoadedModel) -> None:
    """A warning when --start (the first forecast bar) comes before the first forecast that the bars since
    --since allow: each origin needs the encoder's bars first, so forecasts start later than asked."""
    ids, cfg = data.splits["test"], lm.data_cfg
    if start_ns is None or cfg.since is None or not len(ids):
        return
    series = data.windows.series_index(ids)  # (W,) sorted by series, then time
    first = torch.ones(len(ids), dtype=torch.bool)
    first[1:] = series[1:] != series[:-1]
    earliest = int(data.windows.target_ns(ids[first], extrapolated=True)[:, 0].min())  # each series' first forecast
    if start_ns < earliest:
        log.warning("--start %s comes before the first forecast that the bars since %s allow, %s (each origin "
                    "reads %d encoder bars first); forecasts start there: pass an earlier --since for earlier ones",
                    start, since_text(lm), _day(earliest), cfg.encoder_length)


def _day(ns: int) -> str:
    """'2014-02-24' for a bar at midnight UTC, else the full time."""
    return iso(ns).removesuffix("T00:00:00Z")
