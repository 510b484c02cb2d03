"""The automatic split cuts sit on bars: a fraction of the span names a time, and the cut is the first bar at or after
it, so that daily data is cut at a day (`train cut 2015-03-02T09:36` was printed for daily bars) and the summary
names a bar. No row and no window crosses between the time and that bar: the splits and the purge stay the same."""

from __future__ import annotations

import numpy as np

from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.featurize import window_splits
from foxhunt.data.dataset.windows import series_bounds
from foxhunt.data.prepare.splits import split_cuts, split_times


def ns(*days: str) -> np.ndarray:
    return np.array([np.datetime64(d, "ns").astype(np.int64) for d in days])


def weekdays(start: str, end: str) -> np.ndarray:
    """(N,) int64 ns of the weekdays in [start, end]."""
    days = np.arange(np.datetime64(start), np.datetime64(end) + 1)
    return days[np.is_busday(days)].astype("datetime64[ns]").astype(np.int64)


CFG = DataConfig(paths=("x",), val_fraction=0.375, test_fraction=0.125, encoder_length=2, horizon=2)  # exact floats


def test_the_fractions_of_a_daily_span_cut_at_the_next_bar_by_hand():
    """The weekdays 2024-01-01 .. 01-30, a 29-day span: train ends half of it in (Monday 01-15 12:00), so the cut
    is Tuesday 01-16; validation ends 7/8 in (Friday 01-26 09:00): the cut is Monday 01-29, past the weekend."""
    ts = weekdays("2024-01-01", "2024-01-30")
    assert split_times(CFG, int(ts[0]), int(ts[-1])) == tuple(ns("2024-01-15T12:00", "2024-01-26T09:00"))
    assert split_cuts(CFG, ts) == tuple(ns("2024-01-16", "2024-01-29"))
    # in any order, and from arrays that together hold the bars (a store's pieces' distinct times)
    assert split_cuts(CFG, ts[::-1].copy()) == split_cuts(CFG, [ts[::2], ts[1::2]]) == split_cuts(CFG, ts)


def test_a_time_on_a_bar_stays_and_dates_given_are_kept():
    ts = weekdays("2024-01-01", "2024-01-30")
    no_test = DataConfig(paths=("x",), val_fraction=0.4, test_fraction=0.0)  # 0.6 of 29 days: Thursday 01-18 09:36
    assert split_cuts(no_test, ts) == (int(ns("2024-01-19")[0]), None)
    half = DataConfig(paths=("x",), val_fraction=0.5, test_fraction=0.0)  # half of 28 days: Monday 01-15 00:00
    assert split_cuts(half, ts[ts <= ns("2024-01-29")[0]]) == (int(ns("2024-01-15")[0]), None)
    dated = DataConfig(paths=("x",), train_end="2024-01-13T09:36", val_end="2024-01-21")
    assert split_cuts(dated, ts) == tuple(ns("2024-01-13T09:36", "2024-01-21"))


def test_the_splits_and_the_purge_are_those_of_the_fractions_times():
    """Two series of weekdays, one starting later: windows, splits and purged counts under the cuts on bars are
    those under the fractions' own times."""
    a, b = weekdays("2024-01-02", "2024-03-29"), weekdays("2024-01-15", "2024-03-28")
    ts = np.concatenate([a, b])
    first, end = series_bounds(np.repeat([0, 1], [len(a), len(b)]))
    on_bars = split_cuts(CFG, ts)
    times = split_times(CFG, int(ts.min()), int(ts.max()))
    assert on_bars != times and np.isin(on_bars, ts).all()
    (starts, split), (starts_t, split_t) = (window_splits(ts, first, end, 2, 2, cuts, np.iinfo(np.int64).min)
                                            for cuts in (on_bars, times))
    assert np.array_equal(starts, starts_t) and split.purged == split_t.purged and split.purged["train"] > 0
    assert all(np.array_equal(split.ids[k], split_t.ids[k]) for k in split.ids)
