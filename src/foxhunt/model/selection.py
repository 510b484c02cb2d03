"""Variable selection networks (Lim et al. 2021, section 4.2), with the per-variable work done once per bar.

`v = Softmax(GRN_v(flatten(ξ), c))` and `out = Σ_j v_j GRN_j(ξ_j)`. Two facts make most of this per bar, not per
(window, position):

- `GRN_j(ξ_j)` has no context: it depends on one input at one bar. Windows that share a bar share it, so it is
  computed once per distinct bar (`Terms.processed`) and gathered into windows.
- The first layers of the selection GRN (`fc2` and the residual projection `skip`) are linear in `flatten(ξ)`, so
  they split into a sum of per-variable terms, each again per bar (`Terms.pre`, `Terms.skip`). Only what follows the
  context (ELU, fc1, the gate, LayerNorm, softmax) is per (window, position), at width H, not V x H.

A continuous input is a scalar embedded linearly, `ξ_j = x_j w_j + b_j`, so any linear map of `ξ_j` is
`x_j (W w_j) + W b_j`: the first layer of its GRN and its share of `fc2`/`skip` fold into the embedding
(`continuous_terms`), exactly, at the cost of an H-vector instead of an H x H product per bar.

Inputs fixed by the position in the window (the relative time index) are the same for every window: their terms are
computed once per position. The result equals the textbook computation to float rounding (tests/model).

Legend: B batch, L positions per window, N rows (distinct bars or positions), V variables of this network, V' the
variables of one group, H hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from foxhunt.model.layers import GatedResidualNetwork, StackedGRN


@dataclass
class Terms:
    """One group of inputs (V' variables of the network) over N rows: what each contributes, before the context."""

    var: torch.Tensor  # (V',) int64: which of the network's variables these are
    processed: torch.Tensor  # (N, V', H) GRN_j(ξ_j)
    pre: torch.Tensor | None  # (N, H) the group's share of fc2(flatten ξ), no bias; None when V == 1
    skip: torch.Tensor | None  # (N, V) its share of the residual projection, no bias; None when V == 1


def merge(groups: list[Terms]) -> Terms | None:
    """Groups over the same rows as one (variables concatenated, linear shares summed); None for no groups."""
    groups = [g for g in groups if g.var.numel()]
    if not groups:
        return None
    if len(groups) == 1:
        return groups[0]
    pre = None if groups[0].pre is None else sum(g.pre for g in groups)  # type: ignore[misc]
    skip = None if groups[0].skip is None else sum(g.skip for g in groups)  # type: ignore[misc]
    return Terms(torch.cat([g.var for g in groups]), torch.cat([g.processed for g in groups], dim=1), pre, skip)


class VariableSelectionNetwork(nn.Module):
    """Soft selection over V transformed inputs; returns (output (..., H), weights (..., V)).

    The weights sum to one and are the variable importances. With V = 0 (e.g. no static inputs) the output is a
    learned constant and the weights have width 0; with V = 1 the weight is exactly 1, so there is no selection GRN.
    `forward` takes the embedded inputs of every (window, position); `continuous_terms`, `categorical_terms` and
    `select` do the same per distinct bar and position (see the module docstring).
    """

    def __init__(self, n_vars: int, hidden: int, dropout: float, context: bool) -> None:
        super().__init__()
        self.n_vars, self.hidden = n_vars, hidden
        if n_vars == 0:
            self.constant = nn.Parameter(torch.randn(hidden))  # (H,) like an embedding row
            return
        if n_vars > 1:
            self.flat_grn = GatedResidualNetwork(n_vars * hidden, hidden, n_vars, dropout, hidden if context else None)
        self.var_grns = StackedGRN(n_vars, hidden, dropout)

    # -- per (window, position) --------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., V, H) embedded inputs, context (B, H) -> output (..., H), weights (..., V)."""
        lead = x.shape[:-2]
        if self.n_vars == 0:
            return self.constant.expand(*lead, -1), x.new_zeros(*lead, 0)  # (..., H), (..., 0)
        processed = self.var_grns(x)  # (..., V, H)
        if self.n_vars == 1:
            return processed[..., 0, :], x.new_ones(*lead, 1)
        weights = torch.softmax(self.flat_grn(x.flatten(-2), context), dim=-1)  # (..., V*H) -> (..., V)
        return torch.einsum("...v,...vh->...h", weights, processed), weights  # (..., H)

    # -- per distinct bar or position ------------------------------------------------------------------------------
    def _blocks(self, var: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | tuple[None, None]:
        """fc2 and skip weights split by input variable: (H, V', H) and (V, V', H), in (out, var, in) order."""
        if self.n_vars == 1:
            return None, None
        h, v = self.hidden, self.n_vars
        fc2 = self.flat_grn.fc2.weight.view(h, v, h).index_select(1, var)  # (H, V', H)
        skip = self.flat_grn.skip.weight.view(v, v, h).index_select(1, var)  # (V, V', H)
        return fc2, skip

    def continuous_terms(
        self, x: torch.Tensor, var: torch.Tensor, emb_w: torch.Tensor, emb_b: torch.Tensor
    ) -> Terms:
        """Terms of continuous inputs x (N, V') embedded as x * emb_w + emb_b (emb_* (V', H)), folded (exact)."""
        if var.numel() == 0:
            return Terms(var, x.new_zeros(x.shape[0], 0, self.hidden), None, None)  # dropped by `merge`
        stack = self.var_grns
        w2 = stack.w2.index_select(0, var)  # (V', H, H)
        u = torch.einsum("vi,vio->vo", emb_w, w2)  # (V', H): the first layer's slope in x
        c = torch.einsum("vi,vio->vo", emb_b, w2) + stack.b2.index_select(0, var)  # (V', H)
        xs = x.unsqueeze(-1)  # (N, V', 1)
        processed = stack.from_first_layer(xs * emb_w + emb_b, xs * u + c, var)  # (N, V', H)
        fc2, skip = self._blocks(var)
        if fc2 is None:
            return Terms(var, processed, None, None)
        pre = x @ torch.einsum("ovi,vi->vo", fc2, emb_w) + torch.einsum("ovi,vi->o", fc2, emb_b)  # (N, H)
        res = x @ torch.einsum("ovi,vi->vo", skip, emb_w) + torch.einsum("ovi,vi->o", skip, emb_b)  # (N, V)
        return Terms(var, processed, pre, res)

    def categorical_terms(self, xi: torch.Tensor, var: torch.Tensor) -> Terms:
        """Terms of embedded categorical inputs xi (N, V', H)."""
        if var.numel() == 0:
            return Terms(var, xi, None, None)  # dropped by `merge`
        stack = self.var_grns
        h2 = torch.einsum("nvi,vio->nvo", xi, stack.w2.index_select(0, var)) + stack.b2.index_select(0, var)
        processed = stack.from_first_layer(xi, h2, var)  # (N, V', H)
        fc2, skip = self._blocks(var)
        if fc2 is None:
            return Terms(var, processed, None, None)
        return Terms(var, processed, torch.einsum("nvi,ovi->no", xi, fc2), torch.einsum("nvi,ovi->no", xi, skip))

    def select(
        self,
        rows: Terms | None,
        index: torch.Tensor,  # (B, L) int64 into the rows of `rows`
        positions: Terms | None,  # over the L positions of every window
        context: torch.Tensor | None,  # (B, H)
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-bar terms gathered into windows, plus per-position terms, combined: output (B, L, H), weights (B, L, V)."""
        b, length = index.shape
        if self.n_vars == 0:
            return self.constant.expand(b, length, -1), self.constant.new_zeros(b, length, 0)
        if self.n_vars == 1:
            single = (F.embedding(index, rows.processed.flatten(1)).unflatten(-1, rows.processed.shape[1:])
                      if rows is not None else positions.processed.unsqueeze(0))  # type: ignore[union-attr]
            return single[..., 0, :].expand(b, length, -1), single.new_ones(b, length, 1)  # (B, L, H), (B, L, 1)
        grn = self.flat_grn
        pre, skip = grn.fc2.bias, grn.skip.bias  # (H,), (V,)
        if rows is not None:
            pre = F.embedding(index, rows.pre) + pre  # (B, L, H): a row gather
            skip = F.embedding(index, rows.skip) + skip  # (B, L, V)
        if positions is not None:
            pre, skip = positions.pre + pre, positions.skip + skip  # broadcast over B
        if grn.ctx is not None:
            pre = pre + grn.ctx(context).unsqueeze(1)  # (B, L, H) + (B, 1, H)
        h = grn.fc1(F.elu(pre))  # (B, L, H)
        weights = torch.softmax(grn.gate(h, skip), dim=-1)  # (B, L, V)
        out = None
        if rows is not None:
            # Σ_v w_v GRN_v(ξ_v) over gathered bars, as one weighted embedding bag per (window, position): the
            # gather, the weighting and the sum in one fused kernel, without materialising the (B, L, V', H)
            # gathered tensor (far faster than gather-multiply-sum on CPU: benchmarks/RESULTS.md).
            nv = rows.var.numel()
            table = rows.processed.reshape(-1, rows.processed.shape[-1])  # (N * V', H)
            bags = (index.reshape(-1, 1) * nv + torch.arange(nv, device=index.device))  # (B * L, V')
            w = weights.index_select(-1, rows.var).reshape(-1, nv).to(table.dtype)  # (B * L, V')
            out = F.embedding_bag(bags, table, per_sample_weights=w, mode="sum").view(b, length, -1)  # (B, L, H)
        if positions is not None:
            w = weights.index_select(-1, positions.var).unsqueeze(-1)  # (B, L, P, 1)
            term = (w * positions.processed).sum(-2)  # (B, L, P, H) -> (B, L, H)
            out = term if out is None else out + term
        return out, weights
