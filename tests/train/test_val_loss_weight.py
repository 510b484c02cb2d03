"""Early stopping selects by the loss training minimized: with --loss-weight scale the validation loss is weighted
the same way (each sample's scaled pinball times its scale over the mean scale)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from foxhunt.model.loss import quantile_loss, scale_weight
from foxhunt.train.validate import ValSums


def batch(scaled_y: torch.Tensor, scale: torch.Tensor) -> SimpleNamespace:
    """The three things ValSums reads from a Batch: target (B, D), target_scale (B,), unscale (center 0)."""
    return SimpleNamespace(target=scaled_y, target_scale=scale,
                           unscale=lambda y: y * scale.view((-1,) + (1,) * (y.dim() - 1)))


@pytest.mark.parametrize("loss_weight", ["none", "scale"])
def test_validation_loss_weighs_samples_as_training_does(loss_weight: str) -> None:
    q = torch.tensor([0.5])
    b = batch(torch.tensor([[1.0], [2.0]]), torch.tensor([1.0, 3.0]))  # (B=2, D=1); raw targets 1 and 6
    pred = torch.zeros(2, 1, 1)  # (B, D, Q)
    sums = ValSums(1, loss_weight)
    sums.add(b, pred, q)
    loss = sums.result([0.5], batch_size=2).loss
    # scaled pinball 0.5 and 1.0; unweighted mean 0.75. Raw pinball 0.5 and 3.0 over the mean scale 2: 0.875
    # (= the weighted scaled losses 0.5 * 0.5 and 1.0 * 1.5, averaged)
    want = 0.875 if loss_weight == "scale" else 0.75
    assert loss == pytest.approx(want)
    weight = scale_weight(b.target_scale) if loss_weight == "scale" else None
    assert loss == pytest.approx(float(quantile_loss(pred, b.target, q, weight)))
