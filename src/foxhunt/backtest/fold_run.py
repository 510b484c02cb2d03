"""One fold of a walk-forward backtest: train its model (when it refits), then forecast and score its test period.

Files in OUT_DIR/fold-NN/ (each written atomically; `fold.json` last, so a fold whose fold.json exists is finished):
  run/              the fold's training run (only for folds that refit), a normal `foxhunt train` run directory;
  forecasts.parquet its test period's forecasts in `foxhunt predict`'s schema;
  scored.npz        what was scored: series, origin_ns, first_ns (the first forecast bar), actual (K, D),
                    model (K, D, Q) and one (K, D, Q) per baseline;
  fold.json         the fold's dates, the run that forecast it, the series each baseline could not forecast and
                    why (`baseline_gaps`), and its metrics.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foxhunt.atomic import write_json, write_with
from foxhunt.backtest.fold_dates import Fold, iso
from foxhunt.console import SHOW
from foxhunt.data.config import DataConfig
from foxhunt.errors import InputError
from foxhunt.evaluate.scored_rows import gather
from foxhunt.evaluate.series_baselines import baseline_cut, baselines
from foxhunt.model.config import DEFAULT_METHOD, ModelConfig
from foxhunt.model.saved import load_model
from foxhunt.predict.calibrated import calibration_method, forecast_calibration
from foxhunt.predict.origins import prepare_for_model, select_origins
from foxhunt.predict.parquet import write_forecasts
from foxhunt.train.config import TrainConfig

log = logging.getLogger("foxhunt.backtest")
TRAINED = "trained.json"  # in the fold directory once its run has finished training and calibration


def fold_dir(out_dir: Path, fold: Fold) -> Path:
    return out_dir / fold.name


def run_dir(out_dir: Path, fold: Fold) -> Path:
    """The run that forecasts `fold`: its own, or the run of the last fold that trained before it."""
    return out_dir / f"fold-{fold.model_fold:02d}" / "run"


def is_finished(out_dir: Path, fold: Fold) -> bool:
    return (fold_dir(out_dir, fold) / "fold.json").exists()


def fold_configs(fold: Fold, data_cfg: DataConfig, train_cfg: TrainConfig, out_dir: Path,
                 threads: int | None = None) -> tuple[DataConfig, TrainConfig]:
    """The fold's `foxhunt train` configuration: the split by its dates, its own run directory."""
    data = dataclasses.replace(data_cfg, train_start=iso(fold.train_start), train_end=iso(fold.val_start),
                               val_end=iso(fold.test_start))
    train = dataclasses.replace(train_cfg, run_dir=str(run_dir(out_dir, fold)), progress=False,
                                num_threads=train_cfg.num_threads if threads is None else threads)
    return data, train


def train_fold(fold: Fold, data_cfg: DataConfig, model_cfg: ModelConfig, train_cfg: TrainConfig, out_dir: Path,
               threads: int | None = None) -> int:
    """Train the fold's model (continuing a run killed mid-training from its checkpoint); returns the fold index.
    A module-level function so that `--jobs` can run it in a worker process."""
    from foxhunt.train.resume import DataChanged
    from foxhunt.train.session import train_run  # the heavy import, in the process that trains

    marker = fold_dir(out_dir, fold) / TRAINED
    if marker.exists():
        return fold.index
    data, train = fold_configs(fold, data_cfg, train_cfg, out_dir, threads)
    resume = (Path(train.run_dir) / "checkpoint.pt").exists()
    if resume:
        log.info("%s: continuing its killed training run from %s", fold.name, train.run_dir)
    elif Path(train.run_dir).exists():  # killed before its first checkpoint: nothing there to continue from
        shutil.rmtree(train.run_dir)
    # final=False: a fold's run is no run of the user's, so not its `next: foxhunt evaluate ...` hints (the backtest
    # scores the fold itself), one line of how it trained instead
    try:
        result = train_run(data, model_cfg, train, resume=resume, final=False)
    except DataChanged as e:  # the folds already scored saw the old data: the backtest as a whole is void
        raise InputError(f"{out_dir}: {e.source} changed since this backtest started ({e.detail}); its finished "
                         "folds were trained and scored on the data as it was; run it into a new --out-dir") from None
    log.info("%s: trained, best epoch %d (val_loss %.5f); run directory %s", fold.name, result.state.best_epoch,
             result.state.best_val_loss, train.run_dir, extra=SHOW)
    write_json(marker, {"run_dir": train.run_dir, "best_epoch": result.state.best_epoch,
                        "best_val_loss": result.state.best_val_loss})
    return fold.index


def score_fold(fold: Fold, paths: tuple[str, ...], out_dir: Path, batch_size: int = 1024,
               device: str = "cpu", calibration: str = DEFAULT_METHOD) -> dict[str, Any]:
    """Forecast the fold's test period with its model (calibrated by `calibration` when the run has a calibration:
    adaptive shifts carried from its validation through every later bar, or the fixed ones), score the model and
    every baseline on the same origins, write the fold's files; returns fold.json's content."""
    here, model_dir = fold_dir(out_dir, fold), run_dir(out_dir, fold)
    dev = torch.device(device)
    lm = load_model(model_dir, dev)
    data = prepare_for_model(lm, paths)  # the bars are not kept: the baselines read the prepared data
    ids = select_origins(data, fold.test_start, fold.test_end)
    kept: list = []
    cal = forecast_calibration(lm, calibration)
    write_forecasts(lm, data, ids, here / "forecasts.parquet", batch_size, dev, calibration=cal, consume=kept.append)
    scored = gather(kept, data)
    scored = scored.subset(~np.isnan(scored.actual).all(axis=1))  # the live origin after the last bar has none
    first_ns = data.windows.ts_ns[torch.from_numpy(scored.origin_row + 1)].numpy()  # each first forecast bar
    arrays = {"series": scored.series, "origin_ns": scored.origin_ns, "first_ns": first_ns,
              "actual": scored.actual, "model": scored.quantiles}
    gaps: dict[str, dict[str, str]] = {}
    if len(scored.origin_ns):
        cut = baseline_cut(model_dir, int(first_ns.min()))
        forecasts, gaps = baselines(data, scored, cut, lm.model_cfg.quantiles)
        arrays.update({f"baseline_{k}": v for k, v in forecasts.items()})
    write_with(here / "scored.npz", lambda p: _savez(p, arrays))
    info = {**fold.to_dict(), "run_dir": str(model_dir), "calibrated": cal is not None,
            "calibration": calibration_method(cal),
            "origins": int(len(scored.origin_ns)), "series_names": list(data.windows.series_names),
            "quantiles": list(lm.model_cfg.quantiles), "target": lm.schema.target,
            "baseline_gaps": {k: v for k, v in gaps.items() if v}}
    return info


def _savez(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def load_scored(out_dir: Path, fold: Fold) -> dict[str, np.ndarray]:
    with np.load(fold_dir(out_dir, fold) / "scored.npz") as z:
        return {k: z[k] for k in z.files}


def load_fold_json(out_dir: Path, fold: Fold) -> dict[str, Any]:
    return json.loads((fold_dir(out_dir, fold) / "fold.json").read_text(encoding="utf-8"))
