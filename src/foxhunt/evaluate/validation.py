"""The baselines on a training run's validation split, for the claim `foxhunt train` ends with.

Training validates against the training-set quantiles only (a loss-scale reference that any volatility forecast
beats). The honest comparison is the one `foxhunt evaluate` makes: every baseline, scored on the same windows. Here it
is made on the validation windows, with the best epoch's validation q-risk, so a user learns at the end of training
whether the model beats what a practitioner would write first, before any held-out data is spent.

The CLI hands a `ValidationClaim` to the training run (train never imports evaluate). The baselines are fitted on
the rows before the training cut, exactly as evaluate fits them; the bars are read again because the prepared data
keep only the model's tensors, while the baselines read each contract's own returns and ranges.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from foxhunt.data.config import DataConfig
from foxhunt.data.features import RETURN_TARGETS
from foxhunt.data.load import load_bars
from foxhunt.data.prepare import PreparedData
from foxhunt.evaluate.verdict import validation_claim

log = logging.getLogger("foxhunt.evaluate")


def validation_baselines(data: PreparedData, data_cfg: DataConfig,
                         quantiles: tuple[float, ...]) -> dict[str, dict[float, float]]:
    """q-risk per quantile of each baseline on the validation windows of `data` (prepared from `data_cfg`)."""
    # run.py also draws the report's figures: matplotlib loads when the claim is made, not when training starts
    from foxhunt.evaluate.run import baselines, cut_before, score, scored_windows

    ids = data.splits["val"]
    w = data.windows
    scored = scored_windows(w, ids, np.empty((len(ids), w.horizon, 0)))  # no model forecasts: baselines only
    loaded = load_bars(data_cfg)  # the same bars `data` was prepared from (training reads them with no model grid)
    cut = cut_before(data.summary.get("train_end"), int(scored.origin_ns.min()))
    forecasts = baselines(data, loaded.bars, scored, cut, quantiles, data_cfg.adjust)
    del loaded
    directional = data.schema.target in RETURN_TARGETS
    return {k: score(scored.actual, q, scored.series, quantiles, w.series_names, directional)["overall"]["q_risk"]
            for k, q in forecasts.items()}


class ValidationClaim:
    """Called by a training run with its prepared data and the best epoch's validation q-risk; returns the clause
    of the final line. The baselines are scored once per instance: the runs of `--seeds N` share one split."""

    def __init__(self) -> None:
        self.baselines: dict[str, dict[float, float]] | None = None
        self.seconds = 0.0

    def __call__(self, data: PreparedData, data_cfg: DataConfig, quantiles: tuple[float, ...],
                 model_qrisk: Mapping[Any, float]) -> str | None:
        """The clause, or None (with a warning) when the baselines cannot be scored: the model is trained and saved
        by now, and a comparison that failed must not fail the run."""
        if self.baselines is None:
            t0, cpu0 = time.perf_counter(), time.process_time()
            try:
                self.baselines = validation_baselines(data, data_cfg, quantiles)
            except Exception as e:  # noqa: BLE001 - reported, and the run's final line falls back
                first = str(e).splitlines()[0] if str(e) else ""
                log.warning("the baselines could not be scored on validation (%s: %s); the final line compares with "
                            "the training-set quantiles only, and `foxhunt evaluate` scores them all",
                            type(e).__name__, first)
                return None
            self.seconds = time.perf_counter() - t0
            log.info("baselines on validation (%s) scored in %.1fs (%.1fs CPU, the arch package's import included)",
                     ", ".join(self.baselines) or "none", self.seconds, time.process_time() - cpu0)
        return validation_claim(model_qrisk, self.baselines, quantiles)
