"""Interpretable multi-head attention (Lim et al. 2021, section 4.4), with queries only where outputs are needed.

Per head h: `A_h = Softmax(Q W_Q^(h) (K W_K^(h))ᵀ / sqrt(d_attn) + causal mask)`; one value projection `V W_V` shared by
all heads, so the head-averaged `A = mean_h A_h` is exactly the attention the output used (the interpretability claim).
Output `H̃ W_H` with `H̃ = mean_h A_h V W_V`.

Legend: B batch, N heads, L query positions, T key positions, K = d_attn = H / N per-head width.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from foxhunt.errors import InputError
from foxhunt.model.config import heads_fit
from foxhunt.model.layers import Dropout


class InterpretableMultiHeadAttention(nn.Module):
    """Causal self-attention whose queries are the last L of T positions (L = D in the model, L = T in audits).

    All heads' Q and K projections and the shared V projection live in ONE fused weight `qkv` of shape
    ((2N + 1) K, H); queries are projected only at the query positions and keys/values at all positions, by slicing that
    weight (a view), so no work is done for queries whose outputs are thrown away.

    Dropout follows the reference implementation (google-research/tft): on the attention weights, on each head's output,
    and on the projected output.
    """

    def __init__(self, hidden: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        if not heads_fit(hidden, n_heads):
            raise InputError(
                f"--hidden-size {hidden} is not divisible by --attention-heads {n_heads}; pick sizes where it is"
            )
        self.n_heads = n_heads
        self.d_head = hidden // n_heads
        self.qkv = nn.Linear(hidden, (2 * n_heads + 1) * self.d_head)  # [Q heads | K heads | shared V]
        self.out = nn.Linear(self.d_head, hidden)  # W_H
        self.attn_dropout = Dropout(dropout)
        self.head_dropout = Dropout(dropout)
        self.out_dropout = Dropout(dropout)

    def forward(
        self, x: torch.Tensor, query_start: int, return_attention: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (B, T, H) all positions. Queries are positions query_start..T-1, each attending to positions <= itself.

        Returns the output at the query positions (B, L, H), L = T - query_start, and, when asked, the head-averaged
        attention (B, L, T) before dropout (zero above the causal diagonal, rows summing to one).
        """
        b, t, _ = x.shape
        n, k = self.n_heads, self.d_head
        nk = n * k
        q = nn.functional.linear(x[:, query_start:], self.qkv.weight[:nk], self.qkv.bias[:nk])  # (B, L, N*K)
        kv = nn.functional.linear(x, self.qkv.weight[nk:], self.qkv.bias[nk:])  # (B, T, N*K + K)
        keys, v = kv.split([nk, k], dim=-1)  # (B, T, N*K), (B, T, K)
        q = q.view(b, -1, n, k)  # (B, L, N, K)
        keys = keys.view(b, t, n, k)  # (B, T, N, K)
        scores = torch.einsum("blnk,btnk->bnlt", q, keys) / math.sqrt(k)  # (B, N, L, T)
        # Query i sits at absolute position query_start + i and may see keys t <= query_start + i.
        qpos = torch.arange(query_start, t, device=x.device).unsqueeze(1)  # (L, 1)
        future = torch.arange(t, device=x.device).unsqueeze(0) > qpos  # (L, T) True where masked
        scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)  # (B, N, L, T)
        probs = torch.softmax(scores, dim=-1)  # (B, N, L, T)
        attention = probs.mean(dim=1) if return_attention else None  # (B, L, T)
        heads = torch.einsum(
            "bnlt,btk->bnlk", self.attn_dropout(probs), v
        )  # (B, N, L, K), V shared by all heads
        mixed = self.head_dropout(heads).mean(dim=1)  # (B, L, K): H̃ = mean_h A_h V W_V
        return self.out_dropout(self.out(mixed)), attention  # (B, L, H)
