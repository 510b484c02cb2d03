"""`foxhunt evaluate`'s scores, accumulated as the forecasts come: the model's batch by batch, each baseline's a
series at a time.

Evaluating a store's millions of origins must not hold all their forecasts: 4.6M origins of 5 steps and 3
quantiles are 550 MB of model quantiles (calibrated and raw) and 550 MB more for each baseline in float64. The
origins come in window order (sorted by series, then time), so `SeriesScorer` updates the model's metric accumulators
with each batch (evaluate/metrics.py: running sums, and a bounded sample of pairs for the IC) and keeps only the
current series' origins, actuals and model quantiles (64 bytes an origin, and 60 more for each of the model's
quantile sets at D = 5, Q = 3 in float32), until the next series starts. Then it fits and forecasts each baseline on
that series, one at a time (evaluate/series_baselines.py), updates its accumulator and its comparison with the model
on the pairs both cover (evaluate/paired.py: per series sums and the pooled differentials per origin time) and lets
the forecasts go. The series' model quantiles are what the comparison pairs: at most one baseline's float64 forecasts
(120 bytes an origin) are alive beside them. What the report draws of the forecasts is each series' latest
FAN_POINTS origins, kept as they pass.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from foxhunt.data.dataset.windows import id_chunks
from foxhunt.data.features.bar_features import RETURN_TARGETS
from foxhunt.evaluate.metrics import MetricAccumulator
from foxhunt.evaluate.paired import Comparison
from foxhunt.evaluate.scored_rows import Scored, concat, metrics_of
from foxhunt.evaluate.series_baselines import series_forecasts, series_inputs, usable_baselines

if TYPE_CHECKING:
    import torch

    from foxhunt.data.dataset.types import PreparedData

FAN_POINTS = 300  # origins shown in each series' fan chart (the most recent ones)
MODEL, RAW = "model", "model (raw)"  # the forecasts compared with the baselines: as scored, and the model's own


@dataclass(frozen=True)
class Span:
    """The origins that can be scored (those with a realised target): how many, the first and the last (ns), and the
    earliest first forecast bar (ns), where the baselines' fit ends at the latest (data/dataset/fit_rows.py fit_cut).
    `partial`: how many of them have fewer realised steps than the horizon (a series' last origins, whose steps run
    past its last bar): scored on the steps they have, and never in a feature store, whose windows all have every
    step."""

    origins: int
    first_ns: int
    last_ns: int
    first_forecast_ns: int
    partial: int = 0


def span_of(data: PreparedData, ids: torch.Tensor) -> Span | None:
    """The span of the windows `ids` that have a realised target (None: none has), read a chunk of windows at a
    time (`id_chunks`): the baselines' cut depends on the first, and a run with nothing to score stops before it
    forecasts."""
    import torch

    w, n, partial, first, last, forecast = data.windows, 0, 0, None, None, None
    for part in id_chunks(ids):
        real = torch.isfinite(w.actual(part))  # (C, D)
        has = real.any(dim=1)  # (C,)
        partial += int((has & ~real.all(dim=1)).sum())
        on = w.origin_ns(part)[has]
        if len(on):
            n += len(on)
            first = int(on.min()) if first is None else min(first, int(on.min()))
            last = int(on.max()) if last is None else max(last, int(on.max()))
            step1 = int(w.target_ns(part, extrapolated=True)[has, 0].min())  # the first forecast bars
            forecast = step1 if forecast is None else min(forecast, step1)
    if first is None or last is None or forecast is None:
        return None
    return Span(n, first, last, forecast, partial)


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
        self.pairs = {m: {k: Comparison(quantiles, data.windows.horizon) for k in self.kinds}
                      for m in (MODEL, *((RAW,) if raw else ()))}  # model -> baseline -> the comparison
        self.forecast_any = dict.fromkeys(self.kinds, False)  # a baseline with no finite forecast is left out
        self.why: dict[str, dict[str, str]] = {k: {} for k in self.kinds}  # baseline -> series -> why none
        self.fans: dict[int, Scored] = {}  # series -> its latest FAN_POINTS origins, quantiles included
        self._series: int | None = None
        self._pending: list[Scored] = []  # the current series' origins, actuals and model quantiles

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
            self._pending.append(_copy(part if self.raw is not None else dataclasses.replace(part, raw=None)))

    def _flush(self) -> None:
        """Score every baseline on the current series' origins, one baseline at a time, and compare it with the
        model there."""
        if not self._pending:
            return
        run = concat(self._pending)
        self._pending = []
        name = self.names[int(run.series[0])]
        inputs, none = series_inputs(self.data, int(run.series[0]), self.cut)
        models = {MODEL: run.quantiles, RAW: run.raw}
        for k in self.kinds:
            if inputs is None:
                forecasts, why = np.full((*run.actual.shape, len(self.quantiles)), np.nan), none
            else:
                forecasts, why = series_forecasts(k, self.data, inputs, run, self.quantiles)  # (K_s, D, Q)
            if why is not None:
                self.why[k][name] = why
            self.forecast_any[k] |= bool(np.isfinite(forecasts).any())
            self.base[k].update(run.actual, forecasts, run.series)
            for m, by_kind in self.pairs.items():
                q = models[m]
                if q is not None:
                    by_kind[k].add_series(name, run.origin_ns, run.actual, q, forecasts, why)
            del forecasts

    def results(self) -> Results:
        """The model's metrics, its own quantiles' when calibrated, each scored baseline's and each comparison, once
        all is added."""
        self._flush()
        model = metrics_of(self.model, self.names, self.directional)
        raw = None if self.raw is None else metrics_of(self.raw, self.names, self.directional)
        scored = [k for k in self.kinds if self.forecast_any[k]]
        base = {k: metrics_of(self.base[k], self.names, self.directional) for k in scored}
        pairs = {m: {k: by_kind[k].result() for k in scored} for m, by_kind in self.pairs.items()}
        unscored = {k: self.why[k] for k in self.kinds if not self.forecast_any[k]}
        return Results(model, raw, base, pairs[MODEL], pairs.get(RAW), unscored)


@dataclass(frozen=True)
class Results:
    """What `SeriesScorer` scored: metric results (evaluate/metrics.py), comparisons (evaluate/paired.py) of the
    model and of its raw quantiles with each scored baseline, and the baselines with no forecast anywhere, with each
    series' reason."""

    model: dict[str, Any]
    raw: dict[str, Any] | None
    baselines: dict[str, dict[str, Any]]
    comparisons: dict[str, dict[str, Any]]
    raw_comparisons: dict[str, dict[str, Any]] | None
    unscored: dict[str, dict[str, str]]


def _copy(s: Scored) -> Scored:
    """`s` with its own arrays: a slice of a batch would keep the whole batch alive."""
    return Scored(*(None if a is None else np.array(a) for a in (s.series, s.origin_row, s.origin_ns, s.quantiles,
                                                                  s.actual, s.raw)))
