"""`foxhunt evaluate`'s scores, accumulated as the forecasts come: the model's batch by batch, each baseline's a
series at a time.

Evaluating a store's millions of origins must not hold all their forecasts: 4.6M origins of 5 steps and 3
quantiles are 550 MB of model quantiles (calibrated and raw) and 550 MB more for each baseline in float64. The
origins come in window order (sorted by series, then time), so `SeriesScorer` updates the model's metric accumulators
with each batch (evaluate/metrics.py: running sums, and a bounded sample of pairs for the IC) and keeps only the
current series' origins and actuals (64 bytes an origin, no quantiles), until the next series starts. Then it fits
and forecasts each baseline on that series, one at a time (evaluate/series_baselines.py), updates its accumulator and
lets the forecasts go. What the report draws of the forecasts is each series' latest FAN_POINTS origins, kept as
they pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from foxhunt.data.dataset.windows import id_chunks
from foxhunt.data.features.features import RETURN_TARGETS
from foxhunt.evaluate.metrics import MetricAccumulator
from foxhunt.evaluate.scored import Scored, concat, metrics_of
from foxhunt.evaluate.series_baselines import series_forecasts, series_inputs, usable_baselines

if TYPE_CHECKING:
    import torch

    from foxhunt.data.dataset.types import PreparedData

FAN_POINTS = 300  # origins shown in each series' fan chart (the most recent ones)


@dataclass(frozen=True)
class Span:
    """The origins that can be scored (those with a realised target): how many, the first and the last (ns)."""

    origins: int
    first_ns: int
    last_ns: int


def span_of(data: PreparedData, ids: torch.Tensor) -> Span | None:
    """The span of the windows `ids` that have a realised target (None: none has), read a chunk of windows at a
    time (`id_chunks`): the baselines' cut depends on the first, and a run with nothing to score stops before it
    forecasts."""
    import torch

    w, n, first, last = data.windows, 0, None, None
    for part in id_chunks(ids):
        has = torch.isfinite(w.actual(part)).any(dim=1)  # (C,)
        on = w.origin_ns(part)[has]
        if len(on):
            n += len(on)
            first = int(on.min()) if first is None else min(first, int(on.min()))
            last = int(on.max()) if last is None else max(last, int(on.max()))
    return None if first is None or last is None else Span(n, first, last)


class SeriesScorer:
    """Scores forecasts added in window order (see the module doc): the model's own quantiles too when `raw`."""

    def __init__(self, data: PreparedData, quantiles: tuple[float, ...], cut: int, raw: bool):
        self.data, self.quantiles, self.cut = data, quantiles, cut
        self.names = data.windows.series_names
        self.directional = data.schema.target in RETURN_TARGETS
        self.model = self._accumulator()
        self.raw = self._accumulator() if raw else None
        self.kinds = usable_baselines(data)
        self.base = {k: self._accumulator() for k in self.kinds}
        self.forecast_any = dict.fromkeys(self.kinds, False)  # a baseline with no finite forecast is left out
        self.fans: dict[int, Scored] = {}  # series -> its latest FAN_POINTS origins, quantiles included
        self._series: int | None = None
        self._pending: list[Scored] = []  # the current series' origins and actuals (no quantiles)

    def _accumulator(self) -> MetricAccumulator:
        return MetricAccumulator(self.quantiles, self.data.windows.horizon, n_series=len(self.names))

    def add(self, piece: Scored) -> None:
        """Forecasts of consecutive windows; those without a realised target (the live origin) are not scored."""
        keep = ~np.isnan(piece.actual).all(axis=1)
        if not keep.all():
            piece = piece.subset(keep)
        if len(piece) == 0:
            return
        self.model.update(piece.actual, piece.quantiles, piece.series)
        if self.raw is not None and piece.raw is not None:
            self.raw.update(piece.actual, piece.raw, piece.series)
        edges = [0, *(np.flatnonzero(piece.series[1:] != piece.series[:-1]) + 1), len(piece)]
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):  # a batch spans one series, or two at a border
            part = piece.subset(slice(lo, hi))
            s = int(part.series[0])
            if s != self._series:
                self._flush()
                self._series = s
            tail = part if s not in self.fans else concat([self.fans[s], part])
            self.fans[s] = _copy(tail.subset(slice(-FAN_POINTS, None)))
            self._pending.append(_copy(Scored(part.series, part.origin_row, part.origin_ns,
                                              np.empty((hi - lo, *part.quantiles.shape[1:2], 0)), part.actual)))

    def _flush(self) -> None:
        """Score every baseline on the current series' origins, one baseline at a time."""
        if not self._pending:
            return
        run = concat(self._pending)
        self._pending = []
        inputs = series_inputs(self.data, int(run.series[0]), self.cut)
        for k in self.kinds:
            if inputs is None:
                forecasts = np.full((*run.actual.shape, len(self.quantiles)), np.nan)
            else:
                forecasts = series_forecasts(k, self.data, inputs, run, self.quantiles)  # (K_s, D, Q)
            self.forecast_any[k] |= bool(np.isfinite(forecasts).any())
            self.base[k].update(run.actual, forecasts, run.series)
            del forecasts

    def results(self) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, dict[str, Any]]]:
        """(the model's metrics, its own quantiles' when calibrated, each scored baseline's), once all is added."""
        self._flush()
        model = metrics_of(self.model, self.names, self.directional)
        raw = None if self.raw is None else metrics_of(self.raw, self.names, self.directional)
        base = {k: metrics_of(acc, self.names, self.directional) for k, acc in self.base.items()
                if self.forecast_any[k]}
        return model, raw, base


def _copy(s: Scored) -> Scored:
    """`s` with its own arrays: a slice of a batch would keep the whole batch alive."""
    return Scored(*(None if a is None else np.array(a) for a in (s.series, s.origin_row, s.origin_ns, s.quantiles,
                                                                  s.actual, s.raw)))
