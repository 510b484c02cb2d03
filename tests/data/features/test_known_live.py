"""The live stream's span cache of known inputs (data/features/known_live.py): bit for bit what the data layer
(known.py, the batch form) gives for each timestamp alone, and the forecast grid of `future_timestamps`, across halts, weekends, DST switches and --calendar's
holidays; and the stream's shortcut for the next origin's grid (bar_features_live.py `StreamState.decoder`): when a
bar lands on the previous origin's first forecast step, the next grid is the old one's tail plus one step."""

from __future__ import annotations

import numpy as np
import pytest

from foxhunt.data.bars.grid import future_timestamps
from foxhunt.data.bars.sessions import calendar_session
from foxhunt.data.features.known import known_columns
from foxhunt.data.features.known_live import KnownGrid
from foxhunt.data.features.seasonality import Season, profile_at

MIN_NS = 60 * 10**9
DAY_NS = 1440 * MIN_NS


@pytest.mark.parametrize(("start", "step_ns", "intraday", "tz", "span", "calendar"), [
    ("2024-03-08T20:00", MIN_NS, True, "America/Chicago", 300, None),  # the Friday halt, the weekend, DST starts
    ("2024-11-01T20:55", 5 * MIN_NS, True, "America/Chicago", 64, None),  # 5-minute bars, DST ends
    ("2024-03-06T00:00", DAY_NS, False, "UTC", 16, None),  # daily bars over weekends
    ("2016-08-01T00:00", DAY_NS, False, "UTC", 16, "XSHG"),  # and the Mid-Autumn and National Day holidays
    ("2024-11-26T14:30", 5 * MIN_NS, True, "America/New_York", 64, "XNYS"),  # Thanksgiving's closed session
])
def test_spans_give_each_timestamps_own_known_inputs_and_grid(start, step_ns, intraday, tz, span, calendar,
                                                              bare_transform):
    season = Season(tz, 3.0, tuple(np.linspace(0.5, 2.0, 1440).tolist())) if intraday else None
    if calendar is not None:
        pytest.importorskip("pandas_market_calendars")
    session = None if calendar is None else calendar_session(calendar)
    tf = bare_transform({"exchange_tz": tz}, intraday=intraday, bar_spacing_ns=step_ns, session=session)
    grid = KnownGrid(tf, season, span=span)  # small spans: the walk below starts several
    d = 5
    ts = int(np.datetime64(start, "ns").astype(np.int64))
    out = np.empty((d, 6 if intraday else 4), np.float32)  # intraday: 5 calendar columns and tod_vol
    for i in range(300):  # a stream of bars on the grid, some skipped, and one off the lattice
        ts = future_timestamps(np.array([ts]), step_ns, 1 + i % 3, intraday, tz, tf.grid)[0, -1] + (7 if i == 150 else 0)
        want = known_columns(np.array([ts]), tz, intraday, None, season)
        np.testing.assert_array_equal(grid.known(ts), np.array([v[0] for v in want.values()], np.float32))
        if season is not None:
            assert grid.profile(ts) == profile_at(np.array([ts]), season)[0]
        steps = future_timestamps(np.array([ts]), step_ns, d, intraday, tz, tf.grid)[0]  # (D,)
        grid.decoder(ts, out)
        want = known_columns(steps, tz, intraday, None, season)
        np.testing.assert_array_equal(out, np.stack(list(want.values()), -1).astype(np.float32))


@pytest.mark.parametrize(("start", "step_ns", "intraday", "tz"), [
    ("2024-03-08T20:00", MIN_NS, True, "America/Chicago"),  # the Friday halt, the weekend and the DST switch
    ("2024-11-01T20:55", 5 * MIN_NS, True, "America/Chicago"),  # 5-minute bars, DST ends
    ("2024-03-06T00:00", 24 * 60 * MIN_NS, False, "UTC"),  # daily bars over weekends
])
def test_the_next_origins_grid_is_the_last_grid_shifted_by_one_step(start, step_ns, intraday, tz):
    d = 5
    origin = np.array([np.datetime64(start, "ns").astype(np.int64)])
    grid = future_timestamps(origin, step_ns, d, intraday, tz)[0]  # (D,)
    crossed = 0
    for _ in range(400):  # the stream: each new bar is the last forecast's first step
        shifted = np.append(grid[1:], future_timestamps(grid[-1:], step_ns, 1, intraday, tz)[0])
        direct = future_timestamps(grid[:1], step_ns, d, intraday, tz)[0]
        np.testing.assert_array_equal(shifted, direct)
        crossed += int(np.diff(direct).max() > step_ns)
        grid = direct
    assert crossed  # the walk did cross closed time
