"""Building blocks: shapes, gating, residual + LayerNorm, stacked per-variable GRNs against a naive loop."""

from __future__ import annotations

import torch
from torch import nn

from foxhunt.model.layers import (
    GLU,
    CategoricalEmbedding,
    ContinuousEmbedding,
    Dropout,
    GateAddNorm,
    GatedResidualNetwork,
    StackedGRN,
)
from foxhunt.model.selection import VariableSelectionNetwork, merge
from foxhunt.model.tft import count_parameters


def test_glu_shape_and_gate_saturation() -> None:
    torch.manual_seed(0)
    glu = GLU(4, 3)
    x = torch.randn(2, 5, 4)
    assert glu(x).shape == (2, 5, 3)
    value = nn.functional.linear(x, glu.fc.weight[:3], glu.fc.bias[:3])  # (2, 5, 3)
    with torch.no_grad():
        glu.fc.weight[3:].zero_()
        glu.fc.bias[3:].fill_(-100.0)  # gate σ(-100) ≈ 0: the block is switched off
    assert torch.allclose(glu(x), torch.zeros(2, 5, 3), atol=1e-30)
    with torch.no_grad():
        glu.fc.bias[3:].fill_(100.0)  # gate ≈ 1: the value passes through unchanged
    assert torch.allclose(glu(x), value, atol=1e-6)


def test_gate_add_norm_off_gate_is_layernorm_of_skip() -> None:
    torch.manual_seed(0)
    gan = GateAddNorm(6, 6, dropout=0.0)
    with torch.no_grad():
        gan.glu.fc.bias[6:].fill_(-100.0)
        gan.glu.fc.weight[6:].zero_()
    x, skip = torch.randn(3, 6), torch.randn(3, 6)
    assert torch.allclose(gan(x, skip), nn.functional.layer_norm(skip, (6,)), atol=1e-6)


def test_grn_shapes_context_and_residual() -> None:
    torch.manual_seed(0)
    grn = GatedResidualNetwork(4, 8, 8, dropout=0.1, d_context=8).eval()
    a, c = torch.randn(2, 5, 4), torch.randn(2, 8)
    out = grn(a, c)
    assert out.shape == (2, 5, 8)
    # LayerNorm with its initial affine (1, 0): every output row has mean 0 and variance 1.
    assert torch.allclose(out.mean(-1), torch.zeros(2, 5), atol=1e-5)
    assert torch.allclose(out.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-3)
    # The context is broadcast over time: same as passing it per time step.
    per_step = torch.stack([grn(a[:, i], c) for i in range(5)], dim=1)
    assert torch.allclose(out, per_step, atol=1e-6)
    assert not torch.allclose(out, grn(a, c + 1.0))
    # Gate switched off: the GRN reduces to LayerNorm of the projected residual.
    with torch.no_grad():
        grn.gate.glu.fc.weight[8:].zero_()
        grn.gate.glu.fc.bias[8:].fill_(-100.0)
    assert torch.allclose(grn(a, c), nn.functional.layer_norm(grn.skip(a), (8,)), atol=1e-5)


def test_grn_same_width_has_identity_residual() -> None:
    torch.manual_seed(0)
    grn = GatedResidualNetwork(5, 7, 5, dropout=0.0).eval()
    assert grn.skip is None
    with torch.no_grad():
        grn.gate.glu.fc.weight[5:].zero_()
        grn.gate.glu.fc.bias[5:].fill_(-100.0)
    a = torch.randn(3, 5)
    assert torch.allclose(grn(a), nn.functional.layer_norm(a, (5,)), atol=1e-5)


def _grn_from_stack(stack: StackedGRN, v: int, h: int) -> GatedResidualNetwork:
    """Variable v's slice of the stacked weights, loaded into an ordinary GRN (the naive reference)."""
    grn = GatedResidualNetwork(h, h, h, dropout=0.0)
    with torch.no_grad():
        grn.fc2.weight.copy_(stack.w2[v].T)
        grn.fc2.bias.copy_(stack.b2[v])
        grn.fc1.weight.copy_(stack.w1[v].T)
        grn.fc1.bias.copy_(stack.b1[v])
        grn.gate.glu.fc.weight.copy_(stack.wg[v].T)
        grn.gate.glu.fc.bias.copy_(stack.bg[v])
        grn.gate.norm.weight.copy_(stack.ln_w[v])
        grn.gate.norm.bias.copy_(stack.ln_b[v])
    return grn.eval()


