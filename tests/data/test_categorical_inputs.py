"""data/features/timed_categories.py against hand-computed codes: the vocabulary of the training values, code =
index + 1, 0 for an unseen value (counted, said once) and for no value; known codes as of each time; the as-of join
keeping text and a categorical observed column's missing value keeping its bar; and prepared data carrying the
codes in time_cat / known_cat through a store."""

from __future__ import annotations

import logging

import numpy as np
import polars as pl
import pytest
import torch

from foxhunt.data.features import inputs, timed_categories
from foxhunt.data.features.covariate_files import CovariateTable
from foxhunt.data.features.covariates import asof_join, known_values_at

UTC_NS = pl.Datetime("ns", "UTC")


def unkeyed(ts: list[int], **cols: list) -> CovariateTable:
    return CovariateTable("c.csv", pl.DataFrame({"ts": pl.Series(ts, dtype=pl.Int64).cast(UTC_NS), **cols}),
                          keyed=False)


def test_numbers_taken_as_categories_read_as_text_without_a_trailing_zero():
    got = timed_categories.texts(pl.Series("x", [1.0, 2.5, float("nan"), None, 3.0]))
    assert got.to_list() == ["1", "2.5", None, None, "3"]
    assert timed_categories.vocabulary(pl.Series("x", ["b", None, "a", "b"])) == ["a", "b"]


def test_codes_are_index_plus_one_and_an_unseen_value_is_zero_counted_and_said_once(caplog):
    s = pl.Series("regime", ["calm", "storm", "panic", None, "panic", "calm"])
    with caplog.at_level(logging.WARNING, logger="foxhunt.data"):
        got = timed_categories.codes(s, ["calm", "storm"], "--observed regime")
    assert got.tolist() == [1, 2, 0, 0, 0, 1] and got.dtype == np.int64
    said = [r.getMessage() for r in caplog.records]
    assert said == ["--observed regime: 2 rows with a value unseen in training (panic) get the unknown code 0"]


def test_known_values_are_read_as_of_each_time():
    t = unkeyed([0, 10, 20], session_type=["full", "half", "holiday"])
    (got,) = known_values_at(np.array([0, 5, 10, 19, 20]), [t], ["session_type"])
    assert got.to_list() == ["full", "full", "half", "half", "holiday"]


def test_the_asof_join_keeps_text_and_a_bar_without_a_category_keeps_its_place():
    bars = pl.DataFrame({"series": ["A"] * 4, "contract": ["AH4"] * 4,
                         "ts": pl.Series([5, 10, 15, 30], dtype=pl.Int64).cast(UTC_NS)})
    t = unkeyed([10, 20], regime=["calm", "storm"])
    joined = asof_join(bars, [t], ["regime"])
    assert joined.schema["regime"] == pl.Utf8 and joined["regime"].to_list() == [None, "calm", "calm", "storm"]
    src = inputs.Sources(observed=(), known=(), tables={"regime": t}, events=None, observed_cat=("regime",))
    kept, dropped = inputs.observe(bars, src)
    assert kept.height == 4 and dropped == 0  # no value as of the first bar: code 0, not a dropped bar


def test_arrays_code_the_rows_and_the_grid_under_the_training_vocabulary(caplog):
    """Rows at 0, 10, 20 and an appended forecast row (not real, code 0); the grid at 10, 20, 30."""
    session = unkeyed([0, 15, 30], session_type=["full", "half", "holiday"])
    src = inputs.Sources(observed=(), known=(), tables={"session_type": session, "regime": session}, events=None,
                         observed_cat=("regime",), known_cat=("session_type",))
    fitted = {"observed_cat": ["regime"], "known_cat": ["session_type"],
              "timed_vocab": {"regime": ["calm", "storm"], "session_type": ["full", "half"]}}
    observed = {"regime": pl.Series("regime", ["storm", None, "calm"])}  # the real rows' joined values
    ts, real = np.array([0, 10, 20, 30]), np.array([True, True, True, False])
    with caplog.at_level(logging.WARNING, logger="foxhunt.data"):
        time_cat, known_cat = timed_categories.arrays(fitted, src, observed, ts, real, np.array([10, 20, 30]))
    # session_type as of 0, 10, 20: full, full, half; regime storm, (none), calm
    assert time_cat.tolist() == [[1, 2], [1, 0], [2, 1], [0, 0]]
    assert known_cat.tolist() == [[1], [2], [0]]  # as of 30: holiday, unseen in training
    said = [r.getMessage() for r in caplog.records if "unseen" in r.getMessage()]
    assert said == ["--known session_type: 1 rows with a value unseen in training (holiday) get the unknown code 0"]


def test_fit_reads_the_observed_training_rows_and_the_known_values_at_the_training_times():
    session = unkeyed([0, 15, 30], session_type=["full", "half", "holiday"])
    src = inputs.Sources(observed=(), known=(), tables={"session_type": session}, events=None,
                         observed_cat=("regime",), known_cat=("session_type",))
    observed = {"regime": pl.Series(["storm", "calm", "panic"])}
    got = timed_categories.fit(src, observed, np.array([True, True, False]), np.array([0, 20]))
    assert got == {"regime": ["calm", "storm"], "session_type": ["full", "half"]}


def test_categorical_names_an_observed_or_known_column():
    inputs.check_names(("regime",), ("session_type",), (), ("regime", "session_type"))


def test_prepared_data_carry_the_codes_through_a_store(daily_path, tmp_path):
    from foxhunt.data.config import DataConfig
    from foxhunt.data.prepare import prepare_data
    from foxhunt.data.store import open_store, write_store

    bars = tmp_path / "bars.parquet"
    b = pl.read_parquet(daily_path)
    b.with_columns(regime=pl.when(pl.col("close") > pl.col("open")).then(pl.lit("up")).otherwise(pl.lit("down")))\
        .write_parquet(bars)
    cfg = DataConfig(paths=(str(bars),), encoder_length=16, horizon=3, observed=("regime",))
    data = prepare_data(cfg)
    w = data.windows
    assert data.transform.inputs["timed_vocab"] == {"regime": ["down", "up"]}
    assert w.time_cat.shape == (w.n_rows, 1) and w.known_cat.shape[1] == 0 and w.n_known_cat == 0
    want = b.sort("symbol", "timestamp").select((pl.col("close") > pl.col("open")).cast(pl.Int64) + 1)
    assert w.time_cat[:, 0].tolist() == want.to_series().to_list()
    assert [f.cardinality for f in data.schema.features if f.name == "regime"] == [3]
    store = tmp_path / "store"
    write_store(data, cfg, store)
    back = open_store(store)
    assert torch.equal(back.windows.time_cat, w.time_cat)
    ids = data.splits["val"][:5]
    assert torch.equal(back.windows.batch(ids).enc_cat, w.batch(ids).enc_cat)


@pytest.mark.parametrize("bad", ["panic"])
def test_a_value_unseen_in_training_is_unknown(bad):
    assert timed_categories.codes(pl.Series([bad]), ["calm"], "--observed regime").tolist() == [0]
