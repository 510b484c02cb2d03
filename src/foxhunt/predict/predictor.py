"""The model run over windows batch by batch, on any device, with flat device memory however many origins there
are: each batch is predicted and moved to the host before the next one is read. Adaptive calibration carries each
series' state from the end of validation: origins from there to the first one asked for are forecast too, to
advance it (`lead_in`), and not handed out."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.features.schema import Kind, Role
from foxhunt.errors import ResourceError
from foxhunt.model.adaptive import Origins, Runner
from foxhunt.model.calibration import Calibration
from foxhunt.model.saved import LoadedModel
from foxhunt.predict.interpretation import InterpretationAccumulator
from foxhunt.train import faults
from foxhunt.train.calibrate import raw_quantiles
from foxhunt.train.oom import OOM_ERRORS, is_oom, release_memory, rung

log = logging.getLogger("foxhunt.evaluate")


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


class BatchPredictor:
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

