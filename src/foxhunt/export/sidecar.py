"""The sidecar `model.onnx.json`: what a program without Python needs to feed the graph and read its output.

Each input's name, dtype, shape (the batch axis named "batch") and the feature of every channel; the categorical
codes; how each feature is computed and scaled (formulas in words, the fitted numbers per series); how to turn the
output into the target's units and apply the calibration. docs/reference/model-format.md walks through it.

Its `scaling.scalers` and `your_inputs` are a public layout (format_version 1): the fitted records (fitted.py) with
the options they were fitted under written back in (`scalers_json`, `inputs_json`), as a reader of the sidecar alone
needs them; model.json keeps those options once, in its "data".
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

import foxhunt
from foxhunt.data.baselines.anchor import ANCHOR_CLIP
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.features.bar_features import (
    FILL_OBSERVED,
    RETURN_TARGETS,
    move_columns,
)
from foxhunt.data.features.inputs import context_inputs
from foxhunt.data.features.scaling import VOL_FLOOR, standardized
from foxhunt.export.graph import OUTPUT_NAME, InputSpec, positional_names, relative_time
from foxhunt.export.parity import ParityResult
from foxhunt.model.config import DEFAULT_METHOD
from foxhunt.model.saved import LoadedModel

FORMAT_VERSION = 1

# How each input is computed from bars, in words (data/features/calendar.py, data/features/bar_features.py, data/features/scaling.py).
FEATURES = {
    "series": "series code: 1 + the series' index in series.vocabulary; 0 for a series unseen in training",
    "dow_sin": "sin(2 pi w / 7), w the weekday (Monday 0 .. Sunday 6) of the UTC date (daily bars) or of the trade "
               "date = exchange-time date of ts + 7 h (intraday bars)",
    "dow_cos": "cos(2 pi w / 7), w as for dow_sin",
    "month_sin": "sin(2 pi m / 12), m = months since 1970-01 modulo 12 of the UTC date (0 = January)",
    "month_cos": "cos(2 pi m / 12), m as for month_sin",
    "tod_sin": "sin(2 pi t / 1440), t minutes after midnight in exchange time (exchange_tz)",
    "tod_cos": "cos(2 pi t / 1440), t as for tod_sin",
    "session_elapsed": "clip(((t - 1020) mod 1440) / 1380, 0, 1): share of the 23 h session (opens 17:00 exchange "
                       "time) elapsed at the bar",
    "tod_vol": "ln p(t), the fitted time-of-day volatility profile at the bar (scalers.season)",
    "log_return": "ln(close_t / close_t-1) of the bar's own contract (a roll bar: minus the roll's log price "
                  "ratio); 0 on a series' first bar",
    "log_range": "ln(high_t / low_t)",
    "price_change": "close_t - close_t-1 of the bar's own contract (a roll bar: minus the roll's price gap)",
    "price_range": "high_t - low_t",
    "log_volume": "ln(1 + volume_t)",
    "roll": "1 on the first bar of a new contract, else 0 (not standardized)",
    "filled": "1 on a bar added by --fill-gaps (no trade), else 0 (not standardized)",
    "shock": "r_t / sigma_t-1", "range_shock": "sqrt(k) ln(H/L)_t / sigma_t-1",
    "log_vol_fast": "ln(sigma_t at halflife / 4 over sigma_t)", "log_vol_slow": "ln(sigma_t at halflife x 4 over sigma_t)",
    "early_close": "1 when the bar's trade date closes before the regular close of calendar.session_inputs "
                   "(a pandas-market-calendars calendar), else 0; 0 on a day it has no session",
    "pre_holiday": "1 on the session before a weekday on which calendar.session_inputs has no session, else 0",
    "post_holiday": "1 on the session after a weekday on which calendar.session_inputs has no session, else 0",
    "to_close": "minutes from the bar to its session's close over the regular session's length, clipped to [0, 1]",
}


def _proxy_words(tf: FittedTransform, target: str) -> str:
    """The variance proxy v_t of data/features/scaling.variance_proxy for this model's estimator."""
    ret, rng = move_columns(target)
    return (f"v_t = {ret}_t^2" if tf.data.vol_estimator == "returns" else
            f"v_t = k {rng}_t^2, k = scalers.series[s].range_k.value")


