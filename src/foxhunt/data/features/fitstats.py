"""The scalers' statistics as per-series sufficient statistics that merge exactly across pieces of a panel.

Every number `scaling.fit_scalers` fits on the training rows is a function of per-series sums: counts, means and
sums of squared deviations (two passes within the series: as accurate as a direct std), sums of squares (range_k,
the seasonality's per-series scale) and sums by minute of the day (the seasonality profile). A series' sums depend
on its own rows alone, in row order (`sums`: a pairwise sum over its run of rows), and the pooled values are merged
from the per-series ones in series order (Chan et al.'s exact pairwise update for the variance). So a panel prepared
series group by series group (data/prepare, plan.py) gets bit-for-bit the scalers of the panel prepared as one
piece. Nothing here is a quantile: no statistic needs a sample or a second pass over other series.

A "moments" dict maps a key to a (S,) or (S, M) array over the series of one panel or piece; the arrays of pieces
holding consecutive series concatenate (`concat`) into those of the whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from foxhunt.data.features.fitted import Moments
from foxhunt.data.features.seasonality import MINUTES, Season, minute_of_day, profile_from_sums


def _safe(x: float | None, default: float) -> float:
    return float(x) if x is not None and np.isfinite(x) and x > 0 else default


@dataclass(frozen=True)
class Selected:
    """The rows where a mask holds, for sums by series over them: shared by every column with the same mask.

    at: (K,) their positions in order; g: (K,) their series index; n: (S,) rows per series."""

    at: np.ndarray
    g: np.ndarray
    n: np.ndarray
    grouped: bool = False  # g never decreases: each series' rows are one run, in series order


def select(valid: np.ndarray, g: np.ndarray, s: int) -> Selected:
    """The rows of (N,) bool `valid` with series index `g` (N,) among `s` series."""
    at = np.flatnonzero(valid)
    gv = g.take(at)
    return Selected(at=at, g=gv, n=np.bincount(gv, minlength=s), grouped=bool(np.all(gv[1:] >= gv[:-1])))


@dataclass(frozen=True)
class KeptRows:
    """The rows a fit sums over and the panel they are in: `keep` (N,) bool, the series index `g` (N,) among `s`
    series, and `kept`: select(keep, g, s), shared by every column without nulls."""

    keep: np.ndarray
    g: np.ndarray
    s: int
    kept: Selected

    @staticmethod
    def of(keep: np.ndarray, g: np.ndarray, s: int, kept: Selected | None = None) -> KeptRows:
        """`kept`: select(keep, g, s), when the caller has it."""
        return KeptRows(keep, g, s, select(keep, g, s) if kept is None else kept)


def by_series(op: np.ufunc, xv: np.ndarray, sel: Selected, per: np.ndarray) -> np.ndarray:
    """op(xv, per[sel.g]) (K,) for values `xv` (K,) of the rows `sel` and a (S,) table `per`. Rows grouped by series
    take each series' value as a scalar over its run: the same float op per element, no (K,) gather."""
    if not sel.grouped:
        return op(xv, per[sel.g])
    out = np.empty(len(xv), dtype=np.result_type(xv, per))
    lo = 0
    for i, n in enumerate(sel.n.tolist()):  # a handful of series
        if n:
            op(xv[lo : lo + n], per[i], out=out[lo : lo + n])
            lo += n
    return out


def column_moments(x: np.ndarray, valid: np.ndarray, g: np.ndarray, s: int, name: str) -> dict[str, np.ndarray]:
    """{name:n, name:mean, name:m2} (S,) of `x` over rows where `valid` holds, by series index `g` (N,)."""
    sel = select(valid, g, s)
    return moments_of(x.take(sel.at), sel, name)


def sums(xv: np.ndarray, sel: Selected) -> np.ndarray:
    """(S,) the sum of the values `xv` (K,) of the rows `sel` in each series: each run of a series' rows summed by
    itself (numpy's pairwise sum: a function of the run's values alone, 5x faster than np.bincount's weighted
    adds, which scatter into the table row by row), or by np.bincount where the rows are not grouped by series."""
    if not sel.grouped:
        return np.bincount(sel.g, weights=xv, minlength=len(sel.n))
    out = np.zeros(len(sel.n))
    lo = 0
    for i, n in enumerate(sel.n.tolist()):  # a handful of series
        if n:
            out[i] = np.add.reduce(xv[lo : lo + n], dtype=np.float64)
            lo += n
    return out


def moments_of(xv: np.ndarray, sel: Selected, name: str) -> dict[str, np.ndarray]:
    """`column_moments` of the values `xv` (K,) of the rows `sel`."""
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = sums(xv, sel) / sel.n
    dev = by_series(np.subtract, xv, sel, mean)  # (K,)
    m2 = sums(np.square(dev, out=dev), sel)
    return {f"{name}:n": sel.n, f"{name}:mean": mean, f"{name}:m2": m2}


def square_sums(x: np.ndarray, valid: np.ndarray, g: np.ndarray, s: int, name: str) -> dict[str, np.ndarray]:
    """{name:sq_n, name:sq} (S,): count and sum of x^2 over rows where `valid` holds."""
    sel = select(valid, g, s)
    return squares_of(x.take(sel.at), sel, name)


