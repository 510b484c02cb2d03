"""TFT building blocks (Lim et al. 2021, section 4): dropout, GLU, gated residual networks, input embeddings.

Everything here is batched over variables: the per-variable GRNs of a variable-selection network (selection.py) are
one stacked weight and one `einsum`, categorical inputs share one embedding table (with offsets), and continuous inputs
are embedded with one broadcast multiply-add. Legend: B batch, T time, V variables, H hidden, C context width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class Dropout(nn.Dropout):
    """Dropout with the keep-mask drawn as `uniform >= p` instead of by `bernoulli_`: the same distribution (keep
    with probability 1 - p, scale kept values by 1 / (1 - p)), but CPU `bernoulli_` runs on one thread and was the
    largest single cost of a training step; this is faster forward and backward (benchmarks/RESULTS.md).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.p == 1.0:
            return x * 0.0
        keep = torch.rand(x.shape, device=x.device) >= self.p  # fp32 uniforms whatever x's dtype
        return x * keep.to(x.dtype).mul_(1.0 / (1.0 - self.p))


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
        self.dropout = Dropout(dropout)
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
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.einsum("...vi,vio->...vo", x, self.w2) + self.b2  # (..., V, H)
        return self.from_first_layer(x, h)

    def from_first_layer(self, x: torch.Tensor, h: torch.Tensor, var: torch.Tensor | None = None) -> torch.Tensor:
        """The GRNs after their first layer: x (..., V', H) the inputs (the residual), h = x W2 + b2 (..., V', H).

        `var` (V',) picks which of the V stacked GRNs the V' inputs belong to (None: all, in order). Callers that
        know a cheaper way to get `h` than the einsum (a continuous input is a scalar times a vector, so its first
        layer is rank one: see `VariableSelectionNetwork.continuous_terms`) enter here.
        """
        pick = (lambda t: t) if var is None else (lambda t: t.index_select(0, var))  # noqa: E731
        h = torch.einsum("...vi,vio->...vo", F.elu(h), pick(self.w1)) + pick(self.b1)  # (..., V', H)
        g = torch.einsum("...vi,vio->...vo", self.dropout(h), pick(self.wg)) + pick(self.bg)  # (..., V', 2H)
        y = F.layer_norm(x + F.glu(g, dim=-1), x.shape[-1:])  # (..., V', H), normalised per variable
        return y * pick(self.ln_w) + pick(self.ln_b)  # (..., V', H)


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


