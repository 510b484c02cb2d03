"""TFT building blocks (Lim et al. 2021, section 4): GLU, gated residual network, input embeddings, variable selection.

Everything here is batched over variables: the per-variable networks of a variable-selection network are one stacked
weight and one `einsum`, categorical inputs share one embedding table (with offsets), and continuous inputs are embedded
with one broadcast multiply-add. Legend: B batch, T time, V variables, H hidden, C context width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class GLU(nn.Module):
    """Gated linear unit `σ(W4 γ + b4) ⊙ (W5 γ + b5)`: lets the network switch a whole block off (gate → 0).

    Both maps are one fused `Linear(d_in, 2 * d_out)`; the first half of its output is the value, the second the gate.
    """

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d_in, 2 * d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.glu(self.fc(x), dim=-1)  # (..., 2 d_out) -> (..., d_out): value * sigmoid(gate)


class GateAddNorm(nn.Module):
    """`LayerNorm(skip + GLU(dropout(x)))`: the gated skip connection used after the LSTM, the attention, the GRN."""

    def __init__(self, d_in: int, d_out: int, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.glu = GLU(d_in, d_out)
        self.norm = nn.LayerNorm(d_out)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.norm(skip + self.glu(self.dropout(x)))


class GatedResidualNetwork(nn.Module):
    """GRN(a, c) = LayerNorm(a + GLU(dropout(W1 ELU(W2 a + W3 c + b2) + b1))).

    `a` is (..., d_in); the optional context `c` is (B, C) and is broadcast over any time axes of `a` (B, T, d_in).
    When d_in != d_out the residual goes through a linear projection first.
    """

    def __init__(
        self, d_in: int, d_hidden: int, d_out: int, dropout: float, d_context: int | None = None
    ) -> None:
        super().__init__()
        self.skip = nn.Linear(d_in, d_out) if d_in != d_out else None
        self.fc2 = nn.Linear(d_in, d_hidden)  # W2, b2
        self.ctx = nn.Linear(d_context, d_hidden, bias=False) if d_context else None  # W3
        self.fc1 = nn.Linear(d_hidden, d_hidden)  # W1, b1
        self.gate = GateAddNorm(d_hidden, d_out, dropout)

    def forward(self, a: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        h = self.fc2(a)  # (..., d_hidden)
        if self.ctx is not None:
            if context is None:
                raise ValueError("this GRN was built with a context input; pass one")
            c = self.ctx(context)  # (B, d_hidden)
            h = h + c.view(
                c.shape[0], *([1] * (h.dim() - 2)), c.shape[-1]
            )  # (B, 1.., d_hidden) broadcast over time
        h = self.fc1(F.elu(h))  # (..., d_hidden)
        skip = a if self.skip is None else self.skip(a)  # (..., d_out)
        return self.gate(h, skip)


def _uniform_(t: torch.Tensor, fan_in: int) -> torch.Tensor:
    """nn.Linear's default init (U(-1/sqrt(fan_in), 1/sqrt(fan_in))), applied to a stacked weight."""
    bound = 1.0 / math.sqrt(fan_in)
    return nn.init.uniform_(t, -bound, bound)


