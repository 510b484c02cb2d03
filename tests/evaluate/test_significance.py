"""The Diebold-Mariano test of evaluate/significance.py against numbers worked out by hand in the comments, against
statsmodels' HAC regression on a constant, and pooled over a 2-series panel by hand; and the comparison of
evaluate/paired.py: the model against a baseline on the rows both forecast, with what was left out."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm

from foxhunt.evaluate.paired import NO_HISTORY, compare, left_out_text
from foxhunt.evaluate.significance import DMTest, PooledDifferentials, bandwidth, dm_tests

QS = (0.1, 0.5, 0.9)


def t3_two_sided(stat: float) -> float:
    """Two-sided p-value of Student's t with 3 degrees of freedom, in closed form: P(|T| > t) =
    1 - (2 / pi) (x / (1 + x^2) + atan(x)), x = t / sqrt(3)."""
    x = abs(stat) / math.sqrt(3)
    return 1 - (2 / math.pi) * (x / (1 + x * x) + math.atan(x))


def test_one_series_by_hand():
    # d = 1, -1, 2, 0 (T = 4) of 2-step forecasts: lag max(2 - 1, floor(4 (4 / 100)^(2/9)) = floor(1.96) = 1) = 1
    # mean 0.5; e = 0.5, -1.5, 1.5, -0.5; g0 = (0.25 + 2.25 + 2.25 + 0.25) / 4 = 1.25
    # g1 = (0.5 * -1.5 + -1.5 * 1.5 + 1.5 * -0.5) / 4 = -3.75 / 4 = -0.9375
    # lrv = g0 + 2 (1 - 1/2) g1 = 1.25 - 0.9375 = 0.3125; se = sqrt(0.3125 / (4 - 1)) = 0.322749
    # stat = 0.5 / 0.322749 = 1.549193 (= sqrt(2.4)); p from t with 3 degrees of freedom
    (test,) = dm_tests(np.array([[1.0], [-1.0], [2.0], [0.0]]), horizon=2, mean_abs_y=1.0)
    assert test.lag == 1 and test.periods == 4 and test.mean == 0.5
    assert test.stat == pytest.approx(math.sqrt(2.4), rel=1e-12)
    assert test.p_value == pytest.approx(t3_two_sided(math.sqrt(2.4)), rel=1e-12)
    assert test.p_value == pytest.approx(0.219102, abs=1e-6)
    assert test.outcome == "level"  # p > 0.05: a loss of 0.5 a period on 4 periods could be noise


@pytest.mark.parametrize("horizon", [1, 5, 20])
def test_the_statistic_is_statsmodels_hac_regression_on_a_constant(horizon):
    """OLS of d on a constant, cov_type HAC with the same lag, use_correction (the T / (T - 1) factor) and use_t
    (Student's t, T - 1 degrees of freedom): the same statistic and p-value, for every column at once."""
    rng = np.random.default_rng(7)
    T = 300
    shocks = rng.normal(size=(T + horizon, 3))
    d = np.stack([shocks[k : k + T] for k in range(horizon)]).mean(axis=0)  # (T, 3), overlapping sums
    d += np.array([0.0, 0.5, -0.5])
    tests = dm_tests(d, horizon, mean_abs_y=1.0)
    lag = bandwidth(T, horizon)
    assert lag == max(horizon - 1, 5)  # floor(4 (300 / 100)^(2/9)) = floor(5.10) = 5
    for col, test in enumerate(tests):
        fit = sm.OLS(d[:, col], np.ones(T)).fit(cov_type="HAC", cov_kwds={"maxlags": lag, "use_correction": True},
                                                use_t=True)
        assert test.lag == lag and test.mean == pytest.approx(fit.params[0], rel=1e-12)
        assert test.stat == pytest.approx(fit.tvalues[0], rel=1e-10)
        assert test.p_value == pytest.approx(fit.pvalues[0], rel=1e-9, abs=1e-300)
    assert [t.outcome for t in tests][1:] == ["worse", "better"]  # the model's loss higher, then lower


def test_the_lag_covers_the_overlap_and_grows_with_the_sample():
    assert bandwidth(250, 5) == 4 and bandwidth(2500, 5) == 8 and bandwidth(100_000, 5) == 18
    assert bandwidth(50, 30) == 29 and bandwidth(10, 30) == 9  # the overlap's floor, capped at T - 1
    assert bandwidth(1, 5) == 0


def test_what_cannot_be_tested_is_never_a_win():
    same, = dm_tests(np.zeros((10, 1)), 1, mean_abs_y=1.0)  # identical forecasts: level, no statistic
    assert (same.stat, same.p_value, same.equal, same.outcome) == (None, None, True, "level")
    one, = dm_tests(np.array([[-3.0]]), 1, mean_abs_y=1.0)
    assert (one.p_value, one.outcome) == (None, "none")
    assert DMTest(-1.0, -5.0, 0.049, 100, 4).outcome == "better"
    assert DMTest(-1.0, -1.9, 0.051, 100, 4).outcome == "level"
    assert DMTest(1.0, 5.0, 0.001, 100, 4).outcome == "worse"


def test_pooled_over_a_two_series_panel_by_hand():
    # series A at times 1, 2, 3 with d 1, 0, 2; series B at 2, 3, 4 with d 3, -1, 1
    # per time sums: t1 1 (1 series), t2 0 + 3 = 3 (2), t3 2 - 1 = 1 (2), t4 1 (1); mean count 6 / 4 = 1.5
    # terms x = (1, 3, 1, 1) / 1.5 = 2/3, 2, 2/3, 2/3: mean 1, the mean of all six differentials
    # horizon 1, T = 4: lag floor(1.96) = 1; e = -1/3, 1, -1/3, -1/3; g0 = (1/9 + 1 + 1/9 + 1/9) / 4 = 1/3
    # g1 = (-1/3 - 1/3 + 1/9) / 4 = -5/36; lrv = 1/3 - 5/36 = 7/36; se = sqrt(7/36 / 3) = sqrt(7/108)
    # stat = 1 / sqrt(7/108) = 3.927922
    pooled = PooledDifferentials(1)
    pooled.add(np.array([1, 2, 3]), np.array([[1.0], [0.0], [2.0]]))
    pooled.add(np.array([2, 3, 4]), np.array([[3.0], [-1.0], [1.0]]))
    assert pooled.times.tolist() == [1, 2, 3, 4] and pooled.counts.tolist() == [1, 2, 2, 1]
    (test,) = pooled.tests(horizon=1, mean_abs_y=1.0)
    assert test.periods == 4 and test.lag == 1 and test.mean == pytest.approx(1.0, rel=1e-12)
    assert test.stat == pytest.approx(1 / math.sqrt(7 / 108), rel=1e-12)
    assert test.p_value == pytest.approx(t3_two_sided(1 / math.sqrt(7 / 108)), rel=1e-10)
    assert test.outcome == "worse"  # the model's loss is higher, p = 0.029


def test_a_balanced_panel_pools_the_cross_sectional_mean():
    rng = np.random.default_rng(3)
    d = rng.normal(size=(2, 50, 2))  # (series, time, Q)
    pooled = PooledDifferentials(2)
    for s in range(2):
        pooled.add(np.arange(50), d[s])
    want = dm_tests(d.mean(axis=0), 5, mean_abs_y=1.0)
    got = pooled.tests(5, mean_abs_y=1.0)
    for g, w in zip(got, want, strict=True):
        assert g.stat == pytest.approx(w.stat, rel=1e-12) and g.p_value == pytest.approx(w.p_value, rel=1e-12)


def test_a_comparison_is_made_on_the_rows_both_forecast():
    # series A (3 origins) and B (2 origins), 2 steps, one quantile q = 0.5; the baseline cannot forecast B at all
    # and A's first origin; A's last origin has its second step unrealised
    y = np.array([[1.0, 2.0], [0.0, -2.0], [4.0, np.nan], [1.0, 1.0], [1.0, 1.0]])  # (K, D)
    model = np.zeros((5, 2, 1))
    base = np.full((5, 2, 1), 1.0)
    base[0] = np.nan
    base[3:] = np.nan
    series, origin = np.array([0, 0, 0, 1, 1]), np.array([10, 20, 30, 10, 20])
    c = compare(series, origin, y, model, base, (0.5,), ("A", "B"), {"B": "only 40 finite training returns"})
    # pairs: A's origins 2 (steps 1, 2) and 3 (step 1): y = 0, -2, 4. Pinball at q = 0.5 is |y - f| / 2:
    # model 0, 1, 2 (sum 3); baseline 0.5, 1.5, 1.5 (sum 3.5); sum |y| = 6
    # q-risk: model 2 * 3 / 6 = 1.0, baseline 2 * 3.5 / 6 = 1.1667; skill 1 - 1 / 1.1667 = 1/7
    assert (c["origins"], c["pairs"], c["series"]) == (2, 3, 1)
    assert c["model_q_risk"]["0.5"] == pytest.approx(1.0) and c["baseline_q_risk"]["0.5"] == pytest.approx(7 / 6)
    assert c["skill"]["0.5"] == pytest.approx(1 / 7)
    assert c["left_out"] == {"origins": 3, "series": ["B"], "origins_by_series": {"A": 1, "B": 2},
                             "reasons": {"A": NO_HISTORY, "B": "only 40 finite training returns"}}
    assert left_out_text(c["left_out"]) == f"B (only 40 finite training returns); 1 origins of 1 other series ({NO_HISTORY})"
    # differentials per origin, averaged over its realised steps: (1 - 1.5 + 0 - 0.5) / 2 = -0.5, then 2 - 1.5 = 0.5
    assert c["per_series"]["A"]["dm"]["0.5"]["mean"] == pytest.approx(0.0)
    assert c["series_won"]["0.5"] == {"won": 1, "won_significant": 0, "lost_significant": 0, "equal": 0, "of": 1}
    assert [h["pairs"] for h in c["per_horizon"]] == [2, 1]
    assert c["per_horizon"][1]["skill"]["0.5"] == pytest.approx(1 - 1 / 1.5)  # step 2: y = -2, model 1, base 1.5


def test_a_series_in_chunks_is_the_series_at_once(monkeypatch):
    """Long series are compared CHUNK origins at a time: the same result as all at once."""
    from foxhunt.evaluate import paired

    rng = np.random.default_rng(5)
    y = rng.normal(size=(50, 3))
    y[-2:, 1:] = np.nan  # the last origins' later steps unrealised
    model, base = np.sort(rng.normal(size=(2, 50, 3, 3)), axis=-1)
    base[:4] = np.nan  # no baseline forecast at the first origins
    series, origin = np.repeat([0, 1], 25), np.tile(np.arange(25), 2)
    whole = compare(series, origin, y, model, base, QS, ("A", "B"))
    monkeypatch.setattr(paired, "CHUNK", 4)
    chunked, whole = leaves(compare(series, origin, y, model, base, QS, ("A", "B"))), leaves(whole)
    numbers = {k for k, v in whole.items() if isinstance(v, float)}
    assert chunked.keys() == whole.keys() and {k: chunked[k] for k in whole if k not in numbers} == {
        k: whole[k] for k in whole if k not in numbers}
    assert [chunked[k] for k in sorted(numbers)] == pytest.approx([whole[k] for k in sorted(numbers)], rel=1e-12)


def leaves(tree: object, path: str = "") -> dict:
    """A nested result as {path: value}."""
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in leaves(sub, f"{path}/{key}").items()}
    if isinstance(tree, list):
        return {k: v for i, sub in enumerate(tree) for k, v in leaves(sub, f"{path}[{i}]").items()}
    return {path: tree}


