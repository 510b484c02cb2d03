"""Baselines: hand-checked values, no look-ahead, and a GARCH(1,1)-t fit on a simulated series."""

from __future__ import annotations

import subprocess
import sys
from statistics import NormalDist

import numpy as np
import pytest

from foxhunt.data.baselines.forecasts import (
    BASELINES,
    BaselineSeries,
    GarchParams,
    baseline_forecasts,
    fit_garch_t,
    future_targets,
    garch_next_variance,
    garch_sigma_paths,
    linear_scan,
    rolling_vol_normal,
    seasonal_rolling_vol,
    std_t_quantiles,
    training_quantiles,
)
from foxhunt.errors import InputError
from foxhunt.evaluate.metrics import compute_metrics

Z1 = NormalDist().cdf(1.0)  # the quantile level whose standard-normal quantile is exactly 1
QS = [0.1, 0.5, 0.9]


def simulate_garch_t(n, mu=2e-4, omega=2e-6, alpha=0.08, beta=0.9, nu=6.0, seed=0):
    """A GARCH(1,1) series with standardized Student-t shocks (the reference recursion, a plain loop)."""
    rng = np.random.default_rng(seed)
    z = rng.standard_t(nu, n) * np.sqrt((nu - 2) / nu)
    r, s2, e = np.empty(n), omega / (1 - alpha - beta), 0.0
    for t in range(n):
        s2 = omega + alpha * e * e + beta * s2 if t else s2
        e = np.sqrt(s2) * z[t]
        r[t] = mu + e
    return r


def test_future_targets_pads_past_the_end():
    y = future_targets(np.array([0.0, 1.0, 2.0, 3.0]), np.array([0, 2]), 2)
    np.testing.assert_array_equal(y, [[1.0, 2.0], [3.0, np.nan]])


def test_training_quantiles_hand_values():
    tq = training_quantiles(np.array([5.0, 1.0, 4.0, np.nan, 2.0, 3.0]), [0.25, 0.5, 0.9], horizon=3)
    assert tq.shape == (3, 3)
    np.testing.assert_allclose(tq, [[2.0, 3.0, 4.6]] * 3)  # linear interpolation on 1..5
    with pytest.raises(InputError, match="no finite target"):
        training_quantiles(np.array([np.nan]), QS, 1)


def test_rolling_vol_hand_values():
    x = np.array([1.0, 3.0, 2.0, 6.0, np.nan, 4.0])
    f = rolling_vol_normal(x, np.array([0, 1, 2, 3, 5]), horizon=2, quantiles=[0.5, Z1], window=3)
    assert f.shape == (5, 2, 2)
    # windows: [1] -> too short; [1 3] std sqrt(2); [1 3 2] std 1; [3 2 6] std sqrt(13/3); [6 nan 4] std sqrt(2)
    sig = np.array([np.nan, np.sqrt(2.0), 1.0, np.sqrt(13 / 3), np.sqrt(2.0)])
    np.testing.assert_allclose(f[:, 0, 1], sig)
    np.testing.assert_allclose(f[1:, :, 0], 0.0)  # returns: median 0
    np.testing.assert_array_equal(f[:, 0], f[:, 1])  # same for every step
    g = rolling_vol_normal(x, np.array([1, 2, 3, 5]), horizon=1, quantiles=[0.5, Z1], window=3, demean=True)
    means = np.array([2.0, 2.0, 11 / 3, 5.0])
    np.testing.assert_allclose(g[:, 0, 0], means)
    np.testing.assert_allclose(g[:, 0, 1], means + sig[1:])


def _perturb_after(x, k, seed=1):
    y = x.copy()
    y[k + 1 :] += np.random.default_rng(seed).normal(0, 5 * np.nanstd(x), x.size - k - 1)
    return y


@pytest.mark.parametrize("kind", ["training_quantiles", "rolling_vol"])
@pytest.mark.parametrize("target_name", ["log_return", "log_range"])
def test_no_look_ahead(kind, target_name):
    x = np.abs(simulate_garch_t(600, seed=2)) if target_name == "log_range" else simulate_garch_t(600, seed=2)
    train = np.arange(600) < 300
    origins = np.arange(300, 595)
    k = 450  # change everything after row k
    args = dict(origins=origins, horizon=3, quantiles=QS)
    a = baseline_forecasts(kind, BaselineSeries(target_name, x, train), **args)
    b = baseline_forecasts(kind, BaselineSeries(target_name, _perturb_after(x, k), train), **args)
    at_or_before = origins <= k
    np.testing.assert_array_equal(a[at_or_before], b[at_or_before])
    if kind == "rolling_vol":  # the test bites: later origins do see the change
        assert not np.allclose(a[~at_or_before], b[~at_or_before])


