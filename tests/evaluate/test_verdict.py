"""The sentence `foxhunt evaluate` opens with, and the clause `foxhunt train` ends with, on hand-made comparisons
(q-risks of the model and a baseline on the rows both forecast, with the pooled Diebold-Mariano p-value): a win, a
loss to the strongest baseline, a loss to a weaker one, a difference too small to be more than noise, a missing
GARCH baseline and the seed spread."""

from __future__ import annotations

import json
import logging
import os
import shutil

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from foxhunt import settings
from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data
from foxhunt.evaluate import run as evaluate_run
from foxhunt.evaluate import series_baselines
from foxhunt.evaluate.scored_rows import scored_windows
from foxhunt.evaluate.significance import DMTest
from foxhunt.evaluate.validation import claim_on_validation, data_key, judge_on_validation
from foxhunt.evaluate.verdict import seed_spread, strongest_baseline, validation_claim, verdict

QS = (0.1, 0.5, 0.9)
qrisk = st.floats(0.05, 3.0)
GARCH_HINT = "the arch package is not installed: pip install 'foxhunt[garch]'"
RULE = "(Diebold-Mariano, 5% two-sided, on the origins both forecast)"


def comp(model: dict, base: dict, p: dict, origins: int = 1000, series: int = 4, won: int = 3, left: int = 0,
         gone: tuple[str, ...] = ()) -> dict:
    """A comparison (evaluate/paired.py's layout, after a JSON round trip): q-risks of the model and the baseline on
    the rows both forecast, the pooled p-value, the series won."""
    keys = {f"{q:g}": q for q in model}
    dm = {}
    for k, q in keys.items():
        mean = model[q] - base[q]  # the sign of the loss differential: the model's minus the baseline's
        dm[k] = DMTest(mean, mean / 0.01, p[q], 500, 4).to_dict()
    return {"origins": origins, "series": series, "model_q_risk": {k: model[q] for k, q in keys.items()},
            "baseline_q_risk": {k: base[q] for k, q in keys.items()},
            "skill": {k: 1 - model[q] / base[q] for k, q in keys.items()}, "dm": dm,
            "series_won": {k: {"won": won, "won_significant": 1, "lost_significant": 0, "of": series} for k in keys},
            "left_out": {"origins": left, "series": list(gone), "reasons": {}, "origins_by_series": {}}}


def test_a_model_significantly_better_than_every_baseline_is_called_better_against_the_strongest():
    base = {"training_quantiles": comp({0.1: 0.456, 0.9: 0.441}, {0.1: 0.60, 0.9: 0.62}, {0.1: 1e-6, 0.9: 1e-6}),
            "rolling_vol": comp({0.1: 0.456, 0.9: 0.441}, {0.1: 0.50, 0.9: 0.50}, {0.1: 0.001, 0.9: 0.002}),
            "garch_t": comp({0.1: 0.456, 0.9: 0.441}, {0.1: 0.48, 0.9: 0.49}, {0.1: 0.012, 0.9: 0.0004},
                            origins=950, series=3, won=2, left=50, gone=("NI0",))}
    v = verdict(base, QS, "The calibrated model")
    assert v.strongest == "garch_t" and v.better and v.quantiles == (0.1, 0.9)
    # 1 - 0.456 / 0.48 = 0.05, 1 - 0.441 / 0.49 = 0.10
    assert v.sentence == (f"The calibrated model beats all 3 baselines at p10 and p90 {RULE}: against the strongest, "
                          "garch_t, it is better at p10 (q-risk 5.0% lower, p = 0.012) and better at p90 (q-risk 10.0% "
                          "lower, p < 0.001) on 950 origins of 3 series (1 series and 50 origins with no forecast of it "
                          "left out), with a lower q-risk in 2 of 3 series at p10 (1 significantly) and 2 of 3 at p90 "
                          "(1 significantly).")
    assert v.skill["garch_t"]["0.1"] == pytest.approx(0.05) and v.p_value["garch_t"]["0.9"] == 0.0004
    assert v.outcome["garch_t"] == {"0.1": "better", "0.9": "better"}


