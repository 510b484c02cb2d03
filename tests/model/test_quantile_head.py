"""The quantile heads: the tied head against hand-computed quantiles, its order for any input, its starting spread, and
the option that selects it (a model saved before the option reads as independent)."""

from __future__ import annotations

import math
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from foxhunt.errors import InputError
from foxhunt.model.config import ModelConfig
from foxhunt.model.quantile_head import TiedQuantiles, centre_index, quantile_head

LN2 = math.log(2.0)  # softplus(0)
ONE = math.log(math.e - 1.0)  # softplus(ONE) = 1


def test_tied_head_with_hand_set_weights_gives_hand_computed_quantiles() -> None:
    """Quantiles 0.1, 0.25, 0.5, 0.9 (centre 0.5, index 2) at x = (1, 2): z = W x + b = (ONE, 0, 1.75, 0), so
    q(0.5) = 1.75, q(0.9) = 1.75 + softplus(0), q(0.25) = 1.75 - softplus(0), q(0.1) = q(0.25) - softplus(ONE)."""
    head = TiedQuantiles(2, (0.1, 0.25, 0.5, 0.9))
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.5, 0.5], [0.0, 1.0]]))
        head.bias.copy_(torch.tensor([ONE - 1.0, 0.0, 0.25, -2.0]))
    got = head(torch.tensor([[[1.0, 2.0]]]))  # (B, D, H) = (1, 1, 2) -> (1, 1, Q)
    want = torch.tensor([[[1.75 - LN2 - 1.0, 1.75 - LN2, 1.75, 1.75 + LN2]]])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_independent_head_is_the_plain_linear_map() -> None:
    head = quantile_head(4, (0.1, 0.5, 0.9), "independent")
    assert type(head) is nn.Linear and head.out_features == 3


@pytest.mark.parametrize(("quantiles", "centre"), [((0.1, 0.5, 0.9), 1), ((0.5,), 0), ((0.1, 0.9), 0),
                                                   ((0.02, 0.1, 0.3, 0.45, 0.7), 3), ((0.6, 0.8, 0.99), 0)])
def test_the_centre_is_the_quantile_nearest_a_half(quantiles: tuple[float, ...], centre: int) -> None:
    assert centre_index(quantiles) == centre


@pytest.mark.parametrize("quantiles", [(0.1, 0.5, 0.9), (0.05, 0.1, 0.5, 0.9, 0.95), (0.1, 0.9), (0.3,)])
def test_untrained_tied_head_starts_at_the_standard_normals_quantiles(quantiles: tuple[float, ...]) -> None:
    """With zero input (the bias alone) the head gives Φ⁻¹(q): 0 and ±1.2816 for the default quantiles."""
    head = TiedQuantiles(8, quantiles)
    normal = torch.distributions.Normal(0.0, 1.0)
    want = normal.icdf(torch.tensor(quantiles))
    torch.testing.assert_close(head(torch.zeros(3, 8)), want.expand(3, -1), rtol=0, atol=1e-5)


quantile_sets = st.lists(st.integers(1, 999), min_size=1, max_size=9, unique=True).map(
    lambda xs: tuple(x / 1000 for x in sorted(xs)))


@settings(max_examples=60, deadline=None)
@given(quantiles=quantile_sets, seed=st.integers(0, 2**31 - 1), scale=st.sampled_from([1e-3, 1.0, 30.0, 1e4]),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_tied_quantiles_never_cross(quantiles: tuple[float, ...], seed: int, scale: float,
                                    dtype: torch.dtype) -> None:
    """For any sorted quantile set, any weights and any input (gaps that underflow to 0 and centres of 1e4 and more
    included), each quantile is at least the one below it, exactly: no rounding crosses them."""
    gen = torch.Generator().manual_seed(seed)
    head = TiedQuantiles(5, quantiles).to(dtype)
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=gen, dtype=dtype) * scale)
        head.bias.copy_(torch.randn(head.bias.shape, generator=gen, dtype=dtype) * scale)
    q = head(torch.randn(64, 3, 5, generator=gen, dtype=dtype) * scale)  # (B, D, Q)
    assert q.shape == (64, 3, len(quantiles)) and torch.isfinite(q).all()
    assert (q.diff(dim=-1) >= 0).all()


def test_model_config_reads_a_model_saved_before_the_option_as_independent() -> None:
    saved = ModelConfig(quantile_head="tied").to_dict()
    assert ModelConfig.from_dict(saved).quantile_head == "tied"
    del saved["quantile_head"]
    assert ModelConfig.from_dict(saved).quantile_head == "independent"


def test_an_unknown_head_is_a_one_line_error() -> None:
    with pytest.raises(InputError, match=re.escape("--quantile-head must be one of independent | tied, got 'sorted'")):
        ModelConfig(quantile_head="sorted")