def test_unknown_baseline():
    with pytest.raises(InputError, match="unknown baseline"):
        baseline_forecasts("oracle", BaselineSeries("log_return", np.zeros(3), np.ones(3, bool)),
                           origins=np.array([0]), horizon=1, quantiles=QS)  # fmt: skip
    assert set(BASELINES) == {"training_quantiles", "rolling_vol", "garch_t", "seasonal_rolling_vol", "har"}


def test_a_series_reads_its_arrays_once_and_refuses_an_unknown_target():
    s = BaselineSeries("log_range", [1, 2, 3], [1, 0, 1], day=4)
    assert s.target.dtype == np.float64 and s.train_mask.dtype == bool
    assert s.train_mask.tolist() == [True, False, True] and (s.returns, s.day) == (None, 4)
    with pytest.raises(ValueError, match="unknown target 'log_volume'"):
        BaselineSeries("log_volume", np.zeros(3), np.ones(3, bool))


def test_garch_missing_arch_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "arch", None)  # import arch -> ImportError
    with pytest.raises(InputError, match=r"foxhunt\[garch\]"):
        fit_garch_t(np.zeros(500))


@pytest.mark.parametrize("a", [0.0, 0.3, 0.9, 0.995])
def test_linear_scan_matches_a_loop(a):
    u = np.random.default_rng(0).random(5000)
    ref, prev = np.empty_like(u), 0.7
    for i, x in enumerate(u):
        prev = a * prev + x
        ref[i] = prev
    np.testing.assert_allclose(linear_scan(u, a, 0.7), ref, rtol=1e-12)


def test_garch_variance_filter_matches_the_recursion():
    p = GarchParams(mu=0.1, omega=0.2, alpha=0.1, beta=0.8, nu=5.0, init_var=1.5, converged=True)
    r = np.array([0.5, -1.0, np.nan, 2.0, 0.0])
    v = garch_next_variance(r, p)
    ref, prev = [], p.init_var
    for x in r:  # fill for a missing return: the unconditional variance 0.2 / 0.1
        e2 = (x - p.mu) ** 2 if np.isfinite(x) else 2.0
        prev = p.omega + p.alpha * e2 + p.beta * prev
        ref.append(prev)
    np.testing.assert_allclose(v, ref)
    sig = garch_sigma_paths(v, np.array([1, 4]), 3, p)
    s2 = v[[1, 4]]
    expect = np.stack([s2, 0.2 + 0.9 * s2, 0.2 + 0.9 * (0.2 + 0.9 * s2)], axis=1)
    np.testing.assert_allclose(sig, np.sqrt(expect))


@pytest.fixture(scope="module")
def garch_series():
    pytest.importorskip("arch")
    r = simulate_garch_t(7000)
    train = np.arange(r.size) < 4000
    return r, train, fit_garch_t(r[train])


def test_garch_fits_the_last_max_garch_fit_returns_only(garch_series, monkeypatch):
    import foxhunt.data.baselines.forecasts as baselines

    r, train, on_all = garch_series  # fitted on all 4,000 training returns
    monkeypatch.setattr(baselines, "MAX_GARCH_FIT", 1500)
    x = r[train].copy()
    x[100] = np.nan  # a missing return is skipped, not counted
    assert fit_garch_t(x) == fit_garch_t(r[train][-1500:]) != on_all


def test_garch_recovers_parameters(garch_series):
    _, _, p = garch_series
    assert p.converged
    assert 0.03 < p.alpha < 0.15 and 0.8 < p.beta < 0.97 and p.persistence < 1
    assert 4.0 < p.nu < 10.0
    assert abs(p.mu - 2e-4) < 3e-4


