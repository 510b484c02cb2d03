"""`foxhunt evaluate`: forecasts on bars the model may never have seen, scored against the baselines on exactly
the same origins, with interpretation and a self-contained HTML report.

Forecasts are calibrated (`--calibration`: adaptive shifts, model/adaptive.py, or the fixed conformal shifts of
model/calibration.py) unless `--no-calibration`; the model's own quantiles are scored beside them ("model_raw") so
the change shows. By default
only origins after the model's validation period are scored (evaluate/period.py). The bars may be a feature store's
windows (`--features`). Scores accumulate as the forecasts are written (evaluate/accumulators.py), so memory holds one
series' origins, not every forecast."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from foxhunt.atomic import write_json
from foxhunt.data.dataset.fit_rows import first_forecast_ns
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.io.sample_path import SIMULATED, is_bundled_sample
from foxhunt.errors import InputError
from foxhunt.evaluate.accumulators import SeriesScorer, Span, span_of
from foxhunt.evaluate.config import EvaluateConfig
from foxhunt.evaluate.period import scoring_start
from foxhunt.evaluate.report import data_note, write_report
from foxhunt.evaluate.scored_rows import Scored, from_batch, scored_windows
from foxhunt.evaluate.series_baselines import baseline_cut, expected_baselines
from foxhunt.evaluate.verdict import seed_spread, verdict
from foxhunt.model.adaptive import started_from
from foxhunt.model.config import quantile_label
from foxhunt.model.saved import LoadedModel, load_model
from foxhunt.model.tft import variable_names
from foxhunt.predict.bar_range import check_start, window_note, with_window
from foxhunt.predict.calibrated import auto_none, calibration_method, forecast_calibration
from foxhunt.predict.interpretation import InterpretationAccumulator
from foxhunt.predict.origins import (
    parse_time,
    prepare_for_model,
    select_origins,
    store_for_model,
    with_sources,
)
from foxhunt.predict.parquet import write_forecasts
from foxhunt.predict.provenance import check_made_by, is_calibrated, read_metadata
from foxhunt.train.device import resolve_device
from foxhunt.train.seeds import SEEDS_FILE

log = logging.getLogger("foxhunt.evaluate")


def evaluate_run(cfg: EvaluateConfig, paths: tuple[str, ...]) -> dict[str, Any]:
    """Score the model `cfg.model` on the bars at `paths`, or on the windows of the feature store `cfg.features`
    (prepared with the model's data options: `store_for_model`), against every baseline on the same origins; write
    metrics.json, interpretation.json and report.html into `cfg.out_dir`. `cfg.covariates`, `cfg.events`: the
    user's inputs read from these instead of the training run's (predict.with_sources). `cfg.since`, `cfg.until`:
    the bars read (default: from the model's --since to the newest bar; predict/bar_range.py)."""
    model_dir, out_dir, start, end, forecasts = cfg.model, cfg.out_dir, cfg.start, cfg.end, cfg.forecasts
    device = resolve_device(cfg.device)
    lm = with_sources(load_model(model_dir, device), cfg.covariates, cfg.events)
    window: dict[str, str | None] = {"since": None, "until": None}  # the bars read: a store's are its own
    read = None  # the report's line about them
    if cfg.features is not None:  # --since / --until beside it were refused (ForecastConfig)
        data, where = store_for_model(lm, cfg.features), (f"feature store {cfg.features}",)
    else:
        lm = with_window(lm, cfg.since, cfg.until, cfg.timezone)
        window, read = {"since": lm.data_cfg.since, "until": lm.data_cfg.until}, window_note(lm)
        data, where = prepare_for_model(lm, paths), paths
        check_start(data, parse_time(start, "--start"), start, lm)
    end_ns = parse_time(end, "--end", end=True)
    start_ns, scored_what = scoring_start(data, model_dir, parse_time(start, "--start"), end_ns, start)
    ids = select_origins(data, start_ns, end_ns)
    info = None if forecasts is None else read_metadata(forecasts)  # read once: who made them, how calibrated
    given = None if forecasts is None else read_forecasts(forecasts, info, data, ids, lm)
    span = span_of(data, ids) if given is None else _span(given, data)
    if span is None:
        raise InputError("no origin in --start/--end has a realised target to score; evaluate on bars with a future")
    out_dir.mkdir(parents=True, exist_ok=True)
    static, encoder, decoder = variable_names(lm.schema)  # the order of the model's weight columns
    interp = InterpretationAccumulator(static, encoder, decoder, lm.schema.encoder_length, lm.schema.horizon)
    qs = lm.model_cfg.quantiles
    cal = forecast_calibration(lm, cfg.method) if given is None else None
    scorer = SeriesScorer(data, qs, baseline_cut(model_dir, span.first_forecast_ns), raw=cal is not None)
    if given is None:
        fc = write_forecasts(lm, data, ids, out_dir / "forecasts.parquet", cfg.batch_size, device, interp,
                             calibration=cal, consume=lambda fb: scorer.add(from_batch(fb, data)))
        crossings = {"crossed_pairs": fc.crossed, "pairs": fc.pairs}
        applied: bool | None = cal is not None
        method = lm.resolved_method(cfg.method)
        why_not = ((auto_none(lm) if cfg.method == "auto" else "--no-calibration") if method == "none"
                   else lm.calibration_note)
    else:
        scorer.add(given)
        crossings, applied = None, is_calibrated(info)
        why_not = f"{forecasts} holds {'uncalibrated' if applied is False else 'forecasts that do not say'}"
    del given
    scored = scorer.results()
    model_metrics, raw_metrics, baseline_metrics = scored.model, scored.raw, scored.baselines
    series_names = data.windows.series_names
    skills = {k: c["skill"] for k, c in scored.comparisons.items()}  # on the pairs both cover (evaluate/paired.py)
    claim = verdict_of(scored.comparisons, qs, applied, lm.transform.intraday, model_dir, scored.unscored)
    period = {"first_origin": _iso(span.first_ns), "last_origin": _iso(span.last_ns), "origins": span.origins,
              "partial_origins": span.partial, "scored": scored_what, **window}
    if span.partial:
        log.info("%s of the %s origins are scored on fewer than %d steps: each series' last origins, whose steps "
                 "run past its last bar (a feature store holds none of them)", f"{span.partial:,}",
                 f"{span.origins:,}", lm.model_cfg.horizon)
    calibrated = calibration_result(lm, applied, why_not, model_metrics, raw_metrics, calibration_method(cal))
    result = {"verdict": claim, "model": model_metrics, "baselines": baseline_metrics, "skill": skills,
              "comparisons": scored.comparisons, "period": period, "target": lm.schema.target,
              "quantile_crossings": crossings, "model_dir": str(model_dir), "calibration": calibrated}
    if raw_metrics is not None:
        result["model_raw"] = raw_metrics
        result["comparisons_raw"] = scored.raw_comparisons
    write_json(out_dir / "metrics.json", result)
    models = {"model": model_metrics, **({"model (raw)": raw_metrics} if raw_metrics is not None else {})}
    interpretation = interp.result()
    if forecasts is None:
        write_json(out_dir / "interpretation.json", interpretation)
    others = {k: v for k, v in models.items() if k != "model"}
    write_report(out_dir / "report.html", title=f"foxhunt evaluation: {lm.schema.target}", metrics=models,
                 claim=[claim["sentence"], *([claim["seed_spread"]] if claim["seed_spread"] else []),
                        *([SIMULATED] if is_bundled_sample(where) else [])],
                 baselines=baseline_metrics,
                 comparisons={"model": scored.comparisons, **({"model (raw)": scored.raw_comparisons}
                                                             if scored.raw_comparisons is not None else {})},
                 images=images(scorer.fans, qs, series_names, model_metrics, {**others, **baseline_metrics},
                               interpretation if forecasts is None else None, model_dir),
                 notes=[*notes(lm, where, period, model_dir), *([read] if read else []),
                        calibration_note(calibrated)])
    return result


def calibration_result(lm: LoadedModel, applied: bool | None, why_not: str | None, model: dict[str, Any],
                       raw: dict[str, Any] | None, method: str = "fixed") -> dict[str, Any]:
    """metrics.json "calibration": whether the scored forecasts are calibrated (None: a --forecasts file that does
    not say) and else why not, with which method (adaptive or fixed), the fit, and the outer-pair coverage and
    share below each quantile of the model raw and calibrated."""
    def cover(m: dict[str, Any]) -> dict[str, Any]:
        o = m["overall"]
        return {**o["coverage"], "below": o["calibration"]}

    cal = lm.calibration
    out: dict[str, Any] = {"applied": applied}
    if applied and cal is not None:
        method = lm.resolved_method(method)  # auto: as it applied to this model
        out.update(method=method, mode=cal.mode, fitted_on=cal.fitted_on, validation_coverage=cal.coverage)
        if method == "adaptive" and lm.adaptive is not None:
            out["adaptive"] = lm.adaptive.fitted_on
    elif not applied:
        out["not_applied"] = why_not
    if raw is not None:
        out["coverage"] = {"raw": cover(raw), "calibrated": cover(model)}
    else:
        out["coverage"] = {"calibrated" if applied else "raw": cover(model)}
    return out


def calibration_note(c: dict[str, Any]) -> str:
    """One plain line for the report and the console: coverage raw -> calibrated, or why there is no calibration."""
    cov = c["coverage"]
    label = next((k for k in next(iter(cov.values())) if k != "below"), None)
    shown = " -> ".join(f"{k} {v[label]:.3f}" for k, v in cov.items() if label and v.get(label) is not None)
    if c["applied"] and c.get("method") == "adaptive":
        a = c.get("adaptive", {})
        return (f"calibration: adaptive {c.get('mode', '?')} conformal shifts per series, started from "
                f"{started_from(a)} and moved by every outcome since (state as of {a.get('as_of', '?')}); {label} "
                f"coverage {shown}")
    if c["applied"]:
        f = c.get("fitted_on", {})
        return (f"calibration: fixed {c.get('mode', '?')} conformal shifts fitted on validation "
                f"({f.get('windows', 0):,} windows, {f.get('first_origin', '?')} to {f.get('last_origin', '?')}); "
                f"{label} coverage {shown}")
    return f"calibration: not applied ({c.get('not_applied')}); {label} coverage {shown}"


def read_forecasts(path: Path, info: dict[str, Any] | None, data: PreparedData, ids: torch.Tensor,
                   lm: LoadedModel) -> Scored:
    """Forecasts written earlier by `foxhunt predict` (`info`: the file's metadata), matched to these bars' windows by
    (symbol, origin)."""
    if not path.exists():
        raise InputError(f"{path}: --forecasts file not found")
    check_made_by(path, info, lm, data)
    cols = [quantile_label(q) for q in lm.model_cfg.quantiles]
    try:
        fc = pl.read_parquet(path, columns=["symbol", "origin", "horizon", *cols])
    except Exception as e:
        raise InputError(f"{path}: not a forecasts file from `foxhunt predict` ({str(e).splitlines()[0]})") from e
    w = data.windows
    keys = pl.DataFrame({
        "symbol": np.asarray(w.series_names, dtype=object)[w.series_index(ids).numpy()].tolist(),
        "origin_ns": w.origin_ns(ids).numpy(), "window": ids.numpy(),
    })
    d = lm.schema.horizon
    wide = (fc.with_columns(pl.col("origin").dt.epoch("ns").alias("origin_ns")).sort("symbol", "origin_ns", "horizon")
            .group_by("symbol", "origin_ns", maintain_order=True).agg([pl.col(c) for c in cols])
            .filter(pl.col(cols[0]).list.len() == d))
    joined = keys.join(wide, on=["symbol", "origin_ns"], how="inner").sort("window")
    if joined.height == 0:
        raise InputError(f"{path}: no forecast matches an origin of these bars; predict on the same file first")
    q = np.stack([np.stack(joined[c].to_list()) for c in cols], axis=-1)  # (K, D, Q)
    return scored_windows(w, torch.from_numpy(joined["window"].to_numpy().copy()), q)


def verdict_of(comparisons: dict[str, dict[str, Any]], qs: tuple[float, ...], applied: bool | None,
               intraday: bool, model_dir: Path, unscored: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """metrics.json "verdict": the sentence the console and the report open with (evaluate/verdict.py) on the model's
    `comparisons` with each baseline (evaluate/paired.py), and the seed spread when the run kept the best of several
    seeds (its seeds.json), since the claim depends on it. `expected_baselines` says why a baseline is missing;
    `unscored`: the series' reasons of a baseline that forecast none of them."""
    who = "The calibrated model" if applied else "The model (uncalibrated)" if applied is False else "The model"
    missing = {k: why or unscored_reason((unscored or {}).get(k))
               for k, why in expected_baselines(intraday).items() if k not in comparisons}
    out = verdict(comparisons, qs, who, missing).to_dict()
    seeds = read_seeds(Path(model_dir))
    out["seed_spread"] = seed_spread(seeds, qs) if seeds else None
    return out


def read_seeds(model_dir: Path) -> dict[str, Any] | None:
    """The run's seeds.json (written by `foxhunt train --seeds N`), or None without one."""
    path = model_dir / SEEDS_FILE
    if not path.exists():
        return None
    try:
        seeds = json.loads(path.read_text(encoding="utf-8"))
        return seeds if isinstance(seeds, dict) else None
    except (OSError, ValueError):
        log.warning("%s cannot be read: the seed spread is left out of the verdict", path)
        return None


def images(fans: dict[int, Scored], qs: tuple[float, ...], names: tuple[str, ...], model: dict[str, Any],
           base: dict[str, dict[str, Any]], interpretation: dict[str, Any] | None,
           model_dir: Path) -> dict[str, bytes]:
    # matplotlib loads here, not with this module: training imports the baselines above for its final line
    from foxhunt.evaluate import plots
    from foxhunt.evaluate.memory_report import load_memory, memory_png

    imgs: dict[str, bytes] = {}
    for s, name in enumerate(names):  # each series' latest origins (scoring.FAN_POINTS)
        fan = fans.get(s)
        if fan is not None and len(fan):
            times = fan.origin_ns.astype("datetime64[ns]")
            imgs[f"Forecast fan, one step ahead: {name} (latest {len(fan)} origins)"] = plots.fan_chart(
                times, fan.actual[:, 0], fan.quantiles[:, 0, :], qs, title=f"{name}: one step ahead")
    sources = {"model": model, **base}
    imgs["Calibration: share of actuals below each quantile"] = plots.calibration_plot(
        list(qs), {k: [v["overall"]["calibration"].get(_qk(v["overall"]["calibration"], q)) for q in qs]
                   for k, v in sources.items()})
    imgs["q-risk by horizon, model vs baselines"] = plots.qrisk_by_horizon(
        {k: [[h["q_risk"].get(_qk(h["q_risk"], q)) for q in qs] for h in v["per_horizon"]] for k, v in sources.items()},
        quantiles=list(qs))
    if interpretation and interpretation.get("n"):
        imgs["Variable importance (mean selection weights)"] = plots.variable_importance(interpretation)
        imgs["Attention by lag for each forecast step"] = plots.attention_by_lag(interpretation)
    records = _jsonl(Path(model_dir) / "metrics.jsonl")
    if records:
        imgs["Training curves"] = plots.training_curves(records)
    if (Path(model_dir) / "memory.jsonl").exists():
        imgs["Memory during training (train, validation and checkpoint shaded)"] = memory_png(
            load_memory(Path(model_dir) / "memory.jsonl"))
    return imgs


def notes(lm: LoadedModel, paths: tuple[str, ...], period: dict[str, Any], model_dir: Path) -> list[str]:
    return [
        f"model: {model_dir} ({lm.meta.get('n_params', '?')} parameters, hidden {lm.model_cfg.hidden_size}, "
        f"encoder {lm.schema.encoder_length} bars, horizon {lm.schema.horizon} bars)",
        data_note(paths),
        f"target: {lm.schema.target} ({'price' if lm.schema.target == 'price_change' else 'plain ln'} units), "
        f"scaling: {lm.schema.extra.get('scaling', 'series')}",
        f"origins scored: {period['origins']:,} from {period['first_origin']} to {period['last_origin']}"
        + (f" ({period['scored']})" if period.get("scored") else ""),
    ]


def _qk(d: dict[Any, Any], q: float) -> Any:
    """Metric dicts are keyed by quantile; after JSON they may be strings."""
    return q if q in d else next((k for k in d if float(k) == q), q)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a torn last line of a killed run
    return out


def unscored_reason(why: dict[str, str] | None) -> str:
    """Why a baseline forecast no series: the series' reasons, the same one said once."""
    reasons = sorted(set((why or {}).values()))
    if not reasons:
        return "it could not be fitted; see the warnings above"
    return reasons[0] if len(reasons) == 1 else "; ".join(f"{s}: {r}" for s, r in sorted((why or {}).items()))


def _span(given: Scored, data: PreparedData) -> Span | None:
    """The span of forecasts read from a file (those with a realised target)."""
    has = ~np.isnan(given.actual).all(axis=1)
    on = given.origin_ns[has]
    if not len(on):
        return None
    partial = int((has & np.isnan(given.actual).any(axis=1)).sum())
    return Span(len(on), int(on.min()), int(on.max()), first_forecast_ns(data, given.origin_row[has]), partial)


def _iso(ns: int) -> str:
    return str(np.datetime64(int(ns), "ns").astype("datetime64[s]")) + "Z"
