"""`foxhunt backtest`: fold after fold, train (when the fold refits), forecast the test period, score; then the
folds together. A killed backtest run again with the same options resumes at the first unfinished fold (a fold is
finished when its fold.json exists; a fold whose training was killed continues from its checkpoint)."""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.atomic import write_json
from foxhunt.backtest import fold_run as fold_io
from foxhunt.backtest.config import BacktestConfig
from foxhunt.backtest.fold_dates import Fold, iso, plan_folds, short_folds, short_line
from foxhunt.backtest.jobs import jobs_that_fit
from foxhunt.backtest.report import write_backtest_report
from foxhunt.backtest.summary import (
    around_rolls,
    concat,
    merge_gaps,
    metrics,
    monthly,
    with_fold_ic,
    write_forecasts,
)
from foxhunt.console import FINAL, SHOW, warn_once
from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.features.bar_features import RETURN_TARGETS
from foxhunt.data.io.sample_path import SIMULATED, is_bundled_sample
from foxhunt.errors import InputError
from foxhunt.evaluate.report import data_note
from foxhunt.evaluate.verdict import Verdict, at, dm_short, judged_quantiles, verdict
from foxhunt.model.config import ModelConfig, quantile_label
from foxhunt.predict.bar_range import window_text
from foxhunt.train.config import TrainConfig

log = logging.getLogger("foxhunt.backtest")
PLAN_FILE = "plan.json"


def run_backtest(bt: BacktestConfig, data_cfg: DataConfig, model_cfg: ModelConfig,
                 train_cfg: TrainConfig) -> dict[str, Any]:
    """Every fold, trained and scored, and the folds together; each warning shows once on the console, though the
    plan and every fold read the same files (each fold's train.log keeps its own)."""
    with warn_once():
        return _run_backtest(bt, data_cfg, model_cfg, train_cfg)


def _run_backtest(bt: BacktestConfig, data_cfg: DataConfig, model_cfg: ModelConfig,
                  train_cfg: TrainConfig) -> dict[str, Any]:
    loaded = load_bars(data_cfg)
    window = window_text(data_cfg.since, data_cfg.until)
    if window:
        log.info("%s: every fold trains and is scored within them", window, extra=SHOW)
    ts = loaded.bars["ts"].dt.epoch("ns").to_numpy()
    folds = plan_folds(int(ts.min()), int(ts.max()), bt.folds, bt.test_length, bt.val_length, bt.refit,
                       bt.train_length)
    _check_plan(bt, folds, data_cfg, model_cfg, train_cfg)
    short = short_folds(folds, int(ts.max()))
    if short:
        log.warning("%s", short_line(short))
    for f in folds:
        log.info("%s: %s test %s .. %s, validation from %s, model of fold %d%s", f.name,
                 "train from the first bar," if f.train_start is None else f"train from {_day(f.train_start)},",
                 _day(f.test_start), _day(f.test_end), _day(f.val_start),
                 f.model_fold, " (finished)" if fold_io.is_finished(bt.out_dir, f) else "", extra=SHOW)
    todo = [f for f in folds if not fold_io.is_finished(bt.out_dir, f)]
    if bt.jobs > 1:
        _train_parallel(bt, [f for f in folds if f.trains and any(t.model_fold == f.index for t in todo)],
                        data_cfg, model_cfg, train_cfg)
    for f in todo:
        model_fold = folds[f.model_fold - 1]
        fold_io.train_fold(model_fold, data_cfg, model_cfg, train_cfg, bt.out_dir)  # a no-op once trained
        info = fold_io.score_fold(f, data_cfg.paths, bt.out_dir, bt.predict_batch_size, calibration=bt.calibration)
        arrays = fold_io.load_scored(bt.out_dir, f)
        info["metrics"] = _metrics(arrays, info)
        write_json(fold_io.fold_dir(bt.out_dir, f) / "fold.json", info)
        log.info("%s: %s", f.name, _vs(info["metrics"]), extra=SHOW)
    return combine(bt, folds, loaded.rolls, data_cfg.paths, short)


