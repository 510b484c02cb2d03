"""AdamW with host-resident state matches plain AdamW; the warm-up/cosine schedule against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from foxhunt.train.optim import HostAdamW, warmup_cosine


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
    assert fresh.state_dict()["state"][0]["step"] == opt_b.state_dict()["state"][0]["step"]


def test_warmup_then_cosine_by_hand():
    base, total, warm = 1e-3, 110, 10
    assert warmup_cosine(0, total, warm, base) == pytest.approx(1e-4)  # (0 + 1) / 10 of the peak
    assert warmup_cosine(9, total, warm, base) == pytest.approx(1e-3)
    assert warmup_cosine(10, total, warm, base) == pytest.approx(1e-3)  # cosine starts at the peak
    mid = 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * 0.5))
    assert warmup_cosine(60, total, warm, base) == pytest.approx(base * mid)
    assert warmup_cosine(110, total, warm, base) == pytest.approx(0.05 * base)  # the floor
