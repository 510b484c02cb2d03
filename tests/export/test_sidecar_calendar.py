"""The sidecar says where a `--calendar` model's forecast steps sit (its session and holidays) and which calendar
its session inputs follow: enough to place the steps past a holiday without foxhunt."""

from __future__ import annotations

import json

import numpy as np
import pytest

from foxhunt.data.bars.grid import future_timestamps, grid_of
from foxhunt.data.bars.sessions import session_of
from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data
from foxhunt.export.sidecar import calendar_words


def test_a_calendar_models_sidecar_carries_its_session_and_session_inputs(daily_path):
    pytest.importorskip("pandas_market_calendars")
    cfg = DataConfig(paths=(str(daily_path),), until="2024-11-28", calendar="XNYS", calendar_features=True,
                     encoder_length=16, horizon=3)
    tf = prepare_data(cfg).transform
    words = json.loads(json.dumps(calendar_words(tf)))  # as a reader gets it
    assert words["session_inputs"] == "XNYS" and "holidays" in words["decoder_steps"]
    assert "2024-11-28" in words["session"]["holidays"]  # Thanksgiving
    wednesday = np.array([np.datetime64("2024-11-27", "ns").astype(np.int64)])
    from_sidecar = future_timestamps(wednesday, tf.bar_spacing_ns, 3, tf.intraday, words["exchange_tz"],
                                     grid_of(session_of(words["session"])))
    np.testing.assert_array_equal(from_sidecar, future_timestamps(wednesday, tf.bar_spacing_ns, 3, tf.intraday,
                                                                  tf.exchange_tz, tf.grid))
    assert from_sidecar[0, 0] == np.datetime64("2024-11-29", "ns").astype(np.int64)  # past the holiday


def test_without_a_calendar_the_sidecar_says_the_default_grid(daily_path):
    tf = prepare_data(DataConfig(paths=(str(daily_path),), encoder_length=16, horizon=3)).transform
    words = calendar_words(tf)
    assert words["session"] is None and words["session_inputs"] is None
    assert "Saturdays and Sundays for daily bars" in words["decoder_steps"]


@pytest.mark.parametrize("zone", [None, "America/New_York"])
def test_your_inputs_say_the_zone_naive_source_times_are_read_in(bare_transform, zone):
    """A reader outside Python reads the covariate files' naive times in the training run's --timezone (UTC without
    one), which the sidecar states beside the (absolute) sources."""
    from foxhunt.data.features.fitted import FittedInputs
    from foxhunt.export.sidecar import inputs_json

    tf = bare_transform({"timezone": zone}, inputs=FittedInputs(observed=("stress",),
                                                                sources={"stress": "/data/stress.csv"}))
    side = json.loads(json.dumps(inputs_json(tf)))
    assert side["timezone"] == (zone or "UTC") and side["sources"] == {"stress": "/data/stress.csv"}
    assert f"wall-clock time in {zone or 'UTC'}" in side["times"]
