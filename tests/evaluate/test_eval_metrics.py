"""Metrics against hand-computed values, and the streaming accumulator against the one-shot computation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from foxhunt.evaluate.metrics import (
    MetricAccumulator,
    compute_metrics,
    interval_pairs,
    pinball,
    q_risk,
    rankdata,
    spearman,
)

QS = [0.1, 0.5, 0.9]
NAN = np.nan

# Three origins, two steps; the actual of origin 1 at step 2 is missing. Per-entry pinball losses are worked out
# in the comments: (y, [p10, p50, p90]) -> [L10, L50, L90].
Y = np.array([[1.0, -2.0], [0.5, NAN], [-1.0, 3.0]])
P = np.array(
    [
        [[-1.0, 0.0, 2.0], [-1.0, -1.0, 1.0]],  # (1 | 0.2 0.5 0.1), (-2 | 0.9 0.5 0.3)
        [[0.0, 0.5, 1.0], [0.0, 0.0, 0.0]],  # (0.5 | 0.05 0 0.05), missing actual
        [[-2.0, 0.2, 1.0], [1.0, 2.0, 4.0]],  # (-1 | 0.1 0.6 0.2), (3 | 0.2 0.5 0.1)
    ]
)


def test_pinball_hand_values():
    loss = pinball(Y, P, QS)
    assert loss.shape == (3, 2, 3)
    np.testing.assert_allclose(loss[0, 0], [0.2, 0.5, 0.1])
    np.testing.assert_allclose(loss[0, 1], [0.9, 0.5, 0.3])
    np.testing.assert_allclose(loss[1, 0], [0.05, 0.0, 0.05])
    np.testing.assert_allclose(loss[2, 0], [0.1, 0.6, 0.2])
    np.testing.assert_allclose(loss[2, 1], [0.2, 0.5, 0.1])
    assert np.isnan(loss[1, 1]).all()


def test_q_risk_hand_values_ignore_nan_actuals():
    # sums of losses 1.45, 2.1, 0.75 over sum |y| = 7.5
    np.testing.assert_allclose(q_risk(Y, P, QS), [2 * 1.45 / 7.5, 2 * 2.1 / 7.5, 2 * 0.75 / 7.5])


def test_zero_median_scores_exactly_one():
    y = np.random.default_rng(3).standard_t(4, size=(500, 4)) * 0.01
    y[5, 2] = NAN
    assert q_risk(y, np.zeros((500, 4, 3)), QS)[1] == pytest.approx(1.0, rel=1e-12)
    r = compute_metrics(y, np.zeros((500, 4, 3)), QS)
    assert r["overall"]["q_risk"][0.5] == pytest.approx(1.0, rel=1e-12)


def test_all_metrics_hand_values():
    r = compute_metrics(Y, P, QS)
    o = r["overall"]
    assert o["n"] == 5 and o["n_missing_forecast"] == 0
    assert o["q_risk"] == pytest.approx({0.1: 2.9 / 7.5, 0.5: 4.2 / 7.5, 0.9: 1.5 / 7.5})
    assert o["pinball"] == pytest.approx({0.1: 0.29, 0.5: 0.42, 0.9: 0.15})
    assert o["mean_pinball"] == pytest.approx(4.3 / 15)
    assert o["mae_median"] == pytest.approx(4.2 / 5)
    assert o["coverage"] == pytest.approx({"p10-p90": 0.8})  # only (-2 outside [-1, 1]) misses
    # below the forecast, the tie y == p50 == 0.5 counts one half
    assert o["calibration"] == pytest.approx({0.1: 0.2, 0.5: 0.5, 0.9: 1.0})
    # median 0 at the first entry: no direction; of the other four, (-1 vs 0.2) misses
    assert o["hit_rate"] == pytest.approx(0.75)
    # ranks y [4 1 3 2 5], median [2 1 4 3 5]: sum d^2 = 6, rho = 1 - 6 * 6 / (5 * 24)
    assert o["ic"] == pytest.approx(0.7)
    h1, h2 = r["per_horizon"]
    assert h1["n"] == 3 and h2["n"] == 2
    assert h1["q_risk"][0.5] == pytest.approx(2 * 1.1 / 2.5)
    assert h2["q_risk"][0.5] == pytest.approx(2 * 1.0 / 5.0)
    assert h2["coverage"]["p10-p90"] == pytest.approx(0.5)
    assert list(r["per_series"]) == [0]


def test_per_series_split_and_missing_forecasts():
    p = P.copy()
    p[2, 1, 0] = NAN  # a forecast that could not be made: skipped and counted
    r = compute_metrics(Y, p, QS, series=np.array([0, 1, 1]))
    assert r["overall"]["n"] == 4 and r["overall"]["n_missing_forecast"] == 1
    s0, s1 = r["per_series"][0], r["per_series"][1]
    assert s0["n"] == 2 and s1["n"] == 2 and s1["n_missing_forecast"] == 1
    assert s0["q_risk"][0.1] == pytest.approx(2 * 1.1 / 3.0)
    assert s1["q_risk"][0.9] == pytest.approx(2 * 0.25 / 1.5)


def test_spearman_and_ranks():
    np.testing.assert_allclose(rankdata(np.array([3.0, 1.0, 3.0, 2.0])), [3.5, 1.0, 3.5, 2.0])
    assert spearman(np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0, 20.0, 30.0, 40.0])) == pytest.approx(1.0)
    assert spearman(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])) == pytest.approx(-1.0)
    assert spearman(np.array([1.0, 2.0, 3.0]), np.array([5.0, 5.0, 5.0])) is None
    assert spearman(np.array([1.0, 2.0]), np.array([1.0, 2.0])) is None


def test_interval_pairs_labels():
    assert interval_pairs([0.05, 0.1, 0.5, 0.9, 0.95]) == [(0, 4, "p5-p95"), (1, 3, "p10-p90")]
    assert interval_pairs([0.1, 0.5, 0.8]) == []


def test_accumulator_over_batches_equals_one_shot():
    rng = np.random.default_rng(0)
    n, h = 403, 4
    qs = [0.05, 0.1, 0.5, 0.9, 0.95]
    y = rng.normal(size=(n, h))
    y[rng.random((n, h)) < 0.05] = NAN
    y[rng.random((n, h)) < 0.05] = 0.0
    q_pred = np.sort(rng.normal(size=(n, h, 5)), axis=-1)
    series = rng.integers(0, 3, n)
    one = compute_metrics(y, q_pred, qs, series)
    acc = MetricAccumulator(qs, h, n_series=3)
    for lo in range(0, n, 37):
        acc.update(y[lo : lo + 37], q_pred[lo : lo + 37], series[lo : lo + 37])
    acc.update(y[:0], q_pred[:0], series[:0])  # empty batch is a no-op
    streamed = acc.result()
    _assert_close(streamed, one)
    assert streamed["ic_sampled"] is False
    json.dumps(streamed)  # plain values only


def test_reservoir_bounds_memory_and_samples_uniformly():
    n, cap = 20_000, 2_000
    y = np.arange(n, dtype=np.float64)[:, None]  # (n, 1): y = position
    q_pred = np.repeat(y[..., None], 3, axis=-1) + np.array([-1.0, 0.0, 1.0])  # median == actual
    acc = MetricAccumulator(QS, 1, ic_max_pairs=cap)
    for lo in range(0, n, 1000):
        acc.update(y[lo : lo + 1000], q_pred[lo : lo + 1000], np.zeros(1000, dtype=np.int64))
    r = acc.result()
    stored_y = acc._reservoir.pairs()[0]
    assert r["ic_sampled"] is True and stored_y.size == cap
    assert r["overall"]["ic"] == pytest.approx(1.0)
    assert abs(stored_y.mean() - (n - 1) / 2) < 0.05 * n  # a uniform sample, not the first `cap` pairs
    assert r["overall"]["n"] == n  # sums stay exact


def test_without_a_median_the_median_metrics_are_none():
    o = compute_metrics(Y, P[..., [0, 2]], [0.1, 0.9])["overall"]
    assert o["mae_median"] is None and o["hit_rate"] is None and o["ic"] is None
    assert o["coverage"] == pytest.approx({"p10-p90": 0.8})
    assert o["q_risk"] == pytest.approx({0.1: 2.9 / 7.5, 0.9: 1.5 / 7.5})


def test_accumulator_rejects_bad_series_codes():
    acc = MetricAccumulator(QS, 2, n_series=2)
    with pytest.raises(ValueError, match="series codes"):
        acc.update(Y, P, np.array([0, 1, 2]))


def _assert_close(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_close(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, z in zip(a, b, strict=True):
            _assert_close(x, z)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-10, abs=1e-12)
    else:
        assert a == b