def combine(bt: BacktestConfig, folds: list[Fold], rolls: list[dict[str, Any]], paths: tuple[str, ...],
            short: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """forecasts.parquet, backtest.json and report.html from the finished folds; `short`: the folds much shorter
    than the others (`short_folds`)."""
    infos = [fold_io.load_fold_json(bt.out_dir, f) for f in folds]
    arrays = concat([fold_io.load_scored(bt.out_dir, f) for f in folds])
    first = infos[-1]
    names, qs = tuple(first["series_names"]), tuple(first["quantiles"])
    write_forecasts([(f.index, fold_io.fold_dir(bt.out_dir, f) / "forecasts.parquet") for f in folds],
                    bt.out_dir / "forecasts.parquet")
    overall = with_fold_ic(_metrics(arrays, {**first, "baseline_gaps": merge_gaps(infos)}), [i["metrics"] for i in infos])
    claim = overall_verdict(overall, qs, len(folds))
    result = {
        "backtest": bt.to_dict(), "target": first["target"], "quantiles": list(qs), "verdict": claim.to_dict(),
        "folds": infos, "overall": overall, "short_folds": short or [],
        "by_month": monthly(arrays, qs), "around_rolls": around_rolls(arrays, qs, names, rolls),
    }
    write_json(bt.out_dir / "backtest.json", result)
    write_backtest_report(bt.out_dir / "report.html", result, *report_text(result, paths))
    log.info("all %d folds: %s", len(folds), _vs(result["overall"]), extra=SHOW)
    log.info("%s", claim.sentence, extra=FINAL)
    log.info("wrote %s, %s and %s", bt.out_dir / "forecasts.parquet", bt.out_dir / "backtest.json",
             bt.out_dir / "report.html", extra=FINAL)
    return result


def report_text(result: dict[str, Any], paths: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(report.html's claim: the verdict, and that the bars are simulated when they are the bundled sample; its notes:
    what was run, on which data, and each fold's scores) from backtest.json's content."""
    claim = [result["verdict"]["sentence"], *([SIMULATED] if is_bundled_sample(paths) else [])]
    infos = result["folds"]
    short = result.get("short_folds") or []
    notes = [describe_backtest(result["backtest"], infos), *([short_line(short)] if short else []), data_note(paths),
             *(f"fold {i['index']}: test {i['test_start'][:10]} .. {(i['test_end'] or 'end')[:10]}, model of fold "
               f"{i['model_fold']}, {i['origins']:,} origins: {_vs(i['metrics'])}" for i in infos)]
    return claim, notes


def overall_verdict(overall: dict[str, Any], qs: tuple[float, ...], n_folds: int) -> Verdict:
    """evaluate's verdict (evaluate/verdict.py) on every fold's test origins together: each baseline compared with the
    model on the origins both forecast, the tests pooled over the series and the folds' test periods as one time
    series."""
    return verdict(overall["comparisons"], qs, who=f"Over the {n_folds} test period{'s' if n_folds != 1 else ''}, "
                                                   "the model")


def describe_backtest(cfg: dict[str, Any], infos: list[dict[str, Any]]) -> str:
    """`walk-forward backtest: 2 folds, each tested on 60d after 60d of validation, trained on every bar before
    (expanding window), a model trained at every fold; 352 origins scored`."""
    window = ("trained on every bar before (expanding window)" if cfg["window"] == "expanding"
              else f"trained on the {cfg['train_length']} before (rolling window)")
    refit = {"every": "a model trained at every fold",
             "once": "one model, trained at fold 1, forecasts every fold"}.get(str(cfg["refit"]),
                                                                            f"a model trained every {cfg['refit']} folds")
    n = len(infos)
    return (f"walk-forward backtest: {n} fold{'s' if n != 1 else ''}, each tested on {cfg['test_length']} after "
            f"{cfg['val_length']} of validation, {window}, {refit}; {sum(i['origins'] for i in infos):,} origins scored")


def _day(ns: int | None) -> str:
    return (iso(ns) or "")[:10] or "the last bar"


def _metrics(arrays: dict[str, np.ndarray], info: dict[str, Any]) -> dict[str, Any]:
    return metrics(arrays, tuple(info["quantiles"]), tuple(info["series_names"]), info["target"] in RETURN_TARGETS,
                   info.get("baseline_gaps"))


def _vs(m: dict[str, Any]) -> str:
    """'q-risk p10 0.5453 p50 0.9971 p90 0.4596; skill at p10 / p90 (Diebold-Mariano p) vs garch_t +0.012 / -0.004
    (p 0.031 / 0.412) on 250 origins, ...': the verdict's judged quantiles, on the origins both forecast; `equal` for
    a p-value where the forecasts are equal to float rounding (not tested)."""
    qrisk = m["model"]["overall"]["q_risk"]
    q = " ".join(f"{quantile_label(k)} {v:.4f}" for k, v in qrisk.items() if v is not None)
    judged = judged_quantiles([float(k) for k in qrisk])
    sk = []
    for name, c in m["comparisons"].items():
        skills = [at(c["skill"], x) for x in judged]
        if all(v is not None for v in skills):
            ps = " / ".join(dm_short(at(c["dm"], x)) for x in judged)
            sk.append(f"{name} {' / '.join(f'{v:+.3f}' for v in skills)} (p {ps}) on {c['origins']:,} origins")
    return f"q-risk {q}; skill at {' / '.join(map(quantile_label, judged))} vs {', '.join(sk) or 'no baseline'}"


def _check_plan(bt: BacktestConfig, folds: list[Fold], data_cfg: DataConfig, model_cfg: ModelConfig,
                train_cfg: TrainConfig) -> None:
    """The first run writes OUT_DIR/plan.json; a later one resumes only with the same folds and options."""
    train = dataclasses.replace(train_cfg, run_dir=None, progress=False, num_threads=0)
    plan = {"backtest": bt.to_dict(), "folds": [f.to_dict() for f in folds], "data": data_cfg.to_dict(),
            "model": model_cfg.to_dict(), "train": train.to_dict()}
    plan = json.loads(json.dumps(plan, default=str))
    path = bt.out_dir / PLAN_FILE
    if path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        diff = next((k for k in plan if saved.get(k) != plan[k]), None)
        if diff is not None:
            raise InputError(f"{path}: --out-dir holds a backtest with other {diff} options; rerun with the same "
                             "options to resume it, or choose a new --out-dir")
        log.info("resuming the backtest in %s", bt.out_dir, extra=SHOW)
        return
    write_json(path, plan)


def _train_parallel(bt: BacktestConfig, folds: list[Fold], data_cfg: DataConfig, model_cfg: ModelConfig,
                    train_cfg: TrainConfig) -> None:
    """Train the folds' models in worker processes: as many as `--jobs` and the memory plan allow, the CPU threads
    split between them. Workers start fresh ("spawn"): a forked torch with running OpenMP threads can hang."""
    pending = [f for f in folds if not (fold_io.fold_dir(bt.out_dir, f) / fold_io.TRAINED).exists()]
    if not pending:
        return
    last = fold_io.fold_configs(pending[-1], data_cfg, train_cfg, bt.out_dir)[0]  # the most training data
    jobs = min(jobs_that_fit(bt.jobs, last, model_cfg, train_cfg), len(pending))
    threads = max(1, (train_cfg.num_threads or os.cpu_count() or 1) // jobs)
    log.info("training %d fold models in %d processes, %d thread%s each", len(pending), jobs, threads,
             "s" if threads > 1 else "", extra=SHOW)
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(fold_io.train_fold, f, data_cfg, model_cfg, train_cfg, Path(bt.out_dir), threads)
                   for f in pending]
        for fut in futures:
            log.info("fold-%02d: trained", fut.result(), extra=SHOW)
