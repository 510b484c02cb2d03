"""`foxhunt evaluate`: forecasts on bars the model may never have seen, scored against the baselines on exactly
the same origins, with interpretation and a self-contained HTML report.

Forecasts are calibrated (conformal shifts fitted on the validation split, model/calibration.py) unless
`--no-calibration`; the model's own quantiles are scored beside them ("model_raw") so the change shows. By default
only origins after the model's validation period are scored (evaluate/period.py)."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from foxhunt.atomic import write_json
from foxhunt.data.calendar import future_timestamps
from foxhunt.data.features import RETURN_TARGETS
from foxhunt.data.prepare import FittedTransform, PreparedData
from foxhunt.data.seasonality import fit_profile, profile_at
from foxhunt.data.windows import WindowedData
from foxhunt.errors import InputError
from foxhunt.evaluate.baselines import BASELINES, INTRADAY_ONLY, baseline_forecasts, garch_available
from foxhunt.evaluate.interpretation import InterpretationAccumulator
from foxhunt.evaluate.metrics import MetricAccumulator, skill
from foxhunt.evaluate.period import scoring_start
from foxhunt.evaluate.predict import (
    ForecastBatch,
    forecast_calibration,
    is_calibrated,
    parse_time,
    prepare_for_model,
    quantile_column,
    select_origins,
    store_for_model,
    write_forecasts,
)
from foxhunt.evaluate.report import write_report
from foxhunt.evaluate.verdict import seed_spread, verdict
from foxhunt.model.tft import variable_names
from foxhunt.train.checkpoint import LoadedModel, load_model
from foxhunt.train.seeds import SEEDS_FILE

log = logging.getLogger("foxhunt.evaluate")
FAN_POINTS = 300  # origins shown in each series' fan chart (the most recent ones)


@dataclass
class Scored:
    """Forecasts gathered on the host for scoring: (K, D, Q) model quantiles and (K, D) actuals, K origins."""

    series: np.ndarray  # (K,)
    origin_row: np.ndarray  # (K,) global row of each origin
    origin_ns: np.ndarray  # (K,)
    quantiles: np.ndarray  # (K, D, Q), calibrated when `raw` is set
    actual: np.ndarray  # (K, D)
    raw: np.ndarray | None = None  # (K, D, Q) the model's own quantiles when `quantiles` are calibrated

    def subset(self, keep: np.ndarray) -> Scored:
        return Scored(*(None if a is None else a[keep] for a in dataclasses.astuple(self)))


def evaluate_run(
    model_dir: Path, paths: tuple[str, ...], out_dir: Path, start: str | None = None, end: str | None = None,
    batch_size: int = 1024, device: torch.device | str = "cpu", forecasts: Path | None = None,
    calibrate: bool = True, features: Path | None = None,
) -> dict[str, Any]:
    """Score the model on the bars at `paths`, or on the windows of the feature store `features` (prepared with the
    model's data options: `store_for_model`), against every baseline on the same origins; write metrics.json,
    interpretation.json and report.html into `out_dir`."""
    device = torch.device(device)
    lm = load_model(model_dir, device)
    if features is not None:
        data, where = store_for_model(lm, Path(features)), (f"feature store {features}",)
    else:
        data, where = prepare_for_model(lm, paths), paths
    end_ns = parse_time(end, "--end", end=True)
    start_ns, scored_what = scoring_start(data, model_dir, parse_time(start, "--start"), end_ns, start)
    ids = select_origins(data, start_ns, end_ns)
    out_dir.mkdir(parents=True, exist_ok=True)
    static, encoder, decoder = variable_names(lm.schema)  # the order of the model's weight columns
    interp = InterpretationAccumulator(static, encoder, decoder, lm.schema.encoder_length, lm.schema.horizon)
    if forecasts is None:
        kept: list[ForecastBatch] = []
        cal = forecast_calibration(lm, calibrate)
        fc = write_forecasts(lm, data, ids, out_dir / "forecasts.parquet", batch_size, device, interp, kept, cal)
        scored = gather(kept, data)
        kept.clear()  # the batches are copied into `scored`: not held twice through the scoring
        crossings = {"crossed_pairs": fc.crossed, "pairs": fc.pairs}
        applied: bool | None = cal is not None
        why_not = "--no-calibration" if not calibrate else lm.calibration_note
    else:
        scored = read_forecasts(forecasts, data, ids, lm)
        crossings, applied = None, is_calibrated(forecasts)
        why_not = f"{forecasts} holds {'uncalibrated' if applied is False else 'forecasts that do not say'}"
    has_actual = ~np.isnan(scored.actual).all(axis=1)
    if not has_actual.any():
        raise InputError("no origin in --start/--end has a realised target to score; evaluate on bars with a future")
    if not has_actual.all():  # (a store's windows all have their targets: no copy of them)
        scored = scored.subset(has_actual)

    qs = lm.model_cfg.quantiles
    series_names = data.windows.series_names
    directional = lm.schema.target in RETURN_TARGETS
    model_metrics = score(scored.actual, scored.quantiles, scored.series, qs, series_names, directional)
    raw_metrics = (None if scored.raw is None
                   else score(scored.actual, scored.raw, scored.series, qs, series_names, directional))
    cut = baseline_cut(model_dir, int(scored.origin_ns.min()))
    baseline_metrics = {}
    for kind in BASELINES:  # one baseline's (K, D, Q) float64 forecasts at a time: 4 of them for 2.6M origins, 1.3 GB
        for k, v in baselines(data, scored, cut, qs, only=(kind,)).items():
            baseline_metrics[k] = score(scored.actual, v, scored.series, qs, series_names, directional)
    skills = {k: skill(model_metrics["overall"]["q_risk"], m["overall"]["q_risk"]) for k, m in baseline_metrics.items()}
    claim = verdict_of(model_metrics, baseline_metrics, qs, applied, lm.transform.intraday, model_dir,
                       lm.schema.target, data.own_moves)
    period = {"first_origin": _iso(scored.origin_ns.min()), "last_origin": _iso(scored.origin_ns.max()),
              "origins": int(len(scored.origin_ns)), "scored": scored_what}
    calibration = calibration_result(lm, applied, why_not, model_metrics, raw_metrics)
    result = {"verdict": claim, "model": model_metrics, "baselines": baseline_metrics, "skill": skills, "period": period,
              "target": lm.schema.target, "quantile_crossings": crossings, "model_dir": str(model_dir),
              "calibration": calibration}
    if raw_metrics is not None:
        result["model_raw"] = raw_metrics
    write_json(out_dir / "metrics.json", result)
    models = {"model": model_metrics, **({"model (raw)": raw_metrics} if raw_metrics is not None else {})}
    interpretation = interp.result()
    if forecasts is None:
        write_json(out_dir / "interpretation.json", interpretation)
    others = {k: v for k, v in models.items() if k != "model"}
    write_report(out_dir / "report.html", title=f"foxhunt evaluation: {lm.schema.target}", metrics=models,
                 claim=[claim["sentence"], *([claim["seed_spread"]] if claim["seed_spread"] else [])],
                 baselines=baseline_metrics,
                 images=images(scored, qs, series_names, model_metrics, {**others, **baseline_metrics},
                               interpretation if forecasts is None else None, model_dir),
                 notes=[*notes(lm, where, period, model_dir), calibration_note(calibration)])
    return result


def gather(kept: list[ForecastBatch], data: PreparedData) -> Scored:
    window = np.concatenate([k.window for k in kept])
    origin_row = (data.windows.starts[torch.from_numpy(window)] + data.windows.encoder_length - 1).numpy()
    data.windows.release()
    raw = None if kept[0].raw is None else np.concatenate([k.raw for k in kept])
    return Scored(np.concatenate([k.series for k in kept]), origin_row, np.concatenate([k.origin_ns for k in kept]),
                  np.concatenate([k.quantiles for k in kept]), np.concatenate([k.actual for k in kept]), raw)


def calibration_result(lm: LoadedModel, applied: bool | None, why_not: str | None, model: dict[str, Any],
                       raw: dict[str, Any] | None) -> dict[str, Any]:
    """metrics.json "calibration": whether the scored forecasts are calibrated (None: a --forecasts file that does
    not say) and else why not, the fit, and the outer-pair coverage and share below each quantile of the model raw
    and calibrated."""
    def cover(m: dict[str, Any]) -> dict[str, Any]:
        o = m["overall"]
        return {**o["coverage"], "below": o["calibration"]}

    cal = lm.calibration
    out: dict[str, Any] = {"applied": applied}
    if applied and cal is not None:
        out.update(mode=cal.mode, fitted_on=cal.fitted_on, validation_coverage=cal.coverage)
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
    if c["applied"]:
        f = c.get("fitted_on", {})
        return (f"calibration: {c.get('mode', '?')} conformal shifts fitted on validation ({f.get('windows', 0):,} "
                f"windows, {f.get('first_origin', '?')} to {f.get('last_origin', '?')}); {label} coverage {shown}")
    return f"calibration: not applied ({c.get('not_applied')}); {label} coverage {shown}"


def read_forecasts(path: Path, data: PreparedData, ids: torch.Tensor, lm: LoadedModel) -> Scored:
    """Forecasts written earlier by `foxhunt predict`, matched to these bars' windows by (symbol, origin)."""
    if not path.exists():
        raise InputError(f"{path}: --forecasts file not found")
    cols = [quantile_column(q) for q in lm.model_cfg.quantiles]
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


def scored_windows(w: WindowedData, ids: torch.Tensor, quantiles: np.ndarray) -> Scored:
    """The windows `ids` with their (K, D, Q) `quantiles` (Q may be 0: baselines alone are scored there)."""
    origin_row = (w.starts[ids] + w.encoder_length - 1).numpy()
    w.release()
    return Scored(w.series_index(ids).numpy(), origin_row, w.origin_ns(ids).numpy(), quantiles,
                  w.actual(ids).numpy().astype(np.float64))


def score(y: np.ndarray, q: np.ndarray, series: np.ndarray, qs: tuple[float, ...], names: tuple[str, ...],
          directional: bool) -> dict[str, Any]:
    """Metrics overall, per horizon and per series (by name). The directional hit rate means something for returns
    only: a range is always positive, so for other targets it is reported as null."""
    acc = MetricAccumulator(qs, y.shape[1], n_series=len(names))
    acc.update(y, q, series)
    res = acc.result()
    res["per_series"] = {names[int(k)]: v for k, v in res.get("per_series", {}).items()}
    if not directional:
        for block in [res["overall"], *res["per_horizon"], *res["per_series"].values()]:
            block["hit_rate"] = None
    return res


# The own move columns (features.own_move_columns) each baseline reads, by target ("*": any target).
NEEDS = {("seasonal_rolling_vol", "*"): "log_range", ("garch_t", "log_range"): "log_return"}


def expected_baselines(intraday: bool, target: str = "log_return",
                       own: Collection[str] | None = None) -> dict[str, str | None]:
    """The baselines this data calls for, each with the reason it cannot be scored here (None: it can). `own`: the
    own move columns the data keep (None: all; a feature store prepared before foxhunt kept them has none)."""
    out: dict[str, str | None] = {}
    for k in BASELINES:
        if k in INTRADAY_ONLY and not intraday:
            continue
        column = NEEDS.get((k, target), NEEDS.get((k, "*")))
        if own is not None and column is not None and column not in own:
            out[k] = (f"the feature store keeps no own_{column}, as stores prepared by an earlier foxhunt do not: "
                      "run `foxhunt prepare` again, or evaluate on the bars")
        elif k == "garch_t" and not garch_available():
            out[k] = "the arch package is not installed: pip install 'foxhunt[garch]'"
        else:
            out[k] = None
    return out


def baselines(data: PreparedData, scored: Scored, cut: int, quantiles: tuple[float, ...],
              only: Collection[str] | None = None) -> dict[str, np.ndarray]:
    """Each baseline's (K, D, Q) on the scored origins (of `only` when given), fitted per series on rows before
    `cut` (ns). They read each series' target and its contracts' own moves (`data.own_moves`, computed with the
    model's features: adjusted closes would carry later roll gaps), a series' rows at a time: a feature store's
    pages are let go after each series."""
    w, tf = data.windows, data.transform
    expected = expected_baselines(tf.intraday, data.schema.target, data.own_moves)
    for k, why in expected.items():
        if why is not None and (only is None or k in only):
            log.warning("baseline %s left out: %s", k, why)
    kinds = [k for k, why in expected.items() if why is None and (only is None or k in only)]
    out = {k: np.full((*scored.actual.shape, len(quantiles)), np.nan) for k in kinds}
    # Rows are sorted by series, then time, each series' real rows first: a series' rows are one slice.
    bounds = np.searchsorted(w.series_idx.numpy(), np.arange(len(w.series_names) + 1))  # (S + 1,)
    for s, name in enumerate(w.series_names):  # a handful of series
        pick = np.flatnonzero(scored.series == s)
        rows = bounds[s] + np.flatnonzero(w.real.numpy()[bounds[s] : bounds[s + 1]])  # (n,)
        if len(rows) == 0 or len(pick) == 0:
            continue
        target = w.target_raw.numpy()[rows].astype(np.float64)
        ts = w.ts_ns.numpy()[rows]
        own = {c: v[rows].astype(np.float64) for c, v in data.own_moves.items()}
        w.release()
        train_mask = (ts < cut) & np.isfinite(target)
        if train_mask.sum() < 2:
            log.warning("series %s: no bars before %s to fit baselines on; its baselines are left out", name,
                        _iso(cut))
            continue
        origins = scored.origin_row[pick] - rows[0]
        returns = own.get("log_return")
        if returns is not None:
            returns[0] = np.nan  # a series' first bar has no return
        profile = None
        if "seasonal_rolling_vol" in kinds:
            profile = _season(own["log_range"], ts, train_mask, scored.origin_ns[pick], w.horizon, tf)
        for k in kinds:
            try:
                out[k][pick] = baseline_forecasts(k, target_name=data.schema.target, target=target,
                                                  train_mask=train_mask, origins=origins, horizon=w.horizon,
                                                  quantiles=quantiles, returns=returns, profile=profile)
            except (InputError, ValueError) as e:
                log.warning("series %s: baseline %s left out (%s)", name, k, e)
    return {k: v for k, v in out.items() if np.isfinite(v).any()}


def _season(log_range: np.ndarray, ts: np.ndarray, train_mask: np.ndarray, origin_ns: np.ndarray, horizon: int,
            tf: FittedTransform) -> tuple[np.ndarray, np.ndarray] | None:
    """The seasonal baseline's time-of-day profile, fitted like the model's (seasonality.py) on this series' rows
    before the baseline cut, at each row (n,) and at each origin's forecast-step grid times (K, H)."""
    x2 = log_range**2
    fit = train_mask & np.isfinite(x2)
    if not fit.any() or not x2[fit].mean() > 0:
        return None
    season = fit_profile(ts, x2 / x2[fit].mean(), fit, tf.exchange_tz)
    grid = future_timestamps(origin_ns, tf.bar_spacing_ns, horizon, True, tf.exchange_tz)  # (K, H)
    return profile_at(ts, season), profile_at(grid, season)


def baseline_cut(model_dir: Path, first_origin_ns: int) -> int:
    """Baselines fit on the model's training period, and never past the first evaluated origin."""
    summary = Path(model_dir) / "data_summary.json"
    train_end = json.loads(summary.read_text()).get("train_end") if summary.exists() else None
    return cut_before(train_end, first_origin_ns)


def cut_before(train_end: str | None, first_origin_ns: int) -> int:
    """The end (ns, exclusive) of the rows baselines fit on: the training cut, never past the first scored origin."""
    cut = first_origin_ns + 1
    if train_end:
        cut = min(cut, int(np.datetime64(train_end.replace("+00:00", "").rstrip("Z"), "ns").astype(np.int64)))
    return cut


def verdict_of(model: dict[str, Any], base: dict[str, dict[str, Any]], qs: tuple[float, ...], applied: bool | None,
               intraday: bool, model_dir: Path, target: str = "log_return",
               own: Collection[str] | None = None) -> dict[str, Any]:
    """metrics.json "verdict": the sentence the console and the report open with (evaluate/verdict.py), and the
    seed spread when the run kept the best of several seeds (its seeds.json), since the claim depends on it. `target`
    and `own` (the own move columns the data keep) say why a baseline is missing (`expected_baselines`)."""
    who = "The calibrated model" if applied else "The model (uncalibrated)" if applied is False else "The model"
    missing = {k: why or "it could not be fitted; see the warnings above"
               for k, why in expected_baselines(intraday, target, own).items() if k not in base}
    out = verdict(model["overall"]["q_risk"], {k: m["overall"]["q_risk"] for k, m in base.items()}, qs, who,
                  missing).to_dict()
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


def images(scored: Scored, qs: tuple[float, ...], names: tuple[str, ...], model: dict[str, Any],
           base: dict[str, dict[str, Any]], interpretation: dict[str, Any] | None,
           model_dir: Path) -> dict[str, bytes]:
    # matplotlib loads here, not with this module: training imports the baselines above for its final line
    from foxhunt.evaluate import plots
    from foxhunt.evaluate.memory_report import load_memory, memory_png

    imgs: dict[str, bytes] = {}
    for s, name in enumerate(names):
        pick = np.flatnonzero(scored.series == s)[-FAN_POINTS:]
        if len(pick):
            times = scored.origin_ns[pick].astype("datetime64[ns]")
            imgs[f"Forecast fan, one step ahead: {name} (latest {len(pick)} origins)"] = plots.fan_chart(
                times, scored.actual[pick, 0], scored.quantiles[pick, 0, :], qs, title=f"{name}: one step ahead")
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
        f"data: {', '.join(paths)}",
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


def _iso(ns: int) -> str:
    return str(np.datetime64(int(ns), "ns").astype("datetime64[s]")) + "Z"
