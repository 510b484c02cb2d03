"""--calibration auto, the default: the fixed shifts for a model without an anchor, none for one with an anchor
(benchmarks/RESULTS.md, "The anchored head": the shifts fitted on one validation year cost the anchored model's p10
on the S&P walk-forward); any other method as asked."""

from __future__ import annotations

import pytest

from foxhunt.model.config import DEFAULT_METHOD, METHODS, resolved_method


@pytest.mark.parametrize(("method", "anchored", "applied"), [
    ("auto", True, "none"), ("auto", False, "fixed"),
    ("fixed", True, "fixed"), ("adaptive", True, "adaptive"), ("none", False, "none"), ("adaptive", False, "adaptive"),
])
def test_auto_is_none_with_an_anchor_and_fixed_without(method, anchored, applied) -> None:
    assert resolved_method(method, anchored) == applied


def test_auto_is_the_default_and_every_method_resolves_to_one_that_applies() -> None:
    assert DEFAULT_METHOD == "auto" and METHODS[0] == "auto"
    assert {resolved_method(m, a) for m in METHODS for a in (True, False)} == set(METHODS) - {"auto"}
