"""The baselines on a training run's validation split, for the claim `foxhunt train` ends with.

Training validates against the training-set quantiles only (a loss-scale reference, far easier to beat than a
volatility forecast). The honest comparison is the one `foxhunt evaluate` makes: every baseline, scored with the
model on the rows both forecast, with a significance test (evaluate/paired.py). Here it is made on the validation
windows with the best weights' forecasts, so a user learns at the end of training whether the model beats what a
practitioner would write first, before any held-out data is spent. The forecasts are made again from the saved best
weights (raw, as predict makes them before calibration): the per-origin losses the pairing and the test need are not
kept by validation, which holds running sums only. It costs one pass over the validation windows, as an epoch's
validation does.

The CLI hands `judge_on_validation` to the training run (train never imports evaluate). The baselines are fitted on
the rows before the training cut, by the rule `foxhunt evaluate` and `backtest` use (data/dataset/fit_rows.py), from
the prepared data: the targets, and each contract's own ranges and returns the prepared data keep beside the model's
tensors, so the bars are not read again.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from foxhunt.console import SHOW
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.util.digest import tensor_digest
from foxhunt.evaluate.verdict import validation_claim

if TYPE_CHECKING:
    import torch

    from foxhunt.evaluate.scored_rows import Scored

log = logging.getLogger("foxhunt.evaluate")

# The baselines' forecasts on a validation split do not depend on the model: a process that trains several times on
# the same data (--seeds, the Python API, a test suite) fits them once. GARCH's fit is most of the cost. The cache is
# bounded by entries and by bytes (a split's forecasts are (windows, D, Q) float64 for each baseline).
CACHE_SIZE = 8
CACHE_BYTES = 256 * 2**20
Fitted = tuple[dict[str, np.ndarray], dict[str, dict[str, str]]]  # baseline -> (K, D, Q); baseline -> series -> why
_FITTED: OrderedDict[tuple[Any, ...], Fitted] = OrderedDict()


def validation_forecasts(run_dir: Path, data: PreparedData, device: torch.device) -> Scored:
    """The best weights' raw forecasts of the validation windows (as predict makes them), with their actuals."""
    from foxhunt.evaluate.scored_rows import scored_windows
    from foxhunt.model.saved import load_model
    from foxhunt.train.calibrate import MAX_BATCH, forecast_windows

    ids = data.splits["val"]
    lm = load_model(Path(run_dir), device, calibration=False)
    _, q, _, _ = forecast_windows(lm.model, data.windows, ids, MAX_BATCH, device)  # (N, D, Q)
    del lm
    return scored_windows(data.windows, ids, q)


def validation_baselines(data: PreparedData, scored: Scored, quantiles: tuple[float, ...]) -> Fitted:
    """Each baseline's (K, D, Q) forecasts at the validation origins of `scored`, and the series each could not
    forecast with the reason."""
    from foxhunt.data.dataset.fit_rows import first_forecast_ns, fit_cut
    from foxhunt.evaluate.series_baselines import baselines

    cut = fit_cut(data.summary.get("train_end"), first_forecast_ns(data, scored.origin_row))
    return baselines(data, scored, cut, quantiles)


def claim_on_validation(data: PreparedData, data_cfg: DataConfig, quantiles: tuple[float, ...],
                        scored: Scored) -> str:
    """The final line's clause for the model's validation forecasts `scored` against every baseline."""
    from foxhunt.evaluate.metrics import q_risk
    from foxhunt.evaluate.paired import compare

    scored = scored.subset(~np.isnan(scored.actual).all(axis=1))
    t0, cpu0 = time.perf_counter(), time.process_time()
    key = data_key(data, data_cfg, quantiles)
    fitted = _FITTED.get(key)
    if fitted is None:
        fitted = validation_baselines(data, scored, quantiles)
        log.info("baselines on validation (%s) fitted in %.1fs (%.1fs CPU, a first import of the arch package "
                 "included)", ", ".join(fitted[0]) or "none", time.perf_counter() - t0, time.process_time() - cpu0)
        _remember(key, fitted)
    forecasts, why = fitted
    names = data.windows.series_names
    comparisons = {k: compare(scored.series, scored.origin_ns, scored.actual, scored.quantiles, f, quantiles, names,
                              why.get(k)) for k, f in forecasts.items()}
    model = dict(zip(quantiles, q_risk(scored.actual, scored.quantiles, quantiles).tolist(), strict=True))
    return validation_claim(comparisons, quantiles, model, len(scored))


def judge_on_validation(data: PreparedData, data_cfg: DataConfig, quantiles: tuple[float, ...], run_dir: Path,
                        device: torch.device | str = "cpu") -> str | None:
    """The clause of train's final line for the best weights saved in `run_dir` (train/session.py's Judge), or None
    with a warning when the baselines cannot be scored: the model is trained and saved by now, and a comparison that
    failed must not fail the run. A run trained from a feature store ends without it: the baselines could read the
    store, but the arch package and GARCH-t's fits would raise the run's peak memory by a third
    (benchmarks/RESULTS.md), where training from a store is meant to hold a fraction of it; `foxhunt evaluate
    --features` scores every baseline on the store."""
    import torch

    if data_cfg.features:
        log.info("the baselines are not scored at the end of a run trained from a feature store (the GARCH fits "
                 "would raise its peak memory by a third): the final line compares with the training-set quantiles; "
                 "`foxhunt evaluate --model RUN --features %s` scores every baseline", data_cfg.features, extra=SHOW)
        return None
    try:
        scored = validation_forecasts(Path(run_dir), data, torch.device(device))
        return claim_on_validation(data, data_cfg, quantiles, scored)
    except Exception as e:  # noqa: BLE001 - reported, and the run's final line falls back
        first = str(e).splitlines()[0] if str(e) else ""
        log.warning("the baselines could not be scored on validation (%s: %s); the final line compares with the "
                    "training-set quantiles only, and `foxhunt evaluate` scores them all", type(e).__name__, first)
        return None


def _remember(key: tuple[Any, ...], fitted: Fitted) -> None:
    """Cache `fitted`, the oldest entries out past CACHE_SIZE or CACHE_BYTES; one larger than that is not kept."""
    def size(f: Fitted) -> int:
        return sum(a.nbytes for a in f[0].values())

    if size(fitted) > CACHE_BYTES:
        return
    _FITTED[key] = fitted
    while len(_FITTED) > CACHE_SIZE or sum(size(f) for f in _FITTED.values()) > CACHE_BYTES:
        _FITTED.popitem(last=False)


def data_key(data: PreparedData, data_cfg: DataConfig, quantiles: tuple[float, ...]) -> tuple[Any, ...]:
    """What the baselines' scores depend on: the options, the quantiles, the training cut, the files read (path, size,
    modification time: a file rewritten in place gives another key), the targets and times of the bars and the
    validation windows."""
    digest = tensor_digest((name, t.numpy()) for name, t in (("target_raw", data.windows.target_raw),
                                                              ("ts_ns", data.windows.ts_ns),
                                                              ("split_val", data.splits["val"])))
    files = tuple((f.get("path"), f.get("size_bytes"), _mtime_ns(f.get("path"))) for f in data.summary.get("files", []))
    return data_cfg, tuple(quantiles), data.summary.get("train_end"), files, digest


def _mtime_ns(path: str | None) -> int | None:
    try:
        return os.stat(path).st_mtime_ns if path else None
    except OSError:
        return None