def test_garch_coverage_and_no_look_ahead(garch_series):
    r, train, p = garch_series
    origins = np.arange(4000, r.size - 5)
    args = dict(origins=origins, horizon=5, quantiles=QS)
    f = baseline_forecasts("garch_t", BaselineSeries("log_return", r, train), **args)  # fits again from the training rows
    m = compute_metrics(future_targets(r, origins, 5), f, QS)["overall"]
    assert abs(m["coverage"]["p10-p90"] - 0.8) < 0.03
    assert abs(m["calibration"][0.1] - 0.1) < 0.03 and abs(m["calibration"][0.9] - 0.9) < 0.03
    k = 5000
    g = baseline_forecasts("garch_t", BaselineSeries("log_return", _perturb_after(r, k), train), **args)
    before = origins <= k
    np.testing.assert_array_equal(f[before], g[before])
    assert not np.allclose(f[~before], g[~before])


def test_garch_range_scale_model(garch_series):
    r, train, p = garch_series
    # a range-like target: proportional to each bar's true volatility times a positive, skewed factor
    sig = np.sqrt(np.r_[p.init_var, garch_next_variance(r, p)[:-1]])  # sigma of bar t known at t - 1
    rng = sig * np.random.default_rng(5).lognormal(0.5, 0.4, r.size)
    origins = np.arange(4000, r.size - 5)
    args = dict(origins=origins, horizon=5, quantiles=QS)
    f = baseline_forecasts("garch_t", BaselineSeries("log_range", rng, train, returns=r), **args)
    assert (f > 0).all() and (np.diff(f, axis=-1) > 0).all()
    m = compute_metrics(future_targets(rng, origins, 5), f, QS)["overall"]
    assert abs(m["coverage"]["p10-p90"] - 0.8) < 0.04
    k = 5000
    g = baseline_forecasts(
        "garch_t", BaselineSeries("log_range", _perturb_after(rng, k), train, returns=_perturb_after(r, k)), **args
    )
    np.testing.assert_array_equal(f[origins <= k], g[origins <= k])


def test_seasonal_rolling_vol_deseasonalizes_then_scales_by_the_profile_at_each_step() -> None:
    r = np.array([1.0, -2.0, 3.0, -4.0])
    p_rows = np.array([1.0, 2.0, 1.0, 2.0])  # r / p = 1, -1, 3, -2
    p_steps = np.array([[2.0, 0.5]])  # (K=1, H=2): the profile at the origin's two forecast-step times
    qs = [0.1, 0.5, 0.9]
    got = seasonal_rolling_vol(r, p_rows, p_steps, np.array([3]), 2, qs, window=3)
    sigma = np.sqrt(((-1.0) ** 2 + 3.0**2 + (-2.0) ** 2) / 2)  # rows 1..3 of r / p: mean 0, ddof 1
    z = np.array([NormalDist().inv_cdf(q) for q in qs])
    np.testing.assert_allclose(got, [[2.0 * sigma * z, 0.5 * sigma * z]])
    series = BaselineSeries("log_return", r, np.ones(4, bool))
    via = baseline_forecasts("seasonal_rolling_vol", series, origins=np.array([3]), horizon=2, quantiles=qs, window=3,
                             profile=(p_rows, p_steps))
    np.testing.assert_array_equal(via, got)
    with pytest.raises(ValueError, match="profile"):
        baseline_forecasts("seasonal_rolling_vol", series, origins=np.array([3]), horizon=2, quantiles=qs)


def test_std_t_quantiles_by_the_closed_form_for_4_degrees_of_freedom():
    """nu = 4 has a closed-form quantile (Shaw 2006): t = sign(p - 1/2) 2 sqrt(q - 1), q = cos(arccos(sqrt(a)) / 3) /
    sqrt(a), a = 4 p (1 - p); the unit-variance version scales it by sqrt((nu - 2) / nu)."""
    p = np.array([0.05, 0.1, 0.5, 0.9, 0.99])
    a = 4 * p * (1 - p)
    q = np.cos(np.arccos(np.sqrt(a)) / 3) / np.sqrt(a)
    t = np.sign(p - 0.5) * 2 * np.sqrt(q - 1)
    np.testing.assert_allclose(std_t_quantiles(p, 4.0), t * np.sqrt(0.5), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(std_t_quantiles([0.1, 0.9], 1e6), [-1.2815516, 1.2815516], atol=1e-6)  # the normal's


def test_the_live_anchor_quantiles_do_not_import_scipy_stats():
    """An anchored model's predict and Forecaster.load need these quantiles; scipy.stats alone took about a second to
    import there (benchmarks/RESULTS.md)."""
    code = ("import sys; from foxhunt.data.baselines.forecasts import std_t_quantiles; std_t_quantiles([0.1], 5.0); "
            "print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
