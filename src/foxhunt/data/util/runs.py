"""Reading a column once per run of equal rows instead of once per row.

Loaded bars come sorted by symbol and ts (clean_bars), so a column such as symbol or root holds a few hundred runs
over millions of rows. Comparing each row with the one before it (a pass that reads each string's inline prefix)
costs a fraction of hashing or ranking every string, and what is decided per symbol is then decided once per run and
repeated. Every function here is exact for rows in any order: unsorted rows only make the runs shorter.
"""

from __future__ import annotations

import numpy as np
import polars as pl


def run_starts_of(s: pl.Series) -> np.ndarray:
    """(R,) int64 the first row of each run of equal values of `s` (a null equal to a null)."""
    return np.flatnonzero(changes(s))


def changes(s: pl.Series) -> np.ndarray:
    """(N,) bool: True where a row differs from the one before it (a null equal to a null; the first row: True).
    Compared as two zero-copy slices: a shifted copy of a column of millions of strings would take tens of MB."""
    out = np.ones(len(s), dtype=bool)
    if len(s) > 1:
        out[1:] = s.slice(1).ne_missing(s.slice(0, len(s) - 1)).to_numpy()
    return out


def distinct(s: pl.Series) -> pl.Series:
    """The distinct values of `s` (nulls included, in no set order), as `s.unique()`, read from its runs' firsts."""
    return s.gather(pl.Series(run_starts_of(s), dtype=pl.get_index_type())).unique()


def run_lengths(starts: np.ndarray, n: int) -> np.ndarray:
    """(R,) the length of each run of `n` rows that start at `starts` (R,)."""
    return np.diff(np.append(starts, n))


def value_runs(a: np.ndarray, most: int | None = None) -> list[tuple[int, int, int]] | None:
    """(start, end, value) of each run of equal values of the integer array `a` (N,), in row order; None when there
    are more than `most` runs (rows not grouped: the caller then works row by row)."""
    change = np.flatnonzero(a[1:] != a[:-1]) + 1
    if most is not None and len(change) >= most:
        return None
    bounds = [0, *change.tolist(), len(a)]
    return [(lo, hi, int(a[lo])) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True) if hi > lo]
