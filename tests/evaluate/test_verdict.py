"""The sentence `foxhunt evaluate` opens with, and the clause `foxhunt train` ends with, on hand-made q-risks: a win,
a loss to the strongest baseline, a loss to a weaker one, a tie, a missing GARCH baseline and the seed spread."""

from __future__ import annotations

import json
import logging
import os
import shutil

import pytest
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from foxhunt import settings
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.prepare import prepare_data
from foxhunt.evaluate import run as evaluate_run
from foxhunt.evaluate import series_baselines
from foxhunt.evaluate.validation import data_key, judge_on_validation
from foxhunt.evaluate.verdict import TIE, seed_spread, strongest_baseline, validation_claim, verdict

QS = (0.1, 0.5, 0.9)
qrisk = st.floats(0.05, 3.0)
GARCH_HINT = "the arch package is not installed: pip install 'foxhunt[garch]'"


def test_a_model_that_beats_every_baseline_is_called_better_against_the_strongest():
    base = {"training_quantiles": {0.1: 0.60, 0.5: 1.0, 0.9: 0.62}, "rolling_vol": {0.1: 0.50, 0.5: 1.0, 0.9: 0.50},
            "garch_t": {0.1: 0.48, 0.5: 1.0, 0.9: 0.49}}
    v = verdict({0.1: 0.456, 0.5: 1.2, 0.9: 0.441}, base, QS, "The calibrated model")
    assert v.strongest == "garch_t" and v.better and v.quantiles == (0.1, 0.9)
    # 1 - 0.456 / 0.48 = 0.05, 1 - 0.441 / 0.49 = 0.10; the median (1.2, worse) is not judged
    assert v.sentence == ("The calibrated model beats all 3 baselines at p10 and p90: against the strongest, "
                          "garch_t, its q-risk is 5.0% lower at p10, 10.0% lower at p90.")
    assert v.skill["garch_t"]["0.1"] == pytest.approx(0.05)


def test_a_loss_to_the_strongest_baseline_says_by_how_much_and_names_the_others_it_does_not_beat():
    base = {"training_quantiles": {0.1: 0.584, 0.9: 0.595}, "rolling_vol": {0.1: 0.457, 0.9: 0.465},
            "garch_t": {0.1: 0.52, 0.9: 0.48}}
    v = verdict({0.1: 0.500, 0.5: 1.0, 0.9: 0.499}, base, QS)
    # 0.500 / 0.457 = 1.094, 0.499 / 0.465 = 1.073; against garch_t: 0.500 < 0.52 wins, 0.499 / 0.48 = 1.040 loses
    assert v.strongest == "rolling_vol" and not v.better
    assert v.sentence == ("The model does not beat every baseline at p10 and p90: against the strongest, rolling_vol, "
                          "its q-risk is 9.4% higher at p10, 7.3% higher at p90; nor does it beat garch_t (4.0% higher at p90).")


def test_a_baseline_the_model_loses_to_at_both_quantiles_is_named_once():
    base = {"seasonal_rolling_vol": {0.1: 0.444, 0.9: 0.455}, "rolling_vol": {0.1: 0.449, 0.9: 0.465},
            "garch_t": {0.1: 0.449, 0.9: 0.460}}
    v = verdict({0.1: 0.4661, 0.9: 0.4727}, base, QS)
    # rolling_vol: 1 - 0.4661 / 0.449 = -3.8%, 1 - 0.4727 / 0.465 = -1.7%; garch_t: -3.8%, -2.8%
    assert v.sentence == ("The model does not beat every baseline at p10 and p90: against the strongest, "
                          "seasonal_rolling_vol, its q-risk is 5.0% higher at p10, 3.9% higher at p90; nor does it "
                          "beat rolling_vol (3.8% higher at p10, 1.7% higher at p90); garch_t (3.8% higher at p10, "
                          "2.8% higher at p90).")


def test_beating_the_strongest_is_not_enough_when_a_weaker_baseline_wins_one_quantile():
    # garch_t has the lowest mean (0.49 against 0.495) but rolling_vol is lower at p90
    base = {"garch_t": {0.1: 0.48, 0.9: 0.50}, "rolling_vol": {0.1: 0.52, 0.9: 0.47}}
    v = verdict({0.1: 0.456, 0.9: 0.475}, base, QS, "The calibrated model")
    assert v.strongest == "garch_t" and not v.better
    assert v.sentence == ("The calibrated model does not beat every baseline at p10 and p90: it beats the strongest, "
                          "garch_t (5.0% lower at p10, 5.0% lower at p90), but not rolling_vol (1.1% higher at p90).")


