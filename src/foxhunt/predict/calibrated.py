"""Which calibration forecasts get (model/calibration.METHODS): the adaptive state's shifts, the fixed ones, or the
model's own quantiles, and the one line that says which and why."""

from __future__ import annotations

import logging

from foxhunt.errors import InputError
from foxhunt.model.adaptive import Runner, started_from
from foxhunt.model.calibration import METHODS, Calibration
from foxhunt.model.saved import LoadedModel

log = logging.getLogger("foxhunt.evaluate")


def auto_none(lm: LoadedModel) -> str:
    """Why `--calibration auto` gives an anchored model no shifts (model/config.resolved_method), for predict's line
    and evaluate's metrics.json: its validation verdict, or that there is none to read."""
    if lm.adaptive is not None and "beats_own" in lm.adaptive.fitted_on:
        return "--calibration auto: the adaptive shifts did not beat the anchored model's own quantiles on validation"
    return ("--calibration auto: the anchored model's forecasts are its own quantiles (no validation verdict on "
            "adaptive shifts: calibration.json missing or from before it)")


def pick_calibration(lm: LoadedModel, method: str) -> Calibration | Runner | None:
    """`forecast_calibration` without a word: for `Forecaster.load`, which says nothing until asked."""
    if method not in METHODS:
        raise InputError(f"--calibration {method!r} is not one of {', '.join(METHODS)}")
    method = lm.resolved_method(method)
    if method == "none" or lm.calibration is None:
        return None
    return lm.adaptive.runner() if method == "adaptive" and lm.adaptive is not None else lm.calibration


def forecast_calibration(lm: LoadedModel, method: str) -> Calibration | Runner | None:
    """The calibration `method` (model/calibration.METHODS) to apply: the fixed shifts, a Runner of the adaptive
    state, or None (the model's own quantiles); said once: which one, or why there is none. A run whose
    calibration.json predates the adaptive state gets the fixed shifts, with a warning."""
    picked, applies = pick_calibration(lm, method), lm.resolved_method(method)
    if applies == "none":
        why = auto_none(lm) if method == "auto" else "--calibration none"
        log.info("calibration none (%s): forecasts are the model's own quantiles", why)
        return None
    cal = lm.calibration
    if cal is None:
        log.warning("%s: forecasts are the model's own quantiles, not calibrated", lm.calibration_note or "no calibration")
        return None
    f = cal.fitted_on
    if isinstance(picked, Runner):
        log.info("calibrated forecasts: adaptive %s shifts per series, started from %s and followed through "
                 "validation to %s; each later outcome moves them", cal.mode, started_from(picked.cal.fitted_on),
                 picked.cal.fitted_on.get("as_of"))
        return picked
    if applies == "adaptive":
        log.warning("%s has no adaptive state (fitted before adaptive calibration): fixed shifts instead; retrain "
                    "for adaptive ones", lm.root / "calibration.json" if lm.root is not None else "calibration.json")
    log.info("calibrated forecasts: fixed %s conformal shifts fitted on validation origins %s .. %s (%s windows)",
             cal.mode, f.get("first_origin", "?"), f.get("last_origin", "?"), f"{f.get('windows', 0):,}")
    return cal


def calibration_method(cal: Calibration | Runner | None) -> str:
    """Which calibration `forecast_calibration` gave: "adaptive", "fixed" or "none"."""
    return "none" if cal is None else "adaptive" if isinstance(cal, Runner) else "fixed"

