"""The live stream's decoder grid shortcut (api/stream.py `StreamState.decoder`): when a bar lands on the previous
origin's first forecast step, the next origin's grid is the old one's tail plus one step after its last."""

from __future__ import annotations

import numpy as np
import pytest

from foxhunt.data.bars.grid import future_timestamps

MIN_NS = 60 * 10**9


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
