"""What a fit keeps of the training rows, as typed records: the scalers (`Scalers`, fitted and applied by scaling.py)
and the user's inputs (`FittedInputs`: inputs.py, static.py, timed_categories.py). A FittedTransform holds both and
saves them in model.json and in a store's manifest (`to_dict`: plain JSON; `from_dict`: its exact inverse).

They hold fitted values only. The options that shaped them (the target, the trailing volatility's halflife and
estimator, --vol-features, --fill-gaps, --covariate-scaling, the window lengths that cap the event features) are the
DataConfig's, saved once beside them: the transform reads them from its `data`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from foxhunt.data.features.events import EventCalendar, event_columns
from foxhunt.data.features.seasonality import Season

TARGET, RANGE_K = "target", "range_k"  # a series' keys besides its inputs' (an input may take neither name)


@dataclass(frozen=True)
class Moments:
    """A standardized input's mean and std over the training rows: x is fed as (x - mean) / std."""

    mean: float
    std: float

    def to_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "std": self.std}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Moments:
        return Moments(float(d["mean"]), float(d["std"]))


@dataclass(frozen=True)
class SeriesScalers:
    """One series' scalers (or the pooled ones, of every training row): each standardized input's Moments, the
    target's center and scale (scaling "series"; the seeds of the trailing ones otherwise) and range_k, k =
    mean(r^2) / mean(range^2), which puts a squared range in return-variance units (estimator "range")."""

    moments: dict[str, Moments]
    center: float
    scale: float
    range_k: float

    def with_moments(self, more: Mapping[str, Moments]) -> SeriesScalers:
        """These scalers with the Moments of `more` added (or replaced)."""
        return SeriesScalers({**self.moments, **more}, self.center, self.scale, self.range_k)

    def to_dict(self) -> dict[str, Any]:
        """{input: {mean, std}, ..., "target": {center, scale}, "range_k": {value}}: the layout the ONNX sidecar
        documents (scalers.series[s][x].mean)."""
        return {**{c: m.to_dict() for c, m in self.moments.items()},
                TARGET: {"center": self.center, "scale": self.scale}, RANGE_K: {"value": self.range_k}}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> SeriesScalers:
        return SeriesScalers({c: Moments.from_dict(m) for c, m in d.items() if c not in (TARGET, RANGE_K)},
                             float(d[TARGET]["center"]), float(d[TARGET]["scale"]), float(d[RANGE_K]["value"]))


@dataclass(frozen=True)
class Scalers:
    """The scalers fitted on the training rows: per series with training rows (`series`), pooled for any other
    (`pooled`); the time-of-day profile (--seasonality, intraday); the user's observed inputs in column order
    (after foxhunt's own: scaling.observed_names)."""

    series: dict[str, SeriesScalers]
    pooled: SeriesScalers
    season: Season | None = None
    user_observed: tuple[str, ...] = ()

    def of(self, name: str) -> SeriesScalers:
        """The scalers of series `name` (the pooled ones for a series unseen in training)."""
        return self.series.get(name, self.pooled)

    def per_series(self, names: list[str], value: Callable[[SeriesScalers], float]) -> np.ndarray:
        """(len(names),) float64 `value` of each series' scalers (`of`)."""
        return np.array([value(self.of(n)) for n in names], dtype=np.float64)

    def with_moments(self, per: Mapping[str, Mapping[str, Moments]], pooled: Mapping[str, Moments] | None = None,
                     user: tuple[str, ...] = ()) -> Scalers:
        """These scalers with more inputs' Moments: `per` series (a series it leaves out keeps its own), `pooled`
        for the pooled scalers; `user`: the user's observed inputs they add, listed after those already there."""
        return Scalers({n: s.with_moments(per[n]) if n in per else s for n, s in self.series.items()},
                       self.pooled.with_moments(pooled or {}), self.season, (*self.user_observed, *user))

    def to_dict(self) -> dict[str, Any]:
        return {"series": {n: s.to_dict() for n, s in self.series.items()}, "pooled": self.pooled.to_dict(),
                "season": None if self.season is None else self.season.to_dict(),
                "user_observed": list(self.user_observed)}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Scalers:
        return Scalers({str(n): SeriesScalers.from_dict(s) for n, s in d["series"].items()},
                       SeriesScalers.from_dict(d["pooled"]),
                       None if d["season"] is None else Season.from_dict(d["season"]),
                       tuple(d["user_observed"]))


