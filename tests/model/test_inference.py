"""InferenceTFT (the weights folded into fewer ops) forecasts what the training model forecasts, to float rounding."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from foxhunt.data.dataset.batch import Batch
from foxhunt.data.features.schema import InputSizes
from foxhunt.model.inference import folded as inference
from foxhunt.model.inference.folded import InferenceTFT
from foxhunt.model.inference.traced import OnnxForward, TracedForward, live_forward
from foxhunt.model.tft import TemporalFusionTransformer
from tests.model.test_tft_model import FULL_SIZES, D, E, overlapping_batches, synthetic_batch, tiny_model

# The layout of a model trained on bars: the series code is the only static input, no categorical time inputs.
BARS_SIZES = InputSizes(static_cat=(4,), static_cont=0, known_cat=(), known_cont=3, observed_cat=(), observed_cont=5)


def float64_quantiles(model: TemporalFusionTransformer, batch: Batch) -> torch.Tensor:
    """The training model's own code run in float64: the reference both float32 computations round away from."""
    m64 = copy.deepcopy(model).double()
    b64 = Batch(**{k: (v.double() if v is not None and v.is_floating_point() else v) for k, v in vars(batch).items()})
    features, _ = m64._run(b64, None, False)  # (B, D, H)
    out = m64.output(features)  # (B, D, Q)
    return out + b64.anchor if model.cfg.anchored else out


def assert_matches_model(model: TemporalFusionTransformer, batch: Batch, got: torch.Tensor) -> None:
    """Within 1e-6 of the training model, or (where the float32 model itself is further than that from its float64
    run) no further from the float64 run than the float32 model is."""
    with torch.inference_mode():
        ref = model(batch).quantiles
    exact = float64_quantiles(model, batch)
    own_error = (ref.double() - exact).abs().max().item()
    assert (got - ref).abs().max().item() <= 1e-6 or (got.double() - exact).abs().max().item() <= own_error


# Both quantile heads (model/quantile_head.py); the tied one with four quantiles, its centre (0.5) not in the middle.
HEADS = {"independent": {}, "tied": {"quantile_head": "tied", "quantiles": (0.05, 0.1, 0.5, 0.9)}}


@pytest.mark.parametrize("sizes", [FULL_SIZES, BARS_SIZES])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("head", list(HEADS))
def test_inference_model_equals_training_model(sizes: InputSizes, layers: int, head: str) -> None:
    """Batch 1 and a batch of several series (each window its own rows), and windows that share bars; with static
    continuous and categorical time inputs (FULL_SIZES) and in the bars layout (static contexts as a code table)."""
    model = tiny_model(sizes, lstm_layers=layers, **HEADS[head]).eval()
    fast = InferenceTFT(model)
    assert (fast.code_table is not None) == (sizes is BARS_SIZES)
    shared, dense = overlapping_batches(sizes, [0, 2, 3, 9], n_rows=20)
    for batch in (synthetic_batch(sizes, 1, E, D, seed=1), synthetic_batch(sizes, 6, E, D, seed=2), shared, dense):
        with torch.inference_mode():
            got = fast(batch)
        assert got.shape == (len(batch), D, len(model.cfg.quantiles))
        assert_matches_model(model, batch, got)


@pytest.mark.parametrize("head", list(HEADS))
def test_traced_forward_runs_the_inference_model_and_refolds_new_positions(head: str) -> None:
    """What `Forecaster.update` runs (a frozen trace of InferenceTFT) gives the model's forecasts; new positional
    inputs are folded in again rather than served stale."""
    model = tiny_model(BARS_SIZES, **HEADS[head]).eval()
    traced = TracedForward(model)
    assert isinstance(traced.model, InferenceTFT)
    batch = synthetic_batch(BARS_SIZES, 1, E, D, seed=3)
    with torch.inference_mode():
        got = traced(batch)
        assert len(traced.traces) == 1 and not traced.failed
        assert_matches_model(model, batch, got)
        moved = Batch(**{**vars(batch), "pos_cont": batch.pos_cont + 0.5})
        assert_matches_model(model, moved, traced.model(moved))


