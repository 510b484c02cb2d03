"""What the stages of a run read of its options: the run's DataConfig's when the transform is fitted now, the ones
a saved transform was fitted under (its `data`) when it is a model's (then nothing is fitted and every bar is a
forecast origin: `predict`), so that a model's data are featurized exactly as its training data were, whatever the
options of the run that forecasts.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.features import inputs, static
from foxhunt.data.prepare.splits import train_start_ns


@dataclass(frozen=True)
class Recipe:
    """The options the load, trail and write stages read (each job gets it whole: it is small and picklable)."""

    fitting: bool  # False: a saved model's transform, nothing fitted, every bar an origin
    target: str
    scaling: str
    fill_gaps: bool
    adjust: str
    encoder_length: int
    horizon: int
    train_start: int  # ns: a rolling window's start (train_start_ns); the earliest int64 without one
    season_tz: str | None  # the zone of the time-of-day profile to fit (--seasonality; fitting only)
    exchange_tz: str
    observed: tuple[str, ...] = ()  # the user's real --observed columns, joined to the bars (Sources.observed)
    known_stamps: bool = False  # fitting the user's --known inputs: the pieces count their training bars' times
    anchor: str = "none"  # fitting an anchor (DataConfig.anchor): the pieces fit their series' baselines

    @property
    def prediction(self) -> bool:
        return not self.fitting


def recipe_of(cfg: DataConfig, transform: FittedTransform | None, src: inputs.Sources | None) -> Recipe:
    """The Recipe of a run of `cfg`: its own options, or with `transform` the model's (the target, its scaling,
    --fill-gaps and the exchange zone it was fitted with), the window lengths and --adjust still `cfg`'s."""
    observed = () if src is None else src.observed
    if transform is None:
        return Recipe(True, cfg.target, cfg.scaling, cfg.fill_gaps, cfg.adjust, cfg.encoder_length, cfg.horizon,
                      train_start_ns(cfg), cfg.exchange_tz if cfg.seasonality else None, cfg.exchange_tz, observed,
                      bool(cfg.known), cfg.anchor)
    fitted = transform.data
    return Recipe(False, fitted.target, fitted.scaling, fitted.fill_gaps, cfg.adjust, cfg.encoder_length, cfg.horizon,
                  train_start_ns(cfg), None, fitted.exchange_tz, observed)


def user_sources(cfg: DataConfig, transform: FittedTransform | None,
                 bar_frame: tuple[str, pl.DataFrame] | None = None,
                 bar_reader: inputs.BarReader | None = None) -> inputs.Sources | None:
    """The user's inputs: those `cfg` declares for a new transform, the transform's own for a fitted one (its
    covariates read from `cfg`'s files, its event calendar from the model unless `cfg` names an events file).
    `bar_frame`, `bar_reader`: as inputs.load_sources takes them."""
    if transform is None:
        names = inputs.InputNames(cfg.observed, cfg.known, cfg.static, cfg.categorical, cfg.context, cfg.target)
        return inputs.load_sources(cfg, names, bar_frame=bar_frame, bar_reader=bar_reader)
    if transform.inputs is None:
        return None
    got = transform.inputs
    names = inputs.InputNames(got.observed + got.observed_cat, got.known + got.known_cat, got.static,
                              (*static.categorical_columns(got), *got.observed_cat, *got.known_cat), got.context,
                              transform.target)
    return inputs.load_sources(cfg, names, got.events, bar_frame, fitted=True, bar_reader=bar_reader)
