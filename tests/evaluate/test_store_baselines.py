"""The baselines read the prepared data alone (targets and each contract's own moves), so a feature store scores
them as the bars do: the same numbers, bit for bit, for a returns and a range target."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.features.features import raw_features
from foxhunt.data.prepare import prepare_data
from foxhunt.data.prepare.entry import prepare_store
from foxhunt.data.store.read import open_store
from foxhunt.evaluate.scored import scored_windows
from foxhunt.evaluate.validation import validation_baselines

QS = (0.1, 0.5, 0.9)


@pytest.fixture(scope="module", params=["log_return", "log_range"])
def both(request, fixtures_dir, tmp_path_factory):
    """(config, the data prepared in memory, the same data read back from a store prepared from the bars)."""
    cfg = DataConfig(paths=(str(fixtures_dir / "es_fut_ohlcv1m_databento.parquet"),), encoder_length=16, horizon=3,
                     target=request.param)
    store = tmp_path_factory.mktemp("store") / request.param
    prepare_store(cfg, store, workers=0)
    return cfg, prepare_data(cfg), open_store(store)


def test_the_prepared_data_keep_each_contracts_own_moves_as_float32(both):
    """The columns are raw_features' returns and ranges of the loaded bars: each contract's own prices."""
    cfg, data, _ = both
    bars = load_bars(cfg).bars
    feats = raw_features(bars.sort("series", "ts"), cfg.adjust, cfg.target)
    want = ("log_range", "log_return") if cfg.target == "log_range" else ("log_range",)
    assert tuple(data.own_moves) == want
    for name, column in data.own_moves.items():
        assert column.dtype == np.float32 and len(column) == data.windows.n_rows
        np.testing.assert_array_equal(column, feats[name].to_numpy().astype(np.float32))


def on_validation(data) -> dict[str, np.ndarray]:
    """Each baseline's forecasts of the validation windows, as train's final line scores them."""
    ids = data.splits["val"]
    forecasts, _ = validation_baselines(data, scored_windows(data.windows, ids, np.empty((len(ids), 3, 0))), QS)
    return forecasts


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_validation_baselines_from_a_store_are_those_from_the_bars(both):
    _, data, stored = both
    from_bars = on_validation(data)
    assert set(from_bars) == {"training_quantiles", "rolling_vol", "garch_t", "seasonal_rolling_vol", "har"}
    assert_same(on_validation(stored), from_bars)


def test_a_store_without_the_own_moves_scores_the_baselines_that_need_none(both, caplog):
    cfg, _, stored = both
    legacy = dataclasses.replace(stored, own_moves={})  # a store prepared before foxhunt kept them
    scored = on_validation(legacy)
    left_out = {"seasonal_rolling_vol", "har", "garch_t"} if cfg.target == "log_range" else {"seasonal_rolling_vol", "har"}
    assert set(scored) == {"training_quantiles", "rolling_vol", "garch_t", "seasonal_rolling_vol", "har"} - left_out
    assert_same(scored, {k: v for k, v in on_validation(stored).items() if k not in left_out})
    said = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert any("seasonal_rolling_vol left out: the feature store keeps no own_log_range" in m for m in said)

