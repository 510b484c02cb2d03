"""The one name of a quantile level, shown and stored everywhere (forecast columns, tables, the console)."""

import pytest

from foxhunt.model.config import quantile_label


@pytest.mark.parametrize(("q", "name"), [(0.1, "p10"), (0.5, "p50"), (0.9, "p90"), (0.025, "p2.5"), (0.975, "p97.5"),
                                         ("0.1", "p10"), (0.05, "p5"), (1e-3, "p0.1")])
def test_quantile_label(q, name):
    assert quantile_label(q) == name
