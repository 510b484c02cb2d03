"""The memory plan: sizes, hand-counted terms, monotonicity, budget fit, checkpointing, host optimizer state, probe."""

from __future__ import annotations

import json

import pytest
import torch

from foxhunt.data.features.schema import InputSizes
from foxhunt.errors import InputError
from foxhunt.model.config import ModelConfig
from foxhunt.model.tft import TemporalFusionTransformer
from foxhunt.train.config import parse_size
from foxhunt.train.plan import (
    FRAGMENTATION,
    HEADROOM,
    LiveTensorBytes,
    Stage,
    activation_elements,
    calibration,
    plan_memory,
    probe_batch,
    stages,
)

SIZES = InputSizes(
    static_cat=(3,), static_cont=1, known_cat=(5, 7), known_cont=2, observed_cat=(4,), observed_cont=2
)
BATCHES = (1, 2, 4, 8, 16, 32, 64)


def config(**kw: object) -> ModelConfig:
    base: dict[str, object] = dict(
        hidden_size=16, attention_heads=2, dropout=0.1, encoder_length=24, horizon=4
    )
    return ModelConfig(**{**base, **kw})  # type: ignore[arg-type]


def model(cfg: ModelConfig) -> TemporalFusionTransformer:
    torch.manual_seed(0)
    return TemporalFusionTransformer(SIZES, cfg)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4GiB", 4 * 2**30), ("512MiB", 512 * 2**20), ("4GB", 4 * 10**9), ("4096", 4096), ("1.5g", 3 * 2**29),
        (" 2 kib ", 2048), ("3M", 3 * 2**20), ("10b", 10), ("1TB", 10**12),
    ],
)  # fmt: skip
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "4XB", "-1GiB", "0", "GiB", "4 GiB extra", "1e9"])
def test_parse_size_rejects_junk(text: str) -> None:
    with pytest.raises(InputError, match="4GiB, 512MiB, 4GB"):
        parse_size(text, what="--memory-budget")


def test_hand_counted_terms_and_sums() -> None:
    cfg = config()
    m = model(cfg)
    plan = plan_memory(m, SIZES, cfg, torch.device("cpu"), 2**30, batch_sizes=BATCHES, probe=False)
    n = sum(p.numel() for p in m.parameters())
    buffers = sum(b.numel() * b.element_size() for b in m.buffers())  # embedding offsets (int64)
    # per sample (E = 24, D = 4), no bar shared: int64 static code 1, encoder rows' codes 24*3 and index 24, forecast
    # rows' codes 4*2 and index 4, window 1; floats static 1, encoder rows 24*4, forecast rows 4*2, target 4, center,
    # scale
    per_sample = 8 * (1 + 72 + 24 + 8 + 4 + 1) + 4 * (1 + 96 + 8 + 4 + 1 + 1)
    assert probe_batch(SIZES, cfg, 3, torch.device("cpu")).nbytes() == 3 * per_sample
    for r in plan.rows:
        assert (r.train.weights, r.train.gradients, r.train.optimizer) == (4 * n + buffers, 4 * n, 8 * n)
        assert r.train.batch == r.val.batch == r.batch_size * per_sample
        for bd in (r.train, r.val):
            assert bd.total == bd.weights + bd.gradients + bd.optimizer + bd.activations + bd.batch
            assert bd.to_dict()["total"] == bd.total
        assert 0 < r.val.activations < r.train.activations


def test_monotone_in_batch_size_and_best_batch_fits_the_budget() -> None:
    cfg = config()
    m = model(cfg)
    wide = plan_memory(m, SIZES, cfg, torch.device("cpu"), 2**40, batch_sizes=BATCHES, probe=False)
    totals = [(r.train.total, r.val.total) for r in wide.rows]
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(totals, totals[1:], strict=False))
    # a budget between the totals of batch 8 and 16 (with the allowances applied) picks 8 for training
    need = lambda total: total * (1 + FRAGMENTATION) / (1 - HEADROOM)  # noqa: E731
    budget = int((need(totals[3][0]) + need(totals[4][0])) / 2)
    plan = plan_memory(m, SIZES, cfg, torch.device("cpu"), budget, batch_sizes=BATCHES, probe=False)
    assert plan.best_train_batch == 8
    assert plan.best_val_batch >= 16  # validation keeps no activations for backward
    assert plan.usable_bytes == int(budget * (1 - HEADROOM))
    tiny = plan_memory(m, SIZES, cfg, torch.device("cpu"), 1000, batch_sizes=BATCHES, probe=False)
    assert (tiny.best_train_batch, tiny.best_val_batch) == (0, 0)


def test_activation_checkpointing_lowers_the_activation_term() -> None:
    plain, ckpt = config(), config(activation_checkpointing=True)
    a = plan_memory(model(plain), SIZES, plain, torch.device("cpu"), 2**30, batch_sizes=BATCHES, probe=False)
    b = plan_memory(model(ckpt), SIZES, ckpt, torch.device("cpu"), 2**30, batch_sizes=BATCHES, probe=False)
    for ra, rb in zip(a.rows, b.rows, strict=True):
        assert rb.train.activations < 0.9 * ra.train.activations
        assert rb.train.weights == ra.train.weights and rb.val.activations == ra.val.activations


