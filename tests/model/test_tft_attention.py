"""Interpretable multi-head attention against a naive per-head reference; causal mask; half precision."""

from __future__ import annotations

import math

import pytest
import torch

from foxhunt.errors import InputError
from foxhunt.model.attention import InterpretableMultiHeadAttention


def naive_attention(attn: InterpretableMultiHeadAttention, x: torch.Tensor, query_start: int) -> tuple:
    """The paper's equations head by head (test-only loop): A_h, shared V W_V, H̃ = mean_h A_h V W_V, output H̃ W_H."""
    n, k = attn.n_heads, attn.d_head
    w, b = attn.qkv.weight, attn.qkv.bias
    t = x.shape[1]
    v = x @ w[2 * n * k :].T + b[2 * n * k :]  # (B, T, K) shared value
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)[
        query_start:
    ]  # (L, T) True above diagonal
    heads, probs = [], []
    for h in range(n):
        wq, bq = w[h * k : (h + 1) * k], b[h * k : (h + 1) * k]
        wk, bk = w[(n + h) * k : (n + h + 1) * k], b[(n + h) * k : (n + h + 1) * k]
        q = x[:, query_start:] @ wq.T + bq  # (B, L, K)
        key = x @ wk.T + bk  # (B, T, K)
        a = torch.softmax((q @ key.transpose(1, 2) / math.sqrt(k)).masked_fill(mask, -math.inf), dim=-1)
        probs.append(a)
        heads.append(a @ v)
    mixed = torch.stack(heads).mean(0)  # (B, L, K)
    return attn.out(mixed), torch.stack(probs).mean(0)


@pytest.mark.parametrize("query_start", [0, 5])
def test_matches_naive_per_head_reference(query_start: int) -> None:
    torch.manual_seed(0)
    attn = InterpretableMultiHeadAttention(12, 3, dropout=0.3).eval()
    x = torch.randn(2, 8, 12)
    out, a = attn(x, query_start, return_attention=True)
    ref_out, ref_a = naive_attention(attn, x, query_start)
    assert out.shape == (2, 8 - query_start, 12) and a.shape == (2, 8 - query_start, 8)
    assert torch.allclose(out, ref_out, atol=1e-6)
    assert torch.allclose(a, ref_a, atol=1e-6)


def test_weights_sum_to_one_and_vanish_above_causal_diagonal() -> None:
    torch.manual_seed(0)
    attn = InterpretableMultiHeadAttention(8, 2, dropout=0.0)
    e, t = 6, 9
    _, a = attn(torch.randn(4, t, 8), e, return_attention=True)  # queries at positions 6, 7, 8
    assert torch.allclose(a.sum(-1), torch.ones(4, t - e), atol=1e-6)
    for i in range(t - e):
        assert (a[:, i, e + i + 1 :] == 0).all()
        assert (a[:, i, : e + i + 1] > 0).all()
    _, none = attn(torch.randn(4, t, 8), e)
    assert none is None  # nothing computed for interpretation unless asked


def test_no_look_ahead_inside_attention() -> None:
    torch.manual_seed(0)
    attn = InterpretableMultiHeadAttention(8, 4, dropout=0.0)
    x = torch.randn(2, 7, 8)
    base, _ = attn(x, 0)
    for t in range(7):
        y = x.clone()
        y[:, t] += 5.0
        out, _ = attn(y, 0)
        assert torch.equal(out[:, :t], base[:, :t])  # bit-identical before t
        assert not torch.allclose(out[:, t], base[:, t])


def test_bfloat16_mask_is_safe() -> None:
    torch.manual_seed(0)
    attn = InterpretableMultiHeadAttention(8, 2, dropout=0.0).to(torch.bfloat16)
    out, a = attn(torch.randn(2, 6, 8, dtype=torch.bfloat16) * 50, 3, return_attention=True)
    assert torch.isfinite(out).all() and torch.isfinite(a).all()
    assert (a[:, 0, 4:] == 0).all()


def test_hidden_must_divide_by_heads() -> None:
    with pytest.raises(InputError, match="--attention-heads"):
        InterpretableMultiHeadAttention(10, 4, dropout=0.0)