def test_stacked_grn_equals_per_variable_loop() -> None:
    torch.manual_seed(0)
    v, h = 3, 6
    stack = StackedGRN(v, h, dropout=0.2).eval()
    with torch.no_grad():  # non-trivial LayerNorm affine so that part is checked too
        stack.ln_w.normal_()
        stack.ln_b.normal_()
    x = torch.randn(2, 4, v, h)  # (B, T, V, H)
    naive = torch.stack([_grn_from_stack(stack, j, h)(x[:, :, j]) for j in range(v)], dim=2)
    assert stack(x).shape == (2, 4, v, h)
    assert torch.allclose(stack(x), naive, atol=1e-6)


def test_categorical_embedding_uses_one_table_per_variable_rows() -> None:
    torch.manual_seed(0)
    emb = CategoricalEmbedding((3, 5), 4)
    assert emb.table.num_embeddings == 8
    codes = torch.tensor([[[0, 0], [2, 4]]])  # (B=1, T=2, V=2); code 0 of each variable is its own row
    out = emb(codes)  # (1, 2, 2, 4)
    assert out.shape == (1, 2, 2, 4)
    w = emb.table.weight
    assert torch.equal(out[0, 0, 0], w[0]) and torch.equal(out[0, 0, 1], w[3])
    assert torch.equal(out[0, 1, 0], w[2]) and torch.equal(out[0, 1, 1], w[7])
    assert CategoricalEmbedding((), 4)(torch.zeros(2, 5, 0, dtype=torch.long)).shape == (2, 5, 0, 4)


def test_continuous_embedding_equals_per_variable_linear() -> None:
    torch.manual_seed(0)
    emb = ContinuousEmbedding(3, 4)
    x = torch.randn(2, 5, 3)
    out = emb(x)
    assert out.shape == (2, 5, 3, 4)
    for j in range(3):  # test-only reference loop
        lin = nn.Linear(1, 4)
        with torch.no_grad():
            lin.weight.copy_(emb.weight[j].unsqueeze(1))
            lin.bias.copy_(emb.bias[j])
        assert torch.allclose(out[:, :, j], lin(x[:, :, j : j + 1]), atol=1e-6)
    assert ContinuousEmbedding(0, 4)(torch.zeros(2, 0)).shape == (2, 0, 4)


def test_vsn_weights_sum_to_one_and_match_naive_loop() -> None:
    torch.manual_seed(0)
    v, h = 4, 6
    vsn = VariableSelectionNetwork(v, h, dropout=0.1, context=True).eval()
    x, c = torch.randn(3, 5, v, h), torch.randn(3, h)
    out, w = vsn(x, c)
    assert out.shape == (3, 5, h) and w.shape == (3, 5, v)
    assert torch.allclose(w.sum(-1), torch.ones(3, 5), atol=1e-6)
    assert (w > 0).all()
    naive_w = torch.softmax(vsn.flat_grn(x.reshape(3, 5, v * h), c), dim=-1)
    naive = sum(naive_w[..., j : j + 1] * _grn_from_stack(vsn.var_grns, j, h)(x[:, :, j]) for j in range(v))
    assert torch.allclose(out, naive, atol=1e-6)


def test_vsn_without_context_and_without_variables() -> None:
    torch.manual_seed(0)
    static = VariableSelectionNetwork(2, 5, dropout=0.0, context=False)
    out, w = static(torch.randn(3, 2, 5))
    assert out.shape == (3, 5) and torch.allclose(w.sum(-1), torch.ones(3))
    empty = VariableSelectionNetwork(0, 5, dropout=0.0, context=True)
    out, w = empty(torch.zeros(3, 4, 0, 5), torch.randn(3, 5))
    assert out.shape == (3, 4, 5) and w.shape == (3, 4, 0)
    assert torch.equal(out[1, 2], empty.constant)  # a learned constant, the same for every sample and step


