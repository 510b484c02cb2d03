"""Adaptive conformal calibration (model/adaptive.py): the update rule against steps computed by hand, the pairing of
each outcome with the forecast made h bars before, no look-ahead, batch boundaries and series interleaving that
change nothing, the saved state before and after its as_of, the JSON round trip, and coverage that follows a shift."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from foxhunt.model.adaptive import (
    GRID,
    NEVER,
    AdaptiveCalibration,
    Origins,
    Rule,
    Runner,
    Track,
    track,
    warm_up,
)


def _rule(step, quantiles=(0.1, 0.9), d=1, rate=1.0, share=0.1, mode="raw", start=None) -> Rule:
    """A rule with the experts' steps `step` (K,) alike for every horizon and quantile, unit losses."""
    q = len(quantiles)
    steps = np.asarray(step, dtype=np.float64)[:, None, None] * np.ones((1, d, q))
    return Rule(tuple(quantiles), mode, np.zeros((d, q)) if start is None else np.asarray(start, dtype=np.float64),
                steps, np.ones((d, q)), rate, share)


def test_two_steps_by_hand():
    rule = _rule([0.0, 0.5])  # a fixed expert and one that moves by 0.5 x (tau or 1 - tau)
    t = rule.fresh()
    np.testing.assert_array_equal(t.weights, 0.5)
    track(rule, t.shifts, t.weights, np.array([[1.0, 1.0]]))  # the outcome 1 above both forecasts
    # equal shifts, equal losses: the weights stay 0.5; the moving expert goes up by 0.5 tau
    np.testing.assert_allclose(t.weights[:, 0], [[0.5, 0.5], [0.5, 0.5]])
    np.testing.assert_allclose(t.shifts[1, 0], [0.5 * 0.1, 0.5 * 0.9])
    np.testing.assert_allclose(t.shift()[0], [0.025, 0.225])
    track(rule, t.shifts, t.weights, np.array([[1.0, 1.0]]))
    # losses: fixed expert tau * 1 (0.1, 0.9); moving one tau * (1 - shift) (0.1 * 0.95, 0.9 * 0.55)
    for j, (fixed, moved) in enumerate([(0.1, 0.095), (0.9, 0.495)]):
        w1 = math.exp(-moved) / (math.exp(-fixed) + math.exp(-moved))
        w1 = 0.9 * w1 + 0.1 / 2  # fixed share 0.1 mixed back uniformly
        assert t.weights[1, 0, j] == pytest.approx(w1, rel=1e-12)
        assert t.weights[0, 0, j] == pytest.approx(1 - w1, rel=1e-12)
    np.testing.assert_allclose(t.shifts[1, 0], [0.1, 0.9])
    np.testing.assert_allclose(t.shift()[0], t.weights[1, 0] * [0.1, 0.9])
    track(rule, t.shifts, t.weights, np.array([[-2.0, -2.0]]))  # below both: down by 0.5 (1 - tau)
    np.testing.assert_allclose(t.shifts[1, 0], [0.1 - 0.45, 0.9 - 0.05])
    before = (t.shifts.copy(), t.weights.copy())
    track(rule, t.shifts, t.weights, np.array([[np.nan, np.nan]]))  # no outcome: nothing moves
    np.testing.assert_array_equal(t.shifts, before[0])
    np.testing.assert_array_equal(t.weights, before[1])


def test_only_the_horizons_with_an_outcome_move():
    """A series' first bars score some horizons and not others (no forecast made h bars before yet): the scored
    entries step as they would alone, the others keep their shifts and weights exactly."""
    rule = _rule([0.0, 0.5], d=2)
    part, full = rule.fresh(), rule.fresh()
    track(rule, part.shifts, part.weights, np.array([[1.0, np.nan], [np.nan, np.nan]]))
    track(rule, full.shifts, full.weights, np.array([[1.0, 1.0], [1.0, 1.0]]))
    np.testing.assert_array_equal(part.shifts[:, 0, 0], full.shifts[:, 0, 0])  # scored: the same step
    np.testing.assert_array_equal(part.weights[:, 0, 0], full.weights[:, 0, 0])
    fresh = rule.fresh()
    np.testing.assert_array_equal(part.shifts[:, 0, 1], fresh.shifts[:, 0, 1])  # not scored: untouched
    np.testing.assert_array_equal(part.shifts[:, 1], fresh.shifts[:, 1])
    np.testing.assert_array_equal(part.weights[:, 1], fresh.weights[:, 1])
    assert part.shifts[1, 0, 0] == pytest.approx(0.5 * 0.1)


def test_an_outlier_moves_the_weights_without_breaking_them():
    """A score a million units away gives every expert a loss whose exp underflows: the weights must stay a
    distribution (the best expert's loss is taken off first)."""
    rule = _rule([0.0, 0.5])
    t = rule.fresh()
    track(rule, t.shifts, t.weights, np.array([[1e6, -1e6]]))
    assert np.isfinite(t.weights).all() and np.allclose(t.weights.sum(axis=0), 1)
    assert np.isfinite(t.shift()).all()