def test_a_difference_that_rounds_to_nothing_is_a_tie_not_a_win():
    base = {"garch_t": {0.1: 0.48, 0.9: 0.49}, "rolling_vol": {0.1: 0.55, 0.9: 0.56}}
    v = verdict({0.1: 0.456, 0.9: 0.48952}, base, QS)  # p90: 1 - 0.48952 / 0.49 = 0.00098, under 0.1%
    assert not v.better
    assert v.sentence == ("The model does not beat every baseline at p10 and p90: against the strongest, garch_t, "
                          "its q-risk is 5.0% lower at p10, level at p90 (within 0.1%).")


def test_a_missing_garch_baseline_is_named_and_all_means_the_ones_scored(tmp_path, monkeypatch):
    monkeypatch.setattr(series_baselines, "garch_available", lambda: False)
    model = {"overall": {"q_risk": {"0.1": 0.456, "0.5": 1.0, "0.9": 0.441}}}  # after a JSON round trip
    base = {"training_quantiles": {"overall": {"q_risk": {"0.1": 0.60, "0.5": 1.0, "0.9": 0.62}}},
            "rolling_vol": {"overall": {"q_risk": {"0.1": 0.48, "0.5": 1.0, "0.9": 0.49}}}}
    v = evaluate_run.verdict_of(model, base, QS, applied=True, intraday=False, model_dir=tmp_path)
    assert v["better"] and v["strongest"] == "rolling_vol" and v["seed_spread"] is None
    assert v["sentence"] == ("The calibrated model beats all 2 baselines at p10 and p90: against the strongest, "
                             f"rolling_vol, its q-risk is 5.0% lower at p10, 10.0% lower at p90; garch_t was not "
                             f"scored ({GARCH_HINT}); har was not scored (it could not be fitted; see the warnings "
                             "above).")


def test_intraday_data_expects_the_seasonal_baseline_too(tmp_path, monkeypatch):
    monkeypatch.setattr(series_baselines, "garch_available", lambda: True)
    model = {"overall": {"q_risk": {0.1: 0.5, 0.9: 0.5}}}
    base = {"rolling_vol": {"overall": {"q_risk": {0.1: 0.6, 0.9: 0.6}}}}
    v = evaluate_run.verdict_of(model, base, (0.1, 0.9), applied=False, intraday=True, model_dir=tmp_path)
    assert v["sentence"].startswith("The model (uncalibrated) beats the only baseline at p10 and p90")
    for name in ("training_quantiles", "garch_t", "seasonal_rolling_vol", "har"):
        assert f"; {name} was not scored (it could not be fitted; see the warnings above)" in v["sentence"]


def test_no_baseline_means_no_claim():
    v = verdict({0.1: 0.5, 0.9: 0.5}, {}, QS, missing={"garch_t": GARCH_HINT})
    assert v.strongest is None and not v.better
    assert v.sentence == (f"No baseline could be scored at p10 and p90, so there is no claim to make; garch_t was not "
                          f"scored ({GARCH_HINT}).")


def test_the_strongest_baseline_is_the_lowest_mean_of_the_outer_quantiles():
    # a: (0.40 + 0.70) / 2 = 0.55, b: (0.50 + 0.56) / 2 = 0.53; a's better p10 and median do not decide
    base = {"a": {0.1: 0.40, 0.5: 0.1, 0.9: 0.70}, "b": {0.1: 0.50, 0.5: 9.0, 0.9: 0.56}}
    assert strongest_baseline(base, (0.1, 0.9)) == "b"
    assert strongest_baseline({**base, "c": {0.1: 0.1}}, (0.1, 0.9)) == "b"  # one without p90 cannot be ranked