def squares_of(xv: np.ndarray, sel: Selected, name: str, squares: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """`square_sums` of the values `xv` (K,) of the rows `sel` (`squares`: xv**2, when the caller has it)."""
    squares = xv**2 if squares is None else squares
    return {f"{name}:sq_n": sel.n, f"{name}:sq": sums(squares, sel)}


def pooled(n: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> tuple[int, float, float]:
    """(n, mean, m2) of all series together, merged in series order (exact pairwise update)."""
    tn, tmean, tm2 = 0, 0.0, 0.0
    for ni, mi, vi in zip(n.tolist(), mean.tolist(), m2.tolist(), strict=True):  # a handful of series
        if ni == 0:
            continue
        total = tn + ni
        delta = mi - tmean
        tmean += delta * ni / total
        tm2 += vi + delta * delta * tn * ni / total
        tn = total
    return tn, tmean, tm2


def _std(n: int, m2: float) -> float | None:
    return float(np.sqrt(m2 / (n - 1))) if n > 1 else None


def stats(mom: dict[str, np.ndarray], cols: tuple[str, ...], names: list[str], present: np.ndarray
          ) -> tuple[dict[str, dict[str, Moments]], dict[str, Moments]]:
    """Per-series ({name: {col: Moments}} for series where `present`) and pooled {col: Moments} of `cols`.

    Where a series' std is undefined or zero (one training row, a constant column) the pooled value is used, and 1
    where that is undefined too; a mean over no row is 0."""
    pool = {}
    for c in cols:
        n, mean, m2 = pooled(mom[f"{c}:n"], mom[f"{c}:mean"], mom[f"{c}:m2"])
        pool[c] = Moments(float(mean) if n else 0.0, _safe(_std(n, m2), 1.0))
    per = {}
    for i in np.flatnonzero(present):
        per[names[i]] = {
            c: Moments(float(mom[f"{c}:mean"][i]) if mom[f"{c}:n"][i] else 0.0,
                       _safe(_std(int(mom[f"{c}:n"][i]), float(mom[f"{c}:m2"][i])), pool[c].std))
            for c in cols
        }
    return per, pool


def range_k(mom: dict[str, np.ndarray], ret: str, rng: str, names: list[str], present: np.ndarray
            ) -> tuple[dict, float]:
    """k = mean(r^2) / mean(range^2) per series and pooled (1 where undefined): range^2 in return-variance units."""

    def ratio(rn: float, rs: float, xn: float, xs: float) -> float | None:
        with np.errstate(invalid="ignore", divide="ignore"):
            return float(np.float64(rs) / rn / (np.float64(xs) / xn)) if rn and xn else None

    sums = [mom[f"{ret}:sq_n"], mom[f"{ret}:sq"], mom[f"{rng}:sq_n"], mom[f"{rng}:sq"]]
    totals = [sum_in_order(a) for a in sums]
    pool = _safe(ratio(*totals), 1.0)
    per = {names[i]: _safe(ratio(*(a[i] for a in sums)), pool) for i in np.flatnonzero(present)}
    return per, pool


def sum_in_order(a: np.ndarray) -> float:
    """The sum of a (S,) array added in series order (a piece's sums and the whole's agree bit for bit)."""
    total = 0.0 if a.dtype.kind == "f" else 0
    for v in a.tolist():
        total += v
    return total


def season_moments(ts_ns: np.ndarray, log_range: np.ndarray, valid: np.ndarray, rows: KeptRows, tz: str,
                   minute: np.ndarray | None = None, squares: tuple[np.ndarray, np.ndarray] | None = None
                   ) -> dict[str, np.ndarray]:
    """Per series (S, MINUTES) sums and counts by minute of the day of the squared range in units of the series'
    mean over the training rows (`rows.keep`; the mean over those also `valid`, not null), and the (S,) sums behind
    that mean. `minute`: (N,) minute_of_day(ts_ns, tz); `squares`: the kept rows' squared ranges (K,) and their sums
    by series (S,), where every kept row is valid; each when the caller has it."""
    kept, s = rows.kept, rows.s
    if squares is not None:
        x2, sq = squares[0], {"season:sq_n": kept.n, "season:sq": squares[1]}
    else:
        x = log_range.take(kept.at)  # (K,) the training rows: the only ones summed
        both = valid.take(kept.at)
        x2 = x**2
        sq = squares_of(x, kept, "season", x2) if both.all() else square_sums(log_range, rows.keep & valid, rows.g, s, "season")
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = sq["season:sq"] / sq["season:sq_n"]
    scale = np.array([_safe(m, 1.0) for m in mean.tolist()])  # (S,)
    with np.errstate(invalid="ignore", divide="ignore"):
        proxy = by_series(np.divide, x2, kept, scale)
    use = np.isfinite(proxy)
    every = bool(use.all())  # the usual case: no row to mask out
    at, gu, pu = (kept.at, kept.g, proxy) if every else (kept.at[use], kept.g[use], proxy[use])
    cell = gu * MINUTES + (minute_of_day(ts_ns.take(at), tz) if minute is None else minute.take(at))
    by_cell = np.bincount(cell, weights=pu, minlength=s * MINUTES).reshape(s, MINUTES)
    counts = np.bincount(cell, minlength=s * MINUTES).reshape(s, MINUTES)
    return {**sq, "season:sums": by_cell, "season:counts": counts}


def season_profile(mom: dict[str, np.ndarray], tz: str) -> Season:
    """The seasonality profile (seasonality.profile_from_sums) of the per-series minute sums, added in order."""
    sums, counts = np.zeros(MINUTES), np.zeros(MINUTES)
    for row_s, row_c in zip(mom["season:sums"], mom["season:counts"], strict=True):  # series in order
        sums += row_s
        counts += row_c
    return profile_from_sums(sums, counts, tz)


def concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The moments of consecutive series groups as the moments of all of them."""
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
