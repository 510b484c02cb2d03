"""The quantile head: the last map of the TFT, from ψ̃ (..., H) to the quantiles (..., Q) in scaled target units.

Two heads (`--quantile-head`, ModelConfig.quantile_head):
- independent: one linear map per quantile, fused (the paper's step 9). Nothing keeps p10 below p50; crossings are
  sorted away afterwards (train/calibrate.py `raw_quantiles` counts them).
- tied: the same linear map, its Q outputs read as the centre quantile (the one nearest 0.5) and Q - 1 gaps. Each
  quantile above the centre is the one below it plus softplus(its output), each one below the centre the one above
  it minus softplus(its output), so the quantiles are in order by construction, for any sorted quantile set.

Both are an `nn.Linear(H, Q)` with the same parameter names, so checkpoints, the folded inference model, the traces
and the ONNX export take either unchanged; model.json's `quantile_head` says which one reads the weights.
Legend: B batch, D forecast steps, H hidden, Q quantiles.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import torch
import torch.nn.functional as F
from torch import nn


def centre_index(quantiles: tuple[float, ...]) -> int:
    """The quantile nearest 0.5 (the lower one on a tie): the tied head's anchor."""
    return min(range(len(quantiles)), key=lambda j: (abs(quantiles[j] - 0.5), j))


def _inverse_softplus(y: float) -> float:
    """x with softplus(x) = y > 0 (log(expm1(y)), written so that it stays finite for small and large y)."""
    return y + math.log(-math.expm1(-y))


class TiedQuantiles(nn.Linear):
    """Quantiles that cannot cross: `q_c = z_c`, `q_j = q_{j-1} + softplus(z_j)` for j > c and `q_j = q_{j+1} -
    softplus(z_j)` for j < c, z = W x + b the linear map's outputs and c the centre (`centre_index`).

    Written as a chain of Q - 1 additions outwards from the centre, not as a cumulative sum or a product with a
    triangular matrix: each step adds a non-negative number to the quantile before it, and rounding is monotone, so
    the order holds exactly in floating point, on any device and in any exported graph. A product (blocked BLAS) or
    a scan (parallel on a GPU) may sum each column in an order of its own, which keeps the order only to rounding.

    Initialisation: the weights as `nn.Linear`'s; the biases such that an input of zero gives the quantiles of a
    standard normal: b_c = Φ⁻¹(q_c) and each gap softplus(b_j) = |Φ⁻¹(q_j) - Φ⁻¹(q_neighbour)| (1.28 for the default
    0.1, 0.5, 0.9). The target is scaled to unit scale (by its series' standard deviation or its trailing
    volatility), so these are the gaps of a model that knows only the scaling: an untrained model starts with that
    spread around its median, where the independent head starts with three outputs in random order.
    """

    def __init__(self, in_features: int, quantiles: tuple[float, ...]) -> None:
        super().__init__(in_features, len(quantiles))
        self.centre = c = centre_index(quantiles)
        z = [NormalDist().inv_cdf(q) for q in quantiles]
        bias = [z[c] if j == c else _inverse_softplus(abs(z[j] - z[j - 1 if j > c else j + 1])) for j in range(len(z))]
        with torch.no_grad():
            self.bias.copy_(torch.tensor(bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = super().forward(x)  # (..., Q) the centre and, elsewhere, the gaps before softplus
        gaps = F.softplus(z)  # (..., Q)
        c, n = self.centre, z.shape[-1]
        q: list[torch.Tensor] = [z[..., c]] * n  # each (...)
        for j in range(c + 1, n):  # upwards from the centre
            q[j] = q[j - 1] + gaps[..., j]
        for j in range(c - 1, -1, -1):  # downwards
            q[j] = q[j + 1] - gaps[..., j]
        return torch.stack(q, dim=-1)  # (..., Q) in order


def quantile_head(in_features: int, quantiles: tuple[float, ...], kind: str) -> nn.Linear:
    """The head `kind` ("independent" | "tied", ModelConfig.quantile_head) for these quantiles: (..., H) -> (..., Q)."""
    if kind == "tied":
        return TiedQuantiles(in_features, quantiles)
    return nn.Linear(in_features, len(quantiles))  # one linear map per quantile, fused
