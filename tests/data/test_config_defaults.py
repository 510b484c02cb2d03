"""The data defaults chosen on validation (issue 11), and runs saved before those options existed still load as they
were trained: series scaling, an EWMA of squared returns, halflife 20."""

from __future__ import annotations

from foxhunt.data.config import DataConfig


def test_new_runs_scale_by_a_5_bar_range_volatility_and_old_runs_keep_theirs() -> None:
    new = DataConfig()
    assert (new.scaling, new.vol_estimator, new.vol_halflife) == ("volatility", "range", 5.0)
    saved = new.to_dict()
    assert DataConfig.from_dict(saved) == new
    for key in ("scaling", "vol_estimator", "vol_halflife"):
        del saved[key]
    old = DataConfig.from_dict(saved)
    assert (old.scaling, old.vol_estimator, old.vol_halflife) == ("series", "returns", 20.0)
