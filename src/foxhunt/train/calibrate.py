"""After training: fit the conformal calibration (model/calibration.py) on the validation split with the best
checkpoint's forecasts, warm the adaptive state (model/adaptive.py) up through the validation period (for an anchored
model, scoring it there against the model's own quantiles: what `--calibration auto` applies), write
RUN_DIR/calibration.json and return the line that `train` prints at the end.

The forecasts are made exactly as `foxhunt predict` makes them (the saved best weights, fp32, quantiles unscaled and
sorted), so the shifts correct what users will see. calibration.json records the SHA-256 of model.safetensors: a
later run that writes new weights (a resumed run stopped before it refits) leaves a calibration that `load_model`
recognises as stale and ignores.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import torch

from foxhunt.atomic import write_json
from foxhunt.data.dataset.batch import Batch
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.dataset.windows import WindowedData
from foxhunt.model.adaptive import AdaptiveCalibration, Origins, Rule, pinball, warm_up
from foxhunt.model.calibration import DEFAULT_MODE, MIN_WINDOWS, Calibration, outer_label, scores
from foxhunt.model.saved import load_model, weights_digest
from foxhunt.train.oom import OOM_ERRORS, is_oom, release_memory
from foxhunt.train.run_dir import RunDir

log = logging.getLogger("foxhunt.train")
MAX_BATCH = 1024  # windows per forward pass while fitting (predict's default)


def raw_quantiles(batch: Batch, scaled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's forecasts `scaled` (B, D, Q) for a batch in the target's own units, sorted along Q, float32, and
    which (origin, horizon) pairs came out of the model crossed (B, D) bool. Shared by predict and the fit."""
    q = batch.unscale(scaled).float()  # (B, D, Q) target units
    crossed = (q.diff(dim=-1) < 0).any(dim=-1)  # (B, D)
    return q.sort(dim=-1).values, crossed


