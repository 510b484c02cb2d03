"""AdamW with host-resident state matches plain AdamW, with torch's private fused kernel and without it (a torch
that lacks it or changed its signature); the warm-up/cosine schedule against hand-computed values."""

from __future__ import annotations

import json
import math

import pytest
import torch

from foxhunt.cli import main
from foxhunt.train.optim import FUSED_KNOWN_GOOD, AdamW, HostAdamW, fused_kernel_works, warmup_cosine
from foxhunt.train.resume import load_checkpoint
from tests.epochs import trained


@pytest.fixture(autouse=True)
def _fresh_kernel_check():
    """fused_kernel_works asks once per process; a test that patches torch must be asked afresh, and leave no
    answer about the patched torch behind."""
    fused_kernel_works.cache_clear()
    yield
    fused_kernel_works.cache_clear()


def _other_signature(params, grads, exp_avgs, exp_avg_sqs, state_steps, *, lr, betas, eps):  # noqa: ARG001
    raise TypeError("_fused_adamw_() got an unexpected keyword argument 'beta1'")


def _no_op_kernel(*args, **kwargs) -> None:  # the name kept, the update gone (or moved elsewhere)
    return None


def _without_kernel(monkeypatch, how: str) -> None:
    """This torch as a later one might be: the fused kernel gone, or taking other arguments, or doing nothing."""
    if how == "missing":
        monkeypatch.delattr(torch, "_fused_adamw_")
    else:
        monkeypatch.setattr(torch, "_fused_adamw_", _other_signature if how == "signature" else _no_op_kernel)


def _steps_against_torch(ours_factory, weight_decay: float = 1e-2, steps: int = 6) -> tuple[list, list, object]:
    """(reference parameters, ours, our optimizer) after `steps` steps of torch.optim.AdamW (per-tensor) and of
    `ours_factory(params)` on the same model, data and schedule."""
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    ref = torch.optim.AdamW(a.parameters(), lr=1e-2, weight_decay=weight_decay, foreach=False)
    ours = ours_factory(list(b.parameters()))
    x = torch.randn(8, 4)
    for step in range(steps):
        for model, opt in ((a, ref), (b, ours)):
            for group in opt.param_groups:
                group["lr"] = 1e-2 / (step + 1)
            opt.zero_grad(set_to_none=True)
            model(x).pow(2).mean().backward()
            opt.step()
    return list(a.parameters()), list(b.parameters()), ours


@pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
def test_adamw_takes_the_steps_of_torch_adamw(weight_decay: float):
    """The fused-kernel AdamW equals torch.optim.AdamW (the reference, single-tensor implementation)."""
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    ref = torch.optim.AdamW(a.parameters(), lr=1e-2, weight_decay=weight_decay, foreach=False)
    ours = AdamW(list(b.parameters()), lr=1e-2, weight_decay=weight_decay)
    x = torch.randn(8, 4)
    for step in range(6):
        for model, opt in ((a, ref), (b, ours)):
            for group in opt.param_groups:
                group["lr"] = 1e-2 / (step + 1)  # the schedule sets lr between steps
            opt.zero_grad(set_to_none=True)
            model(x).pow(2).mean().backward()
            opt.step()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-6, atol=1e-7)
    # resuming from its state continues exactly
    fresh = AdamW(list(b.parameters()), lr=1.0, weight_decay=0.0)
    fresh.load_state_dict(ours.state_dict())
    assert fresh.param_groups[0]["lr"] == ours.param_groups[0]["lr"]
    for opt in (ours, fresh):
        assert [float(s) for s in opt.steps] == [6.0, 6.0]


@pytest.mark.parametrize("how", ["missing", "signature", "no_op"])
def test_without_the_private_fused_kernel_adamw_takes_torch_adamws_steps(monkeypatch, how: str):
    """torch._fused_adamw_ is private and pyproject allows any torch >= 2.4: where it is missing, takes other
    arguments or no longer updates, AdamW steps through torch.optim.AdamW on its own state, to the same update."""
    _without_kernel(monkeypatch, how)
    assert not fused_kernel_works("cpu", torch.float32)
    ref, ours, opt = _steps_against_torch(lambda ps: AdamW(ps, lr=1e-2, weight_decay=1e-2))
    for pa, pb in zip(ref, ours, strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-6, atol=1e-7)
    assert [float(s) for s in opt.steps] == [6.0, 6.0]  # torch.optim counted the steps in our state, in place
    # the state it leaves is ours: a checkpoint of it resumes on the fallback as on the fused path
    fresh = AdamW(ours, lr=1.0, weight_decay=0.0)
    fresh.load_state_dict(opt.state_dict())
    x = torch.randn(8, 4)
    before = [p.detach().clone() for p in ours]
    fresh.zero_grad()
    (x @ ours[0].T + ours[1]).pow(2).mean().backward()
    fresh.step()
    assert [float(s) for s in fresh.steps] == [7.0, 7.0]
    assert all(not torch.equal(p, q) for p, q in zip(ours, before, strict=True))


def test_host_adamw_without_the_fused_kernel_takes_the_same_steps(monkeypatch):
    _without_kernel(monkeypatch, "missing")
    ref, ours, _ = _steps_against_torch(lambda ps: HostAdamW(ps, lr=1e-2, weight_decay=1e-2))
    for pa, pb in zip(ref, ours, strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-6, atol=1e-7)


