"""Quantile (pinball) loss, the TFT's training objective (Lim et al. 2021, eq. 24).

`QL(y, ŷ, q) = max(q (y - ŷ), (q - 1)(y - ŷ))`: under-forecasts cost q per unit, over-forecasts 1 - q, so its minimiser
is the q-quantile. Legend: B batch, D forecast steps, Q quantiles.
"""

from __future__ import annotations

import torch


def pinball(pred: torch.Tensor, target: torch.Tensor, quantiles: torch.Tensor) -> torch.Tensor:
    """Elementwise pinball loss: pred (B, D, Q), target (B, D), quantiles (Q,) -> (B, D, Q)."""
    err = target.unsqueeze(-1) - pred  # (B, D, Q)
    q = quantiles.to(dtype=pred.dtype, device=pred.device)  # (Q,)
    return torch.maximum(q * err, (q - 1) * err)  # (B, D, Q)


def quantile_loss(
    pred: torch.Tensor, target: torch.Tensor, quantiles: torch.Tensor, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """Training loss: the pinball loss averaged over samples, horizons and quantiles (a scalar).

    `weight` (B,) multiplies each sample's loss (None: all 1). With volatility scaling a sample's scaled pinball is
    its raw pinball divided by its scale, so weighting by the scale (normalized to mean 1) makes the loss the raw
    pinball that q-risk reports, up to a constant (see `scale_weight`).
    """
    loss = pinball(pred, target, quantiles)  # (B, D, Q)
    if weight is None:
        return loss.mean()
    return (loss.mean(dim=(1, 2)) * weight.to(loss.dtype)).mean()


def scale_weight(scale: torch.Tensor, reference: torch.Tensor | float | None = None) -> torch.Tensor:
    """(B,) sample weights scale / reference, the reference being the mean of `scale` (B,) unless given: a batch
    of equal scales (series scaling of one series) weighs every sample 1."""
    ref = scale.mean() if reference is None else reference
    return scale / ref
