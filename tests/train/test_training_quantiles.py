"""The training-quantile baseline: per series and horizon quantiles of the training targets, sampled past a cap."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data
from foxhunt.train.validate import TrainingQuantiles, _column_quantiles

Q = [0.1, 0.5, 0.9]


@pytest.fixture(scope="module")
def data(daily_path):
    return prepare_data(DataConfig(paths=(str(daily_path),), encoder_length=16, horizon=3))


def _by_hand(data, ids: torch.Tensor) -> dict[int, np.ndarray]:
    code, y = data.windows.series_code(ids).numpy(), data.windows.actual(ids).double().numpy()  # (W,), (W, D)
    return {int(c): np.quantile(y[code == c], Q, axis=0).T for c in np.unique(code)}  # (D, Q) per series


def test_the_table_holds_each_series_training_quantiles(data):
    ids = data.splits["train"]
    table = TrainingQuantiles(data.windows, ids, Q).table
    for c, want in _by_hand(data, ids).items():
        np.testing.assert_allclose(table[c].numpy(), want, rtol=1e-6)


def test_past_the_cap_every_kth_window_is_used(data):
    ids = data.splits["train"]
    cap = len(ids) // 3  # a stride of 3 or 4, as W divides
    stride = -(-len(ids) // cap)
    table = TrainingQuantiles(data.windows, ids, Q, max_windows=cap).table
    for c, want in _by_hand(data, ids[::stride]).items():
        np.testing.assert_allclose(table[c].numpy(), want, rtol=1e-6)
    assert not torch.equal(table, TrainingQuantiles(data.windows, ids, Q).table)  # the sample is not the full set


def test_quantiles_one_column_at_a_time_are_torchs_over_all_columns():
    g = torch.Generator().manual_seed(0)
    q = torch.tensor(Q, dtype=torch.float64)
    for w in (1, 2, 1001):
        y = torch.randn(w, 5, generator=g)  # (W, D) float32, as the sample is held
        assert torch.equal(_column_quantiles(y, q), torch.quantile(y.double(), q, dim=0).T)