def test_a_lower_qrisk_that_could_be_noise_is_level_not_a_win():
    """5% lower at p10 but p = 0.21: not better. The old rule (more than a 0.1% tie) called it a win."""
    base = {"garch_t": comp({0.1: 0.456, 0.9: 0.441}, {0.1: 0.48, 0.9: 0.49}, {0.1: 0.21, 0.9: 0.001})}
    v = verdict(base, QS)
    assert not v.better and v.outcome["garch_t"] == {"0.1": "level", "0.9": "better"}
    assert v.sentence == (f"The model does not beat every baseline at p10 and p90 {RULE}: against the strongest, "
                          "garch_t, it is level at p10 (q-risk 5.0% lower, p = 0.210) and better at p90 (q-risk 10.0% "
                          "lower, p = 0.001) on 1,000 origins of 4 series, with a lower q-risk in 3 of 4 series at "
                          "p10 (1 significantly) and 3 of 4 at p90 (1 significantly).")


def test_forecasts_equal_to_float_rounding_read_level_in_every_verdict():
    """An anchored model that kept its untrained epoch IS GARCH-t's forecast, in float32: a q-risk 4e-8 higher, whose
    test the differentials' rounding once made 'worse at p10 (q-risk 0.0% higher, p < 0.001)'. Equal forecasts
    (the test's `equal`) are level, untested, in the sentence, train's clause, a backtest fold's line and the table."""
    from foxhunt.backtest.run import _vs
    from foxhunt.evaluate.table import format_results

    garch = comp({0.1: 0.58105489, 0.9: 0.53170996}, {0.1: 0.58105487, 0.9: 0.53170994}, {0.1: None, 0.9: None},
                 series=1, won=0)
    garch["dm"] = {k: DMTest(3.7e-11, None, None, 251, 4, equal=True).to_dict() for k in garch["dm"]}
    garch["series_won"] = {k: {"won": 0, "won_significant": 0, "lost_significant": 0, "equal": 1, "of": 1}
                           for k in garch["dm"]}
    har = comp({0.1: 0.5811, 0.9: 0.5317}, {0.1: 0.6589, 0.9: 0.5367}, {0.1: 1e-5, 0.9: 0.25}, series=1, won=1)
    comparisons = {"garch_t": garch, "har": har}
    v = verdict(comparisons, QS)
    assert v.strongest == "garch_t" and not v.better
    assert v.outcome["garch_t"] == {"0.1": "level", "0.9": "level"}
    assert v.p_value["garch_t"] == {"0.1": None, "0.9": None}
    equal = "level at p{} (q-risk equal to float rounding, not tested)"
    assert v.sentence == (f"The model does not beat every baseline at p10 and p90 {RULE}: against the strongest, "
                          f"garch_t, it is {equal.format(10)} and {equal.format(90)} on 1,000 origins of 1 series; "
                          "nor does it beat har: level at p90 (q-risk 0.9% lower, p = 0.250).")
    claim = validation_claim(comparisons, QS, {"0.1": 0.5811, "0.9": 0.5317}, 251)
    assert f"1,000 origins, {equal.format(10)}, {equal.format(90)}: NOT better than garch_t" in claim
    fold = _vs({"model": {"overall": {"q_risk": {"0.1": 0.5811, "0.5": 0.9846, "0.9": 0.5317}}},
                "comparisons": comparisons})
    assert "garch_t -0.000 / -0.000 (p equal / equal) on 1,000 origins" in fold
    assert "har +0.118 / +0.009 (p <0.001 / 0.250)" in fold
    block = {"overall": {"q_risk": {"0.1": 0.5811, "0.5": 0.9846, "0.9": 0.5317}}}
    table = format_results({"model": {**block, "quantiles": list(QS)}, "baselines": {"garch_t": block},
                            "skill": {k: c["skill"] for k, c in comparisons.items()}, "comparisons": comparisons,
                            "target": "log_return", "verdict": None,
                            "period": {"origins": 251, "first_origin": "2017-01-03T00:00:00Z",
                                       "last_origin": "2017-12-28T00:00:00Z"}}).splitlines()
    p_row = table[table.index(next(line for line in table if line.startswith("  vs garch_t"))) + 1]
    assert p_row.split() == ["p", "equal", "-", "equal"]  # no comparison at p50 here


