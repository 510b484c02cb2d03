"""Forecasts from a saved model on any bars file: one row per (series, origin, horizon).

The model directory holds everything needed (architecture, weights, feature schema, scalers, and the calibration
fitted after training); no training data is read. Forecasts are calibrated (`--calibration`: adaptive shifts that
follow each outcome, model/adaptive.py, or the fixed ones of model/calibration.py) unless `--no-calibration`; the
parquet file says which in its key-value metadata ("foxhunt": {"calibrated": ..., "calibration": {"method": ...}}).
Adaptive shifts carry each series' state from the end of validation: origins from there to the first one asked for
are forecast too, to advance it, and not written (`lead_in`). Forecasts stream: each batch is predicted, moved to the
host and written to the parquet file before the next one is read, so device memory is flat however many origins
there are. The file is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from foxhunt.atomic import atomic_path
from foxhunt.data.bars.load import LoadedBars, load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import FittedTransform, PreparedData
from foxhunt.data.dataset.windows import id_chunks
from foxhunt.data.features.schema import Kind, Role
from foxhunt.data.prepare import prepare_from_bars
from foxhunt.errors import InputError, ResourceError
from foxhunt.evaluate.interpretation import InterpretationAccumulator
from foxhunt.evaluate.window import check_history, window_note
from foxhunt.model.adaptive import Origins, Runner
from foxhunt.model.calibration import METHODS, Calibration
from foxhunt.train import faults
from foxhunt.train.calibrate import raw_quantiles
from foxhunt.train.checkpoint import LoadedModel
from foxhunt.train.oom import OOM_ERRORS, is_oom, release_memory, rung

log = logging.getLogger("foxhunt.evaluate")


def quantile_column(q: float) -> str:
    """0.1 -> 'p10', 0.025 -> 'p2.5'."""
    return f"p{q * 100:g}"


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


@dataclass
class ForecastBatch:
    series: np.ndarray  # (B,) index into windows.series_names
    window: np.ndarray  # (B,) window ids
    origin_ns: np.ndarray  # (B,)
    target_ns: np.ndarray  # (B, D) the forecast bars' times; beyond the data the grid's (future_timestamps)
    quantiles: np.ndarray  # (B, D, Q) in the target's own units, sorted along Q; calibrated when `raw` is set
    actual: np.ndarray  # (B, D), NaN beyond the data
    filled: np.ndarray | None = None  # (B, D) bool: the actual is a --fill-gaps bar (no trade); None without it
    raw: np.ndarray | None = None  # (B, D, Q) the model's own quantiles when `quantiles` are calibrated


def pick_calibration(lm: LoadedModel, method: str) -> Calibration | Runner | None:
    """`forecast_calibration` without a word: for `Forecaster.load`, which says nothing until asked."""
    if method not in METHODS:
        raise InputError(f"--calibration {method!r} is not one of {', '.join(METHODS)}")
    if method == "none" or lm.calibration is None:
        return None
    return lm.adaptive.runner() if method == "adaptive" and lm.adaptive is not None else lm.calibration


def forecast_calibration(lm: LoadedModel, method: str) -> Calibration | Runner | None:
    """The calibration `method` (model/calibration.METHODS) to apply: the fixed shifts, a Runner of the adaptive
    state, or None (the model's own quantiles); said once: which one, or why there is none. A run whose
    calibration.json predates the adaptive state gets the fixed shifts, with a warning."""
    picked = pick_calibration(lm, method)
    if method == "none":
        log.info("calibration none (--no-calibration): forecasts are the model's own quantiles")
        return None
    cal = lm.calibration
    if cal is None:
        log.warning("%s: forecasts are the model's own quantiles, not calibrated", lm.calibration_note or "no calibration")
        return None
    f = cal.fitted_on
    if isinstance(picked, Runner):
        log.info("calibrated forecasts: adaptive %s shifts per series, started from the fixed ones and followed "
                 "through validation to %s; each later outcome moves them", cal.mode, picked.cal.fitted_on.get("as_of"))
        return picked
    if method == "adaptive":
        log.warning("%s has no adaptive state (fitted before adaptive calibration): fixed shifts instead; retrain "
                    "for adaptive ones", lm.meta.get("run_dir") or "calibration.json")
    log.info("calibrated forecasts: fixed %s conformal shifts fitted on validation origins %s .. %s (%s windows)",
             cal.mode, f.get("first_origin", "?"), f.get("last_origin", "?"), f"{f.get('windows', 0):,}")
    return cal


def calibration_method(cal: Calibration | Runner | None) -> str:
    """Which calibration `forecast_calibration` gave: "adaptive", "fixed" or "none"."""
    return "none" if cal is None else "adaptive" if isinstance(cal, Runner) else "fixed"


def calibration_metadata(cal: Calibration | Runner | None) -> dict[bytes, bytes]:
    """Parquet key-value metadata saying whether the quantile columns are calibrated, and with what."""
    info: dict[str, Any] = {"calibrated": cal is not None}
    if isinstance(cal, Runner):
        info["calibration"] = {"method": "adaptive", "mode": cal.mode, "fitted_on": cal.cal.fitted_on}
    elif cal is not None:
        info["calibration"] = {"method": "fixed", "mode": cal.mode, "fitted_on": cal.fitted_on}
    return {b"foxhunt": json.dumps(info).encode()}


def is_calibrated(path: Path) -> bool | None:
    """What a forecasts file says about itself (None: written before foxhunt said)."""
    meta = pq.read_schema(path).metadata or {}
    try:
        return bool(json.loads(meta[b"foxhunt"])["calibrated"]) if b"foxhunt" in meta else None
    except (ValueError, KeyError, TypeError):
        return None


def with_sources(lm: LoadedModel, covariates: tuple[str, ...] | None = None, events: str | None = None) -> LoadedModel:
    """`lm` reading the user's inputs from these --covariates files and --events calendar instead of the training
    run's (saved in its data options; the calendar itself in model.json); says which it uses."""
    inputs = lm.transform.inputs
    if not inputs:
        if covariates or events:
            raise InputError(f"--covariates / --events: the model {lm.meta.get('run_dir', '')} was trained without "
                             "inputs of your own, so it has none to read; drop them")
        return lm
    cfg = lm.data_cfg
    if covariates:
        cfg = dataclasses.replace(cfg, covariates=tuple(covariates))
    if events:
        cfg = dataclasses.replace(cfg, events=events)
    named = [*inputs["observed"], *inputs.get("observed_cat", ()), *inputs["known"], *inputs.get("known_cat", ())]
    if named:
        log.info("your inputs %s from %s%s", ", ".join(named), ", ".join(cfg.covariates) or "the bar files",
                 "" if covariates else " (the training run's --covariates)")
    if inputs.get("events"):
        log.info("events from %s", events or "the calendar saved with the model (model.json)")
    return dataclasses.replace(lm, data_cfg=cfg)


def prediction_config(lm: LoadedModel, paths: tuple[str, ...]) -> DataConfig:
    """The model's own data options (columns, time zone, contracts, features) for bars at `paths`, within its data
    window (evaluate/window.py: the training run's --since / --until, or what `with_window` set), without splits and
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
    """A transform as canonical JSON: a model's and a store's both went through JSON, so equal fits give equal text.
    Without the contracts decision (roots_apart / roots_rolled): the series it gave are in the vocabulary, and a store
    prepared before it was kept has none."""
    fitted = {k: v for k, v in transform.to_dict().items() if k not in ("roots_apart", "roots_rolled")}
    return json.dumps(fitted, sort_keys=True)


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


class Forecaster:
    """Runs the model over windows batch by batch; counts quantile crossings that it repairs by sorting.

    Out of memory (train/oom.py): the failed batch is retried once, then the batch is halved down to 1 (kept smaller
    for the rest of the pass); at 1 it stops with ResourceError saying what would fit. Rows come out the same either
    way: each window's forecast does not depend on the other windows of its batch.
    """

    def __init__(self, lm: LoadedModel, data: PreparedData, device: torch.device,
                 interpretation: InterpretationAccumulator | None = None,
                 calibration: Calibration | Runner | None = None):
        self.lm, self.data, self.device, self.interp = lm, data, device, interpretation
        self.calibration = calibration
        self.injected = faults.FaultInjector.from_env()  # `predict` faults (a test hook), armed while `iter` runs
        self.crossed = 0  # (origin, horizon) pairs whose raw quantiles were not in order
        self.pairs = 0
        self.batch_size: int | None = None  # the batch size in force at the end (smaller after an OOM)

    def iter(self, ids: torch.Tensor, batch_size: int) -> Iterator[ForecastBatch]:
        """The forecasts of windows `ids` (each series' ones consecutive origins), batch by batch; with adaptive
        calibration, after forecasting the lead-in that brings each series' state up to its first origin."""
        with faults.armed(self.injected):
            if isinstance(self.calibration, Runner):
                lead = lead_in(self.data, ids, self.calibration)
                if len(lead):
                    log.info("adaptive calibration: forecasting %s origins from the end of validation up to the "
                             "first one asked for, to advance the shifts through their outcomes", f"{len(lead):,}")
                for _ in self._batches(lead, batch_size, lead=True):
                    pass
            yield from self._batches(ids, batch_size)

    def _batches(self, ids: torch.Tensor, batch_size: int, lead: bool = False) -> Iterator[ForecastBatch]:
        model = self.lm.model.eval()
        cursor, index, attempt, largest = 0, 0, 0, 0
        with torch.inference_mode():
            while cursor < len(ids):
                size = min(batch_size, len(ids) - cursor)
                chunk = ids[cursor : cursor + size]
                fb = None
                try:
                    faults.at("predict", index + 1)
                    fb = self._forecast(model, chunk, lead)
                except OOM_ERRORS as e:
                    if not is_oom(e):
                        raise
                if fb is None:  # outside the except block: the failed batch's tensors are free to go
                    attempt += 1
                    batch_size = self._climb(attempt, size, index + 1, largest)
                    continue
                attempt, largest = 0, max(largest, size)
                cursor += size
                index += 1
                self.batch_size = batch_size
                yield fb

    def _climb(self, attempt: int, size: int, index: int, largest: int) -> int:
        """The next rung after an OOM in prediction batch `index` of `size` windows; returns the batch size to use."""
        release_memory(self.device)
        where = f"out of memory in prediction batch {index} (batch size {size})"
        if attempt == 1:
            rung(None, "oom_retry", f"{where}: released caches; retrying the same batch once")
            return size
        if size > 1:
            rung(None, "oom_halve", f"{where}: repeating it with batch size {size // 2}")
            return size // 2
        rung(None, "oom_stop", f"{where}: no rung left")
        fitted = f"the largest batch that fitted was {largest}" if largest else "no batch fitted"
        raise ResourceError(f"a single window does not fit in memory for prediction: batch {index} ran out of memory "
                            f"after a retry and batches halved down to 1; {fitted}; what would fit: a device with "
                            "more free memory (--device cpu uses host memory)")

    def _forecast(self, model: torch.nn.Module, chunk: torch.Tensor, lead: bool = False) -> ForecastBatch:
        """One batch's forecasts; `lead`: a lead-in batch, which only advances the adaptive state (no statistics)."""
        w = self.data.windows
        observed = self.data.schema.names(Role.OBSERVED, Kind.CONTINUOUS)
        fill_col = w.n_known_cont + observed.index("filled") if "filled" in observed else None
        batch = w.batch(chunk).to(self.device, non_blocking=True)
        interp = self.interp if not lead else None
        out = model(batch, return_interpretation=interp is not None)
        q_t, crossed = raw_quantiles(batch, out.quantiles)  # (B, D, Q) target units, sorted; (B, D)
        q = q_t.cpu().numpy()
        series, origin_ns = w.series_index(chunk).numpy(), w.origin_ns(chunk).numpy()
        at = Origins(series, w.series_names, origin_ns, w.origin_target(chunk).numpy().astype(np.float64))
        cal = None if self.calibration is None else self.calibration.correct(q, batch.target_scale.cpu().numpy(), at)
        # Only a batch that got this far counts: a failed attempt must not leave half its statistics behind.
        if interp is not None:
            interp.update(out.static_weights, out.encoder_weights, out.decoder_weights, out.attention)
        if not lead:
            self.crossed += int(crossed.sum())
            self.pairs += crossed.numel()
        del batch, out
        return ForecastBatch(
            series=series,
            window=chunk.numpy(),
            origin_ns=origin_ns,
            # beyond the data (the live forecast), the rows appended on the forecast grid: step k's time is known
            target_ns=w.target_ns(chunk, extrapolated=True).numpy(),
            quantiles=q if cal is None else cal.astype(np.float32),
            actual=w.actual(chunk).numpy().astype(np.float64),
            filled=None if fill_col is None else (w.at_targets(chunk, fill_col) > 0.5).numpy(),
            raw=None if cal is None else q,
        )


def forecast_table(fb: ForecastBatch, names: tuple[str, ...], quantiles: tuple[float, ...]) -> pa.Table:
    """Long format: one row per (series, origin, horizon)."""
    b, d, _ = fb.quantiles.shape
    sym = np.asarray(names, dtype=object)[np.repeat(fb.series, d)]
    tgt = fb.target_ns.reshape(-1)
    cols: dict[str, pa.Array] = {
        "symbol": pa.array(sym, type=pa.string()),
        "origin": pa.array(np.repeat(fb.origin_ns, d), type=pa.timestamp("ns", tz="UTC")),
        "horizon": pa.array(np.tile(np.arange(1, d + 1, dtype=np.int16), b)),
        "target_time": pa.array(tgt, type=pa.timestamp("ns", tz="UTC"), mask=tgt < 0),
    }
    for k, q in enumerate(quantiles):
        cols[quantile_column(q)] = pa.array(fb.quantiles[:, :, k].reshape(-1))
    act = fb.actual.reshape(-1)
    cols["actual"] = pa.array(act, mask=np.isnan(act))
    if fb.filled is not None:  # --fill-gaps models: which actuals are filled bars (no trade in that interval)
        cols["actual_filled"] = pa.array(fb.filled.reshape(-1), mask=np.isnan(act))
    return pa.table(cols)


def write_forecasts(
    lm: LoadedModel, data: PreparedData, ids: torch.Tensor, out: Path, batch_size: int, device: torch.device,
    interpretation: InterpretationAccumulator | None = None, calibration: Calibration | Runner | None = None,
    consume: Callable[[ForecastBatch], None] | None = None,
) -> Forecaster:
    """Predict `ids` and stream the rows into `out` (parquet, atomic), calibrated with `calibration` when given.
    `consume` is handed each batch as it is written (to keep it, or to score it)."""
    fc = Forecaster(lm, data, device, interpretation, calibration=calibration)
    meta = calibration_metadata(calibration)
    with atomic_path(out) as tmp:
        writer = None
        try:
            for fb in fc.iter(ids, batch_size):
                table = forecast_table(fb, data.windows.series_names, lm.model_cfg.quantiles).replace_schema_metadata(meta)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, compression="zstd")
                writer.write_table(table)
                if consume is not None:
                    consume(fb)
        finally:
            if writer is not None:
                writer.close()
    if fc.crossed:
        log.warning("quantiles crossed in %d of %d (origin, horizon) pairs (%.2f%%); sorted them", fc.crossed,
                    fc.pairs, 100 * fc.crossed / max(1, fc.pairs))
    return fc


def lead_in(data: PreparedData, ids: torch.Tensor, runner: Runner) -> torch.Tensor:
    """The windows an adaptive calibration forecasts before `ids` without writing them: for each series whose first
    origin in `ids` is at or after its state's as_of (the end of validation), its origins from D - 1 before as_of
    (the forecasts still waiting for outcomes then) up to that first one; for a series with no state, every origin
    before its first one in `ids` (its state starts at its first origin). Found by bisection on window ids (a series'
    windows are consecutive ids, in time order), so a feature store's windows are not all read."""
    if not len(ids):
        return ids
    w, d = data.windows, data.windows.horizon
    series = w.series_index(ids)  # (B,)
    firsts = ids[torch.cat([torch.ones(1, dtype=torch.bool), series[1:] != series[:-1]])]  # each series' first id
    parts, late = [], []
    for f, s in zip(firsts.tolist(), w.series_index(firsts).tolist(), strict=True):
        as_of = runner.as_of(w.series_names[s])
        if as_of is not None and _origin(w, f) < as_of:  # from as_of itself on, the forecasts waiting then are needed
            continue
        lo = _bisect(0, f, lambda i, s=s: int(w.series_index(torch.tensor([i]))[0]) >= s)  # the series' first window
        if as_of is None:  # no saved state: it follows every outcome from its first origin
            parts.append(torch.arange(lo, f, dtype=torch.int64))
            continue
        at = _bisect(lo, f, lambda i, t=as_of: _origin(w, i) >= t)  # its first window at or after as_of
        if _origin(w, lo) > as_of:
            late.append((w.series_names[s], as_of))
        start = max(lo, at - (d - 1))
        if start < f:
            parts.append(torch.arange(start, f, dtype=torch.int64))
    if late:
        name, as_of = late[0]
        more = f" (and {len(late) - 1} more series)" if len(late) > 1 else ""
        log.warning("adaptive calibration: the bars of %s%s start after its state's last outcome (%sZ, the end of "
                    "validation): the outcomes in between are not in its shifts; give bars from then on to follow "
                    "them", name, more, np.datetime64(as_of, "ns").astype("datetime64[s]"))
    return torch.cat(parts) if parts else ids[:0]


def _origin(w: Any, i: int) -> int:
    return int(w.origin_ns(torch.tensor([i]))[0])


def _bisect(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The smallest i in [lo, hi) with ok(i), or hi: ok is false, then true, along the range."""
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
