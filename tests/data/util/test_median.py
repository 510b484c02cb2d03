"""exact_median: np.median's value, bit for bit, whether the counted candidate holds or the fallback runs."""

import numpy as np
import pytest

from foxhunt.data.util.median import exact_median


@pytest.mark.parametrize("n", [1, 2, 7, 8, 3988, 3989, 50_000, 50_001])
def test_matches_np_median_on_bar_gaps(n: int) -> None:
    rng = np.random.default_rng(n)
    gaps = np.full(n, 60_000_000_000, dtype=np.int64)  # 1-minute bars
    odd = rng.random(n) < 0.2  # halts, weekends, missing bars
    gaps[odd] = rng.integers(1, 10**12, int(odd.sum()))
    assert exact_median(gaps) == float(np.median(gaps))


@pytest.mark.parametrize("seed", range(6))
def test_matches_np_median_without_a_dominant_value(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 40_000 + seed
    a = rng.integers(-50, 50, n) if seed % 2 else rng.integers(0, 10**15, n)  # ties, and nearly all distinct
    assert exact_median(a) == float(np.median(a))


def test_even_count_split_between_two_values_averages_them() -> None:
    a = np.repeat(np.array([10, 20], dtype=np.int64), 5_000)  # the middle pair is (10, 20): no single candidate
    assert exact_median(a) == float(np.median(a)) == 15.0


def test_float_input_falls_back() -> None:
    a = np.linspace(0.0, 1.0, 10_001)
    assert exact_median(a) == float(np.median(a))