def test_a_loss_to_the_strongest_baseline_says_by_how_much_and_names_the_others_it_does_not_beat():
    m = {0.1: 0.500, 0.9: 0.499}
    base = {"training_quantiles": comp(m, {0.1: 0.584, 0.9: 0.595}, {0.1: 1e-5, 0.9: 1e-5}),
            "rolling_vol": comp(m, {0.1: 0.457, 0.9: 0.465}, {0.1: 1e-5, 0.9: 0.03}),
            "garch_t": comp(m, {0.1: 0.52, 0.9: 0.48}, {0.1: 0.04, 0.9: 0.2})}
    v = verdict(base, QS)
    # 0.500 / 0.457 = 1.094, 0.499 / 0.465 = 1.073; against garch_t: 0.500 < 0.52 wins, 0.499 / 0.48 = 1.040, p 0.2
    assert v.strongest == "rolling_vol" and not v.better
    assert v.sentence == (f"The model does not beat every baseline at p10 and p90 {RULE}: against the strongest, "
                          "rolling_vol, it is worse at p10 (q-risk 9.4% higher, p < 0.001) and worse at p90 (q-risk "
                          "7.3% higher, p = 0.030) on 1,000 origins of 4 series, with a lower q-risk in 3 of 4 series "
                          "at p10 (1 significantly) and 3 of 4 at p90 (1 significantly); nor does it beat garch_t: "
                          "level at p90 (q-risk 4.0% higher, p = 0.200).")


def test_beating_the_strongest_is_not_enough_when_a_weaker_baseline_wins_one_quantile():
    m = {0.1: 0.456, 0.9: 0.475}
    base = {"garch_t": comp(m, {0.1: 0.48, 0.9: 0.50}, {0.1: 0.001, 0.9: 0.001}),
            "rolling_vol": comp(m, {0.1: 0.52, 0.9: 0.47}, {0.1: 0.001, 0.9: 0.01})}
    v = verdict(base, QS, "The calibrated model")
    assert v.strongest == "garch_t" and not v.better  # mean skill 5.0% against garch_t, 5.7% against rolling_vol
    assert v.sentence == (f"The calibrated model does not beat every baseline at p10 and p90 {RULE}: it beats the "
                          "strongest, garch_t (better at p10 (q-risk 5.0% lower, p = 0.001) and better at p90 (q-risk "
                          "5.0% lower, p = 0.001) on 1,000 origins of 4 series, with a lower q-risk in 3 of 4 series "
                          "at p10 (1 significantly) and 3 of 4 at p90 (1 significantly)), but not rolling_vol: worse "
                          "at p90 (q-risk 1.1% higher, p = 0.010).")


def test_a_missing_garch_baseline_is_named_and_all_means_the_ones_scored(tmp_path, monkeypatch):
    monkeypatch.setattr(series_baselines, "garch_available", lambda: False)
    m = {0.1: 0.456, 0.9: 0.441}
    base = json.loads(json.dumps({"training_quantiles": comp(m, {0.1: 0.60, 0.9: 0.62}, {0.1: 0.001, 0.9: 0.001}),
                                  "rolling_vol": comp(m, {0.1: 0.48, 0.9: 0.49}, {0.1: 0.01, 0.9: 0.01})}))
    v = evaluate_run.verdict_of(base, QS, applied=True, intraday=False, model_dir=tmp_path,
                                unscored={"har": {"ES": "HAR baseline: only 39 training bars", "NQ": "HAR baseline: "
                                                  "only 39 training bars"}})
    assert v["better"] and v["strongest"] == "rolling_vol" and v["seed_spread"] is None
    assert v["sentence"].startswith("The calibrated model beats all 2 baselines at p10 and p90")
    assert v["sentence"].endswith(f"; garch_t was not scored ({GARCH_HINT}); har was not scored (HAR baseline: only "
                                  "39 training bars).")


def test_intraday_data_expects_the_seasonal_baseline_too(tmp_path, monkeypatch):
    monkeypatch.setattr(series_baselines, "garch_available", lambda: True)
    base = {"rolling_vol": comp({0.1: 0.5, 0.9: 0.5}, {0.1: 0.6, 0.9: 0.6}, {0.1: 0.01, 0.9: 0.01})}
    v = evaluate_run.verdict_of(base, (0.1, 0.9), applied=False, intraday=True, model_dir=tmp_path)
    assert v["sentence"].startswith("The model (uncalibrated) beats the only baseline at p10 and p90")
    for name in ("training_quantiles", "garch_t", "seasonal_rolling_vol", "har"):
        assert f"; {name} was not scored (it could not be fitted; see the warnings above)" in v["sentence"]


