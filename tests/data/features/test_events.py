"""Event-calendar known inputs: reading the file, its errors, and the until/since/in_bar values by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from foxhunt.data.features.events import EventCalendar, event_columns, event_features, read_events, slug
from foxhunt.errors import InputError

MIN = 60 * 10**9  # one-minute bars, ns
T0 = 1_709_300_000 * 10**9 // MIN * MIN  # a bar start (2024-03-01), ns UTC


def cal(**events: list[int]) -> EventCalendar:
    names = tuple(sorted(events))
    return EventCalendar("test", names, tuple(np.array(sorted(events[n]), dtype=np.int64) for n in names))


def write_csv(tmp_path: Path, text: str, name: str = "events.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- values ---------------------------------------------------------------------------------------------------------


def test_event_on_a_bar_start_inside_a_bar_and_between_bars() -> None:
    """Bars start at T0 + k min. Events: exactly on bar 2's start, 30 s into bar 5."""
    c = cal(cpi=[T0 + 2 * MIN, T0 + 5 * MIN + 30 * 10**9])
    ts = T0 + MIN * np.arange(8)
    got = event_features(ts, MIN, c, cap=10)
    until = [2, 1, 0, 2, 1, 0, 10, 10]  # bar 5 holds the second event: 0; after it there is none: cap
    since = [10, 10, 10, 1, 2, 3, 0, 1]  # bar 2's event is not < its own start; 30 s before bar 6 is 0 bars
    in_bar = [0, 0, 1, 0, 0, 1, 0, 0]
    np.testing.assert_array_equal(got[:, 0], np.float32(np.array(until) / 10))
    np.testing.assert_array_equal(got[:, 1], np.float32(np.array(since) / 10))
    np.testing.assert_array_equal(got[:, 2], in_bar)
    assert got.dtype == np.float32 and got.shape == (8, 3)


def test_timestamps_between_bar_starts_and_a_longer_step() -> None:
    """Values follow from the timestamp and step alone: an event between two 5-minute bar starts."""
    c = cal(fomc=[T0 + 7 * MIN])
    got = event_features(np.array([T0, T0 + 5 * MIN, T0 + 10 * MIN]), 5 * MIN, c, cap=4)
    np.testing.assert_array_equal(got, np.float32([[1 / 4, 1, 0], [0, 1, 1], [1, 0, 0]]))


def test_cap_limits_until_and_since() -> None:
    c = cal(expiry=[T0 + 100 * MIN])
    got = event_features(np.array([T0, T0 + 97 * MIN, T0 + 103 * MIN, T0 + 500 * MIN]), MIN, c, cap=5)
    np.testing.assert_array_equal(got[:, 0], np.float32([1, 3 / 5, 1, 1]))
    np.testing.assert_array_equal(got[:, 1], np.float32([1, 1, 3 / 5, 1]))


def test_no_events_before_or_after_give_the_cap() -> None:
    c = cal(cpi=[T0 + 10 * MIN])
    before, after = event_features(np.array([T0 - 10**6 * MIN, T0 + 10**6 * MIN]), MIN, c, cap=60)
    np.testing.assert_array_equal(before, [1, 1, 0])
    np.testing.assert_array_equal(after, [1, 1, 0])


def test_unsorted_timestamps_give_the_rows_of_the_sorted_ones() -> None:
    c = cal(cpi=[T0 + 3 * MIN, T0 + 9 * MIN])
    ts = T0 + MIN * np.arange(12)
    order = np.random.default_rng(0).permutation(ts.size)
    np.testing.assert_array_equal(event_features(ts[order], MIN, c, 8), event_features(ts, MIN, c, 8)[order])


def test_several_names_in_column_order() -> None:
    c = cal(fomc=[T0 + MIN], cpi=[T0])
    assert event_columns(c) == ("cpi_until", "cpi_since", "cpi_in_bar", "fomc_until", "fomc_since", "fomc_in_bar")
    got = event_features(np.array([T0]), MIN, c, cap=2)
    np.testing.assert_array_equal(got, np.float32([[0, 1, 1, 1 / 2, 1, 0]]))


def test_empty_inputs_keep_their_shape() -> None:
    assert event_features(np.array([], dtype=np.int64), MIN, cal(cpi=[T0]), 4).shape == (0, 3)
    assert event_features(np.array([T0]), MIN, cal(), 4).shape == (1, 0)
    np.testing.assert_array_equal(event_features(np.array([T0]), MIN, cal(cpi=[]), 4), [[1, 1, 0]])


def test_bad_cap_or_step_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="cap >= 1"):
        event_features(np.array([T0]), MIN, cal(cpi=[T0]), 0)


