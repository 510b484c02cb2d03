"""How many fold trainings fit in memory at once: the memory plan's training-step peak plus the prepared data and
a process's fixed cost, per job, against the memory free now (host RAM on CPU, the card's free memory on CUDA,
where every job shares the one device)."""

from __future__ import annotations

import logging

import torch

from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data
from foxhunt.model.config import ModelConfig
from foxhunt.model.tft import TemporalFusionTransformer
from foxhunt.train.config import AUTO, TrainConfig
from foxhunt.train.device import resolve_device
from foxhunt.train.plan import plan_memory
from foxhunt.train.telemetry import free_bytes

log = logging.getLogger("foxhunt.backtest")
PROCESS_BYTES = 400 * 2**20  # a worker's interpreter, torch and polars before any data (import torch alone: 272 MB)
PLANNING_BATCH = 128  # the training batch planned for when --batch-size is auto
USABLE = 0.8  # leave a fifth of the free memory to everything else


def per_job_bytes(data_cfg: DataConfig, model_cfg: ModelConfig, train_cfg: TrainConfig,
                  device: torch.device) -> tuple[int, int]:
    """(device bytes, host bytes) one fold's training needs: the plan's step peak, and the data held in memory."""
    data = prepare_data(data_cfg)
    host = sum(t.numel() * t.element_size() for t in vars(data.windows).values() if isinstance(t, torch.Tensor))
    model = TemporalFusionTransformer(data.schema.sizes, model_cfg)
    batch = PLANNING_BATCH if train_cfg.batch_size == AUTO else int(train_cfg.batch_size)
    plan = plan_memory(model, data.schema.sizes, model_cfg, torch.device(device.type), 2**40, batch_sizes=[batch],
                       optimizer_state_on_cpu=train_cfg.optimizer_state == "cpu", probe=False)
    return plan.rows[0].train.total, host + PROCESS_BYTES


def jobs_that_fit(jobs: int, data_cfg: DataConfig, model_cfg: ModelConfig, train_cfg: TrainConfig) -> int:
    """`jobs`, or fewer (at least 1) when the free memory holds fewer trainings side by side; logs the reckoning."""
    device = resolve_device(train_cfg.device)
    on_device, on_host = per_job_bytes(data_cfg, model_cfg, train_cfg, device)
    if device.type == "cpu":
        on_host, on_device = on_host + on_device, 0
    fit_host = int(free_bytes(torch.device("cpu")) * USABLE) // max(1, on_host)
    fit = min(fit_host, int(free_bytes(device) * USABLE) // on_device) if on_device else fit_host
    n = max(1, min(jobs, fit))
    log.info("--jobs %d: each fold's training needs about %.0f MiB of host memory%s; %d fit%s", jobs,
             on_host / 2**20, f" and {on_device / 2**20:.0f} MiB on {device}" if on_device else "", fit,
             f", running {n}" if n != jobs else "")
    if n < jobs:
        log.warning("--jobs %d lowered to %d: the free memory holds only %d fold trainings at once", jobs, n, n)
    return n