class StackedGRN(nn.Module):
    """V independent GRNs of width H (no context, no projection), applied to (..., V, H) as one stacked weight.

    Equivalent to a Python loop of `GatedResidualNetwork(H, H, H)` over variables (see the tests), but each layer is a
    single einsum `...vi,vio->...vo` over the stacked (V, H_in, H_out) weight.
    """

    def __init__(self, n_vars: int, hidden: int, dropout: float) -> None:
        super().__init__()
        v, h = n_vars, hidden
        self.w2 = nn.Parameter(_uniform_(torch.empty(v, h, h), h))  # (V, H, H), stored as (in, out)
        self.b2 = nn.Parameter(_uniform_(torch.empty(v, h), h))  # (V, H)
        self.w1 = nn.Parameter(_uniform_(torch.empty(v, h, h), h))  # (V, H, H)
        self.b1 = nn.Parameter(_uniform_(torch.empty(v, h), h))  # (V, H)
        self.wg = nn.Parameter(_uniform_(torch.empty(v, h, 2 * h), h))  # (V, H, 2H): GLU value | gate
        self.bg = nn.Parameter(_uniform_(torch.empty(v, 2 * h), h))  # (V, 2H)
        self.ln_w = nn.Parameter(torch.ones(v, h))  # (V, H) per-variable LayerNorm affine
        self.ln_b = nn.Parameter(torch.zeros(v, h))  # (V, H)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.einsum("...vi,vio->...vo", x, self.w2) + self.b2  # (..., V, H)
        h = torch.einsum("...vi,vio->...vo", F.elu(h), self.w1) + self.b1  # (..., V, H)
        g = torch.einsum("...vi,vio->...vo", self.dropout(h), self.wg) + self.bg  # (..., V, 2H)
        y = F.layer_norm(x + F.glu(g, dim=-1), x.shape[-1:])  # (..., V, H), normalised per variable
        return y * self.ln_w + self.ln_b  # (..., V, H)


class CategoricalEmbedding(nn.Module):
    """Each categorical input gets its own embedding of width H, stored as one table with per-variable row offsets.

    Codes of variable j must lie in [0, cardinality_j); code 0 is the data layer's "unknown" and has its own row.
    """

    def __init__(self, cardinalities: tuple[int, ...], hidden: int) -> None:
        super().__init__()
        cards = [max(int(c), 1) for c in cardinalities]
        offsets = (
            torch.tensor([0, *cards[:-1]], dtype=torch.long).cumsum(0) if cards else torch.zeros(0).long()
        )
        self.register_buffer("offsets", offsets, persistent=False)  # (V,)
        self.n_vars = len(cards)
        self.hidden = hidden
        self.table = nn.Embedding(sum(cards), hidden) if cards else None

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        if self.table is None:
            return codes.new_zeros(*codes.shape, self.hidden, dtype=torch.get_default_dtype())  # (..., 0, H)
        return self.table(codes + self.offsets)  # (..., V) -> (..., V, H)


class ContinuousEmbedding(nn.Module):
    """Each continuous input gets its own linear map 1 -> H, done as one broadcast `x[..., None] * W + b`."""

    def __init__(self, n_vars: int, hidden: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(
            _uniform_(torch.empty(n_vars, hidden), 1)
        )  # (V, H), fan_in 1 like nn.Linear(1, H)
        self.bias = nn.Parameter(_uniform_(torch.empty(n_vars, hidden), 1))  # (V, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.unsqueeze(-1) * self.weight + self.bias  # (..., V) -> (..., V, H)


class VariableSelectionNetwork(nn.Module):
    """Soft selection over V transformed inputs: `v = Softmax(GRN_v(flatten(ξ), c))`, `out = Σ_j v_j GRN_j(ξ_j)`.

    Input (..., V, H), optional context (B, H); returns (output (..., H), weights (..., V)); the weights sum to one and
    are the variable importances. With V = 0 (e.g. no static inputs) the output is a learned constant vector and the
    weights have width 0, so the rest of the model needs no special cases.
    """

    def __init__(self, n_vars: int, hidden: int, dropout: float, context: bool) -> None:
        super().__init__()
        self.n_vars = n_vars
        if n_vars == 0:
            self.constant = nn.Parameter(torch.randn(hidden))  # (H,) like an embedding row
            return
        self.flat_grn = GatedResidualNetwork(
            n_vars * hidden, hidden, n_vars, dropout, hidden if context else None
        )
        self.var_grns = StackedGRN(n_vars, hidden, dropout)

    def forward(
        self, x: torch.Tensor, context: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        lead = x.shape[:-2]
        if self.n_vars == 0:
            return self.constant.expand(*lead, -1), x.new_zeros(*lead, 0)  # (..., H), (..., 0)
        weights = torch.softmax(self.flat_grn(x.flatten(-2), context), dim=-1)  # (..., V*H) -> (..., V)
        processed = self.var_grns(x)  # (..., V, H)
        out = torch.einsum("...v,...vh->...h", weights, processed)  # (..., H)
        return out, weights