def _ewma_words(target: str, x: str, out: str) -> str:
    """The seeded EWMA of data/features/scaling.trailing over `x` (the proxy, or it deseasonalized) and its floor,
    giving `out`: one recipe for the sidecar's volatility inputs and its volatility scale."""
    ret, _ = move_columns(target)
    return ("m_0 = std^2 on the series' first bar (the seed itself: that bar's own v_0 is not used), then m_t = "
            f"(1 - a) m_(t-1) + a {x} on every later bar, a = 1 - 0.5^(1 / scalers.halflife); "
            f"{out} = max(sqrt(m_t), {VOL_FLOOR} std), std = scalers.series[s].{ret}.std")


SEASON_WORDS = ("p(t) = scalers.season.profile[i] at i the minute of the day (0..1439) of bar t's time in zone "
                "scalers.season.tz")


def trailing_words(tf: FittedTransform, target: str) -> dict[str, str]:
    """`log_vol` and `log_vol_season` in words exact enough to rebuild them bar by bar (data/features/scaling.
    trailing, the same recipe as `volatility_words`; tests/export/test_sidecar_scaling.py rebuilds both in numpy
    from these words)."""
    proxy = _proxy_words(tf, target)
    words = {"log_vol": (f"ln sigma_t, the series' trailing volatility (estimator '{tf.data.vol_estimator}'): "
                         f"{proxy}; {_ewma_words(target, 'v_t', 'sigma_t')} (the same recipe as "
                         "scaling.center_scale, without the profile)")}
    if tf.scalers.season is not None:
        words["log_vol_season"] = (
            f"ln s_t, the series' deseasonalized trailing volatility: the proxy {proxy} divided by p(t)^2, "
            f"{SEASON_WORDS}; {_ewma_words(target, 'v_t / p(t)^2', 's_t')} (the seed is not divided by p^2)")
    return words


def calendar_words(tf: FittedTransform) -> dict[str, Any]:
    """Where the forecast steps sit and which calendar the session inputs follow: with `--calendar`, its session
    (hours in its zone, trading weekdays, every holiday it knows: model.json's `transform.session`), without which
    a reader in another language could not place the steps past a holiday."""
    session = None if tf.session is None else dataclasses.asdict(tf.session)
    closures = ("Saturdays and Sundays for daily bars; intraday, CME Globex Equity's daily halt and weekend in "
                "America/Chicago, nothing in another zone" if session is None else
                "the times outside `session` (open_min .. close_min minutes after local midnight, open_day / close_day "
                "relative to the trade date, on `weekdays`, Monday 0) and its `holidays`")
    return {"intraday": tf.intraday, "exchange_tz": tf.exchange_tz, "bar_spacing_ns": tf.bar_spacing_ns,
            "session": session,
            "session_inputs": tf.session_calendar,  # early_close ... to_close follow this calendar (None: not used)
            "decoder_steps": "the known inputs at forecast step k are those of the k-th point of the regular grid "
                             f"of bar_spacing_ns after the origin, skipping {closures}"}


def _input(spec: InputSpec, cards: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": spec.name, "dtype": spec.dtype, "shape": list(spec.shape),
                           "dynamic_axes": {"0": "batch"}, "channels": list(spec.channels)}
    if spec.categorical:
        out["cardinality"] = [cards[c] for c in spec.channels]
    return out


def scalers_json(tf: FittedTransform) -> dict[str, Any]:
    """`scaling.scalers`: {"halflife", "estimator", "vol_features", "fill_gaps", "units" ("price" for a
    price_change target only), "series", "pooled", "season" (with a profile only), "user_observed" (with the user's
    observed inputs only)}, each series' {input: {mean, std}, "target": {center, scale}, "range_k": {value}}."""
    cfg, fitted = tf.data, tf.scalers.to_dict()
    return {"halflife": float(cfg.vol_halflife), "estimator": cfg.vol_estimator, "vol_features": cfg.vol_features,
            "fill_gaps": cfg.fill_gaps, **({"units": "price"} if cfg.target == "price_change" else {}),
            "series": fitted["series"], "pooled": fitted["pooled"],
            **({"season": fitted["season"]} if fitted["season"] is not None else {}),
            **({"user_observed": fitted["user_observed"]} if fitted["user_observed"] else {})}