def _by_hand(f, y, scale, eta, tau, d, scaled):
    """One expert, one quantile, as a plain loop: at bar n the outcome scores the forecast made h bars before for
    step h, and that horizon's shift c moves by eta (1[score > c] - (1 - tau)); the shift applied at n is c then."""
    c = np.zeros(d)
    out = []
    for n in range(len(y)):
        for h in range(1, d + 1):
            if n - h >= 0:
                s = (y[n] - f[n - h, h - 1]) / (scale[n - h] if scaled else 1.0)
                c[h - 1] += eta * ((1.0 if s > c[h - 1] else 0.0) - (1 - tau))
        out.append(c.copy())
    return np.array(out)


@pytest.mark.parametrize("mode", ["raw", "scaled"])
def test_each_outcome_scores_the_forecast_made_h_bars_before(mode):
    rng = np.random.default_rng(0)
    n, d = 60, 3
    f, y, scale = rng.normal(0, 1, (n, d)), rng.normal(0, 1.5, n), rng.uniform(0.5, 2, n)
    rule = _rule([0.3], quantiles=(0.8,), d=d, mode=mode)  # one expert: its weight is 1 whatever the losses
    t = rule.fresh()
    got = t.run(rule, np.arange(n) + 1, y, f[:, :, None], scale)  # (N, D, 1)
    np.testing.assert_allclose(got[:, :, 0], _by_hand(f, y, scale, 0.3, 0.8, d, mode == "scaled"), atol=1e-12)


def _sequence(seed=1, n=80, d=3, q=(0.1, 0.5, 0.9)):
    rng = np.random.default_rng(seed)
    f = np.sort(rng.normal(0, 1, (n, d, len(q))), axis=-1)
    return np.arange(n) * 10 + 5, rng.standard_t(4, n), f, rng.uniform(0.5, 2, n)


def _rule_for(f, q=(0.1, 0.5, 0.9), start=None):
    d = f.shape[1]
    return Rule.fit(np.random.default_rng(9).normal(0, 1, (200, d, len(q))),
                    np.zeros((d, len(q))) if start is None else start, q, "scaled", per_series=50)


def test_no_look_ahead_outcomes_after_t_leave_the_shift_at_t():
    origin, y, f, scale = _sequence()
    rule = _rule_for(f)
    base = rule.fresh().run(rule, origin, y, f, scale)
    for t in (0, 17, 50):
        jittered = y.copy()
        jittered[t + 1:] += np.random.default_rng(t).normal(0, 3, len(y) - t - 1)
        got = rule.fresh().run(rule, origin, jittered, f, scale)
        np.testing.assert_array_equal(got[: t + 1], base[: t + 1])  # the shift applied at t and before
        assert not np.allclose(got[t + 1:], base[t + 1:])  # later ones follow the new outcomes
    # the outcome of t's own bar is in the shift at t: it scores the forecasts made before t
    jittered = y.copy()
    jittered[30] += 5
    assert not np.allclose(rule.fresh().run(rule, origin, jittered, f, scale)[30], base[30])


def test_batches_and_interleaved_series_change_nothing():
    origin, y, f, scale = _sequence()
    rule = _rule_for(f)
    cal = AdaptiveCalibration(rule, {}, {})
    whole = cal.runner().correct(f, scale, Origins(np.zeros(len(y), int), ["A"], origin, y))
    run = cal.runner()
    parts = [run.correct(f[a:b], scale[a:b], Origins(np.zeros(b - a, int), ["A"], origin[a:b], y[a:b]))
             for a, b in ((0, 1), (1, 33), (33, 34), (34, 80))]
    np.testing.assert_array_equal(np.concatenate(parts), whole)
    # two series in one call, interleaved bar by bar across calls: each follows only its own outcomes
    origin2, y2, f2, scale2 = _sequence(seed=2)
    other = cal.runner().correct(f2, scale2, Origins(np.zeros(len(y2), int), ["B"], origin2, y2))
    run = cal.runner()
    for i in range(len(y)):
        rows = run.correct(np.stack([f[i], f2[i]]), np.array([scale[i], scale2[i]]),
                           Origins(np.array([0, 1]), ["A", "B"], np.array([origin[i], origin2[i]]),
                                   np.array([y[i], y2[i]])))
        np.testing.assert_array_equal(rows, np.stack([whole[i], other[i]]))