def reference(ts: int, step: int, times: list[int], cap: int) -> list[float]:
    """The definition, one timestamp at a time."""
    nxt = [e for e in times if e >= ts]
    prv = [e for e in times if e < ts]
    until = min((min(nxt) - ts) // step, cap) / cap if nxt else 1.0
    since = min((ts - max(prv)) // step, cap) / cap if prv else 1.0
    return [until, since, float(any(ts <= e < ts + step for e in times))]


@examples(max_examples=150, deadline=None)
@given(
    events=st.lists(st.integers(-10_000, 10_000), max_size=12),
    asked=st.lists(st.integers(-12_000, 12_000), min_size=1, max_size=30),
    step=st.integers(1, 700),
    cap=st.integers(1, 50),
)
def test_a_row_depends_on_its_timestamp_and_the_calendar_alone(events, asked, step, cap) -> None:
    """No look-around: a timestamp's row is the same alone, among any others, and equals the definition."""
    c = cal(a=sorted(set(events)), b=sorted({e * 3 for e in events}))
    ts = np.array(asked, dtype=np.int64)
    together = event_features(ts, step, c, cap)
    for i, t in enumerate(asked):
        alone = event_features(np.array([t]), step, c, cap)[0]
        np.testing.assert_array_equal(together[i], alone)
        want = reference(t, step, list(c.times[0]), cap) + reference(t, step, list(c.times[1]), cap)
        np.testing.assert_array_equal(alone, np.float32(want))


# -- reading --------------------------------------------------------------------------------------------------------


def test_csv_with_names_to_slug_and_a_calendar_exported_twice(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path,
        "time,name\n2024-03-20 13:00:00,FOMC decision\n2024-03-12 07:30:00,CPI\n"
        "2024-03-20 13:00:00,FOMC decision\n2024-01-31 13:00:00, FOMC decision \n",
    )
    c = read_events(str(path), timezone="America/Chicago")
    assert c.source == str(path) and c.names == ("cpi", "fomc_decision")
    cpi = np.datetime64("2024-03-12T12:30:00", "ns").astype(np.int64)  # 07:30 CDT is 12:30 UTC
    fomc = np.array(["2024-01-31T19:00:00", "2024-03-20T18:00:00"], dtype="datetime64[ns]").astype(np.int64)
    np.testing.assert_array_equal(c.times[0], [cpi])
    np.testing.assert_array_equal(c.times[1], fomc)  # sorted, the duplicate dropped
    assert c.times[0].dtype == np.int64 and not c.times[1].flags.writeable


def test_parquet_with_ts_and_event_columns(tmp_path: Path) -> None:
    path = tmp_path / "events.parquet"
    ts = pl.Series([T0 + MIN, T0], dtype=pl.Int64).cast(pl.Datetime("ns", "UTC"))
    pl.DataFrame({"ts": ts, "Event": ["Contract expiry", "Contract expiry"]}).write_parquet(path)
    c = read_events(str(path))
    assert c.names == ("contract_expiry",)
    np.testing.assert_array_equal(c.times[0], [T0, T0 + MIN])


def test_epoch_integers_and_the_bar_files_time_candidates(tmp_path: Path) -> None:
    path = tmp_path / "events.parquet"
    pl.DataFrame({"ts_event": [T0 // 10**9], "name": ["cpi"]}).write_parquet(path)  # epoch seconds
    np.testing.assert_array_equal(read_events(str(path)).times[0], [T0])


def test_round_trip_through_json(tmp_path: Path) -> None:
    c = cal(cpi=[T0, T0 + 5 * MIN], fomc=[T0 - 2**62])
    back = EventCalendar.from_dict(json.loads(json.dumps(c.to_dict())))
    assert back == c and back.source == "test" and back.names == c.names
    for a, b in zip(back.times, c.times, strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == np.int64
    assert back != cal(cpi=[T0])


def test_slug() -> None:
    assert slug("FOMC decision") == "fomc_decision"
    assert slug("  CPI (m/m) ") == "cpi_m_m"
    assert slug("ES-expiry") == "es_expiry"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "the events file is empty \\(0 bytes\\)"),
        ("time,name\n", "the events file has no rows"),
        ("when,name\n2024-03-01,cpi\n", "no time column \\(looked for ts_event, .*, ts\\); found columns: when, name"),
        ("time,what\n2024-03-01,cpi\n", "no event name column \\(looked for name, event\\); found columns: time, what"),
        ("time,name\n2024-03-01,cpi\n2024-03-02,\n", "column 'name' row 2 is empty; give every event a name"),
        ("time,name\n2024-03-01,cpi\n ,cpi\n", "column 'time' row 2 is empty; give every event a time"),
        ("time,name\n2024-03-01,cpi\nsoon,cpi\n", "column 'time' row 2: cannot parse timestamp 'soon'"),
        ("time,name\n2024-03-01,2024 CPI\n", "row 1: event name '2024 CPI' becomes '2024_cpi', not a name"),
        ("time,name\n2024-03-01,!!!\n", "row 1: event name '!!!' becomes ''"),
        (
            "time,name\n2024-03-01,FOMC decision\n2024-03-02,cpi\n2024-03-03,fomc-decision\n",
            "event names 'FOMC decision' \\(row 1\\) and 'fomc-decision' \\(row 3\\) both become 'fomc_decision'",
        ),
    ],
)
def test_errors_are_one_line_naming_the_file(tmp_path: Path, text: str, match: str) -> None:
    path = write_csv(tmp_path, text)
    with pytest.raises(InputError, match=match) as info:
        read_events(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message


def test_unreadable_files_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such events file"):
        read_events(str(tmp_path / "missing.parquet"))
    bad = tmp_path / "events.parquet"
    bad.write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="cannot read it as parquet"):
        read_events(str(bad))


def test_calendar_checks_its_invariants() -> None:
    with pytest.raises(ValueError, match="sorted distinct names"):
        EventCalendar("x", ("b", "a"), (np.array([1]), np.array([2])))
    with pytest.raises(ValueError, match="sorted and distinct"):
        EventCalendar("x", ("a",), (np.array([2, 1]),))
