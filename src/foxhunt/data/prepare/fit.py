"""Fitting, once, from what the pieces send back: the scalers (from the per-series sums of their training rows,
features/fitstats.py), the user's inputs (scalers of the observed and known ones, the static inputs' and the
categorical ones' vocabularies), and the FittedTransform that holds them, made here and nowhere else.

The scalers are fitted in three steps, as the stages give their sums: `first_transform` after the load stage (the
moves' and volume's scalers, the time-of-day profile, the user's inputs), `complete` after the trail stage (the
trailing inputs' scalers, and then those of the --context columns, which need the trailing volatility). The trail
stage reads the first transform; the write stage the complete one.

The user's inputs, fitted from the pieces as over the whole panel at once:
- observed: each piece joins its bars' columns (inputs.join_observed) and sends back its bars without a finite value
  and its series' moments (inputs.observed_moments), which concatenate into the panel's; the bad-bars rule judges
  the panel's sums.
- known: the known covariates' mean and std over the training bars' times, which the pieces count.
- categorical observed and known (timed_categories.py): the vocabularies of each piece's training values and of the
  training times.
- static: each piece reads its series' values; they are fitted over the panel's series.
- context: each piece sends back the moments of its rows joined with the context series' inputs, fitted last.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter

import numpy as np

from foxhunt.data.bars.chains import decision
from foxhunt.data.bars.sessions import run_session
from foxhunt.data.baselines.anchor import AnchorFit
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.features import inputs, static, timed_categories
from foxhunt.data.features.calendar import features_calendar
from foxhunt.data.features.fitstats import concat
from foxhunt.data.features.fitted import FittedInputs, Scalers
from foxhunt.data.features.scaling import first_scalers, with_vol_stats
from foxhunt.data.prepare.load_stage import Fit, PieceLoaded


@dataclasses.dataclass(frozen=True)
class Declared:
    """What the pieces read of the user's inputs besides their fit: each series' static values (by column) and the
    bars dropped for an observed value that is not finite."""

    static_values: dict[str, list]
    dropped: int


def declared(src: inputs.Sources | None, loads: list[PieceLoaded], names: list[str], fitting: bool) -> Declared:
    """The panel's Declared of the pieces `loads`, its series `names`, after the checks of the whole panel:
    InputError where a --context series is not one of them, where more than inputs.MAX_BAD_FRACTION of the bars
    have no finite observed value, or (`fitting`) where no events key names a series or contract of them."""
    if src is None:
        return Declared({}, 0)
    inputs.check_context(src.context, names)
    dropped = 0
    if src.observed:
        counts = sum((Counter(r.dropped) for r in loads), Counter())
        inputs.check_dropped({k: counts[k] for k in (*src.observed, inputs.DROPPED, inputs.BARS)})
        dropped = counts[inputs.DROPPED]
    if fitting and src.events is not None and src.events.keys:  # event_keys' check, of the whole panel
        inputs.check_keyed(src.events, any((r.keys[:, 0] <= r.keys[:, 1]).any() for r in loads), lambda: names)
    return Declared({c: [v for r in loads for v in r.static[c]] for c in src.static}, dropped)


def first_transform(cfg: DataConfig, names: list[str], fits: list[Fit], spacing: int, intraday: bool,
                    src: inputs.Sources | None, values: dict[str, list], report: dict) -> FittedTransform:
    """The transform fitted on the pieces' training sums `fits` (their series `names`, in order): every scaler but
    the trailing inputs' (`complete`), the user's inputs (`values`: their static values, Declared's) and the
    run's settings; `report`: the panel's load report (its --contracts decision)."""
    season_tz = cfg.exchange_tz if cfg.seasonality and intraday else None
    mom = concat([f.mom for f in fits])
    if season_tz is None:
        mom = {k: v for k, v in mom.items() if not k.startswith("season:")}
    scalers = first_scalers(mom, names, cfg.target, season_tz)
    fitted = None
    if src is not None:
        scalers, fitted = _fit_declared(cfg, src, fits, names, scalers, values)
    return FittedTransform(
        # the series with training rows: those the fit gave scalers of their own
        series_vocab=tuple(n for n, ok in zip(names, mom["rows"] > 0, strict=True) if ok), scalers=scalers,
        data=cfg, intraday=intraday, bar_spacing_ns=spacing, session=run_session(cfg.calendar), inputs=fitted,
        anchor=_anchor([f.anchor for f in fits]), features_calendar=features_calendar(cfg.calendar),
        **decision(report, cfg.contracts),
    )


def complete(transform: FittedTransform, names: list[str], trailed: list[dict[str, np.ndarray]],
             context: list[dict[str, np.ndarray]] | None, src: inputs.Sources | None) -> FittedTransform:
    """`transform` with the trailing inputs' scalers of the pieces' sums `trailed` (scaling.vol_moments), then the
    --context columns' of `context` (inputs.observed_moments; None without --context), listed after the observed
    ones as inputs.fit_observed lists them."""
    cfg = transform.data
    scalers = with_vol_stats(transform.scalers, cfg, concat(trailed), names, np.isin(names, transform.series_vocab))
    if context is not None and src is not None:
        scalers = inputs.scale_observed(concat(context), names, src.context_columns, cfg.covariate_scaling, scalers)
    return dataclasses.replace(transform, scalers=scalers)


def _anchor(fits: list[AnchorFit | None]) -> AnchorFit | None:
    """The panel's anchor from its pieces' (None: no --anchor)."""
    fits = [f for f in fits if f is not None]
    return functools.reduce(AnchorFit.merged, fits) if fits else None


def _fit_declared(cfg: DataConfig, src: inputs.Sources, fits: list[Fit], names: list[str], scalers: Scalers,
                  values: dict[str, list]) -> tuple[Scalers, FittedInputs]:
    """`scalers` with the observed columns' added, and the fitted inputs (FittedTransform.inputs), of the pieces'
    `fits`."""
    mode = cfg.covariate_scaling
    if src.observed:
        scalers = inputs.scale_observed(concat([f.user for f in fits]), names, src.observed, mode, scalers)
    known_scalers, distinct = {}, np.zeros(0, dtype=np.int64)
    if src.known or src.known_cat:
        stamps = np.concatenate([f.stamps[0] for f in fits])
        distinct, at = np.unique(stamps, return_inverse=True)
        counts = np.bincount(at, weights=np.concatenate([f.stamps[1] for f in fits])).astype(np.int64)
        known_scalers = inputs.fit_known_counted(src, distinct, counts, mode) if src.known else {}
    static_fit = static.fit(values, names, list(scalers.series), src.static_kinds or {})
    return scalers, inputs.fit_inputs(src, known_scalers, static_fit=static_fit,
                                      timed_vocab=timed_categories.fit_seen(src, [f.seen or {} for f in fits], distinct))
