"""`foxhunt train --seeds N`: N trainings with seeds --seed, --seed + 1, ..., keeping the best by validation loss.

A claim that a model beats a baseline by 1% means little if another seed moves its q-risk by 2%. Each seed trains
exactly as `foxhunt train --seed S` would (same data, same split, its own run directory under RUN/seeds/seed-S), one
after the other, each model freed before the next starts, so memory stays that of one run. At the end the seed with
the lowest best-epoch validation loss becomes the run: its files move into RUN (model, calibration, checkpoint,
metrics, memory trace), RUN/seeds.json records every seed's summary and the spread, and RUN/seeds/ is removed.
RUN/train.log holds every seed's lines.

A run stopped part-way (Ctrl-C, a crash) leaves the finished seeds and the stopped one under RUN/seeds/seed-S, each
a run directory of its own that can be resumed or evaluated; `--resume` of a `--seeds` run is refused by the CLI.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import os
import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from foxhunt.atomic import write_json
from foxhunt.console import SHOW
from foxhunt.data.config import DataConfig
from foxhunt.model.config import ModelConfig, quantile_label
from foxhunt.train.config import TrainConfig
from foxhunt.train.console_lines import WarningCounter
from foxhunt.train.run_dir import RunDir, attach_log_file
from foxhunt.train.session import Judge, TrainResult, best_record, final_lines, train_run

log = logging.getLogger("foxhunt.train")

SEEDS_FILE = "seeds.json"
SELECTED_BY = "val_loss"  # the best epoch's validation loss: what early stopping and checkpointing already use


@dataclass(frozen=True)
class SeedSummary:
    seed: int
    best_epoch: int
    val_loss: float
    val_qrisk: dict[str, float]  # quantile (as text) -> the best epoch's validation q-risk
    seconds: float  # the whole training run: data, epochs, calibration
    peak_host_mb: float | None  # from the seed's memory.jsonl: flat across seeds when each model is freed
    claim: str | None  # the best epoch against the baselines on validation (the judge's clause)


def summarize(seed: int, result: TrainResult, seconds: float) -> SeedSummary:
    best = best_record(result.state) or {"epoch": 0, "val_loss": float("inf"), "val_qrisk": {}}
    return SeedSummary(seed, int(best["epoch"]), float(best["val_loss"]), dict(best["val_qrisk"]), seconds,
                       peak_host_mb(result.run.memory), result.claim)


def peak_host_mb(memory_jsonl: Path) -> float | None:
    peaks = []
    for line in memory_jsonl.read_text(encoding="utf-8").splitlines() if memory_jsonl.exists() else []:
        try:
            peaks.append(float(json.loads(line)["host_peak_mb"]))
        except (ValueError, KeyError, TypeError):
            continue
    return max(peaks, default=None)


def seed_line(s: SeedSummary, index: int, n: int) -> str:
    """`seed 1 (2 of 3): best epoch 3, val_loss 0.16788, val_qrisk p10=0.5042 p50=1.0000 p90=0.5314, 69.1s, peak
    host 459 MiB`."""
    qrisk = " ".join(f"{quantile_label(q)}={v:.4f}" for q, v in s.val_qrisk.items())
    peak = "" if s.peak_host_mb is None else f", peak host {s.peak_host_mb:,.0f} MiB"
    return (f"seed {s.seed} ({index} of {n}): best epoch {s.best_epoch}, val_loss {s.val_loss:.5f}, val_qrisk "
            f"{qrisk}, {s.seconds:.1f}s{peak}")


def spread(summaries: list[SeedSummary]) -> dict[str, Any]:
    """min / median / max over the seeds of the validation loss and of the q-risk at each quantile."""
    def mmm(values: list[float]) -> dict[str, float]:
        return {"min": min(values), "median": statistics.median(values), "max": max(values)}

    quantiles = list(summaries[0].val_qrisk)
    return {"val_loss": mmm([s.val_loss for s in summaries]),
            "val_qrisk": {q: mmm([s.val_qrisk[q] for s in summaries if q in s.val_qrisk]) for q in quantiles}}


def spread_line(sp: dict[str, Any], n: int, kept: int) -> str:
    """`spread over 3 seeds (min / median / max): val_loss 0.16788 / 0.16801 / 0.16900, val_qrisk p10 0.5042 /
    0.5050 / 0.5100, ...; kept seed 1 (lowest val_loss)`."""
    def three(d: dict[str, float], digits: int) -> str:
        return " / ".join(f"{d[k]:.{digits}f}" for k in ("min", "median", "max"))

    qrisk = ", ".join(f"{quantile_label(q)} {three(d, 4)}" for q, d in sp["val_qrisk"].items())
    return (f"spread over {n} seeds (min / median / max): val_loss {three(sp['val_loss'], 5)}, val_qrisk {qrisk}; "
            f"kept seed {kept} (lowest {SELECTED_BY})")


def train_seeds(data_cfg: DataConfig, model_cfg: ModelConfig, cfg: TrainConfig, n: int,
                judge: Judge | None = None) -> TrainResult:
    """Train `n` seeds from `cfg.seed` and keep the best (see the module docstring); returns the kept run's result,
    with its directory the run directory."""
    run = RunDir.create(cfg.run_dir)  # refuses a finished run before any seed trains
    logger = logging.getLogger("foxhunt")
    handler, warnings = attach_log_file(run), WarningCounter()
    logger.addHandler(warnings)
    try:
        results: list[TrainResult] = []  # progress and numbers only: each model goes with its train_run
        summaries: list[SeedSummary] = []
        for i in range(n):
            seed = cfg.seed + i
            log.info("--seeds %d: seed %d (%d of %d)", n, seed, i + 1, n, extra=SHOW)
            t0 = time.perf_counter()
            results.append(train_run(data_cfg, model_cfg, seed_config(cfg, run, seed), judge=judge, final=False))
            summaries.append(summarize(seed, results[-1], time.perf_counter() - t0))
            log.info(seed_line(summaries[-1], i + 1, n), extra=SHOW)
            free_memory()
        best = min(range(n), key=lambda k: summaries[k].val_loss)
        kept, kept_result = summaries[best], results[best]
        sp = spread(summaries)
        record = {"n": n, "first_seed": cfg.seed, "kept_seed": kept.seed, "selected_by": SELECTED_BY,
                  "seeds": [dataclasses.asdict(s) for s in summaries], "spread": sp}
        promote(run, seed_dir(run, kept.seed), record)
        log.info(spread_line(sp, n, kept.seed), extra=SHOW)
        final_lines(run, kept_result.state, kept_result.baseline, data_cfg, warnings, kept.claim)
        return dataclasses.replace(kept_result, run=run)
    finally:
        logger.removeHandler(warnings)
        logger.removeHandler(handler)
        handler.close()


def seed_dir(run: RunDir, seed: int) -> Path:
    return run.root / "seeds" / f"seed-{seed}"


def seed_config(cfg: TrainConfig, run: RunDir, seed: int) -> TrainConfig:
    return dataclasses.replace(cfg, seed=seed, run_dir=str(seed_dir(run, seed)))


def free_memory() -> None:
    """The finished seed's model, optimizer and data are garbage now; collect them (and the CUDA cache) before the
    next seed allocates its own, so the process peaks at one run's memory, not N."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def promote(run: RunDir, kept: Path, record: dict[str, Any]) -> None:
    """Make the kept seed's run the run: its files move into `run` (its train.log excepted: RUN/train.log has every
    seed's lines), config.json names the run directory and the seeds, seeds.json is written, and RUN/seeds/ goes.
    The weights move last, so a run killed in between is not yet a model (never a model without its files)."""
    config = json.loads((kept / "config.json").read_text(encoding="utf-8"))
    config["train"]["run_dir"] = str(run.root)
    config["seeds"] = {"n": record["n"], "kept_seed": record["kept_seed"], "file": SEEDS_FILE}
    write_json(kept / "config.json", config)
    files = [f for f in kept.iterdir() if f.is_file() and f.name != run.log.name and f.name != run.weights.name]
    for f in files:
        os.replace(f, run.root / f.name)
    write_json(run.root / SEEDS_FILE, record)
    os.replace(kept / run.weights.name, run.weights)
    shutil.rmtree(run.root / "seeds")
