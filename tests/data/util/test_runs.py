"""runs.value_runs: (start, end, value) of each run of equal values, against hand-written runs."""

import numpy as np

from foxhunt.data.util.runs import run_lengths, value_runs


def test_value_runs_in_row_order():
    a = np.array([2, 2, 0, 0, 0, 2, 1])
    assert value_runs(a) == [(0, 2, 2), (2, 5, 0), (5, 6, 2), (6, 7, 1)]
    assert run_lengths(np.array([0, 2, 5, 6]), len(a)).tolist() == [2, 3, 1, 1]


def test_value_runs_gives_up_past_most_and_on_nothing():
    a = np.array([0, 1, 0, 1])
    assert value_runs(a, most=4) == [(0, 1, 0), (1, 2, 1), (2, 3, 0), (3, 4, 1)]
    assert value_runs(a, most=3) is None
    assert value_runs(np.array([], dtype=np.int64)) == []
