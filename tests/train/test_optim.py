"""AdamW with host-resident state matches plain AdamW; the warm-up/cosine schedule against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from foxhunt.train.optim import AdamW, HostAdamW, warmup_cosine


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
