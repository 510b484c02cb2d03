"""The batch sizes a run resolves on CPU (train/batch_sizes.py): the memory plan counts what the process holds outside
the step against --memory-budget, plans on the host memory available when no budget is given (not a fixed 2 GiB),
and a --batch-size over the training windows is cut to them, said; a given batch over the plan is warned about."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import psutil
import pytest
import torch

from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data
from foxhunt.model.config import ModelConfig
from foxhunt.model.tft import TemporalFusionTransformer
from foxhunt.train import session, telemetry
from foxhunt.train.config import TrainConfig
from foxhunt.train.console_lines import predicted_mb

MIB, GIB = 2**20, 2**30
CPU = torch.device("cpu")
WIDE = ModelConfig(hidden_size=64, attention_heads=2, encoder_length=16, horizon=3)  # about 1 MiB a training sample


@pytest.fixture(scope="module")
def data(daily_path):
    return prepare_data(DataConfig(paths=(str(daily_path),), encoder_length=16, horizon=3))


@pytest.fixture
def model(data):
    return TemporalFusionTransformer(data.schema.sizes, WIDE)


def own() -> int:
    """The process's own memory (RssAnon), what a CPU plan counts it holding: its file pages are page cache (this was
    the resident set, psutil's rss, before the plan stopped counting file pages)."""
    return telemetry.anon_rss_bytes()


def test_one_plan_for_train_and_plan_memory_defaults_the_budget_and_holds_the_process(data, model, monkeypatch):
    """budgeted_plan: no budget on CPU is the process's own memory (RssAnon) and the host's still available, and what the process
    holds outside the step is counted against it, as resolve_batch_sizes and plan-memory both need."""
    from foxhunt.train import batch_sizes

    monkeypatch.setattr(batch_sizes, "anon_rss_bytes", lambda: 300 * MIB)
    monkeypatch.setattr(batch_sizes, "available_host_bytes", lambda: 700 * MIB)
    monkeypatch.setattr(batch_sizes, "held_outside_step", lambda m: 123 * MIB)
    plan = batch_sizes.budgeted_plan(model, data.schema.sizes, WIDE, CPU, None, False, "32", probe=False)
    assert (plan.budget_bytes, plan.fixed_bytes) == (1000 * MIB, 123 * MIB)
    given = batch_sizes.budgeted_plan(model, data.schema.sizes, WIDE, CPU, 2 * GIB, False, "32", probe=False)
    assert (given.budget_bytes, given.fixed_bytes) == (2 * GIB, 123 * MIB)


def test_a_budget_is_the_processs_own_less_what_it_holds_outside_the_step(data, model):
    """With a --memory-budget that leaves 40 MiB over what the process holds now (after the 10% headroom), the
    chosen batch's step fits in those 40 MiB, not in the whole budget as if torch and the data took nothing."""
    budget = int((own() + 40 * MIB) / 0.9)
    batch, _, plan = session.resolve_batch_sizes(model, data, WIDE, TrainConfig(batch_size="auto",
                                                                               memory_budget=budget), CPU)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    held = plan["budget_bytes"] * 0.9 - plan["usable_bytes"]
    assert held > 100 * MIB  # the interpreter, torch, the data
    assert predicted_mb(plan, batch, "train") * MIB + held - weights <= budget * 0.9
    assert 1 <= batch < len(data.splits["train"])


def test_without_a_budget_a_cpu_run_plans_on_the_memory_available(data, model, monkeypatch):
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=10 * GIB))
    monkeypatch.setattr(telemetry, "_CGROUP_FILES", (), raising=False)
    _, val, plan = session.resolve_batch_sizes(model, data, WIDE, TrainConfig(batch_size=64), CPU)
    # its file pages (libraries, a mapped store's pages) are page cache, which MemAvailable counts already: this
    # asserted the resident set + 10 GiB before, counting them twice
    assert plan["budget_bytes"] == pytest.approx(own() + 10 * GIB, abs=64 * MIB)
    assert val == min(256, len(data.splits["val"]))


def test_a_cgroup_limit_leaves_less_than_the_machines_free_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=10 * GIB))
    limit, usage = tmp_path / "memory.max", tmp_path / "memory.current"
    monkeypatch.setattr(telemetry, "_CGROUP_FILES", ((limit, usage),))
    limit.write_text(f"{GIB}\n")
    usage.write_text(f"{GIB // 4}\n")
    assert telemetry.available_host_bytes() == 3 * GIB // 4
    limit.write_text("max\n")
    assert telemetry.available_host_bytes() == 10 * GIB


def test_a_batch_over_the_training_windows_is_cut_to_them_and_said(data, model, caplog):
    n_train = len(data.splits["train"])
    with caplog.at_level(logging.INFO, logger="foxhunt"):
        batch, _, _ = session.resolve_batch_sizes(model, data, WIDE, TrainConfig(batch_size=100_000), CPU)
    assert batch == n_train
    assert f"--batch-size 100,000 is more than the {n_train:,} training windows" in caplog.text


def test_a_given_batch_over_the_budget_is_warned_about(data, model, caplog):
    budget = int((own() + 40 * MIB) / 0.9)
    with caplog.at_level(logging.WARNING, logger="foxhunt"):
        batch, _, plan = session.resolve_batch_sizes(model, data, WIDE, TrainConfig(batch_size=256,
                                                                                   memory_budget=budget), CPU)
    assert batch == 256
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith("--batch-size 256 needs about ")
    assert f"over the {plan['usable_bytes'] / MIB:,.0f} MiB usable" in warned[0]


def test_the_memory_records_carry_the_anonymous_resident_set(tmp_path):
    rec = telemetry.MemoryTracker(CPU, tmp_path / "memory.jsonl", logging.getLogger("foxhunt.test")).record("x")
    assert 0 < rec["host_anon_mb"] <= rec["host_rss_mb"]