def test_the_fused_kernel_is_used_on_the_torch_versions_it_is_known_to_work_with():
    """Within FUSED_KNOWN_GOOD (the range the README states) the fast path must be the one taken, so that a change
    of the check cannot quietly make every run slower."""
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    low, high = (tuple(int(x) for x in v.split(".")) for v in FUSED_KNOWN_GOOD)
    if not low <= version <= high:
        pytest.skip(f"torch {torch.__version__} is outside {FUSED_KNOWN_GOOD}: the fallback is tested instead")
    assert fused_kernel_works("cpu", torch.float32)
    assert fused_kernel_works("cpu", torch.float64)


def _train(run_dir, daily_path, tiny) -> tuple[list[float], dict[str, torch.Tensor]]:
    assert main(["train", *tiny, "--parquet-file", str(daily_path), "--epochs", "2", "--patience", "100",
                 "--dropout", "0", "--seed", "3", "--run-dir", str(run_dir)]) == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # the last step's weights (model.safetensors may hold epoch 0's, the untrained model that forecasts its anchor)
    return [r["train_loss"] for r in trained(records)], load_checkpoint(run_dir / "checkpoint.pt")["model"]


def test_a_training_run_without_the_fused_kernel_is_the_run_with_it(tmp_path, monkeypatch, daily_path, tiny):
    """End to end: `foxhunt train` on a torch without torch._fused_adamw_ gives the losses and weights of the run on
    the fused kernel (to float rounding: the two add in another order)."""
    losses, weights = _train(tmp_path / "fused", daily_path, tiny)
    fused_kernel_works.cache_clear()
    _without_kernel(monkeypatch, "missing")
    fallback_losses, fallback_weights = _train(tmp_path / "fallback", daily_path, tiny)
    assert fallback_losses == pytest.approx(losses, rel=1e-5)
    assert weights.keys() == fallback_weights.keys()
    for name, w in weights.items():
        torch.testing.assert_close(fallback_weights[name], w, rtol=1e-4, atol=1e-6, msg=name)


def test_training_never_imports_torch_dynamo():
    """torch.optim imports torch._dynamo (seconds, ~70 MB); a foxhunt training step must not."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from foxhunt.train.optim import AdamW\n"
        "m = torch.nn.Linear(3, 2); opt = AdamW(list(m.parameters()), 1e-3, 1e-4)\n"
        "m(torch.randn(4, 3)).sum().backward(); opt.step(); opt.zero_grad()\n"
        "assert 'torch._dynamo' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_host_adamw_takes_the_same_steps_as_adamw():
    torch.manual_seed(0)
    a = torch.nn.Linear(4, 3)
    b = torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    opt_a = torch.optim.AdamW(a.parameters(), lr=1e-2, weight_decay=1e-2)
    opt_b = HostAdamW(list(b.parameters()), lr=1e-2, weight_decay=1e-2)
    x = torch.randn(8, 4)
    for _ in range(5):
        for model, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad(set_to_none=True)
            model(x).pow(2).mean().backward()
            opt.step()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb)
    # its state round-trips through a checkpoint
    fresh = HostAdamW(list(b.parameters()), lr=1e-2, weight_decay=1e-2)
    fresh.load_state_dict(opt_b.state_dict())
    assert [float(t) for t in fresh.state_dict()["steps"]] == [5.0, 5.0]


def test_warmup_then_cosine_by_hand():
    base, total, warm = 1e-3, 110, 10
    assert warmup_cosine(0, total, warm, base) == pytest.approx(1e-4)  # (0 + 1) / 10 of the peak
    assert warmup_cosine(9, total, warm, base) == pytest.approx(1e-3)
    assert warmup_cosine(10, total, warm, base) == pytest.approx(1e-3)  # cosine starts at the peak
    mid = 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * 0.5))
    assert warmup_cosine(60, total, warm, base) == pytest.approx(base * mid)
    assert warmup_cosine(110, total, warm, base) == pytest.approx(0.05 * base)  # the floor


def test_adamw_works_under_a_gradient_scaler():
    """16-mixed runs our AdamW through torch's GradScaler (unscale, skip on overflow, step): a scaled run takes the
    same steps as an unscaled one, and a step with an infinite gradient is skipped."""
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    plain, scaled = AdamW(list(a.parameters()), 1e-2, 0.0), AdamW(list(b.parameters()), 1e-2, 0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x = torch.randn(8, 4)
    for _ in range(3):
        plain.zero_grad()
        a(x).pow(2).mean().backward()
        plain.step()
        scaled.zero_grad()
        scaler.scale(b(x).pow(2).mean()).backward()
        scaler.unscale_(scaled)
        scaler.step(scaled)
        scaler.update()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb)
    before = [p.detach().clone() for p in b.parameters()]
    scaled.zero_grad()
    scaler.scale(b(x * float("inf")).sum()).backward()
    scaler.unscale_(scaled)
    scaler.step(scaled)  # skipped: the gradients are not finite
    for p, q in zip(b.parameters(), before, strict=True):
        assert torch.equal(p, q)


def test_the_gradient_norm_needs_no_torch_newer_than_2_4(monkeypatch):
    """pyproject allows torch>=2.4; `get_total_norm` arrived in 2.6: without it the step's norm is the same."""
    from foxhunt.train.step import total_norm

    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(7, 3, generator=g), torch.randn(5, generator=g), torch.randn(2, 2, 2, generator=g)]
    with_it = total_norm(grads)
    monkeypatch.delattr(torch.nn.utils, "get_total_norm")
    without = total_norm(grads)
    torch.testing.assert_close(without, with_it, rtol=1e-6, atol=0)
    expected = torch.cat([x.flatten() for x in grads]).double().norm()
    assert abs(float(without) - float(expected)) <= 1e-5 * float(expected)
    assert float(total_norm([])) == 0.0
