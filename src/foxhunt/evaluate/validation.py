"""The baselines on a training run's validation split, for the claim `foxhunt train` ends with.

Training validates against the training-set quantiles only (a loss-scale reference, far easier to beat than a
volatility forecast). The honest comparison is the one `foxhunt evaluate` makes: every baseline, scored on the same
windows. Here it is made on the validation windows, with the best epoch's validation q-risk, so a user learns at the
end of training whether the model beats what a practitioner would write first, before any held-out data is spent.

The CLI hands `judge_on_validation` to the training run (train never imports evaluate). The baselines are fitted on
the rows before the training cut, exactly as evaluate fits them, from the prepared data: the targets, and each
contract's own ranges and returns the prepared data keep beside the model's tensors, so the bars are not read again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np

from foxhunt.console import SHOW
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.features.features import RETURN_TARGETS
from foxhunt.evaluate.verdict import validation_claim

log = logging.getLogger("foxhunt.evaluate")

# The baselines' q-risk on a validation split does not depend on the model: a process that trains several times on the
# same data (--seeds, the Python API, a test suite) scores them once. GARCH's fit is most of the cost.
CACHE_SIZE = 8
_SCORED: OrderedDict[tuple[Any, ...], dict[str, dict[float, float]]] = OrderedDict()


def validation_baselines(data: PreparedData, data_cfg: DataConfig,
                         quantiles: tuple[float, ...]) -> dict[str, dict[float, float]]:
    """q-risk per quantile of each baseline on the validation windows of `data` (prepared from `data_cfg`)."""
    from foxhunt.evaluate.scored import score, scored_windows
    from foxhunt.evaluate.series_baselines import baselines, cut_before

    ids = data.splits["val"]
    w = data.windows
    scored = scored_windows(w, ids, np.empty((len(ids), w.horizon, 0)))  # no model forecasts: baselines only
    cut = cut_before(data.summary.get("train_end"), int(scored.origin_ns.min()))
    forecasts = baselines(data, scored, cut, quantiles)
    directional = data.schema.target in RETURN_TARGETS
    return {k: score(scored.actual, q, scored.series, quantiles, w.series_names, directional)["overall"]["q_risk"]
            for k, q in forecasts.items()}


def judge_on_validation(data: PreparedData, data_cfg: DataConfig, quantiles: tuple[float, ...],
                        model_qrisk: Mapping[Any, float]) -> str | None:
    """The clause of train's final line for the best epoch's validation q-risk `model_qrisk` (train/session.py's
    Judge), or None with a warning when the baselines cannot be scored: the model is trained and saved by now, and a
    comparison that failed must not fail the run. A run trained from a feature store ends without it: the baselines
    could read the store, but the arch package and GARCH-t's fits would raise the run's peak memory by a third
    (benchmarks/RESULTS.md), where training from a store is meant to hold a fraction of it; `foxhunt
    evaluate --features` scores every baseline on the store."""
    if data_cfg.features:
        log.info("the baselines are not scored at the end of a run trained from a feature store (the GARCH fits "
                 "would raise its peak memory by a third): the final line compares with the training-set quantiles; "
                 "`foxhunt evaluate --model RUN --features %s` scores every baseline", data_cfg.features, extra=SHOW)
        return None
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        key = data_key(data, data_cfg, quantiles)
        scored = _SCORED[key] if key in _SCORED else validation_baselines(data, data_cfg, quantiles)
    except Exception as e:  # noqa: BLE001 - reported, and the run's final line falls back
        first = str(e).splitlines()[0] if str(e) else ""
        log.warning("the baselines could not be scored on validation (%s: %s); the final line compares with the "
                    "training-set quantiles only, and `foxhunt evaluate` scores them all", type(e).__name__, first)
        return None
    if key not in _SCORED:
        log.info("baselines on validation (%s) scored in %.1fs (%.1fs CPU, a first import of the arch package included)",
                 ", ".join(scored) or "none", time.perf_counter() - t0, time.process_time() - cpu0)
        _SCORED[key] = scored
        while len(_SCORED) > CACHE_SIZE:
            _SCORED.popitem(last=False)
    return validation_claim(model_qrisk, scored, quantiles)


def data_key(data: PreparedData, data_cfg: DataConfig, quantiles: tuple[float, ...]) -> tuple[Any, ...]:
    """What the baselines' scores depend on: the options, the quantiles, the training cut, the files read (path, size,
    modification time: a file rewritten in place gives another key), the targets and times of the bars and the
    validation windows."""
    digest = hashlib.sha256()
    for t in (data.windows.target_raw, data.windows.ts_ns, data.splits["val"]):
        digest.update(t.numpy())  # the buffer itself: a memory-mapped store's columns are not copied
    files = tuple((f.get("path"), f.get("size_bytes"), _mtime_ns(f.get("path"))) for f in data.summary.get("files", []))
    return data_cfg, tuple(quantiles), data.summary.get("train_end"), files, digest.hexdigest()


def _mtime_ns(path: str | None) -> int | None:
    try:
        return os.stat(path).st_mtime_ns if path else None
    except OSError:
        return None