def test_trains_final_clause_names_the_strongest_and_both_quantiles():
    base = {"training_quantiles": {"0.1": 0.60, "0.9": 0.62}, "garch_t": {"0.1": 0.48, "0.9": 0.49}}
    assert validation_claim({"0.1": 0.456, "0.5": 1.0, "0.9": 0.441}, base, QS) == (
        "validation q-risk p10 0.4560 / p90 0.4410 vs 0.4800 / 0.4900 for garch_t, the strongest of 2 baselines "
        "(5.0% lower / 10.0% lower): better than all 2")
    assert validation_claim({"0.1": 0.500, "0.9": 0.49952}, base, QS) == (
        "validation q-risk p10 0.5000 / p90 0.4995 vs 0.4800 / 0.4900 for garch_t, the strongest of 2 baselines "
        "(4.2% higher / 1.9% higher): NOT better than garch_t")


def test_the_seed_spread_is_min_median_max_of_the_validation_qrisk(tmp_path, monkeypatch):
    monkeypatch.setattr(series_baselines, "garch_available", lambda: True)  # not what this test is about
    seeds = {"kept_seed": 1, "seeds": [{"seed": s, "val_qrisk": {"0.1": p10, "0.5": 1.0, "0.9": p90}}
                                       for s, p10, p90 in ((0, 0.52, 0.55), (1, 0.50, 0.53), (2, 0.51, 0.56))]}
    assert seed_spread(seeds, QS) == ("validation q-risk over 3 seeds (seed 1 kept, lowest val_loss): p10 0.5000 / "
                                      "0.5100 / 0.5200, p90 0.5300 / 0.5500 / 0.5600 (min / median / max); the "
                                      "claim is for the kept seed")
    assert seed_spread({"seeds": seeds["seeds"][:1]}, QS) is None  # one seed: no spread to show
    (tmp_path / "seeds.json").write_text(json.dumps(seeds))
    model = {"overall": {"q_risk": {0.1: 0.5, 0.9: 0.5}}}
    v = evaluate_run.verdict_of(model, {}, QS, applied=True, intraday=False, model_dir=tmp_path)
    assert v["seed_spread"] == seed_spread(seeds, QS)


@examples(max_examples=40, deadline=None)
@given(model=st.tuples(qrisk, qrisk), base=st.dictionaries(st.sampled_from(["a", "b", "c"]),
                                                          st.tuples(qrisk, qrisk), min_size=1))
def test_better_means_lower_than_every_baseline_at_both_quantiles_by_more_than_a_tie(model, base):
    v = verdict(dict(zip((0.1, 0.9), model, strict=True)),
                {k: dict(zip((0.1, 0.9), b, strict=True)) for k, b in base.items()}, QS)
    assert v.better == all(m < b * (1 - TIE) for b_pair in base.values() for m, b in zip(model, b_pair, strict=True))
    assert v.strongest == min(base, key=lambda k: sum(base[k]))
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


def test_a_comparison_that_cannot_be_made_warns_and_never_fails_the_trained_run(logged):
    assert judge_on_validation(object(), DataConfig(), QS, {"0.1": 0.5, "0.9": 0.5}) is None  # no prepared data
    assert "the baselines could not be scored on validation (AttributeError: " in logged.text


def test_the_baselines_are_scored_once_per_data_and_again_for_a_rewritten_file(tmp_path, daily_path, logged):
    path = tmp_path / "bars.parquet"
    shutil.copy(daily_path, path)
    cfg = settings.data_config({"encoder_length": 16, "horizon": 3}, (str(path),))
    data = prepare_data(cfg)
    first = judge_on_validation(data, cfg, QS, {"0.1": 0.5, "0.5": 1.0, "0.9": 0.5})
    again = judge_on_validation(data, cfg, QS, {"0.1": 0.25, "0.5": 1.0, "0.9": 0.25})  # another seed, same data
    assert logged.text.count("baselines on validation (training_quantiles, rolling_vol") == 1
    assert first is not None and first.startswith("validation q-risk p10 0.5000 / p90 0.5000 vs ")
    assert again is not None and again.startswith("validation q-risk p10 0.2500 / p90 0.2500 vs ")
    assert first.split(" vs ")[1].split(" (")[0] == again.split(" vs ")[1].split(" (")[0]  # the same baseline values
    key = data_key(data, cfg, QS)
    os.utime(path, ns=(10**18, 10**18))  # the file rewritten in place: its baselines are scored afresh
    assert data_key(data, cfg, QS) != key
