"""clock.local_ns takes a zoneinfo look-up per quarter-hour for a few timestamps (a live bar and its forecast
steps) and polars for many: both must give the same wall-clock times, across daylight-saving switches too."""

from __future__ import annotations

import numpy as np

from foxhunt.data.util.clock import FEW_PROBES, local_ns


def test_few_timestamps_convert_as_many_do():
    rng = np.random.default_rng(0)
    spring = np.datetime64("2024-03-10T08:00", "ns").astype(np.int64)  # 02:00 CST -> 03:00 CDT
    fall = np.datetime64("2024-11-03T07:00", "ns").astype(np.int64)  # 02:00 CDT -> 01:00 CST
    near = np.concatenate([t + np.arange(-8, 8) * 15 * 60 * 10**9 for t in (spring, fall)])
    ts = np.sort(np.concatenate([near, rng.integers(1.2e18, 1.8e18, 600)]))
    for tz in ("America/Chicago", "Europe/London", "Asia/Kolkata", "UTC"):
        many = local_ns(ts, tz)  # more than FEW_PROBES quarter-hours: polars
        one_by_one = np.concatenate([local_ns(ts[i : i + 1], tz) for i in range(len(ts))])
        assert len(np.unique(ts // (15 * 60 * 10**9))) > FEW_PROBES
        np.testing.assert_array_equal(one_by_one, many)
    assert local_ns(np.array([spring - 1]), "America/Chicago")[0] == spring - 1 - 6 * 3600 * 10**9
    assert local_ns(np.array([spring]), "America/Chicago")[0] == spring - 5 * 3600 * 10**9
