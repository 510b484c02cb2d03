"""The training-quantile baseline training reads its losses against is the one `evaluate`, `backtest` and train's
final line score: per series, the quantiles of every training bar (data/dataset/fit_rows.py), the same at every step;
a series with no training bar takes every series' pooled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.data.config import DataConfig
from foxhunt.data.dataset import fit_rows
from foxhunt.data.prepare import prepare_data
from foxhunt.evaluate.metrics import q_risk
from foxhunt.evaluate.scored_rows import scored_windows
from foxhunt.evaluate.validation import validation_baselines
from foxhunt.train import validate as validate_module
from foxhunt.train.validate import TrainingQuantiles, validate

Q = [0.1, 0.5, 0.9]


@pytest.fixture(scope="module")
def data(daily_path):
    return prepare_data(DataConfig(paths=(str(daily_path),), encoder_length=16, horizon=3))


def _by_hand(data, cut: int) -> dict[int, np.ndarray]:
    """Each series' real bars before the cut, its first bar (no return) left out and the first encoder_length bars
    kept (no window forecasts them, yet they are training data): (Q,) quantiles per series."""
    w = data.windows
    out = {}
    for s in range(len(w.series_names)):
        rows = np.flatnonzero((w.series_idx.numpy() == s) & w.real.numpy())[1:]
        y, ts = w.target_raw.numpy()[rows].astype(np.float64), w.ts_ns.numpy()[rows]
        out[s] = np.quantile(y[(ts < cut) & np.isfinite(y)], Q)
    return out


def test_the_table_holds_each_series_quantiles_of_every_training_bar(data):
    cut = fit_rows.windows_cut(data, data.splits["val"])
    assert np.datetime64(cut, "ns") == np.datetime64(data.summary["train_end"].rstrip("Z"), "ns")
    table = TrainingQuantiles(data, cut, Q).table
    assert table.shape == (2, 3)
    for s, want in _by_hand(data, cut).items():
        np.testing.assert_allclose(table[s].numpy(), want, rtol=1e-6)


def test_train_and_its_final_line_score_one_training_quantile_forecast(data):
    """The console's loss-scale line and the final line's training_quantiles give one q-risk on the validation
    windows (here 0.4693 / 0.9947 / 0.5121 against 0.4701 / 0.9968 / 0.5020 when training took the quantiles of its
    windows' forecast bars, step by step)."""
    val = data.splits["val"]
    loss_scale = validate(TrainingQuantiles(data, fit_rows.windows_cut(data, val), Q), data.windows, val, 64, Q,
                          torch.device("cpu"))
    scored = scored_windows(data.windows, val, np.zeros((len(val), data.windows.horizon, len(Q)), np.float32))
    forecasts, _ = validation_baselines(data, scored, tuple(Q))
    final_line = q_risk(scored.actual, forecasts["training_quantiles"], Q)
    assert [loss_scale.qrisk[q] for q in Q] == pytest.approx(list(final_line), rel=1e-6)


def test_a_series_with_no_training_bar_takes_every_series_pooled(data, monkeypatch):
    cut = fit_rows.windows_cut(data, data.splits["val"])
    real = fit_rows.series_rows
    monkeypatch.setattr(validate_module, "series_rows",
                        lambda d, s, c: (None, "no bars before the cut") if s == 1 else real(d, s, c))
    table = TrainingQuantiles(data, cut, Q).table  # series 1 (NQ) has none: series 0's, the only ones fitted
    want = _by_hand(data, cut)[0]
    np.testing.assert_allclose(table.numpy(), [want, want], rtol=1e-6)
