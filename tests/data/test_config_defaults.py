"""The data defaults chosen on validation (issue 11), and a saved DataConfig read back exactly: every option is
saved, and one missing (a file written before the option existed) is refused, never given a guessed default."""

from __future__ import annotations

import pytest

from foxhunt.data.config import DataConfig


def test_new_runs_scale_by_a_5_bar_range_volatility_and_a_saved_config_lacking_an_option_is_refused() -> None:
    new = DataConfig()
    assert (new.scaling, new.vol_estimator, new.vol_halflife) == ("volatility", "range", 5.0)
    saved = new.to_dict()
    assert DataConfig.from_dict(saved) == new
    for key in ("scaling", "vol_estimator", "vol_halflife"):
        with pytest.raises(KeyError, match=key):
            DataConfig.from_dict({k: v for k, v in saved.items() if k != key})