def test_no_baseline_means_no_claim():
    v = verdict({}, QS, missing={"garch_t": GARCH_HINT})
    assert v.strongest is None and not v.better
    assert v.sentence == (f"No baseline could be scored at p10 and p90, so there is no claim to make; garch_t was not "
                          f"scored ({GARCH_HINT}).")


def test_the_strongest_baseline_is_the_one_the_model_is_weakest_against():
    # against a the model's skill is +0.2 at p10 and -0.3 at p90 (mean -0.05), against b -0.1 and 0.0 (-0.05 too:
    # ties keep the first); c: -0.1 and -0.05
    p = {0.1: 0.5, 0.9: 0.5}
    base = {"a": comp({0.1: 0.8, 0.9: 1.3}, {0.1: 1.0, 0.9: 1.0}, p), "c": comp({0.1: 1.1, 0.9: 1.05}, {0.1: 1.0,
                                                                                                      0.9: 1.0}, p)}
    assert strongest_baseline(base, (0.1, 0.9)) == "c"
    assert strongest_baseline({**base, "d": {"skill": {"0.1": -0.9}}}, (0.1, 0.9)) == "c"  # no p90: not ranked


def test_trains_final_clause_gives_the_figures_of_every_baseline_it_is_not_better_than():
    m = {0.1: 0.456, 0.9: 0.441}
    base = {"training_quantiles": comp(m, {0.1: 0.60, 0.9: 0.62}, {0.1: 0.001, 0.9: 0.001}),
            "garch_t": comp(m, {0.1: 0.48, 0.9: 0.49}, {0.1: 0.003, 0.9: 0.0001}, origins=900)}
    model = {"0.1": 0.457, "0.5": 1.0, "0.9": 0.440}  # on every validation origin
    assert validation_claim(base, QS, model, 1000) == (
        "validation q-risk p10 0.4570 / p90 0.4400 (1,000 origins); the strongest of 2 baselines, garch_t: 0.4800 / "
        "0.4900 against the model's 0.4560 / 0.4410 on 900 origins, better at p10 (q-risk 5.0% lower, p = 0.003), "
        "better at p90 (q-risk 10.0% lower, p < 0.001): better than all 2 (significantly at p10 and p90)")
    base["har"] = comp({0.1: 0.47, 0.9: 0.44}, {0.1: 0.471, 0.9: 0.43}, {0.1: 0.8, 0.9: 0.04})
    base["garch_t"] = comp(m, {0.1: 0.45, 0.9: 0.49}, {0.1: 0.3, 0.9: 0.0001})
    assert validation_claim(base, QS, model, 1000) == (
        "validation q-risk p10 0.4570 / p90 0.4400 (1,000 origins); the strongest of 3 baselines, har: 0.4710 / "
        "0.4300 against the model's 0.4700 / 0.4400 on 1,000 origins, level at p10 (q-risk 0.2% lower, p = 0.800), "
        "worse at p90 (q-risk 2.3% higher, p = 0.040): NOT better than har; garch_t: 0.4500 / 0.4900 against the "
        "model's 0.4560 / 0.4410 on 1,000 origins, level at p10 (q-risk 1.3% higher, p = 0.300), better at p90 (q-risk "
        "10.0% lower, p < 0.001)")


def test_the_seed_spread_is_min_median_max_of_the_validation_qrisk(tmp_path, monkeypatch):
    monkeypatch.setattr(series_baselines, "garch_available", lambda: True)  # not what this test is about
    seeds = {"kept_seed": 1, "seeds": [{"seed": s, "val_qrisk": {"0.1": p10, "0.5": 1.0, "0.9": p90}}
                                       for s, p10, p90 in ((0, 0.52, 0.55), (1, 0.50, 0.53), (2, 0.51, 0.56))]}
    assert seed_spread(seeds, QS) == ("validation q-risk over 3 seeds (seed 1 kept, lowest val_loss): p10 0.5000 / "
                                      "0.5100 / 0.5200, p90 0.5300 / 0.5500 / 0.5600 (min / median / max); the "
                                      "claim is for the kept seed")
    assert seed_spread({"seeds": seeds["seeds"][:1]}, QS) is None  # one seed: no spread to show
    (tmp_path / "seeds.json").write_text(json.dumps(seeds))
    v = evaluate_run.verdict_of({}, QS, applied=True, intraday=False, model_dir=tmp_path)
    assert v["seed_spread"] == seed_spread(seeds, QS)


