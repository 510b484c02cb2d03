"""Validation memory is flat however many batches there are, and the test notices a leak when one is put back.

Memory is measured as the peak of live tensor bytes (`LiveTensorBytes`, exact on CPU); on a GPU the same holds for
torch.cuda.max_memory_allocated (see benchmarks/gpu_check.py).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data
from foxhunt.model.config import ModelConfig
from foxhunt.model.tft import TemporalFusionTransformer
from foxhunt.train.plan import LiveTensorBytes
from foxhunt.train.validate import validate

QUANTILES = [0.1, 0.5, 0.9]


@pytest.fixture(scope="module")
def setup(request):
    fixtures = request.config.rootpath / "tests" / "fixtures"
    data = prepare_data(DataConfig(paths=(str(fixtures / "generic_ohlcv_daily.parquet"),), encoder_length=16,
                                   horizon=3))
    torch.manual_seed(0)
    model = TemporalFusionTransformer(data.schema.sizes, ModelConfig(hidden_size=8, attention_heads=2,
                                                                     encoder_length=16, horizon=3)).eval()
    ids = torch.arange(data.windows.n_windows)
    assert len(ids) >= 250
    return data, model, ids


def peak_bytes(predictor, data, ids) -> int:
    with LiveTensorBytes() as meter:
        validate(predictor, data.windows, ids, 1, QUANTILES, torch.device("cpu"))
    return meter.peak


class LeakyPredictor:
    """The bug foxhunt exists to prevent: each batch's outputs kept, with their autograd graph, across batches."""

    def __init__(self, model):
        self.model, self.kept = model, []

    def __call__(self, batch):
        with torch.inference_mode(False), torch.enable_grad():
            fresh = type(batch)(**{f.name: None if getattr(batch, f.name) is None else getattr(batch, f.name).clone()
                                   for f in dataclasses.fields(batch)})
            out = self.model(fresh).quantiles
        self.kept.append(out)
        return out.detach()


def test_validation_peak_is_the_same_for_10_and_250_batches(setup):
    data, model, ids = setup
    model_fn = lambda b: model(b).quantiles  # noqa: E731
    short, long = peak_bytes(model_fn, data, ids[:10]), peak_bytes(model_fn, data, ids[:250])
    assert long <= short * 1.05 + 4096, (short, long)


def test_a_leak_across_validation_batches_is_caught(setup):
    data, model, ids = setup
    short = peak_bytes(LeakyPredictor(model), data, ids[:10])
    long = peak_bytes(LeakyPredictor(model), data, ids[:100])
    # the assertion above (<= 1.05x) fails by a wide margin when outputs and graphs pile up: 10x the batches, >5x the peak
    assert long > short * 5, (short, long)
