"""What a saved model forecasts from: bars featurized exactly as its training data (or a feature store prepared with
its data options), checked against its feature schema, and the origins to forecast (by --start / --end, or each
series' last bar: the live forecast)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

import torch

from foxhunt.data.bars.load import LoadedBars, load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import FEATURIZING, FittedTransform, PreparedData
from foxhunt.data.dataset.windows import id_chunks
from foxhunt.data.prepare import prepare_from_bars
from foxhunt.errors import InputError
from foxhunt.model.saved import LoadedModel
from foxhunt.predict.bar_range import check_history, check_saved_paths, window_note

log = logging.getLogger("foxhunt.evaluate")


def parse_time(text: str | None, flag: str, end: bool = False) -> int | None:
    """ISO date or datetime (UTC when naive) -> ns. A bare date as --end includes that whole day."""
    if text is None:
        return None
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"{flag} {text!r} is not an ISO date or datetime (e.g. 2016-01-01)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    if end and len(text) <= 10:
        t += dt.timedelta(days=1)
    return int(t.timestamp() * 1e9)


def with_sources(lm: LoadedModel, covariates: tuple[str, ...] | None = None, events: str | None = None) -> LoadedModel:
    """`lm` reading the user's inputs from these --covariates files and --events calendar instead of the training
    run's (saved in its data options; the calendar itself in model.json); says which it uses."""
    inputs = lm.transform.inputs
    if inputs is None:
        if covariates or events:
            raise InputError(f"--covariates / --events: the model {lm.root or ''} was trained without "
                             "inputs of your own, so it has none to read; drop them")
        return lm
    cfg = lm.data_cfg
    if covariates:
        cfg = dataclasses.replace(cfg, covariates=tuple(covariates))
    else:
        _check_saved_sources(lm)
    # the calendar saved with the model unless --events names another: the training run's file is not read again
    cfg = dataclasses.replace(cfg, events=events or None)
    named = [*inputs.observed, *inputs.observed_cat, *inputs.known, *inputs.known_cat]
    if named:
        log.info("your inputs %s from %s%s", ", ".join(named), ", ".join(cfg.covariates) or "the bar files",
                 "" if covariates else " (the training run's --covariates)")
    if inputs.events is not None:
        log.info("events from %s", events or "the calendar saved with the model (model.json)")
    return dataclasses.replace(lm, data_cfg=cfg)


def _check_saved_sources(lm: LoadedModel) -> None:
    """The training run's --covariates, as its model saved them, can be read: a model from before they were saved
    absolute holds them as typed, relative to the directory training ran in, and is read from here."""
    where = f"{lm.root / 'model.json'}" if lm.root is not None else "the model"
    check_saved_paths(tuple(lm.data_cfg.covariates), f"the training run's --covariates, saved in {where}, are not "
                      "found", "point at the file with --covariates PATH (Python: Forecaster.load(..., "
                      "covariates=[PATH]))")


def prediction_config(lm: LoadedModel, paths: tuple[str, ...]) -> DataConfig:
    """The model's own data options (columns, time zone, contracts, features) for bars at `paths`, within its data
    window (predict/bar_range.py: the training run's --since / --until, or what `with_window` set), without splits and
    without its feature store (forecasts read the bars)."""
    return dataclasses.replace(lm.data_cfg, paths=paths, train_end=None, val_end=None, features=None)


def prepare_for_model(lm: LoadedModel, paths: tuple[str, ...]) -> PreparedData:
    """Bar files featurized exactly as the model's training data, every bar an origin (see `prepare_loaded`)."""
    cfg = prediction_config(lm, paths)
    note = window_note(lm)
    if note:
        log.info("%s", note)
    return prepare_loaded(lm, load_bars(cfg, lm.transform.bar_spacing_ns, lm.transform.contract_roots()), paths)


def prepare_loaded(lm: LoadedModel, loaded: LoadedBars, where: tuple[str, ...], frame: Any = None) -> PreparedData:
    """Loaded bars (from files or a frame in memory, named by `where` in errors; `frame`: that frame, whose columns
    stand for the bar files' own) featurized with the model's transform, every bar with a full encoder an origin;
    refused unless the features are the model's."""
    cfg = prediction_config(lm, where)
    check_history(loaded, lm)
    data = prepare_from_bars(loaded, cfg, transform=lm.transform, for_prediction=True,
                             bar_frame=None if frame is None else (where[0], frame))
    check_schema(lm, data, where)
    data.windows.check_codes(lm.schema, "the model's embedding table")  # the model's, not the data's own schema
    return data