def test_count_parameters_by_hand() -> None:
    # GRN(d_in 4, hidden 8, out 8, context 8): skip 4*8+8, W2 4*8+8, W3 8*8, W1 8*8+8, GLU 8*16+16, LayerNorm 2*8
    grn = GatedResidualNetwork(4, 8, 8, dropout=0.0, d_context=8)
    assert count_parameters(grn) == 40 + 40 + 64 + 72 + 144 + 16 == 376
    # StackedGRN(V=2, H=3): W2 2*9 + b2 2*3, W1 18 + 6, GLU 2*3*6 + 2*6, LayerNorm 2*2*3
    assert count_parameters(StackedGRN(2, 3, dropout=0.0)) == 24 + 24 + 48 + 12 == 108
    shared = nn.Linear(2, 2)  # 6 parameters, registered twice, counted once; frozen ones are not counted
    frozen = nn.Linear(3, 1).requires_grad_(False)
    assert count_parameters(nn.ModuleList([shared, shared, frozen])) == 6


def test_vsn_per_bar_terms_equal_the_textbook_selection() -> None:
    """Per-bar terms (continuous inputs folded into their first layers, categorical ones embedded) gathered into
    windows, plus per-position terms, equal `forward` on the embedded inputs of every (window, position)."""
    torch.manual_seed(0)
    h, n_rows, b, length = 6, 9, 4, 5
    vsn = VariableSelectionNetwork(4, h, dropout=0.0, context=True).eval()
    emb = ContinuousEmbedding(2, h)  # variables 0 and 3: per-bar scalars
    cat = CategoricalEmbedding((5,), h)  # variable 1: a per-bar code
    pos_emb = ContinuousEmbedding(1, h)  # variable 2: fixed by the position in the window
    x = torch.randn(n_rows, 2)  # (N, 2)
    codes = torch.randint(0, 5, (n_rows, 1))  # (N, 1)
    pos = torch.randn(length, 1)  # (L, 1)
    index = torch.randint(0, n_rows, (b, length))  # (B, L): windows share rows
    c = torch.randn(b, h)
    cont_vars, cat_vars, pos_vars = torch.tensor([0, 3]), torch.tensor([1]), torch.tensor([2])
    rows = merge([vsn.categorical_terms(cat(codes), cat_vars),
                  vsn.continuous_terms(x, cont_vars, emb.weight, emb.bias)])
    positions = merge([vsn.continuous_terms(pos, pos_vars, pos_emb.weight, pos_emb.bias)])
    out, w = vsn.select(rows, index, positions, c)
    xi = torch.stack(
        [emb(x)[:, 0], cat(codes)[:, 0], torch.zeros(n_rows, h), emb(x)[:, 1]], dim=1
    )[index]  # (B, L, 4, H) with the positional variable filled in below
    xi[:, :, 2] = pos_emb(pos)[:, 0]
    want, want_w = vsn(xi, c)
    torch.testing.assert_close(w, want_w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)


def test_vsn_with_one_variable_has_weight_one_and_no_selection_grn() -> None:
    vsn = VariableSelectionNetwork(1, 4, dropout=0.0, context=True)
    assert not hasattr(vsn, "flat_grn")  # softmax over one input is 1 whatever it sees
    x = torch.randn(3, 2, 1, 4)
    out, w = vsn(x, torch.randn(3, 4))
    assert torch.equal(w, torch.ones(3, 2, 1))
    torch.testing.assert_close(out, vsn.var_grns(x)[..., 0, :])


def test_dropout_keeps_with_probability_one_minus_p_and_rescales() -> None:
    torch.manual_seed(0)
    drop = Dropout(0.25)
    x = torch.ones(200, 500)
    y = drop(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.005  # 100,000 draws: sd of the mean 0.0014
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.75))  # kept values scaled so E[y] = x
    x.requires_grad_(True)
    torch.manual_seed(1)
    drop(x).sum().backward()
    assert torch.isin(x.grad, torch.tensor([0.0, 1 / 0.75])).all()  # the gradient uses the same mask
    drop.eval()
    assert torch.equal(drop(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)