@dataclass(frozen=True)
class FittedInputs:
    """What a model keeps of the user's inputs (inputs.fit_inputs): their names by role and kind, the fitted
    scalers and vocabularies, the event calendar itself (so forecasting needs no events file) and where each
    column was read from. Known covariates are read again from the files at forecast time: their future values
    are what a forecast needs."""

    observed: tuple[str, ...] = ()  # the real --observed columns
    known: tuple[str, ...] = ()  # the real --known covariate columns
    static: tuple[str, ...] = ()  # every --static column, in --static's order
    static_kinds: dict[str, str] = field(default_factory=dict)  # static column -> "real" | "categorical"
    static_scalers: dict[str, Moments] = field(default_factory=dict)  # real static column -> over training series
    static_vocab: dict[str, tuple[str, ...]] = field(default_factory=dict)  # categorical static column -> values
    observed_cat: tuple[str, ...] = ()  # the categorical --observed columns (timed_categories.py)
    known_cat: tuple[str, ...] = ()  # the categorical --known columns
    timed_vocab: dict[str, tuple[str, ...]] = field(default_factory=dict)  # categorical observed/known -> values
    bar_columns: tuple[str, ...] = ()  # the observed and static columns read from the bar files themselves
    context: tuple[str, ...] = ()  # the --context series
    known_scalers: dict[str, Moments] = field(default_factory=dict)  # real known column -> over training times
    events: EventCalendar | None = None
    sources: dict[str, str] = field(default_factory=dict)  # column -> the file it was read from

    @property
    def known_names(self) -> tuple[str, ...]:
        """The user's real known inputs in column order (after the calendar's): the covariates, then the events'."""
        return self.known + (event_columns(self.events) if self.events is not None else ())

    def to_dict(self) -> dict[str, Any]:
        return {
            "observed": list(self.observed), "known": list(self.known), "static": list(self.static),
            "static_kinds": dict(self.static_kinds),
            "static_scalers": {c: m.to_dict() for c, m in self.static_scalers.items()},
            "static_vocab": {c: list(v) for c, v in self.static_vocab.items()},
            "observed_cat": list(self.observed_cat), "known_cat": list(self.known_cat),
            "timed_vocab": {c: list(v) for c, v in self.timed_vocab.items()},
            "bar_columns": list(self.bar_columns), "context": list(self.context),
            "known_scalers": {c: m.to_dict() for c, m in self.known_scalers.items()},
            "events": None if self.events is None else self.events.to_dict(),
            "sources": dict(self.sources),
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> FittedInputs:
        return FittedInputs(
            observed=tuple(d["observed"]), known=tuple(d["known"]), static=tuple(d["static"]),
            static_kinds={str(c): str(k) for c, k in d["static_kinds"].items()},
            static_scalers={str(c): Moments.from_dict(m) for c, m in d["static_scalers"].items()},
            static_vocab={str(c): tuple(v) for c, v in d["static_vocab"].items()},
            observed_cat=tuple(d["observed_cat"]), known_cat=tuple(d["known_cat"]),
            timed_vocab={str(c): tuple(v) for c, v in d["timed_vocab"].items()},
            bar_columns=tuple(d["bar_columns"]), context=tuple(d["context"]),
            known_scalers={str(c): Moments.from_dict(m) for c, m in d["known_scalers"].items()},
            events=None if d["events"] is None else EventCalendar.from_dict(d["events"]),
            sources={str(c): str(s) for c, s in d["sources"].items()},
        )
