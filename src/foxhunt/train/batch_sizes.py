"""The batch sizes of a run: the memory plan's choice for `auto`, the sizes a resumed run resolved when it started,
and the global sizes under torchrun."""

from __future__ import annotations

import json
import logging
from typing import Any

import torch

from foxhunt.console import SHOW
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.features.schema import InputSizes
from foxhunt.errors import InputError
from foxhunt.model.config import ModelConfig
from foxhunt.train.config import AUTO, TrainConfig
from foxhunt.train.console_lines import predicted_mb
from foxhunt.train.distributed import Dist
from foxhunt.train.plan import MemoryPlan, fits, plan_memory
from foxhunt.train.run_dir import RunDir
from foxhunt.train.telemetry import anon_rss_bytes, available_host_bytes, free_bytes, held_outside_step

log = logging.getLogger("foxhunt.train")

MAX_VAL_BATCH = 4096
# On CPU, forward throughput is flat from 128 to 1,024 windows a batch (consecutive windows share their bars at any
# size) while memory grows with the batch (benchmarks/RESULTS.md). So `auto` on CPU sizes for throughput.
CPU_VAL_BATCH = 256


def saved_batch_sizes(run: RunDir, cfg: TrainConfig) -> tuple[int, int] | None:
    """The batch sizes a run resolved when it started (config.json "resolved"): a resumed run keeps them, since a
    new memory plan may choose others and change the step count, the epoch's order and the LR schedule."""
    try:
        saved = json.loads(run.config.read_text(encoding="utf-8"))
        resolved, train = saved["resolved"], saved["train"]
        if cfg.batch_size not in (AUTO, train["batch_size"]):
            return None  # --batch-size typed again on resume, with a new value: the user's choice
        return int(resolved["batch_size"]), int(resolved["validation_batch_size"])
    except (OSError, KeyError, TypeError, ValueError):
        return None


def refuse_new_batch_mid_epoch(run: RunDir, checkpoint: dict[str, Any] | None, batch_size: int) -> None:
    """A checkpoint inside an epoch counts the batches already stepped in that epoch's order; with another batch
    size that count points at other windows, so the resumed epoch would repeat some and skip others."""
    if checkpoint is None or not json.loads(checkpoint["fit_state"]).get("epoch_batches"):
        return
    try:
        before = int(json.loads(run.config.read_text(encoding="utf-8"))["resolved"]["batch_size"])
    except (OSError, KeyError, TypeError, ValueError):
        return
    if before != batch_size:
        raise InputError(f"{run.checkpoint}: the run stopped inside an epoch with batch size {before}; resume it with "
                         f"--batch-size {before} (or without --batch-size), not {batch_size}")


def global_batch_sizes(dist: Dist, cfg: TrainConfig, batch_size: int, val_batch_size: int,
                       n_train: int) -> tuple[int, int]:
    """Under torchrun the memory plan sizes one rank's share: `--batch-size auto` is the smallest share that fits on
    every rank (at most the rank's part of the training windows) times the number of ranks; an `auto` validation
    batch (each rank's own) is the smallest over the ranks."""
    if cfg.batch_size == AUTO:
        batch_size = min(dist.all_min(batch_size), -(-n_train // dist.world_size)) * dist.world_size
    if cfg.validation_batch_size == AUTO:
        val_batch_size = dist.all_min(val_batch_size)
    return batch_size, val_batch_size


def resolve_batch_sizes(
    model: torch.nn.Module, data: PreparedData, model_cfg: ModelConfig, cfg: TrainConfig, device: torch.device,
    precision: str = "32", world: int = 1,
) -> tuple[int, int, dict[str, Any] | None]:
    """Replace `auto` batch sizes by the memory plan's choice (largest that fits the budget with headroom). On CPU
    the budget is the process's (--memory-budget, else what it holds now and the host memory still available), less
    what it holds outside the step; a --batch-size over the training windows is cut to them, said (in one process:
    under torchrun, `world` ranks, a global batch must stay a multiple of the ranks)."""
    n_train, n_val = len(data.splits["train"]), len(data.splits["val"])
    given = cfg.batch_size if cfg.batch_size == AUTO or world > 1 else cut_to_windows(int(cfg.batch_size), n_train)
    if given != AUTO and cfg.validation_batch_size != AUTO:
        return int(given), int(cfg.validation_batch_size), None
    cpu = device.type == "cpu"
    # Without a budget on CPU the plan only bounds the validation batch, whose throughput size is far below any
    # limit: the analytic plan is enough there, and the probe's seconds of instrumented steps are saved.
    plan = budgeted_plan(model, data.schema.sizes, model_cfg, device, cfg.memory_budget, cfg.optimizer_state == "cpu",
                         precision, probe=not (cpu and cfg.memory_budget is None))
    budget, fixed = plan.budget_bytes, plan.fixed_bytes
    log.info("memory plan (budget %.0f MiB):\n%s", budget / 2**20, plan.format_table())
    batch_size = min(plan.best_train_batch, n_train) if given == AUTO else given
    val_batch = cfg.validation_batch_size
    if val_batch == AUTO:
        val_batch = max(1, min(plan.best_val_batch, n_val, CPU_VAL_BATCH if cpu else MAX_VAL_BATCH))
    held = f" (this process holds {fixed / 2**20:,.0f} MiB outside the step)" if fixed else ""
    if batch_size < 1:
        raise InputError(f"not even one training sample fits --memory-budget {budget / 2**20:.0f}MiB{held}; raise it, "
                         "or lower --hidden-size/--encoder-length, or use --optimizer-state cpu")
    row = int(predicted_mb(plan.to_dict(), batch_size // world, "train") * 2**20)  # the plan is one rank's
    if given != AUTO and not fits(row, plan.budget_bytes, plan.fixed_bytes):
        log.warning("--batch-size %s needs about %s MiB, over the %s MiB usable%s: pass a smaller --batch-size (if "
                    "memory runs out, the out-of-memory ladder splits it into micro-batches)", f"{batch_size:,}",
                    f"{row / 2**20:,.0f}", f"{plan.usable_bytes / 2**20:,.0f}", held)
    log.info("batch size %d, validation batch size %d", batch_size, val_batch)
    return int(batch_size), int(val_batch), plan.to_dict()


def budgeted_plan(model: torch.nn.Module, sizes: InputSizes, model_cfg: ModelConfig, device: torch.device,
                  budget: int | None, optimizer_state_on_cpu: bool, precision: str, probe: bool = True) -> MemoryPlan:
    """The memory plan of a run on `device` under `budget` (None, no --memory-budget: 80% of the GPU's free memory;
    on CPU the process's own memory (RssAnon) and the host memory still available), less, on CPU, what the process
    holds outside the step (`MemoryPlan.fixed_bytes`): what `train` sizes its batches by and `plan-memory` prints."""
    fixed = held_outside_step(model) if device.type == "cpu" else 0
    if budget is None:
        budget = int(free_bytes(device) * 0.8) if device.type == "cuda" else (
            anon_rss_bytes() + available_host_bytes())
    return plan_memory(model, sizes, model_cfg, device, budget, optimizer_state_on_cpu=optimizer_state_on_cpu,
                       probe=probe, precision=precision).holding(fixed)


def cut_to_windows(batch_size: int, n_train: int) -> int:
    """A batch larger than the training split is the split: said, so the plan and the epoch lines are read at it."""
    if batch_size <= n_train:
        return batch_size
    log.info("--batch-size %s is more than the %s training windows: one batch of %s an epoch", f"{batch_size:,}",
             f"{n_train:,}", f"{n_train:,}", extra=SHOW)
    return n_train
