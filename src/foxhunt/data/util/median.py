"""The median of millions of bar gaps without a partition of them: most gaps are the bar interval itself.

`np.median` partitions a copy of its input (2M gaps: ~15 ms). Bar gaps are integers and most of them equal the bar
interval, so a candidate read off a thin sample is almost always the median, and two counting passes prove it (a few
ms); anything else falls back to `np.median`. The result is `np.median`'s, bit for bit.
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