def rounding_panel(n: int = 500, steps: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A volatility baseline's float64 quantiles (too wide, as GARCH-t's tails often are), the same forecast computed
    in float32 as a network that reproduces it does (each factor rounded, so the rounding leans one way), and
    fat-tailed actuals: (K, D), (K, D, Q) float64, (K, D, Q) float32."""
    rng = np.random.default_rng(0)
    sigma = 0.01 * np.exp(np.cumsum(rng.normal(0.0, 0.05, n)))  # (K,)
    y = 0.8 * sigma[:, None] * rng.standard_t(5, size=(n, steps))  # (K, D)
    z = np.array([-1.2815515655446004, 0.0, 1.2815515655446004])  # (Q,) normal quantiles
    base = np.broadcast_to(1.3 * sigma[:, None, None] * z, (n, steps, 3))  # (K, D, Q)
    net = np.broadcast_to(np.float32(1.3) * sigma.astype(np.float32)[:, None, None] * z.astype(np.float32),
                          (n, steps, 3))
    return y, base, net


def test_forecasts_equal_up_to_float32_rounding_are_level_and_untested():
    """The float32 forecast differs from the float64 one by a unit in the last place, leaning one way: the plain test
    called that 'better' at p < 0.005 (a skill of 5e-9). Rounding is no evidence: level, no p-value, no series won."""
    y, base, net = rounding_panel()
    series, origin = np.zeros(len(y), dtype=np.int64), np.arange(len(y))
    for model in (net, base.astype(np.float32)):  # computed in float32, or the float64 forecast cast to it
        c = compare(series, origin, y, model, base, QS, ("A",))
        for k in ("0.1", "0.5", "0.9"):
            assert abs(c["skill"][k]) < 1e-7
            assert (c["dm"][k]["outcome"], c["dm"][k]["p_value"], c["dm"][k]["stat"]) == ("level", None, None), k
            assert c["dm"][k]["equal"] and c["per_series"]["A"]["dm"][k]["equal"]
            assert c["series_won"][k] == {"won": 0, "won_significant": 0, "lost_significant": 0, "equal": 1, "of": 1}


def test_a_small_real_difference_is_still_tested():
    """Quantiles 0.1% wider than the baseline's (a 0.05% q-risk difference, the size of the quality benchmark's
    margins) on the same panel: far above rounding, so tested, and significant on 500 origins."""
    y, base, _ = rounding_panel()
    c = compare(np.zeros(len(y), dtype=np.int64), np.arange(len(y)), y, base * 1.001, base, QS, ("A",))
    for k in ("0.1", "0.9"):
        assert -1e-3 < c["skill"][k] < 0
        assert not c["dm"][k]["equal"] and c["dm"][k]["p_value"] < 0.05 and c["dm"][k]["outcome"] == "worse"
        assert c["series_won"][k]["lost_significant"] == 1 and c["series_won"][k]["equal"] == 0


def test_the_rounding_level_is_the_mean_absolute_differential_in_qrisk_units():
    """2 mean|d| / mean|y| at ROUNDING is equal, just above it is tested; a consistent differential of 0.1% of the
    loss is tested and significant, however small the losses themselves are."""
    from foxhunt.evaluate.significance import ROUNDING

    rng = np.random.default_rng(1)
    noise = rng.choice([-1.0, 1.0], size=(400, 1))  # (T, 1) signs
    at_level, = dm_tests(noise * ROUNDING / 2, horizon=1, mean_abs_y=1.0)
    above, = dm_tests(noise * ROUNDING, horizon=1, mean_abs_y=1.0)
    assert at_level.equal and at_level.outcome == "level" and at_level.p_value is None
    assert not above.equal and above.p_value is not None
    loss = 1e-6 * rng.gamma(2.0, size=(400, 1))  # (T, 1) pinball losses of returns of about 1e-5
    real, = dm_tests(1e-3 * loss, horizon=1, mean_abs_y=1e-5)  # 0.1% higher at every origin
    assert not real.equal and real.p_value < 0.001 and real.outcome == "worse"