def inputs_json(tf: FittedTransform) -> dict[str, Any] | None:
    """`your_inputs`: the fitted inputs (FittedInputs.to_dict) with "known_names" (the real known columns, then
    the events'), "covariate_scaling", "event_cap" (the steps at which the event features saturate) and the zone
    naive times in the source files are read in ("timezone", "times": io/times.py)."""
    if tf.inputs is None:
        return None
    zone = tf.data.timezone or "UTC"
    return {**tf.inputs.to_dict(), "known_names": list(tf.inputs.known_names),
            "covariate_scaling": tf.data.covariate_scaling, "event_cap": tf.event_cap,
            "timezone": zone,  # the training run's --timezone (model.json data.timezone)
            "times": f"a time without a zone in a source file (sources, events) is wall-clock time in {zone}; one "
                     "with a zone or offset is that instant; a date alone is midnight of that date in "
                     f"{zone}; every time is then compared in UTC"}


def scaling_words(lm: LoadedModel, used: set[str]) -> dict[str, Any]:
    t = lm.transform
    return {
        "observed_inputs": "each observed input x of a bar is standardized with its series' training statistics: "
                           "(x - scalers.series[s][x].mean) / scalers.series[s][x].std (scalers.pooled for an "
                           "unseen series); NaN or infinite results become 0. "
                           f"Standardized: {sorted(n for n in used if standardized(n, t.scalers))}; the others are fed as they are",
        "target": "the model forecasts y_scaled = (y - center) / scale, center and scale taken at the forecast "
                  "origin (the last encoder bar); back in the target's units: y = q * scale + center",
        "center_scale": ("scaling 'series': center = scalers.series[s].target.center, scale = "
                         "scalers.series[s].target.scale, the same for every window of a series"
                         if t.scaling == "series" else volatility_words(t, lm.schema.target)),
        "mode": t.scaling,
        "scalers": scalers_json(t),
        "not_standardized": sorted((set(FILL_OBSERVED) | {"roll"}) & used),
    }


def user_words(lm: LoadedModel) -> dict[str, str]:
    """How each of the user's own inputs (data/features/inputs.py) is fed, in words; `your_inputs` holds the
    numbers (the known inputs' mean and std, the event calendar)."""
    got = lm.transform.inputs
    if got is None:
        return {}
    src = got.sources
    words = {c: f"column {c} of {src.get(c, 'the bar files')} as of the bar: its last row stamped at or before the "
                "bar's time (per series where the file has a symbol column); standardized like the other observed "
                "inputs with scalers.series[s][" + c + "]" for c in got.observed}
    words.update({c: f"column {c} of {src.get(c, '?')} as of the time of the bar or forecast step (its last row at "
                     "or before it), then (x - your_inputs.known_scalers[" + c + "].mean) / std"
                  for c in got.known})
    for c in got.context:  # --context: the series' own inputs (context_inputs), its log_vol included
        for col in context_inputs(lm.transform.target):
            words[f"{c}_{col}"] = (f"series {c}'s own {col} input (before standardizing) at its last bar at or "
                                   "before the bar's time (the same time included; none before its first bar: 0); "
                                   f"standardized like the other observed inputs with scalers.series[s][{c}_{col}]")
    kinds = got.static_kinds
    for c in got.static:
        whose = (f"the one value of column {c} of {src.get(c, 'the bar files')} over the series' rows (per series by "
                 "name, or by its contracts, where the file has a symbol column)")
        words[c] = (f"{whose}; code = its index in your_inputs.static_vocab[{c}] + 1, 0 for a value not in it "
                    "(static_cat, after the series code)" if kinds.get(c) == "categorical" else
                    f"{whose}, then (x - your_inputs.static_scalers[{c}].mean) / std (static_cont)")
    for c in got.observed_cat:
        words[c] = (f"column {c} of {src.get(c, 'the bar files')} as of the bar (its last row at or before the bar's "
                    f"time); code = its index in your_inputs.timed_vocab[{c}] + 1, 0 for a value not in it or no "
                    "value (encoder_cat, after the known categorical inputs)")
    for c in got.known_cat:
        words[c] = (f"column {c} of {src.get(c, '?')} as of the time of the bar or forecast step; code = its index "
                    f"in your_inputs.timed_vocab[{c}] + 1, 0 for a value not in it (encoder_cat and decoder_cat)")
    cap = lm.transform.event_cap
    keyed = ("; a series' events are events[name] and keyed[key][name], key its name where keyed lists it, else the "
             "contract it holds at the bar (at the origin for a forecast step)") if got.events is not None and (
        got.events.keys) else ""
    for n in got.events.names if got.events is not None else ():
        words[f"{n}_until"] = (f"min(floor((e - t) / bar_spacing_ns), {cap}) / {cap}, e the first {n} event at or "
                               f"after the bar's start t (your_inputs.events{keyed}); 1 when there is none")
        words[f"{n}_since"] = (f"min(floor((t - e) / bar_spacing_ns), {cap}) / {cap}, e the last {n} event before "
                               "the bar's start t; 1 when there is none")
        words[f"{n}_in_bar"] = f"1 when a {n} event falls in [t, t + bar_spacing_ns), else 0"
    return words


