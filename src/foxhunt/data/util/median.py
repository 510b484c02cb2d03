"""Medians of integer bar gaps: of millions of them without a partition (most gaps are the bar interval itself),
and of gaps counted in parts.

`np.median` partitions a copy of its input. Bar gaps are integers and most of them equal the bar interval, so a
candidate read off a thin sample is almost always the median, and two counting passes prove it (several times faster);
anything else falls back to `np.median`. The result is `np.median`'s, bit for bit.
"""

from __future__ import annotations

import numpy as np

SAMPLE_STRIDE = 997  # every this-many-th value makes the sample the candidate is read from


def exact_median(a: np.ndarray) -> float:
    """`float(np.median(a))` for a non-empty integer array `a` (N,), proved by counting where it can be.

    With k = N // 2 of the sorted values, the median is the value m when m is both middle values: N odd, fewer than
    k + 1 values below m and more than k at or below it; N even, fewer than k below and more than k at or below
    (np.median then averages m with itself: m). A candidate that fails this costs the two counts and `np.median`.
    """
    n = len(a)
    if a.dtype.kind not in "iu" or n < 4 * SAMPLE_STRIDE:
        return float(np.median(a))
    sample = np.sort(a[::SAMPLE_STRIDE])
    m = sample[len(sample) // 2]
    below = int(np.count_nonzero(a < m))
    at_or_below = below + int(np.count_nonzero(a == m))
    k = n // 2
    if at_or_below > k and below < (k + 1 if n % 2 else k):
        return float(np.float64(m)) if abs(int(m)) < 2**53 else float(np.median(a))
    return float(np.median(a))


def median_gap(gaps: np.ndarray) -> int:
    """The median of integer gaps `gaps` (N,) (bar spacings in ns) as an int; 0 when there is none."""
    return int(exact_median(gaps)) if len(gaps) else 0


def counted_median(counted: list[tuple[np.ndarray, np.ndarray]]) -> int:
    """`int(np.median(x))` of integers given as (values, counts) pairs (value_counts' of each part); 0 with none.
    For medians over parts that each counted their own values (a pieced `prepare`'s bar gaps)."""
    values = np.concatenate([v for v, _ in counted])
    counts = np.concatenate([c for _, c in counted])
    if not counts.sum():
        return 0
    order = np.argsort(values, kind="stable")
    values, cum = values[order], np.cumsum(counts[order])
    n = int(cum[-1])
    lo = values[np.searchsorted(cum, (n - 1) // 2, side="right")]
    hi = values[np.searchsorted(cum, n // 2, side="right")]
    return int(np.mean(np.array([lo, hi], dtype=np.float64)))


MODE_SAMPLE = 1024  # values value_counts looks at to guess the most common one


def value_counts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, counts) of the distinct values of int64 `x` (N,), by value. The most common value (guessed from a
    sample: the bar spacing, for nearly every gap of regular bars) is counted by one comparison and only the rest is
    sorted, where sorting them all costs a few times more."""
    if not len(x):
        return x[:0], np.zeros(0, dtype=np.int64)
    sample = np.sort(x[:: max(1, len(x) // MODE_SAMPLE)])
    first = np.flatnonzero(np.r_[True, sample[1:] != sample[:-1]])
    mode = sample[first[np.argmax(np.diff(np.r_[first, len(sample)]))]]
    common = x == mode  # (N,)
    rest = np.sort(x[~common])
    first = np.flatnonzero(np.r_[True, rest[1:] != rest[:-1]]) if len(rest) else np.zeros(0, dtype=np.int64)
    values, counts = rest[first], np.diff(np.r_[first, len(rest)])
    at = int(np.searchsorted(values, mode))
    return np.insert(values, at, mode), np.insert(counts, at, int(np.count_nonzero(common)))
