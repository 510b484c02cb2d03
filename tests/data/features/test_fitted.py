"""The fitted transform's typed records (data/features/fitted.py, dataset/types.py) are saved as plain JSON and read
back exactly: from_dict(json(to_dict(x))) == x for any record, and the saved form holds fitted values only (the
options it was fitted under are the DataConfig's, saved once beside it)."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from foxhunt.data.bars.sessions import Session
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.features.events import EventCalendar
from foxhunt.data.features.fitted import TARGET, FittedInputs, Moments, Scalers, SeriesScalers
from foxhunt.data.features.seasonality import Season

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
names = st.text(alphabet="abcdefgxyz_0123456789", min_size=1, max_size=8).filter(lambda s: s not in (TARGET,
                                                                                                        "range_k"))
name_tuples = st.lists(names, max_size=3, unique=True).map(tuple)
moments = st.builds(Moments, finite, finite)
series_scalers = st.builds(SeriesScalers, st.dictionaries(names, moments, max_size=4), finite, finite, finite)
seasons = st.builds(Season, st.sampled_from(["UTC", "America/Chicago"]), finite,
                    st.lists(finite, min_size=1, max_size=5).map(tuple))
scalers = st.builds(Scalers, st.dictionaries(names, series_scalers, max_size=3), series_scalers,
                    st.none() | seasons, name_tuples)


@st.composite
def calendars(draw) -> EventCalendar:
    events = draw(st.lists(names, min_size=1, max_size=2, unique=True).map(sorted))
    times = st.lists(st.integers(0, 2**62), max_size=3, unique=True).map(lambda t: np.array(sorted(t), np.int64))
    keys = draw(st.lists(names, max_size=2, unique=True).map(sorted))
    return EventCalendar("events.csv", tuple(events), tuple(draw(times) for _ in events), tuple(keys),
                         tuple(tuple(draw(times) for _ in events) for _ in keys))


fitted_inputs = st.builds(
    FittedInputs, observed=name_tuples, known=name_tuples, static=name_tuples,
    static_kinds=st.dictionaries(names, st.sampled_from(["real", "categorical"]), max_size=2),
    static_scalers=st.dictionaries(names, moments, max_size=2),
    static_vocab=st.dictionaries(names, name_tuples, max_size=2), observed_cat=name_tuples, known_cat=name_tuples,
    timed_vocab=st.dictionaries(names, name_tuples, max_size=2), bar_columns=name_tuples, context=name_tuples,
    known_scalers=st.dictionaries(names, moments, max_size=2), events=st.none() | calendars(),
    sources=st.dictionaries(names, names, max_size=2))
sessions = st.builds(Session, calendar=names, tz=st.sampled_from(["UTC", "America/New_York"]),
                     open_min=st.integers(0, 1439), close_min=st.integers(0, 1439),
                     weekdays=st.lists(st.integers(0, 6), min_size=1, max_size=5, unique=True).map(sorted).map(tuple),
                     holidays=st.lists(st.sampled_from(["2024-01-01", "2024-12-25"]), unique=True).map(tuple))
transforms = st.builds(
    FittedTransform, series_vocab=name_tuples, scalers=scalers,
    data=st.builds(DataConfig, target=st.sampled_from(["log_return", "log_range"]), fill_gaps=st.booleans(),
                   vol_features=st.booleans()),
    intraday=st.booleans(), bar_spacing_ns=st.integers(0, 2**62), session=st.none() | sessions,
    inputs=st.none() | fitted_inputs, roots_apart=st.none() | name_tuples, roots_rolled=st.none() | name_tuples)


def through_json(d: dict) -> dict:
    return json.loads(json.dumps(d))


@settings(max_examples=25, deadline=None)
@given(transforms)
def test_a_fitted_transform_round_trips_through_json_exactly(tf):
    saved = through_json(tf.to_dict())
    back = FittedTransform.from_dict(saved, tf.data)
    assert back == tf
    assert through_json(back.to_dict()) == saved


@settings(max_examples=25, deadline=None)
@given(scalers)
def test_scalers_round_trip_and_carry_fitted_values_only(sc):
    saved = through_json(sc.to_dict())
    assert Scalers.from_dict(saved) == sc
    assert set(saved) == {"series", "pooled", "season", "user_observed"}  # no halflife, estimator, fill_gaps...


@settings(max_examples=25, deadline=None)
@given(fitted_inputs)
def test_fitted_inputs_round_trip_exactly(fitted):
    assert FittedInputs.from_dict(through_json(fitted.to_dict())) == fitted
