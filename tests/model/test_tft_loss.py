"""Pinball loss against values worked by hand."""

from __future__ import annotations

import pytest
import torch

from foxhunt.model.loss import pinball, quantile_loss, scale_weight


def test_pinball_hand_computed() -> None:
    q = torch.tensor([0.1, 0.5, 0.9])
    pred = torch.tensor([[[0.5, 0.5, 0.5], [2.0, 2.0, 2.0]]])  # (B=1, D=2, Q=3)
    target = torch.tensor([[1.0, 0.0]])  # (B=1, D=2)
    # y - ŷ = 0.5 (under-forecast): cost q * 0.5      -> 0.05, 0.25, 0.45
    # y - ŷ = -2 (over-forecast):   cost (1 - q) * 2  -> 1.8, 1.0, 0.2
    expected = torch.tensor([[[0.05, 0.25, 0.45], [1.8, 1.0, 0.2]]])
    assert torch.allclose(pinball(pred, target, q), expected, atol=1e-6)
    # mean of the six numbers: (0.05 + 0.25 + 0.45 + 1.8 + 1.0 + 0.2) / 6 = 3.75 / 6 = 0.625
    assert torch.isclose(quantile_loss(pred, target, q), torch.tensor(0.625))


def test_pinball_zero_on_exact_forecast_and_mean_over_batch() -> None:
    q = torch.tensor([0.25])
    target = torch.tensor([[3.0], [-1.0]])  # (B=2, D=1)
    pred = torch.tensor([[[3.0]], [[0.0]]])  # exact for sample 0; over-forecast by 1 for sample 1
    assert torch.equal(pinball(pred, target, q), torch.tensor([[[0.0]], [[0.75]]]))
    assert torch.isclose(quantile_loss(pred, target, q), torch.tensor(0.375))  # (0 + 0.75) / 2


def test_pinball_median_is_half_absolute_error_and_has_gradient() -> None:
    pred = torch.tensor([[[1.0], [4.0]]], requires_grad=True)
    target = torch.tensor([[3.0, 1.0]])
    loss = quantile_loss(pred, target, torch.tensor([0.5]))
    assert torch.isclose(loss, torch.tensor((0.5 * 2 + 0.5 * 3) / 2))  # 1.25
    loss.backward()
    # d/dŷ of mean over 2 elements: -q/2 when under-forecast, (1 - q)/2 when over-forecast
    assert torch.allclose(pred.grad, torch.tensor([[[-0.25], [0.25]]]))


def test_scale_weighted_loss_is_the_raw_unit_pinball_over_the_mean_scale() -> None:
    q = torch.tensor([0.1, 0.9])
    scale = torch.tensor([1.0, 3.0])  # (B,)
    raw_y = torch.tensor([[2.0], [-3.0]])  # (B, D=1)
    raw_pred = torch.tensor([[[0.0, 1.0]], [[-6.0, 3.0]]])  # (B, D, Q)
    w = scale_weight(scale)
    assert w.tolist() == [0.5, 1.5]
    scaled = quantile_loss(raw_pred / scale.view(-1, 1, 1), raw_y / scale.view(-1, 1), q, w)
    # raw pinball: sample 1: 0.1 * 2 and 0.9 * 1; sample 2: 0.1 * 3 and 0.1 * 6; mean over (B, Q) / mean scale 2
    want = (0.2 + 0.9 + 0.3 + 0.6) / 4 / 2.0
    assert float(scaled) == pytest.approx(want, rel=1e-6)
    unweighted = float(quantile_loss(raw_pred, raw_y, q))
    assert float(quantile_loss(raw_pred, raw_y, q, torch.ones(2))) == pytest.approx(unweighted)