def test_large_batches_sum_over_variables_with_an_embedding_bag(monkeypatch):
    """The path for batches past GATHER_CELLS (no gathered (B * L, V, H) tensor) gives the same forecasts."""
    monkeypatch.setattr(inference, "GATHER_CELLS", 0)
    for sizes in (FULL_SIZES, BARS_SIZES):
        model = tiny_model(sizes).eval()
        batch = overlapping_batches(sizes, [0, 2, 3, 9], n_rows=20)[0]
        with torch.inference_mode():
            assert_matches_model(model, batch, InferenceTFT(model)(batch))


@pytest.mark.parametrize("head", list(HEADS))
def test_live_windows_give_the_models_forecasts_without_an_index(head: str):
    """`InferenceTFT.live` (dense windows, each its own rows: what onnxruntime runs for `update`) forecasts what the
    training model forecasts on the same windows as a Batch, at batch 1 and for several series."""
    model = tiny_model(BARS_SIZES, **HEADS[head]).eval()
    fwd = live_forward(model, E, D, torch.device("cpu"))
    rng = np.random.default_rng(5)
    for b in (1, 3):
        codes = torch.from_numpy(rng.integers(0, 4, b))
        enc = torch.randn(b, E, BARS_SIZES.known_cont - 1 + BARS_SIZES.observed_cont)
        dec = torch.randn(b, D, BARS_SIZES.known_cont - 1)
        batch = fwd.fallback.batch(codes.numpy(), enc.numpy(), dec.numpy())
        with torch.inference_mode():
            fwd.model(batch)  # folds the positional inputs
            assert fwd.model.dense_ready()
            assert_matches_model(model, batch, fwd.model.live(codes, enc, dec))


def live_windows(rng: np.random.Generator, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """b random live windows in the bars layout: series codes (B,), encoder rows (B, E, F), decoder rows (B, D, Kr)."""
    return (rng.integers(0, 4, b),
            rng.normal(size=(b, E, BARS_SIZES.known_cont - 1 + BARS_SIZES.observed_cont)).astype(np.float32),
            rng.normal(size=(b, D, BARS_SIZES.known_cont - 1)).astype(np.float32))


@pytest.mark.parametrize("head", list(HEADS))
def test_onnxruntime_forward_gives_the_models_forecasts(head: str):
    """What `Forecaster.update` runs when onnxruntime is installed, on dense live windows (codes, encoder rows,
    decoder rows) in numpy: a session for batch 1 and one with a dynamic batch axis for every larger batch, each
    size bound to its own buffers."""
    pytest.importorskip("onnxruntime")
    model = tiny_model(BARS_SIZES, **HEADS[head]).eval()
    fwd = live_forward(model, E, D, torch.device("cpu"))
    assert isinstance(fwd, OnnxForward)
    rng = np.random.default_rng(4)
    for b in (3, 1, 2, 17, 3):
        codes, enc, dec = live_windows(rng, b)
        got = fwd(codes, enc, dec)
        assert got.shape == (b, D, len(model.cfg.quantiles)) and got.dtype == np.float32
        assert_matches_model(model, fwd.fallback.batch(codes, enc, dec), torch.from_numpy(got))
        np.testing.assert_array_equal(fwd(codes, enc, dec), got)  # the bound buffers are reused, not stale
    assert set(fwd.sessions) == {1, "batch"} and set(fwd.bound) == {1, 2, 3, 17} and not fwd.failed


def test_onnxruntime_exports_a_model_the_trace_folded_in_inference_mode():
    """The trace folds the positional inputs on its first call, under inference_mode; the folded tensors must stay
    ordinary ones, or the export that follows fails ("Inference tensors cannot be saved for backward") and every
    later call falls back to the trace."""
    pytest.importorskip("onnxruntime")
    model = tiny_model(BARS_SIZES).eval()
    fwd = live_forward(model, E, D, torch.device("cpu"))
    rng = np.random.default_rng(6)
    fwd.fallback(*live_windows(rng, 2))  # the trace first: what a batch with static or categorical inputs runs
    codes, enc, dec = live_windows(rng, 1)
    got = fwd(codes, enc, dec)
    assert not fwd.failed and set(fwd.sessions) == {1}
    assert_matches_model(model, fwd.fallback.batch(codes, enc, dec), torch.from_numpy(got))
