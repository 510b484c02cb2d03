"""The data defaults chosen on validation (issue 11), and a saved DataConfig read back exactly: every option is
saved, and one missing (a file written before the option existed) is refused, never given a guessed default."""

from __future__ import annotations

import pytest

from foxhunt.data.config import DataConfig
from foxhunt.errors import InputError


def test_new_runs_scale_by_a_5_bar_range_volatility_and_a_saved_config_lacking_an_option_is_refused() -> None:
    new = DataConfig()
    assert (new.scaling, new.vol_estimator, new.vol_halflife) == ("volatility", "range", 5.0)
    saved = new.to_dict()
    assert DataConfig.from_dict(saved) == new
    for key in ("scaling", "vol_estimator", "vol_halflife"):
        with pytest.raises(KeyError, match=key):
            DataConfig.from_dict({k: v for k, v in saved.items() if k != key})


def test_anchor_auto_is_garch_t_for_returns_with_the_independent_head_and_none_otherwise() -> None:
    """--anchor auto (the default) resolves once, on construction, so that a run saves the anchor it used: GARCH-t's
    for a returns target; none for log_range (GARCH-t forecasts returns) and for the tied head (an anchor is
    corrected by the independent head); an anchor asked for by name is kept, or refused where it cannot serve."""
    assert (DataConfig().anchor, DataConfig().anchored) == ("garch_t", True)
    assert DataConfig(target="price_change").anchor == "garch_t"
    assert DataConfig(target="log_range").anchor == "none" and not DataConfig(target="log_range").anchored
    assert DataConfig(quantile_head="tied").anchor == "none"
    assert DataConfig(anchor="none").anchor == "none"
    with pytest.raises(InputError, match="--anchor garch_t forecasts returns"):
        DataConfig(target="log_range", anchor="garch_t")
    with pytest.raises(InputError, match="is not one of auto, none, garch_t"):
        DataConfig(anchor="har")
    saved = DataConfig().to_dict()
    assert saved["anchor"] == "garch_t" and DataConfig.from_dict(saved) == DataConfig()
    del saved["quantile_head"]  # a file of this format saved before the copy existed: its anchor already resolved
    assert DataConfig.from_dict(saved).anchor == "garch_t"


def test_settings_give_the_data_the_models_head_and_quantiles() -> None:
    from foxhunt import settings

    tied = settings.data_config({"quantile_head": "tied"}, ("a.parquet",))
    assert tied.anchor == "none" and tied.quantile_head == "tied"
    own = settings.data_config({"quantiles": "0.05,0.5,0.95"}, ("a.parquet",))
    assert own.anchor == "garch_t" and own.quantiles == (0.05, 0.5, 0.95)


def test_path_options_are_the_same_up_to_their_absolute_form(tmp_path, monkeypatch) -> None:
    """One rule for 'the same option' where a run resumes or a store is reused: a path as typed here equals the
    absolute path a run saved; any other option must be equal."""
    from foxhunt.data.config import same_option

    monkeypatch.chdir(tmp_path)
    saved = DataConfig(paths=("bars.parquet",), covariates=("vix.csv",), events="ev.csv").with_absolute_paths()
    assert saved.paths == (str(tmp_path / "bars.parquet"),) and saved.events == str(tmp_path / "ev.csv")
    assert saved.features is None and saved.covariates == (str(tmp_path / "vix.csv"),)
    assert same_option("paths", ["bars.parquet"], saved.paths) and same_option("events", "ev.csv", saved.events)
    assert not same_option("paths", ("other.parquet",), saved.paths)
    assert not same_option("timezone", "UTC", "utc") and same_option("horizon", 5, 5)
