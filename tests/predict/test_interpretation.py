"""Interpretation accumulator: means over samples and time, and attention re-indexed by lag, checked by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.predict.interpretation import InterpretationAccumulator

# E = 2 encoder steps, D = 2 forecast steps, T = 4. attention[b, d, p]; step d sits at position E + d = 2 + d.
ATTN = np.array(
    [
        [[0.2, 0.3, 0.5, 0.0], [0.1, 0.2, 0.3, 0.4]],
        [[0.4, 0.1, 0.5, 0.0], [0.0, 0.4, 0.2, 0.4]],
    ]
)  # mean over samples: step 1 [0.3 0.2 0.5 0], step 2 [0.05 0.3 0.25 0.4]
STATIC = np.array([[0.2, 0.8], [0.6, 0.4]])
ENC = np.array([[[1.0, 0.0], [0.5, 0.5]], [[0.0, 1.0], [0.5, 0.5]]])  # (B, E, Ve)


def _acc():
    return InterpretationAccumulator(["id", "root"], ["ret", "hour"], [], encoder_length=2, horizon=2)


def test_means_and_lags_by_hand():
    acc = _acc()
    acc.update(STATIC[:1], ENC[:1], None, ATTN[:1])
    acc.update(
        torch.tensor(STATIC[1:]), torch.tensor(ENC[1:]), None, torch.tensor(ATTN[1:], dtype=torch.float16)
    )
    r = acc.result()
    assert r["static"] == pytest.approx({"id": 0.4, "root": 0.6})
    assert r["encoder"] == pytest.approx({"ret": 0.5, "hour": 0.5})
    assert r["decoder"] == {}
    assert r["n"] == 2 and r["encoder_length"] == 2 and r["horizon"] == 2
    lag1, lag2 = r["attention_by_lag"]
    # step 1 (position 2): lag 0 -> position 2, lag 1 -> position 1, lag 2 -> position 0
    assert lag1 == pytest.approx([0.5, 0.2, 0.3], abs=1e-3)  # float16 input: 3 digits
    # step 2 (position 3): lags 0..3 -> positions 3, 2, 1, 0
    assert lag2 == pytest.approx([0.4, 0.25, 0.3, 0.05], abs=1e-3)


def test_per_head_attention_is_averaged():
    acc = _acc()
    heads = np.stack([ATTN, np.full_like(ATTN, 0.25)], axis=1)  # (B, N=2, D, T): second head uniform
    acc.update(None, None, None, heads)
    lag1 = acc.result()["attention_by_lag"][0]
    assert lag1 == pytest.approx([(0.5 + 0.25) / 2, (0.2 + 0.25) / 2, (0.3 + 0.25) / 2])


def test_shape_mismatch_is_reported():
    acc = _acc()
    with pytest.raises(ValueError, match="static weights have 3 variables"):
        acc.update(np.ones((1, 3)), None, None, None)
    with pytest.raises(ValueError, match="attention has shape"):
        acc.update(None, None, None, np.ones((1, 2, 5)))
    assert acc.result()["n"] == 0  # a rejected batch leaves no trace


def test_empty_result():
    r = _acc().result()
    assert r["attention_by_lag"] == [] and r["static"] == {} and r["n"] == 0
