"""The anchor (data/baselines/anchor.py): GARCH-t's own forecast in scaled units, causal, with a fallback for the
series it cannot serve; and its fit saved with the transform."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest

from foxhunt.data.baselines.anchor import AnchorFit, anchor_rows, fit_anchor
from foxhunt.data.baselines.forecasts import GarchParams, garch_t

from .test_forecasts import simulate_garch_t

QS = (0.1, 0.5, 0.9)
PARAMS = GarchParams(mu=1e-4, omega=2e-6, alpha=0.08, beta=0.9, nu=6.0, init_var=1e-4, converged=True)


def _series(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns, a series' first-bar flag, and a center / scale that vary by row (as volatility scaling's do)."""
    r = simulate_garch_t(n, seed=seed)
    first = np.zeros(n, dtype=bool)
    first[0] = True
    scale = np.abs(r).cumsum() / np.arange(1, n + 1) + 1e-3  # (n,) any positive per-row scale
    return r, first, scale


def test_the_anchor_unscaled_is_the_garch_t_baseline_forecast() -> None:
    """anchor * scale + center at each row as an origin = forecasts.garch_t at that origin, with the same fit."""
    r, first, scale = _series()
    center = np.full(r.size, 2e-4)
    fit = AnchorFit("garch_t", {"A": PARAMS})
    rows = anchor_rows(fit, ["A"], np.zeros(r.size, np.int64), r, first, center, scale, 4, QS)  # (n, D * Q)
    got = rows.reshape(r.size, 4, 3).astype(np.float64) * scale[:, None, None] + center[:, None, None]
    target = np.where(first, np.nan, r)
    want = garch_t(target, np.ones(r.size, bool), np.arange(r.size), 4, QS, params=PARAMS)  # (n, D, Q)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-9)


def test_the_anchor_at_a_row_never_reads_a_later_bar() -> None:
    """Jitter every return after row t: the anchor of rows <= t is unchanged, that of later rows moves."""
    r, first, scale = _series()
    sidx, center, t = np.zeros(r.size, np.int64), np.zeros(r.size), 250
    fit = AnchorFit("garch_t", {"A": PARAMS})
    base = anchor_rows(fit, ["A"], sidx, r, first, center, scale, 5, QS)
    jittered = r.copy()
    jittered[t + 1:] *= np.random.default_rng(1).uniform(0.2, 5.0, r.size - t - 1)
    moved = anchor_rows(fit, ["A"], sidx, jittered, first, center, scale, 5, QS)
    np.testing.assert_array_equal(moved[: t + 1], base[: t + 1])
    assert not np.allclose(moved[t + 1:], base[t + 1:])


def test_a_series_with_no_fit_reads_the_standard_normal_quantiles() -> None:
    r, first, scale = _series(50)
    sidx = np.repeat([0, 1], 25)
    fit = AnchorFit("garch_t", {"A": PARAMS}, {"B": "only 24 finite training returns"})
    rows = anchor_rows(fit, ["A", "B"], sidx, r, first, np.zeros(50), scale, 2, QS).reshape(50, 2, 3)
    z = [NormalDist().inv_cdf(q) for q in QS]
    np.testing.assert_allclose(rows[25:], np.broadcast_to(z, (25, 2, 3)), rtol=1e-6)
    assert not np.allclose(rows[:25], np.broadcast_to(z, (25, 2, 3)))


def test_fit_per_series_on_training_rows_only_and_left_out_with_the_reason() -> None:
    pytest.importorskip("arch")
    a = simulate_garch_t(1500, seed=2)
    b = simulate_garch_t(60, seed=3)
    target = np.concatenate([a, b])
    sidx = np.repeat([0, 1], [a.size, b.size])
    train = np.ones(target.size, bool)
    train[1000:1500] = False  # A's later rows are not training rows
    fit = fit_anchor("garch_t", target, sidx, train, ["A", "B"])
    assert set(fit.params) == {"A"} and "only 60 finite training returns" in fit.left_out["B"]
    alone = fit_anchor("garch_t", a[:1000], np.zeros(1000, np.int64), np.ones(1000, bool), ["A"])
    assert fit.params["A"] == alone.params["A"]  # the rows after the cut never entered the fit
    assert AnchorFit.from_dict(fit.to_dict()) == fit  # saved with the transform (model.json), read back equal