def volatility_words(tf: FittedTransform, target: str) -> str:
    """The exact recipe of data/scaling.trailing's center and scale for volatility scaling, in this model's terms:
    a reader in another language rebuilds the scale at the origin from these words and the scaler numbers alone
    (tests/export/test_sidecar_scaling.py does so in numpy)."""
    _, rng = move_columns(target)
    est = tf.data.vol_estimator
    season = tf.scalers.season is not None
    x = "v_t / p(t)^2" if season else "v_t"
    words = (f"scaling 'volatility' ({est} estimator). Per series s, over its bars in time order: "
             f"{_proxy_words(tf, target)}; {_ewma_words(target, x, 'sigma_t')}")
    if season:
        words += (f" (the seed is not divided by p^2); {SEASON_WORDS}, and the volatility expected at bar t is "
                  "sigma_t x p(t)")
    vol = "sigma_t x p(t)" if season else "sigma_t"
    if target in RETURN_TARGETS:
        return words + f". At the origin t: center 0, scale {vol}"
    if est == "range":
        return words + f". At the origin t: center 0, scale {vol} / sqrt(k)"
    return words + (f". For {target} with the returns estimator: center = EWMA (same a, seeded with "
                    f"scalers.series[s].target.center) of x_t = {rng}_t, scale = sqrt(max(EWMA of x_t^2 seeded "
                    "with center^2 + scale^2, minus center_t^2; (0.1 scale)^2)), scalers.series[s].target giving "
                    "the seeds")


def calibration_words(lm: LoadedModel) -> dict[str, Any] | None:
    cal = lm.calibration
    if cal is None:
        return None
    unit = "times the window's scale (the same scale that unscales the output)" if cal.mode == "scaled" else \
        "in the target's own units"
    out = {
        "mode": cal.mode,
        "shifts": cal.shifts.tolist(),  # (D, Q)
        "how_to_apply": "unscale the output (scaling.target), sort each horizon's Q values ascending (an "
                        "independent quantile_head's may cross), add shifts[h][j] "
                        f"{unit} to quantile j at horizon h, sort "
                        "ascending again. Skip the shifts to get the model's own quantiles",
        "fitted_on": cal.fitted_on,
    }
    if lm.adaptive is not None:
        out["default_method"] = lm.resolved_method(DEFAULT_METHOD)
        out["adaptive"] = {**lm.adaptive.to_dict(), "how_to_update": ADAPTIVE_WORDS.format(unit=unit)}
    return out


# What a live user of the graph does to keep adaptive shifts (model/adaptive.py), in words.
ADAPTIVE_WORDS = (
    "adaptive shifts replace `shifts` with a state per series that every outcome moves. Start series s from "
    "adaptive.series[s], as of as_of_ns, its last validation origin: forecast every origin after it in bar order, "
    "the D - 1 before it too (their forecasts wait for outcomes after it); a series not there starts at its first "
    "origin with every expert at rule.start, weights 1/K. At each bar t after as_of_ns, with y_t the target of bar t: for each step h = 1..D whose "
    "origin t - h was forecast, take its raw forecasts f (unscaled, sorted) and that origin's scale, and for each "
    "quantile j with level tau: score = (y_t - f[h][j]) / scale when rule.mode is scaled (else y_t - f[h][j]); for "
    "each expert k with shift c = shifts[k][h][j] and weight w = weights[k][h][j]: u = score - c, loss = max(tau u, "
    "(tau - 1) u) / rule.loss_scale[h][j], w = w exp(-rule.rate loss), c = c + rule.step[k][h][j] ((1 if u > 0 else "
    "0) - (1 - tau)); then normalise w over k to sum 1 and set w = (1 - rule.share) w + rule.share / K. The shift "
    "applied to origin t's quantile j at horizon h is sum over k of w c ({unit}); origins before as_of_ns take "
    "rule.start. Then sort ascending, as with fixed shifts"
)


