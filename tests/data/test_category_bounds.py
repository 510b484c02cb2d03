"""Category codes are checked at the data boundary: a code outside its feature's cardinality is a one-line
InputError naming the feature, the code, the series and the bar, never a silent read of another variable's
embedding rows (or an index error inside the model)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from foxhunt.data.config import DataConfig
from foxhunt.data.features.schema import Feature, Kind, Role
from foxhunt.data.prepare import prepare_data
from foxhunt.errors import InputError
from foxhunt.model.layers import CategoricalEmbedding


@pytest.fixture
def data(fixtures_dir):
    return prepare_data(DataConfig(paths=(str(fixtures_dir / "generic_ohlcv_daily.parquet"),), encoder_length=16,
                                   horizon=3))


def test_prepared_codes_are_within_their_cardinality(data):
    data.windows.check_codes(data.schema)  # what prepare_data checked already
    assert int(data.windows.static_cat.max()) == data.schema.sizes.static_cat[0] - 1


@pytest.mark.parametrize("code", [3, 99, -1])
def test_a_code_out_of_range_names_feature_code_series_and_bar(data, code):
    codes = data.windows.static_cat.clone()
    row = int((data.windows.series_idx == 1).nonzero()[5, 0])
    codes[row, 0] = code
    windows = dataclasses.replace(data.windows, static_cat=codes)
    with pytest.raises(InputError) as err:
        windows.check_codes(data.schema, "the model's embedding table")
    msg = str(err.value)
    name = data.windows.series_names[1]
    assert f"categorical input 'series': code {code} at series {name} bar 20" in msg
    assert "outside [0, 3) of the model's embedding table" in msg and "\n" not in msg


def test_a_model_with_fewer_codes_than_the_data_is_refused(data):
    """A schema that knows fewer series than the data's codes use (a model trained on one series, say)."""
    narrower = dataclasses.replace(data.schema, features=tuple(
        dataclasses.replace(f, cardinality=2) if f.kind == Kind.CATEGORICAL else f for f in data.schema.features))
    with pytest.raises(InputError, match="code 2 at series .* outside \\[0, 2\\)"):
        data.windows.check_codes(narrower)


def test_a_categorical_column_count_mismatch_is_refused(data):
    wider = dataclasses.replace(data.schema, features=(*data.schema.features,
                                                        Feature("weekday", Role.KNOWN, Kind.CATEGORICAL, 7)))
    with pytest.raises(InputError, match="0 categorical columns where the data has 1 \\(weekday\\)"):
        data.windows.check_codes(wider)


def test_why_the_check_is_needed_the_shared_table_reads_the_next_variable():
    """The model's embedding is one table at per-variable offsets: variable 0's code 3 (out of its range 0..2) is
    variable 1's code 0. The check above keeps such codes out."""
    emb = CategoricalEmbedding((3, 4), 2)
    out = emb(torch.tensor([[3, 0]]))  # (1, 2, H)
    assert torch.equal(out[0, 0], out[0, 1])