def test_optimizer_state_on_cpu_leaves_the_accelerator() -> None:
    cfg = config()
    m = model(cfg)  # probe=False: the plan for a CUDA device is analytic and needs no GPU here
    on_dev = plan_memory(m, SIZES, cfg, torch.device("cuda"), 2**30, batch_sizes=BATCHES, probe=False)
    on_host = plan_memory(m, SIZES, cfg, torch.device("cuda"), 2**30, batch_sizes=BATCHES, probe=False,
                          optimizer_state_on_cpu=True)  # fmt: skip
    for rd, rh in zip(on_dev.rows, on_host.rows, strict=True):
        assert rh.train.optimizer == rh.val.optimizer == 0
        assert rd.train.total - rh.train.total == rd.train.optimizer > 0
    cpu = plan_memory(m, SIZES, cfg, torch.device("cpu"), 2**30, batch_sizes=BATCHES, probe=False,
                      optimizer_state_on_cpu=True)  # fmt: skip
    assert cpu.rows[0].train.optimizer > 0  # on CPU the host is the device: the moments still count
    assert on_host.optimizer_state_on_cpu and not cpu.optimizer_state_on_cpu


def test_calibration_is_measured_over_analytic_with_a_floor() -> None:
    assert calibration(1100.0, 1000.0) == pytest.approx(1.1)
    assert calibration(100.0, 1000.0) == 0.5  # allocator rounding at tiny sizes, not activations
    assert calibration(0.0, 1000.0) == calibration(-5.0, 1000.0) == 1.0  # no growth seen: analytic only


def test_activation_elements_hand_computed() -> None:
    st = [Stage("a", saved=10, grad=1, live=3, ckpt_saved=2), Stage("b", saved=20, grad=5, live=7)]
    assert activation_elements(st, checkpointing=False) == (35, 7)  # max(10+1, 10+20+5, 30)
    assert activation_elements(st, checkpointing=True) == (27, 7)  # max(10+1, 2+20+5, 22)


def test_live_tensor_bytes_counts_storages_alive_at_once() -> None:
    with LiveTensorBytes() as live:
        a = torch.ones(1000)  # 4000 bytes
        b = a * 2  # 4000 more
        v = a.view(10, 100)  # a view: no new storage
        assert live.current == 8000
        del b
        c = v + 1
        assert (live.current, live.peak) == (8000, 8000)
        a.add_(1)  # in place: same storage
        del a, v, c
    assert (live.current, live.peak) == (0, 8000)


def test_the_tied_head_keeps_its_linear_outputs() -> None:
    """Per forecast step the output stage keeps Q more elements with the tied head (its linear outputs z, which
    softplus saves for its backward), D = 4 steps, Q = 3."""
    tied, independent = (stages(SIZES, config(quantile_head=h), "cpu", 4)[-1] for h in ("tied", "independent"))
    assert tied.name == "output" and tied.saved - independent.saved == 4 * 3
    assert (tied.grad, tied.live) == (independent.grad, independent.live)


@pytest.mark.parametrize("kw", [{}, {"activation_checkpointing": True}, {"lstm_layers": 2}, {"dropout": 0.0},
                                {"quantile_head": "tied"}])
def test_probe_agrees_with_the_analytic_model(kw: dict[str, object]) -> None:
    """The analytic counts follow the real TFT: measured/analytic bytes per sample stay near 1 on CPU."""
    cfg = config(**kw)
    plan = plan_memory(model(cfg), SIZES, cfg, torch.device("cpu"), 2**30, batch_sizes=(1, 64))
    assert plan.probe.startswith("probe: live tensor bytes")
    assert 0.9 < plan.train_calibration < 1.1 and 0.9 < plan.val_calibration < 1.1


def test_probe_leaves_the_model_and_rng_alone() -> None:
    cfg = config()
    m = model(cfg).eval()
    rng = torch.get_rng_state()
    plan_memory(m, SIZES, cfg, torch.device("cpu"), 2**30, batch_sizes=(1,))
    assert not m.training and all(p.grad is None for p in m.parameters())
    assert torch.equal(rng, torch.get_rng_state())


def test_probe_needs_the_model_on_the_device() -> None:
    cfg = config()
    with pytest.raises(ValueError, match="needs the model on cuda"):
        plan_memory(model(cfg), SIZES, cfg, torch.device("cuda"), 2**30, batch_sizes=(1,), probe=True)


def test_table_and_dict() -> None:
    cfg = config()
    plan = plan_memory(model(cfg), SIZES, cfg, torch.device("cpu"), 2**30, batch_sizes=BATCHES, probe=False)
    text = plan.format_table()
    assert "budget 1024 MiB" in text and "best" in text and len(text.splitlines()) == len(BATCHES) + 3
    d = json.loads(json.dumps(plan.to_dict()))
    assert d["best_train_batch"] == plan.best_train_batch == 64 and len(d["rows"]) == len(BATCHES)
    assert d["rows"][2]["train"]["total"] == plan.rows[2].train.total