def forecast_windows(model: torch.nn.Module, windows: WindowedData, ids: torch.Tensor, batch_size: int,
                     device: torch.device) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Actuals (N, D), sorted raw forecasts (N, D, Q), window scales (N,) and origins in ns (N,) for windows `ids`."""
    ys, qs, scales = [], [], []
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(ids), batch_size):
            chunk = ids[start : start + batch_size]
            batch = windows.batch(chunk).to(device, non_blocking=True)
            q, _ = raw_quantiles(batch, model(batch).quantiles)
            qs.append(q.cpu().numpy())
            scales.append(batch.target_scale.cpu().numpy())
            ys.append(windows.actual(chunk).numpy())
            del batch, q
    return (np.concatenate(ys).astype(np.float64), np.concatenate(qs), np.concatenate(scales).astype(np.float64),
            windows.origin_ns(ids).numpy())


def fit_calibration(run: RunDir, data: PreparedData, device: torch.device, batch_size: int,
                    mode: str = DEFAULT_MODE) -> tuple[Calibration, AdaptiveCalibration] | None:
    """Fit on the validation windows with the saved best weights and write calibration.json (atomic); None, and no
    file, when there are fewer than MIN_WINDOWS validation windows."""
    ids = data.splits["val"]
    run.calibration.unlink(missing_ok=True)  # the weights may have changed since a file from an earlier fit
    if len(ids) < MIN_WINDOWS or not run.weights.exists():
        return None
    lm = load_model(run.root, device, calibration=False)
    y, q, scale, origin = forecast_windows(lm.model, data.windows, ids, max(1, min(batch_size, MAX_BATCH)), device)
    fitted_on = {
        "split": "validation", "val_start": data.summary.get("train_end"), "val_end": data.summary.get("val_end"),
        "first_origin": _iso(origin.min()), "last_origin": _iso(origin.max()), "windows": int(len(ids)),
        "pairs": int(np.isfinite(y).sum()), "weights_sha256": weights_digest(run.weights),
    }
    cal = Calibration.fit(y, q, scale, lm.model_cfg.quantiles, mode, fitted_on)
    adaptive = fit_adaptive(cal, data, ids, (y, q, scale), lm.model_cfg.anchored)
    write_json(run.calibration, {**cal.to_dict(), "adaptive": adaptive.to_dict()})
    return cal, adaptive


def fit_adaptive(cal: Calibration, data: PreparedData, ids: torch.Tensor,
                 val: tuple[np.ndarray, np.ndarray, np.ndarray], anchored: bool) -> AdaptiveCalibration:
    """The adaptive rule from the validation scores `val` (actuals (N, D), raw forecasts (N, D, Q), scales (N,) of
    windows `ids`), and each series' state warmed up through its validation windows: as of its last validation
    origin (D bars before the end of validation; forecasts carry it through the rest, whose windows reach past
    validation and so are never gathered while training).

    The trackers start where the forecasts they correct should stand: the fixed shifts, or for an anchored model
    its own quantiles (zero shift): those are GARCH-t's corrected and near their levels already, and the fixed
    shifts fitted on one validation year moved them off (the S&P 500 walk-forward's p10: 1.4% worse from the fixed
    shifts, level from zero; benchmarks/RESULTS.md, "The anchored head")."""
    start = np.zeros_like(cal.shifts) if anchored else cal.shifts  # (D, Q)
    w = data.windows
    series = w.series_index(ids).numpy()  # (N,)
    n_series = len(np.unique(series))
    per_series = len(ids) / max(n_series, 1)
    rule = Rule.fit(scores(val[0], val[1], val[2], cal.mode), start, cal.quantiles, cal.mode, per_series)
    origins = Origins(series, w.series_names, w.origin_ns(ids).numpy(), w.origin_target(ids).numpy().astype(np.float64))
    fitted_on = {"start": "none" if anchored else "fixed",
                 "origins": int(len(ids)), "series": n_series, "per_series": round(per_series, 1),
                 "first_origin": _iso(origins.origin_ns.min()), "as_of": _iso(origins.origin_ns.max()),
                 "weights_sha256": cal.fitted_on.get("weights_sha256")}
    adaptive, shifted = warm_up(rule, origins, val[1], val[2], fitted_on)
    if not anchored:  # the fixed start was fitted on these very outcomes: no fair comparison here
        return adaptive
    own, moved = mean_pinball(val[0], val[1], cal.quantiles), mean_pinball(val[0], shifted, cal.quantiles)
    verdict = {"validation_pinball": {"own": own, "adaptive": moved}, "beats_own": bool(sum(moved) < sum(own))}
    return replace(adaptive, fitted_on={**fitted_on, **verdict})


def mean_pinball(y: np.ndarray, q: np.ndarray, quantiles: tuple[float, ...]) -> list[float]:
    """Mean pinball loss per quantile (Q,) of forecasts q (N, D, Q) for outcomes y (N, D) in the target's units,
    over the outcomes known (q-risk's numerator, so a panel's volatile markets weigh as they do in the score)."""
    ok = np.isfinite(y)  # (N, D)
    if not ok.any():
        return [float("nan")] * len(quantiles)
    u = y[ok][:, None] - np.asarray(q, dtype=np.float64)[ok]  # (M, Q)
    return [float(v) for v in pinball(u, np.asarray(quantiles, dtype=np.float64)).mean(axis=0)]


def calibration_line(fit: tuple[Calibration, AdaptiveCalibration] | None, n_val: int) -> str:
    """'calibration on validation (6,896 windows): p10-p90 coverage 0.61 -> 0.80 (nominal 0.80); scaled shifts
    saved'; for an anchored model, which ones its forecasts apply by default (--calibration auto, model/config.py)."""
    if fit is None:
        return (f"calibration: not fitted ({n_val:,} validation windows, at least {MIN_WINDOWS} needed); forecasts "
                "are the model's own")
    cal, adaptive = fit
    label = outer_label(cal.quantiles)
    if label is None:
        before, after = (", ".join(f"{v:.2f}" for v in cal.coverage[k]["below"].values()) for k in ("before", "after"))
        change = f"share below each quantile {before} -> {after}"
    else:
        nominal = cal.quantiles[-1] - cal.quantiles[0]
        change = (f"{label} coverage {cal.coverage['before'][label]:.2f} -> {cal.coverage['after'][label]:.2f} "
                  f"(nominal {nominal:.2f})")
    return f"calibration on validation ({cal.fitted_on['windows']:,} windows): {change}; {cal.mode} shifts saved" + \
        anchored_default(adaptive.fitted_on)


def anchored_default(fitted_on: dict) -> str:
    """What --calibration auto gives an anchored model, and why (its validation verdict); '' for another model."""
    losses = fitted_on.get("validation_pinball")
    if losses is None:
        return ""
    own, moved = sum(losses["own"]), sum(losses["adaptive"])
    change = f"pinball loss on validation {100 * (moved / own - 1):+.1f}%" if own > 0 else "no validation loss"
    if fitted_on.get("beats_own"):
        return f"; forecasts apply the adaptive shifts, started from the model's own quantiles ({change})"
    return (f"; forecasts are the model's own quantiles (the adaptive shifts: {change}; --calibration adaptive or "
            "fixed applies shifts anyway)")


def calibrate_run(run: RunDir, data: PreparedData, device: torch.device, batch_size: int) -> str:
    """The train-end hook: fit, save, and the one line to print. Out of memory skips calibration with a note (the
    model itself is saved and usable)."""
    try:
        fit = fit_calibration(run, data, device, batch_size)
    except OOM_ERRORS as e:
        if not is_oom(e):
            raise
        release_memory(device)
        return ("calibration: skipped, out of memory while forecasting the validation windows; forecasts are the "
                "model's own")
    return calibration_line(fit, len(data.splits["val"]))


def _iso(ns: int) -> str:
    return str(np.datetime64(int(ns), "ns").astype("datetime64[s]")) + "Z"