def _anchor_feature(name: str) -> str | None:
    """The words of an anchor channel (`anchor_q0.1`, graph.anchor_channels); None for another input."""
    if not name.startswith("anchor_q"):
        return None
    return (f"the anchor's {name.removeprefix('anchor_q')} quantile at the forecast step, in scaled target units "
            "(see \"anchor\")")


def anchor_words(lm: LoadedModel) -> dict[str, Any] | None:
    """How the `anchor` input is computed (data/baselines/anchor.py), with each series' fitted GARCH-t; None for a
    model without one."""
    fit = lm.transform.anchor
    if fit is None:
        return None
    return {"kind": fit.kind,
            "formula": "at an origin t, for steps h = 1..D: v_t = omega + alpha (r_t - mu)^2 + beta v_t-1 (v_-1 = "
                       "init_var; a series' first bar, with no return, adds omega / (1 - alpha - beta) for (r - mu)^2, "
                       "or init_var when alpha + beta >= 1), s2_1 = v_t, s2_h = omega + (alpha + beta) s2_h-1; "
                       "quantile q = mu + sqrt(s2_h) t_q(nu) sqrt((nu - 2) / nu), t_q the Student-t quantile; the "
                       f"input is (q - center_t) / scale_t (scaling.target at the origin), clipped to +-{ANCHOR_CLIP:g}",
            "fallback": "a series with no fit (listed in left_out, or unseen in training): the standard normal "
                        "quantiles of each level, at every step",
            "series": {name: dataclasses.asdict(p) for name, p in fit.params.items()},
            "left_out": dict(fit.left_out)}


def sidecar(lm: LoadedModel, run_dir: Path, model_file: str, specs: list[InputSpec], parity: ParityResult,
            opset: int) -> dict[str, Any]:
    """The sidecar as a JSON-able dict (see the module docstring)."""
    schema, cfg = lm.schema, lm.model_cfg
    cards = {f.name: f.cardinality for f in schema.features if f.cardinality}
    present = [s for s in specs if s.channels]
    pos = positional_names(schema)
    used = {c for s in present for c in s.channels}
    return {
        "format": "foxhunt-onnx",
        "format_version": FORMAT_VERSION,
        "foxhunt_version": foxhunt.__version__,
        "torch_version": torch.__version__,
        "exporter": "torch.onnx.export(dynamo=True)",
        "opset": opset,
        "model_file": model_file,
        "run_dir": str(Path(run_dir).resolve()),
        "weights_sha256": lm.weights_sha256,
        "inputs": [_input(s, cards) for s in present],
        "omitted_inputs": [s.name for s in specs if not s.channels],
        "output": {"name": OUTPUT_NAME, "dtype": "float32", "shape": ["batch", cfg.horizon, len(cfg.quantiles)],
                   "units": "scaled target (see scaling.target), before calibration"},
        "built_in": {n: {"formula": "(t - (E - 1)) / E at window position t = 0 .. E + D - 1",
                         "values": relative_time(cfg.encoder_length, cfg.horizon)[:, 0].tolist()} for n in pos},
        "encoder_length": cfg.encoder_length,
        "horizon": cfg.horizon,
        "quantiles": list(cfg.quantiles),
        "quantile_head": cfg.quantile_head,  # tied: the output is in order (model/quantile_head.py)
        "target": schema.target,
        "series": {"vocabulary": list(lm.transform.series_vocab), "unknown_code": 0,
                   "codes": {name: i + 1 for i, name in enumerate(lm.transform.series_vocab)}},
        "calendar": calendar_words(lm.transform),
        "features": {n: trailing_words(lm.transform, schema.target).get(n) or FEATURES.get(n) or _anchor_feature(n)
                     or user_words(lm).get(n, "see docs/reference/model-format.md") for n in sorted(used)},
        "anchor": anchor_words(lm),
        "your_inputs": inputs_json(lm.transform),
        "scaling": scaling_words(lm, used),
        "calibration": calibration_words(lm),
        "parity": parity.to_dict(),
    }