@examples(max_examples=40, deadline=None)
@given(model=st.tuples(qrisk, qrisk), base=st.dictionaries(
    st.sampled_from(["a", "b", "c"]), st.tuples(qrisk, qrisk, st.floats(0.0, 1.0), st.floats(0.0, 1.0)), min_size=1))
def test_better_means_significantly_lower_than_every_baseline_at_both_quantiles(model, base):
    comps = {k: comp(dict(zip((0.1, 0.9), model, strict=True)), {0.1: b[0], 0.9: b[1]}, {0.1: b[2], 0.9: b[3]})
             for k, b in base.items()}
    v = verdict(comps, QS)
    assert v.better == all(m < b and p < 0.05 for b10, b90, p10, p90 in base.values()
                           for m, b, p in zip(model, (b10, b90), (p10, p90), strict=True))
    mean_skill = {k: (2 - model[0] / b[0] - model[1] / b[1]) / 2 for k, b in base.items()}
    assert mean_skill[v.strongest] == min(mean_skill.values())
    assert v.sentence.startswith("The model beats " if v.better else "The model does not beat every baseline")
    assert v.strongest in v.sentence


@pytest.fixture
def logged(caplog):
    """caplog with the `foxhunt` logger's INFO records, also after the CLI stopped it propagating to the root."""
    logger = logging.getLogger("foxhunt")
    attach = not logger.propagate
    if attach:
        logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="foxhunt")
    yield caplog
    if attach:
        logger.removeHandler(caplog.handler)


def test_a_comparison_that_cannot_be_made_warns_and_never_fails_the_trained_run(logged, tmp_path):
    assert judge_on_validation(object(), DataConfig(), QS, tmp_path) is None  # no prepared data, no weights
    assert "the baselines could not be scored on validation (" in logged.text


def test_the_baselines_are_fitted_once_per_data_and_again_for_a_rewritten_file(tmp_path, daily_path, logged):
    path = tmp_path / "bars.parquet"
    shutil.copy(daily_path, path)
    cfg = settings.data_config({"encoder_length": 16, "horizon": 3}, (str(path),))
    data = prepare_data(cfg)
    ids = data.splits["val"]
    n = len(ids)
    zero = scored_windows(data.windows, ids, np.zeros((n, 3, 3)))  # two made-up models: a zero forecast ...
    wide = scored_windows(data.windows, ids, np.broadcast_to(np.array([-0.02, 0.0, 0.02]), (n, 3, 3)))  # ... a band
    first = claim_on_validation(data, cfg, QS, zero)
    again = claim_on_validation(data, cfg, QS, wide)  # another seed, same data
    assert logged.text.count("baselines on validation (training_quantiles, rolling_vol") == 1
    # a zero forecast's q-risk at p10 is 2 (0.1 sum of y > 0 + 0.9 sum of |y < 0|) / sum |y|, and the mirror at p90
    y = zero.actual[np.isfinite(zero.actual)]
    up, down = y[y > 0].sum(), -y[y < 0].sum()
    p10, p90 = 2 * (0.1 * up + 0.9 * down) / (up + down), 2 * (0.9 * up + 0.1 * down) / (up + down)
    assert first.startswith(f"validation q-risk p10 {p10:.4f} / p90 {p90:.4f} ({n:,} origins); the strongest of ")
    assert again.startswith("validation q-risk p10 ") and again != first
    theirs = [c.split(" against ")[0].split(": ")[-1] for c in (first, again)]
    assert theirs[0] == theirs[1]  # the same baseline values
    key = data_key(data, cfg, QS)
    os.utime(path, ns=(10**18, 10**18))  # the file rewritten in place: its baselines are fitted afresh
    assert data_key(data, cfg, QS) != key
