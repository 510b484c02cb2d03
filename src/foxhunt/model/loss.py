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


def quantile_loss(pred: torch.Tensor, target: torch.Tensor, quantiles: torch.Tensor) -> torch.Tensor:
    """Training loss: the pinball loss averaged over samples, horizons and quantiles (a scalar)."""
    return pinball(pred, target, quantiles).mean()