def test_the_saved_state_continues_after_its_as_of_and_gives_the_fixed_shifts_before():
    origin, y, f, scale = _sequence()
    rule = _rule_for(f, start=np.full((3, 3), 0.25))
    k = 40
    saved, shifted = warm_up(rule, Origins(np.zeros(k + 1, int), ["A"], origin[: k + 1], y[: k + 1]), f[: k + 1],
                             scale[: k + 1], {"as_of": "x"})
    state = saved.series["A"]
    assert state.as_of == origin[k] and np.isnan(state.pending).all()  # the file keeps no forecast
    whole = rule.fresh().run(rule, origin, y, f, scale)  # (N, D, Q) the shifts applied, origin by origin
    # the warm-up's forecasts are the ones its shifts made on the way ("scaled": shift times the window's scale)
    np.testing.assert_allclose(shifted, np.sort(f[: k + 1] + whole[: k + 1] * scale[: k + 1, None, None], axis=-1))
    # forecasting from D - 1 origins before as_of (the lead-in) continues exactly where the warm-up stopped
    d = f.shape[1]
    go_on = saved.runner().state("A").run(rule, origin[k - d + 1:], y[k - d + 1:], f[k - d + 1:], scale[k - d + 1:])
    np.testing.assert_array_equal(go_on[d - 1:], whole[k:])  # at as_of itself the saved state's shift
    np.testing.assert_array_equal(go_on[: d - 1], np.broadcast_to(rule.start, go_on[: d - 1].shape))
    # a series with no saved state starts fresh: from the fixed shifts, every outcome counted
    fresh = saved.runner()
    assert fresh.as_of("B") is None and fresh.state("B").as_of == NEVER
    np.testing.assert_allclose(fresh.state("B").shift(), rule.start, rtol=1e-15)


def test_json_round_trip_keeps_the_rule_and_every_series_state():
    origin, y, f, scale = _sequence()
    rule = _rule_for(f)
    series = np.repeat([0, 1], 40)
    saved, _ = warm_up(rule, Origins(series, ["A", "B"], np.r_[origin[:40], origin[:40]], y), f, scale,
                       {"as_of": "2024-01-01T00:00:00Z"})
    back = AdaptiveCalibration.from_dict(json.loads(json.dumps(saved.to_dict())))
    assert back.rule.quantiles == rule.quantiles and back.rule.rate == rule.rate and back.rule.share == rule.share
    np.testing.assert_array_equal(back.rule.step, rule.step)
    assert back.fitted_on == saved.fitted_on and set(back.series) == {"A", "B"}
    for name in ("A", "B"):
        np.testing.assert_array_equal(back.series[name].shifts, saved.series[name].shifts)
        np.testing.assert_array_equal(back.series[name].weights, saved.series[name].weights)
        assert back.series[name].as_of == saved.series[name].as_of
    later = (np.zeros(10, int), ["A"], origin[40:50] + 1000, y[40:50])
    np.testing.assert_array_equal(back.runner().correct(f[40:50], scale[40:50], Origins(*later)),
                                  saved.runner().correct(f[40:50], scale[40:50], Origins(*later)))
    with pytest.raises(ValueError):
        AdaptiveCalibration.from_dict({**saved.to_dict(), "series": {"A": {"as_of_ns": 0, "shifts": [[1.0]],
                                                                            "weights": [[1.0]]}}})


def test_rule_constants_from_validation_by_hand():
    s = np.arange(11.0)[:, None, None] * np.ones((1, 1, 2))  # scores 0..10: P10 = 1, P90 = 9
    start = np.array([[2.0, 8.0]])
    rule = Rule.fit(s, start, (0.1, 0.9), "scaled", per_series=100)
    np.testing.assert_allclose(rule.step[:, 0, 0], np.asarray(GRID) * 8)
    u = s[:, 0, :] - start[0]  # mean pinball of the scores against the fixed shifts
    want = [np.mean(np.maximum(tau * u[:, j], (tau - 1) * u[:, j])) for j, tau in enumerate((0.1, 0.9))]
    np.testing.assert_allclose(rule.loss_scale[0], want)
    assert rule.rate == pytest.approx(math.sqrt(8 * math.log(len(GRID)) / 100)) and rule.share == pytest.approx(0.01)


def test_coverage_follows_a_change_that_fixed_shifts_miss():
    """Scores N(0, 1) on validation, then three times as wide: the fixed p10 / p90 shifts cover about 0.35 of the
    new outcomes, the adaptive ones come back to 0.80 (Gibbs and Candes' long-run guarantee, per expert)."""
    rng = np.random.default_rng(0)
    q = (0.1, 0.9)
    val = rng.normal(0, 1, (500, 1, 2))
    start = np.quantile(val[:, 0], q, axis=0).diagonal()[None]  # (1, 2): the fixed shifts, about -1.28 / 1.28
    rule = Rule.fit(val, start, q, "raw", per_series=500)
    n = 3000
    y = rng.normal(0, 3, n)
    f = np.zeros((n, 1, 2))
    shifts = rule.fresh().run(rule, np.arange(n), y, f, np.ones(n))  # (N, 1, 2)
    lo, hi = shifts[:-1, 0, 0], shifts[:-1, 0, 1]  # the shift at bar n is for the forecast of bar n + 1
    covered = (y[1:] >= lo) & (y[1:] <= hi)
    fixed = (y[1:] >= start[0, 0]) & (y[1:] <= start[0, 1])
    assert fixed.mean() < 0.4
    assert abs(covered[-2000:].mean() - 0.8) < 0.04
    assert isinstance(rule.fresh(), Track) and isinstance(AdaptiveCalibration(rule, {}, {}).runner(), Runner)
