"""--calibration auto, the default: the fixed shifts for a model without an anchor; for an anchored one the adaptive
shifts where they beat its own quantiles on validation, none where they did not (benchmarks/RESULTS.md, "The
anchored head": fixed shifts fitted on one validation year cost the anchored model's p10 on the S&P walk-forward;
adaptive ones win the futures panel and cost KO/PEP's p10); any other method as asked."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from foxhunt.model.adaptive import started_from
from foxhunt.model.config import DEFAULT_METHOD, METHODS, ModelConfig, resolved_method
from foxhunt.model.saved import LoadedModel
from foxhunt.predict.calibrated import auto_none
from foxhunt.train.calibrate import anchored_default, mean_pinball


@pytest.mark.parametrize(("method", "anchored", "won", "applied"), [
    ("auto", True, False, "none"), ("auto", True, True, "adaptive"), ("auto", False, False, "fixed"),
    ("auto", False, True, "fixed"), ("fixed", True, True, "fixed"), ("adaptive", True, False, "adaptive"),
    ("none", False, False, "none"), ("none", True, True, "none"), ("adaptive", False, False, "adaptive"),
])
def test_auto_follows_the_validation_verdict_with_an_anchor_and_is_fixed_without(method, anchored, won,
                                                                                  applied) -> None:
    assert resolved_method(method, anchored, won) == applied


def test_auto_is_the_default_and_every_method_resolves_to_one_that_applies() -> None:
    assert DEFAULT_METHOD == "auto" and METHODS[0] == "auto"
    assert {resolved_method(m, a, w) for m in METHODS for a in (True, False) for w in (True, False)} == \
        set(METHODS) - {"auto"}


def _loaded(anchored: bool, fitted_on: dict | None) -> LoadedModel:
    adaptive = None if fitted_on is None else SimpleNamespace(fitted_on=fitted_on)
    return LoadedModel(None, ModelConfig(anchored=anchored), None, None, None, {}, adaptive=adaptive)  # type: ignore[arg-type]


def test_a_loaded_model_reads_its_verdict_from_the_adaptive_fit() -> None:
    assert _loaded(True, {"beats_own": True}).resolved_method("auto") == "adaptive"
    assert _loaded(True, {"beats_own": False}).resolved_method("auto") == "none"
    # a calibration.json from before the verdict (or none at all): the model's own quantiles, as before
    assert _loaded(True, {"start": "fixed"}).resolved_method("auto") == "none"
    assert _loaded(True, None).resolved_method("auto") == "none"
    assert _loaded(False, {"beats_own": True}).resolved_method("auto") == "fixed"


def test_mean_pinball_by_hand() -> None:
    y = np.array([[1.0, np.nan], [-2.0, 0.5]])  # (N=2, D=2); the NaN outcome is not known yet
    q = np.array([[[0.0, 1.0, 2.0], [9.0, 9.0, 9.0]], [[-1.0, 0.0, 1.0], [0.0, 0.5, 1.0]]])  # (N, D, Q)
    # residuals y - q: (1, 0, -1), (-1, -2, -3), (0.5, 0, -0.5); pinball max(tau u, (tau - 1) u)
    p10 = (0.1 * 1 + 0.9 * 1 + 0.1 * 0.5) / 3
    p50 = (0 + 0.5 * 2 + 0) / 3
    p90 = (0.1 * 1 + 0.1 * 3 + 0.1 * 0.5) / 3
    np.testing.assert_allclose(mean_pinball(y, q, (0.1, 0.5, 0.9)), [p10, p50, p90])


def test_the_train_end_line_says_what_auto_gives_an_anchored_model() -> None:
    won = {"validation_pinball": {"own": [1.0, 2.0, 1.0], "adaptive": [0.9, 2.1, 0.98]}, "beats_own": True}
    assert anchored_default(won) == ("; forecasts apply the adaptive shifts, started from the model's own quantiles "
                                     "(pinball loss on validation -0.5%)")
    lost = {"validation_pinball": {"own": [1.0, 2.0, 1.0], "adaptive": [1.0, 2.1, 1.0]}, "beats_own": False}
    assert anchored_default(lost) == ("; forecasts are the model's own quantiles (the adaptive shifts: pinball loss "
                                      "on validation +2.5%; --calibration adaptive or fixed applies shifts anyway)")
    assert anchored_default({"start": "fixed"}) == ""  # a model without an anchor: the line says nothing more


def test_where_the_trackers_started_in_words() -> None:
    assert started_from({"start": "none"}) == "the model's own quantiles"
    assert started_from({"start": "fixed"}) == started_from({}) == "the fixed shifts fitted on validation"


def test_why_auto_gives_an_anchored_model_no_shifts() -> None:
    judged = auto_none(_loaded(True, {"beats_own": False}))
    assert judged == "--calibration auto: the adaptive shifts did not beat the anchored model's own quantiles on validation"
    for unjudged in (_loaded(True, {"start": "fixed"}), _loaded(True, None)):  # a file from before the verdict; none
        assert "no validation verdict on adaptive shifts" in auto_none(unjudged)
