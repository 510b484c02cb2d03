"""The conformal shift (model/calibration.py) against hand-computed values, its guarantee on the fitting data,
non-crossing after the shift, and the JSON round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest

from foxhunt.model.calibration import (
    Calibration,
    apply_shifts,
    conformal_rank,
    conformal_shifts,
    coverage_summary,
)


@pytest.mark.parametrize(("n", "q", "rank"), [
    (9, 0.1, 1),    # (9 + 1) 0.1 = 1 exactly: floor keeps 1
    (9, 0.9, 9),    # (9 + 1) 0.9 = 9 exactly: ceil keeps 9
    (10, 0.1, 1),   # 1.1 -> floor 1 (lower bound leans down)
    (10, 0.9, 10),  # 9.9 -> ceil 10 (upper bound leans up)
    (10, 0.5, 6),   # 5.5 -> ceil 6
    (5, 0.1, 1),    # 0.6 -> floor 0, clamped to the smallest score
    (5, 0.9, 5),    # 5.4 -> ceil 6, clamped to the largest score
    (99, 0.25, 25),
])
def test_conformal_rank_by_hand(n, q, rank):
    assert int(conformal_rank(np.array(n), np.array(q))) == rank


def test_conformal_shifts_by_hand():
    s = np.array([5.0, -1, 3, 0, 2, 8, -4, 7, 1, 6])  # sorted: -4 -1 0 1 2 3 5 6 7 8
    scores = np.stack([s, s, s, s], axis=1)[:, None, :]  # (N=10, D=1, Q=4)
    shifts = conformal_shifts(scores, [0.1, 0.5, 0.8, 0.9])
    # ranks floor(1.1) = 1, ceil(5.5) = 6, ceil(8.8) = 9, ceil(9.9) = 10
    np.testing.assert_array_equal(shifts, [[-4.0, 3.0, 7.0, 8.0]])


def test_conformal_shifts_ignore_nan_scores_per_cell():
    s = np.array([[4.0, np.nan], [1.0, 2.0], [3.0, np.nan], [2.0, 5.0]])[:, :, None]  # (N=4, D=2, Q=1)
    # q = 0.5: column 0 has 4 scores (1 2 3 4), rank ceil(2.5) = 3 -> 3; column 1 has 2 (2 5), rank ceil(1.5) = 2 -> 5
    np.testing.assert_array_equal(conformal_shifts(s, [0.5]), [[3.0], [5.0]])


def test_scaled_shift_is_in_units_of_each_window_scale():
    y = np.array([[2.0], [4.0], [30.0]])  # (N=3, D=1)
    q = np.zeros((3, 1, 1))
    scale = np.array([1.0, 2.0, 10.0])
    cal = Calibration.fit(y, q, scale, [0.5], mode="scaled")
    # scaled scores 2, 2, 3 -> rank ceil(2) = 2 -> shift 2, i.e. 2, 4 and 20 in target units
    np.testing.assert_allclose(cal.shifts, [[2.0]])
    np.testing.assert_allclose(cal.apply(q, scale)[:, 0, 0], [2.0, 4.0, 20.0])
    raw = Calibration.fit(y, q, scale, [0.5], mode="raw")  # scores 2, 4, 30 -> rank 2 -> shift 4 everywhere
    np.testing.assert_allclose(raw.apply(q, scale)[:, 0, 0], [4.0, 4.0, 4.0])


def test_shifted_quantiles_never_cross():
    q = np.array([[[0.0, 1.0, 2.0]]])
    out = apply_shifts(q, np.array([[3.0, 0.0, 0.0]]), np.ones(1), "raw")  # p10 pushed above p50 and p90
    np.testing.assert_array_equal(out, [[[1.0, 2.0, 3.0]]])
    rng = np.random.default_rng(0)
    q = np.sort(rng.normal(size=(200, 4, 3)), axis=-1)
    out = apply_shifts(q, rng.normal(scale=2.0, size=(4, 3)), rng.uniform(0.5, 2.0, size=200), "scaled")
    assert (np.diff(out, axis=-1) >= 0).all()


@pytest.mark.parametrize("mode", ["raw", "scaled"])
def test_fit_reaches_the_nominal_shares_on_the_fitting_data(mode):
    """The conformal guarantee on the fitting sample: at least a share q at or below an upper quantile, at most a
    share q strictly below a lower one, whatever the forecasts' bias and width."""
    rng = np.random.default_rng(1)
    n, d = 501, 3
    scale = rng.uniform(0.5, 3.0, size=n)
    y = rng.standard_t(4, size=(n, d)) * scale[:, None]
    q = np.stack([np.full((n, d), -0.3), np.full((n, d), 0.4), np.full((n, d), 0.9)], axis=-1)  # biased, narrow
    qs = (0.1, 0.5, 0.9)
    cal = Calibration.fit(y, q, scale, qs, mode)
    adj = cal.apply(q, scale)
    eps = 1e-9  # the window whose score is the shift lands on its own outcome up to rounding (x / s * s)
    for j, level in enumerate(qs):
        if level >= 0.5:
            assert (y <= adj[..., j] + eps).mean(axis=0).min() >= level
        else:
            assert (y < adj[..., j] - eps).mean(axis=0).max() <= level
    assert cal.coverage["after"]["p10-p90"] == pytest.approx(0.8, abs=0.01)
    assert cal.coverage["before"]["p10-p90"] < 0.5


def test_coverage_summary_by_hand():
    y = np.array([[0.0], [1.0], [2.0], [np.nan]])
    q = np.array([[[-1.0, 0.0, 1.0]]] * 4)  # p10 -1, p50 0, p90 1 everywhere
    c = coverage_summary(y, q, (0.1, 0.5, 0.9))
    # inside [-1, 1]: 0 and 1 (edges count); below p50 only the tie at 0, one half; below p90 0 and the tie at 1; NaN ignored
    assert c["p10-p90"] == pytest.approx(2 / 3)
    assert c["below"] == pytest.approx({"0.1": 0.0, "0.5": 0.5 / 3, "0.9": 1.5 / 3})
    assert c["n"] == 3


def test_round_trip_through_json():
    rng = np.random.default_rng(2)
    cal = Calibration.fit(rng.normal(size=(50, 2)), np.sort(rng.normal(size=(50, 2, 3)), axis=-1),
                          np.ones(50), (0.1, 0.5, 0.9), "scaled", {"windows": 50})
    back = Calibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    np.testing.assert_array_equal(back.shifts, cal.shifts)
    assert (back.mode, back.quantiles, back.fitted_on, back.coverage) == (
        cal.mode, cal.quantiles, cal.fitted_on, json.loads(json.dumps(cal.coverage)))
    with pytest.raises(ValueError):
        Calibration.from_dict({**cal.to_dict(), "shifts": [[0.0, 1.0]]})  # 2 shifts for 3 quantiles
    with pytest.raises(ValueError):
        Calibration.from_dict({**cal.to_dict(), "mode": "spread"})