def store_for_model(lm: LoadedModel, store: Path) -> PreparedData:
    """A feature store (`foxhunt prepare`) as prediction data, memory-mapped: every window of it an origin. A store's
    windows end `horizon` bars before its last bar (each needs its targets), so it has no live origin. Refused unless
    the store was featurized as the model's data: the same transform (series, scalers, bar spacing) and features."""
    from foxhunt.data.store.read import open_store

    data = open_store(Path(store))
    if _transform_text(data.transform) != _transform_text(lm.transform):
        raise InputError(f"--features {store}: prepared with other series, scalers or bar spacing than the model was "
                         "trained with; predict from the bars with --parquet-file, or from a store prepared with the "
                         "model's data options")
    check_schema(lm, data, (str(store),))
    data.windows.check_codes(lm.schema, "the model's embedding table")
    every = torch.arange(len(data.windows.starts), dtype=torch.int64)  # (W,) all windows, in series then time order
    return dataclasses.replace(data, splits={**data.splits, "test": every})


def _transform_text(transform: FittedTransform) -> str:
    """A transform and the options it featurizes by (types.FEATURIZING) as canonical JSON: a model's and a store's
    both went through JSON, so equal fits give equal text. Without the contracts decision (roots_apart /
    roots_rolled): the series it gave are in the vocabulary; without the inputs' `sources`."""
    fitted = {k: v for k, v in transform.to_dict().items() if k not in ("roots_apart", "roots_rolled")}
    if fitted.get("inputs"):  # where the --covariates files were (as typed, or absolute) featurizes nothing
        fitted["inputs"] = {k: v for k, v in fitted["inputs"].items() if k != "sources"}
    options = {k: getattr(transform.data, k) for k in FEATURIZING}
    return json.dumps({**fitted, "options": options}, sort_keys=True)


def live_origins(data: PreparedData) -> torch.Tensor:
    """(S,) the window of each series whose origin is its last bar: the live forecast."""
    ids = data.splits["test"]
    series = data.windows.series_index(ids)  # (W,) sorted by series, then time
    last = torch.ones(len(ids), dtype=torch.bool)
    last[:-1] = series[1:] != series[:-1]
    return ids[last]


def check_schema(lm: LoadedModel, data: PreparedData, paths: tuple[str, ...]) -> None:
    """The features built from these bars must be the model's, in the model's order: a mismatch would feed columns
    into the wrong inputs and forecast nonsense without an error."""
    # Name, role and kind: the codes' range against the model's tables is the bounds check's job (check_codes).
    want, got = ([(f.name, f.role, f.kind) for f in sch.features] for sch in (lm.schema, data.schema))
    if want == got:
        return
    diff = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), min(len(want), len(got)))
    expected = want[diff][0] if diff < len(want) else "nothing more"
    found = got[diff][0] if diff < len(got) else "nothing more"
    raise InputError(f"{', '.join(paths)}: features do not match the model's (input {diff + 1}: the model expects "
                     f"{expected!r}, these bars give {found!r}); predict with the model trained on such bars, or "
                     "retrain on them")


def select_origins(data: PreparedData, start_ns: int | None, end_ns: int | None) -> torch.Tensor:
    """Windows whose first forecast bar lies in [start, end) (the live forecast after the last bar included), read
    a chunk of windows at a time (`id_chunks`)."""
    ids = data.splits["test"]
    parts = []
    for part in id_chunks(ids):
        first = data.windows.target_ns(part, extrapolated=True)[:, 0]  # (chunk,)
        keep = torch.ones(len(part), dtype=torch.bool)
        if start_ns is not None:
            keep &= first >= start_ns
        if end_ns is not None:
            keep &= first < end_ns
        parts.append(part[keep])
    chosen = torch.cat(parts) if parts else ids
    if len(chosen) == 0:
        raise InputError("no forecast origin falls within --start/--end; widen the dates or check the file's range")
    return chosen

