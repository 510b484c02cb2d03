"""HAR (data/baselines/har.py): its averages and regression against hand-computed values, no look-ahead, scaling."""

import numpy as np
import pytest
from scipy.stats import norm

from foxhunt.data.baselines import forecasts as baselines
from foxhunt.data.baselines import har
from foxhunt.errors import InputError

Q = (0.1, 0.5, 0.9)


def test_windows_are_corsis_for_daily_bars_and_add_the_bar_for_intraday_ones():
    assert har.windows(1) == (1, 5, 22)
    assert har.day_bars(86_400 * 10**9, intraday=False) == 1
    assert har.day_bars(60 * 10**9, intraday=True) == 1440
    assert har.windows(har.day_bars(3600 * 10**9, intraday=True)) == (1, 24, 120, 528)


def test_regressors_are_trailing_means_of_the_finite_values():
    x = np.array([1.0, 2.0, 3.0, np.nan, 5.0, 6.0])
    regs = har.har_regressors(x, day=1)  # windows 1, 5, 22
    assert regs.shape == (6, 4)
    assert np.array_equal(regs[:, 0], np.ones(6))
    assert np.array_equal(regs[:, 1], x, equal_nan=True)  # the bar itself, NaN where it is missing
    # rows t-4..t: t=3 -> mean(1, 2, 3); t=5 -> rows 1..5 -> mean(2, 3, 5, 6)
    assert np.allclose(regs[:, 2], [1, 1.5, 2, 2, 11 / 4, 16 / 4])
    assert np.allclose(regs[:, 3], [1, 1.5, 2, 2, 11 / 4, 17 / 5])  # every row so far


def _har_process(n: int, coef: tuple[float, ...], seed: int = 0) -> np.ndarray:
    """A range series that follows x[t+1] = b . (1, avg_1, avg_5, avg_22)[t] exactly, from random first values."""
    rng = np.random.default_rng(seed)
    x = np.empty(n)
    x[:22] = rng.uniform(0.5, 1.5, 22)
    for t in range(21, n - 1):
        x[t + 1] = coef[0] + coef[1] * x[t] + coef[2] * x[t - 4 : t + 1].mean() + coef[3] * x[t - 21 : t + 1].mean()
    return x


def test_a_series_that_is_a_har_process_is_forecast_exactly_one_step_ahead():
    """The regression recovers the process, so the forecast at an origin is the process's next value, and the ratio
    actual / forecast is 1 on every training row: every quantile is that value."""
    coef = (0.2, 0.4, 0.2, 0.1)
    x = _har_process(400, coef)
    train = np.zeros(400, dtype=bool)
    train[25:300] = True
    origins = np.array([310, 350, 398])
    got = har.har(x, train, origins, 1, Q, volatility_target=True)  # (3, 1, 3)
    want = [coef[0] + coef[1] * x[o] + coef[2] * x[o - 4 : o + 1].mean() + coef[3] * x[o - 21 : o + 1].mean()
            for o in origins]
    assert np.allclose(got[:, 0, :], np.array(want)[:, None], rtol=1e-6)


def test_iid_normal_returns_give_the_normal_quantiles_of_their_sigma():
    rng = np.random.default_rng(1)
    r = 0.01 * rng.standard_normal(20_000)
    train = np.arange(r.size) < 15_000
    got = har.har(r, train, np.array([16_000, 19_000]), 3, Q, volatility_target=False)
    assert np.allclose(got, 0.01 * norm.ppf(Q)[None, None, :], rtol=0.06, atol=3e-4)


def test_forecasts_use_no_row_after_the_origin():
    rng = np.random.default_rng(2)
    x = np.abs(rng.standard_normal(600)) + 0.1
    train = np.arange(600) < 400
    base = har.har(x, train, np.array([450, 500]), 4, Q, volatility_target=True)
    later = x.copy()
    later[501:] = rng.uniform(5, 9, 99)  # after both origins and the training rows
    assert np.array_equal(har.har(later, train, np.array([450, 500]), 4, Q, volatility_target=True), base)
    moved = x.copy()
    moved[480] *= 3  # between the two origins: the first keeps its forecast, the second does not
    got = har.har(moved, train, np.array([450, 500]), 4, Q, volatility_target=True)
    assert np.array_equal(got[0], base[0]) and not np.array_equal(got[1], base[1])


@pytest.mark.parametrize("volatility_target", [True, False])
def test_quantiles_scale_with_the_target(volatility_target):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(800) * (1 + 0.5 * np.sin(np.arange(800) / 30))
    x = np.abs(x) if volatility_target else x
    train = np.arange(800) < 600
    base = har.har(x, train, np.array([650, 700]), 2, Q, volatility_target=volatility_target)
    assert np.allclose(har.har(3 * x, train, np.array([650, 700]), 2, Q, volatility_target=volatility_target),
                       3 * base)


def test_the_profile_at_the_forecast_step_multiplies_the_forecast():
    """Intraday: the regression runs on target / p, and the step's p multiplies its forecast back."""
    rng = np.random.default_rng(4)
    n = 3000
    p_rows = 1 + 0.5 * np.cos(np.arange(n) * 2 * np.pi / 60)
    x = p_rows * (np.abs(rng.standard_normal(n)) + 0.2)
    train = np.arange(n) < 2500
    origins = np.array([2600, 2700])
    steps = np.ones((2, 2))
    base = har.har(x, train, origins, 2, Q, volatility_target=True, day=60, profile=(p_rows, steps))
    doubled = har.har(x, train, origins, 2, Q, volatility_target=True, day=60, profile=(p_rows, 2 * steps))
    assert np.allclose(doubled, 2 * base)


def test_too_few_training_rows_are_refused_in_one_line():
    x = np.abs(np.random.default_rng(5).standard_normal(100)) + 0.1
    with pytest.raises(InputError, match="HAR baseline: only 29 training bars"):
        har.har(x, np.arange(100) < 30, np.array([50]), 1, Q, volatility_target=True)


def test_a_forecast_below_zero_is_floored():
    """A range that falls steeply makes least squares forecast below zero; the floor keeps the scale positive."""
    rng = np.random.default_rng(6)
    x = np.abs(rng.standard_normal(500)) + 1.0
    x[-30:] = 1e-6  # volatility collapses after training
    train = np.arange(500) < 400
    got = har.har(x, train, np.array([499]), 1, Q, volatility_target=True)
    assert np.all(np.isfinite(got)) and got[0, 0, 1] > 0


def test_baseline_forecasts_dispatches_har_by_target():
    rng = np.random.default_rng(7)
    r = 0.01 * rng.standard_normal(1000)
    train = np.arange(1000) < 800
    origins = np.array([850, 900])
    got = baselines.baseline_forecasts("har", baselines.BaselineSeries("log_return", r, train), origins=origins,
                                       horizon=2, quantiles=Q)
    assert np.array_equal(got, har.har(r, train, origins, 2, Q, volatility_target=False))
    rng_ = np.abs(r) + 0.001
    got = baselines.baseline_forecasts("har", baselines.BaselineSeries("log_range", rng_, train), origins=origins,
                                       horizon=2, quantiles=Q)
    assert np.array_equal(got, har.har(rng_, train, origins, 2, Q, volatility_target=True))
    assert "har" in baselines.BASELINES
