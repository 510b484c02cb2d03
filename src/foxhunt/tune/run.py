"""`foxhunt tune`: an Optuna study over `foxhunt train` options.

Each trial is a training run (OUT_DIR/trials/trial-NNNN) with the drawn options beside the ones typed: a typed
option is fixed, taken out of the search space (tune/space.py `without_typed`), so no trial draws it. Its value
is the validation loss in the target's own units, the mean over quantiles of the validation q-risk, at the epoch
early stopping keeps: the training loss is in scaled units, which differ between --scaling options (series std
against trailing volatility), so only the raw-unit loss compares trials. After every epoch the trial reports that
loss, and the median pruner stops a trial whose loss is worse than the median of earlier trials at that epoch.
Trials see only the training and validation periods: the test period (after --val-end, or the last
--test-fraction) is never a training or validation window, and each trial checks its run's split says so.
The study lives in SQLite (default OUT_DIR/study.db): run the same command again and it continues to --trials in
total; several processes (or machines sharing the database) may work on one study at once."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import warnings
from pathlib import Path
from typing import Any

from foxhunt import settings
from foxhunt.console import FINAL, SHOW
from foxhunt.errors import InputError, NonFiniteError, ResourceError
from foxhunt.tune.config import TuneConfig
from foxhunt.tune.output import as_json, shown, write_outputs
from foxhunt.tune.space import Param, heads_that_fit, without_typed

log = logging.getLogger("foxhunt.tune")
HEARTBEAT_S = 60  # a trial whose process stopped beating for 2 heartbeats (killed) is marked failed
MISSING = "foxhunt tune needs Optuna: pip install 'foxhunt[tune]'"


def import_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise InputError(MISSING) from None
    return optuna


def open_study(cfg: TuneConfig) -> Any:
    optuna = import_optuna()
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # the heartbeat is "experimental" in Optuna's words, and what resumes need
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = optuna.storages.RDBStorage(cfg.storage_url, heartbeat_interval=HEARTBEAT_S,
                                             grace_period=2 * HEARTBEAT_S)
    study = optuna.create_study(study_name=cfg.study_name, storage=storage, direction="minimize",
                                load_if_exists=True,
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1))
    # Seeded by the trials already there: a resumed search would otherwise draw its first trials again.
    study.sampler = optuna.samplers.TPESampler(seed=cfg.seed + len(study.get_trials(deepcopy=False)))
    return study


def run_tune(cfg: TuneConfig, space: tuple[Param, ...], values: dict[str, Any], paths: tuple[str, ...],
             typed: dict[str, Any], where: str) -> dict[str, Any]:
    """Run trials until the study holds `cfg.trials` finished (complete or pruned) ones or the timeout passes;
    then write best.toml, trials.csv and summary.json. `values` are all train options, `typed` those the user set
    (every trial's fixed settings, which best.toml repeats); `where` names the space in errors."""
    optuna = import_optuna()
    # Every fixed data flag is checked before the study opens: a trial's InputError only fails that trial (Optuna
    # catches it), so a split refused there would fail every trial in turn.
    settings.data_config(values, paths)
    space = searched_space(space, values, typed, where)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # foxhunt says what happens, once
    study = open_study(cfg)
    check_fixed_options(study, typed, cfg)
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    have = len(study.get_trials(deepcopy=False, states=done))
    log.info("study %r in %s: %d of %d trials finished", cfg.study_name, cfg.storage_url, have, cfg.trials,
             extra=SHOW)
    if have < cfg.trials:
        study.optimize(lambda trial: objective(trial, cfg, space, values, paths), n_trials=cfg.trials - have,
                       timeout=cfg.timeout, catch=(InputError, NonFiniteError, ResourceError),
                       callbacks=[optuna.study.MaxTrialsCallback(cfg.trials, states=done)])
    return write_outputs(study, cfg.out_dir, space, typed)


def searched_space(space: tuple[Param, ...], values: dict[str, Any], typed: dict[str, Any],
                   where: str) -> tuple[Param, ...]:
    """What the study draws: `space` less the typed options, with the attention heads (or hidden sizes) cut to the
    ones that fit a fixed hidden size (or head count). Says so on the console, --quiet included: the search is not
    the space as written."""
    from foxhunt.model.config import ModelConfig

    left = without_typed(space, typed, where)
    if len(left) < len(space):
        fixed = [p for p in space if p.name in typed]
        log.info("searching %d of %d options; fixed by you: %s", len(left), len(space),
                 ", ".join(f"{p.flag} {shown(typed[p.name])}" for p in fixed), extra=FINAL)
    model = settings.build(ModelConfig, values)
    fitted = heads_that_fit(left, model.hidden_size, model.attention_heads, where)
    fixed_by = {"attention_heads": f"--hidden-size {model.hidden_size}",
                "hidden_size": f"--attention-heads {model.attention_heads}"}
    for before, after in zip(left, fitted, strict=True):
        if after is not before:
            log.info("%s drawn from %s only: attention heads must divide the hidden size (%s)", after.flag,
                     ", ".join(map(str, after.choices or ())), fixed_by[after.name], extra=FINAL)
    return fitted


def check_fixed_options(study: Any, typed: dict[str, Any], cfg: TuneConfig) -> None:
    """The train options typed for a study's first run are every trial's fixed settings (and best.toml's); a later
    run must repeat them, or its trials would not be comparable with the earlier ones."""
    fixed = as_json(typed)
    saved = study.user_attrs.get("fixed_options")
    if saved is None:
        study.set_user_attr("fixed_options", fixed)
    elif saved != fixed:
        absent = object()
        key = sorted(k for k in set(saved) | set(fixed) if saved.get(k, absent) != fixed.get(k, absent))[0]
        then, now = (shown(d[key]) if key in d else "not given" for d in (saved, fixed))
        raise InputError(f"study {cfg.study_name!r} in {cfg.storage_url} was started with other train options "
                         f"(--{key.replace('_', '-')}: {then} then, {now} now); repeat them, or pass a new "
                         "--study-name")


def objective(trial: Any, cfg: TuneConfig, space: tuple[Param, ...], values: dict[str, Any],
              paths: tuple[str, ...]) -> float:
    import optuna

    from foxhunt.train.session import best_record, train_run

    drawn = {p.name: p.suggest(trial) for p in space}
    v = {**values, **drawn}
    run_dir = cfg.out_dir / "trials" / f"trial-{trial.number:04d}"
    data_cfg = dataclasses.replace(settings.data_config(v, ()), paths=paths)
    model_cfg = settings.model_config(v, data_cfg)
    train_cfg = dataclasses.replace(settings.train_config(v), run_dir=str(run_dir), progress=False)
    trial.set_user_attr("run_dir", str(run_dir))
    log.info("trial %d: %s", trial.number, " ".join(f"{Param(k).flag} {x}" for k, x in drawn.items()), extra=SHOW)

    def report(record: dict[str, Any]) -> None:
        trial.report(val_qrisk(record), record["epoch"])
        if trial.should_prune():
            log.info("trial %d pruned after epoch %d: val q-risk %.5f above the median of earlier trials",
                     trial.number, record["epoch"], val_qrisk(record), extra=SHOW)
            raise optuna.TrialPruned()

    t0 = time.perf_counter()
    try:
        result = train_run(data_cfg, model_cfg, train_cfg, on_epoch=report)
    finally:
        trial.set_user_attr("seconds", time.perf_counter() - t0)
    check_held_out(run_dir)
    best = best_record(result.state)
    if best is None:  # train_run returns only after an epoch has finished
        raise RuntimeError(f"trial {trial.number}: training returned without a finished epoch")
    log.info("trial %d: val q-risk %.5f at epoch %d%s", trial.number, val_qrisk(best), best["epoch"],
             " (the anchor, untrained)" if best["train_loss"] is None else "", extra=FINAL)
    return val_qrisk(best)


def val_qrisk(record: dict[str, Any]) -> float:
    """An epoch record's validation q-risk, averaged over quantiles (raw target units, comparable across scalings)."""
    values = list(record["val_qrisk"].values())
    return float(sum(values) / len(values))


def check_held_out(run_dir: Path) -> None:
    """The trial's split, as its run saved it: every training and validation window's first forecast bar lies before
    the test period (purging keeps their other forecast bars out of it too)."""
    summary = json.loads((run_dir / "data_summary.json").read_text(encoding="utf-8"))
    test_start = summary.get("val_end")
    if test_start is None:
        log.warning("no test period held out (--test-fraction 0): the search sees all the data; hold the last "
                    "part back with --test-fraction, or with --val-end after --train-end")
        return
    for split in ("train", "val"):
        last = (summary["ranges"].get(split) or {}).get("last")
        if last is not None and last >= test_start:
            raise RuntimeError(f"{run_dir}: a {split} window forecasts {last}, inside the test period from "
                               f"{test_start}")
