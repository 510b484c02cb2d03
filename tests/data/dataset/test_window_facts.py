"""The summary's facts of rows and windows (summary.WindowFacts): against hand-counted values, merged over
consecutive groups of series exactly as computed over the whole (the pieced store sums its pieces' this way), and
the off-grid count of windows whose forecast span misses bars."""

from __future__ import annotations

import dataclasses

import numpy as np

from foxhunt.data.dataset.summary import merge_facts, window_facts
from foxhunt.data.dataset.windows import SplitResult, assign_splits, off_grid_windows, window_starts

E, D = 2, 1


def _rows(lengths: list[int], t0: int = 100) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of series with these lengths: timestamps t0, t0 + 10, ... in each, series index, code = 2 * index + 1."""
    sidx = np.repeat(np.arange(len(lengths)), lengths)
    ts = np.concatenate([t0 + 10 * np.arange(n) for n in lengths]).astype(np.int64)
    return ts, sidx, 2 * sidx + 1


def _facts(lengths: list[int], cut: int, win0: int = 0):
    ts, sidx, code = _rows(lengths)
    end = np.cumsum(lengths)
    starts = window_starts(end - lengths, end, E + D)
    split = assign_splits(ts[starts + E], ts[starts + E + D - 1], cut, None)
    facts = window_facts(ts, np.ones(len(ts), bool), sidx, code, starts, len(lengths), E, split, 0)
    return facts, {k: v + win0 for k, v in split.ids.items()}, len(starts)


def test_facts_count_rows_windows_and_each_splits_first_forecast_bars():
    facts, ids, n = _facts([4, 5], cut=135)
    # windows start after a series' first row (it has no return): series 0 (ts 100..130) has one, its first
    # forecast bar at 130; series 1 (100..140) two, at 130 and 140
    assert facts.rows.tolist() == [4, 5] and facts.windows.tolist() == [1, 2] and n == 3
    assert facts.start.tolist() == [100, 100] and facts.end.tolist() == [130, 140]
    assert facts.code.tolist() == [1, 3]
    assert facts.split_windows == {"train": 2, "val": 1, "test": 0}
    assert facts.ranges == {"train": (130, 130), "val": (140, 140), "test": None}


def test_facts_of_consecutive_groups_of_series_merge_into_those_of_the_whole():
    whole, whole_ids, _ = _facts([4, 5, 6], cut=135)
    first, first_ids, w0 = _facts([4, 5], cut=135)
    second, second_ids, _ = _facts([6], cut=135, win0=w0)
    second = dataclasses.replace(second, code=second.code + 4)  # its series is the whole's third: code 2 * 2 + 1
    merged = merge_facts([first, second])
    for field in ("rows", "start", "end", "code", "windows"):
        assert np.array_equal(getattr(merged, field), getattr(whole, field)), field
    assert (merged.split_windows, merged.ranges, merged.purged) == (whole.split_windows, whole.ranges, whole.purged)
    for k in whole_ids:
        assert np.array_equal(np.concatenate([first_ids[k], second_ids[k]]), whole_ids[k])


def test_rows_appended_for_prediction_are_not_counted():
    ts, sidx, code = _rows([5])
    real = np.array([True, True, True, False, False])
    split = SplitResult(ids={"train": np.zeros(0, np.int64), "val": np.zeros(0, np.int64), "test": np.arange(3)},
                        purged={"train": 0, "val": 0})
    facts = window_facts(ts, real, sidx, code, np.arange(3), 1, E, split, 0)
    assert facts.rows.tolist() == [3] and facts.end.tolist() == [120] and facts.ranges["test"] == (120, 140)


def test_off_grid_counts_windows_whose_last_forecast_bar_is_not_the_grids_last_step():
    ts = np.array([0, 60, 120, 240, 300], dtype=np.int64)  # a bar missing at 180
    grid = np.array([60, 120, 180, 240, 300, 360], dtype=np.int64)  # the regular grid
    base = np.array([0, 1, 2, 4, 5])  # each row's grid row of step 1 (the grid's next stamp)
    starts = np.array([0, 1, 2])  # E = 2, D = 1: origins at rows 1, 2, 3; forecast rows 2, 3, 4
    # origin 60: forecast 120 = grid[1]; origin 120: forecast 240, grid says 180; origin 240: 300 = grid[4]
    assert off_grid_windows(starts, ts, grid, 2, 1, base) == 1
    assert off_grid_windows(starts, ts, grid, 2, 1, base, chunk=1) == 1
    index_last = base.astype(np.int32)  # the same grid rows given per step (D = 1)
    assert off_grid_windows(starts, ts, grid, 2, 1, base * 0, index_last) == 1
