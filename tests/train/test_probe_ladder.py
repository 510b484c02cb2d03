"""The memory probe's out-of-memory ladder: retry, then smaller probe batches (the per-sample slope it measures is
the same at any two sizes), then an analytic-only plan that still says which batch sizes fit."""

from __future__ import annotations

import logging

import pytest
import torch

from foxhunt.data.features.schema import InputSizes
from foxhunt.model.config import ModelConfig
from foxhunt.model.tft import TemporalFusionTransformer
from foxhunt.train.faults import ENV_VAR
from foxhunt.train.plan import plan_memory

SIZES = InputSizes(static_cat=(3,), static_cont=1, known_cat=(5, 7), known_cont=2, observed_cat=(4,), observed_cont=2)
CFG = ModelConfig(hidden_size=16, attention_heads=2, dropout=0.1, encoder_length=24, horizon=4)
CPU = torch.device("cpu")


def plan(model=None):
    if model is None:
        torch.manual_seed(0)
        model = TemporalFusionTransformer(SIZES, CFG)
    return plan_memory(model, SIZES, CFG, CPU, 2**30, batch_sizes=(1, 8, 64))


@pytest.fixture
def rungs(caplog, monkeypatch):
    """The ladder's warnings, seen once, whether or not a CLI test has stopped "foxhunt" logs propagating."""
    logger = logging.getLogger("foxhunt.train")
    monkeypatch.setattr(logger, "propagate", False)
    logger.addHandler(caplog.handler)
    caplog.handler.setLevel(logging.WARNING)
    yield lambda: [r.getMessage().split()[1] for r in caplog.records if r.getMessage().startswith("[MEMORY]")]
    logger.removeHandler(caplog.handler)


def test_probe_retries_then_probes_smaller_batches_with_the_same_result(monkeypatch, rungs):
    clean = plan()
    monkeypatch.setenv(ENV_VAR, "oom@probe:2x2")  # the probe's 2nd step fails twice: retry, then batches 1 and 4
    torch.manual_seed(0)
    m = TemporalFusionTransformer(SIZES, CFG).eval()
    rng = torch.get_rng_state()
    laddered = plan(m)
    assert laddered.probe == "probe: live tensor bytes at batch 1 and 4"
    assert laddered.train_calibration == pytest.approx(clean.train_calibration, rel=0.02)
    assert laddered.val_calibration == pytest.approx(clean.val_calibration, rel=0.02)
    assert laddered.best_train_batch == clean.best_train_batch
    assert rungs() == ["phase=oom_retry", "phase=oom_halve"]
    assert not m.training and all(p.grad is None for p in m.parameters())  # left as it was found
    assert torch.equal(rng, torch.get_rng_state())


def test_probe_that_never_fits_falls_back_to_the_analytic_plan(monkeypatch, rungs):
    monkeypatch.setenv(ENV_VAR, "oom@probe:1x4")  # retry, batches 1 and 4, batches 1 and 2, stop
    p = plan()
    assert p.probe == "probe ran out of memory: analytic only"
    assert p.train_calibration == p.val_calibration == 1.0
    assert p.best_train_batch == 64  # the plan still says what fits
    assert rungs() == ["phase=oom_retry", "phase=oom_halve", "phase=oom_halve", "phase=oom_stop"]
