"""Forecast metrics for quantile forecasts, one-shot and streaming.

Everything is on the target's own scale (unscaled), numpy in and numpy out. Legend: N origins, H horizon steps,
Q quantiles, S series.

- pinball loss `QL(y, yhat, q) = max(q (y - yhat), (q - 1)(y - yhat))`;
- q-risk (Lim et al. 2021, the TFT paper) for quantile q: `2 * sum QL / sum |y|` over every origin and horizon. A
  median forecast of 0 scores exactly 1.0 on q=0.5, so for returns q-risk(0.5) < 1 means "beats the zero forecast";
- coverage of each central interval (quantile q paired with 1 - q): share of actuals with lo <= y <= hi;
- calibration of each quantile: share of actuals below it. Ties (y == forecast) count one half, because returns of
  futures on a tick grid are exactly 0 often enough that `<` and `<=` disagree by tens of percent for a zero median;
- hit rate: share of sign agreement between the median and the actual, pairs where either is exactly 0 excluded;
- information coefficient (IC): Spearman rank correlation of the median with the actual.

`MetricAccumulator` keeps running sums per (series, horizon) on the host, so evaluating millions of origins needs
fixed memory. The IC needs ranks, which running sums cannot give: the accumulator keeps the (actual, median) pairs
exactly up to `ic_max_pairs` (default 2,000,000 pairs, about 28 MB) and beyond that a uniform reservoir sample of that
size (result key `ic_sampled` says which), so memory stays bounded and the IC stays an unbiased-sample estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from foxhunt.model.config import quantile_label

_TIE = 1e-9  # quantile levels closer than this are the same level


def pinball(y: np.ndarray, q_pred: np.ndarray, quantiles: Sequence[float] | np.ndarray) -> np.ndarray:
    """Pinball loss per origin, step and quantile: y (N, H), q_pred (N, H, Q) -> (N, H, Q). NaN in, NaN out."""
    q = np.asarray(quantiles, dtype=np.float64)  # (Q,)
    diff = np.asarray(y, dtype=np.float64)[..., None] - np.asarray(q_pred, dtype=np.float64)  # (N, H, Q)
    return np.maximum(q * diff, (q - 1.0) * diff)


def q_risk(y: np.ndarray, q_pred: np.ndarray, quantiles: Sequence[float] | np.ndarray) -> np.ndarray:
    """q-risk per quantile, (Q,): 2 * sum of pinball / sum of |y| over all origins and steps; NaN actuals ignored.

    NaN where the sum of |y| is 0 (q-risk is undefined for an all-zero target).
    """
    y = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(y)  # (N, H)
    loss = pinball(np.where(ok, y, 0.0), q_pred, quantiles)  # (N, H, Q)
    num = 2.0 * np.where(ok[..., None], loss, 0.0).sum(axis=(0, 1))  # (Q,)
    den = np.abs(y[ok]).sum()
    return num / den if den > 0 else np.full(num.shape, np.nan)


def median_index(quantiles: Sequence[float] | np.ndarray) -> int | None:
    """Position of the 0.5 quantile, or None when the forecast has no median (median metrics are then None)."""
    hits = np.flatnonzero(np.abs(np.asarray(quantiles, dtype=np.float64) - 0.5) < _TIE)
    return int(hits[0]) if hits.size else None


def interval_pairs(quantiles: Sequence[float] | np.ndarray) -> list[tuple[int, int, str]]:
    """Central intervals: (index of q, index of 1 - q, label like "p10-p90") for every q < 0.5 whose partner exists."""
    qs = np.asarray(quantiles, dtype=np.float64)
    pairs = []
    for i, lo in enumerate(qs):
        if lo < 0.5 - _TIE:
            j = np.flatnonzero(np.abs(qs - (1.0 - lo)) < _TIE)
            if j.size:
                pairs.append((i, int(j[0]), f"{quantile_label(lo)}-{quantile_label(1.0 - lo)}"))
    return pairs


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (as scipy.stats.rankdata's default), vectorised."""
    x = np.asarray(x)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    new = np.empty(xs.size, dtype=bool)
    new[:1] = True
    new[1:] = xs[1:] != xs[:-1]
    group = np.cumsum(new) - 1  # tie group of each sorted element
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], xs.size)  # exclusive
    avg = (starts + ends + 1) / 2.0  # mean of ranks start+1..end
    ranks = np.empty(xs.size, dtype=np.float64)
    ranks[order] = avg[group]
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman rank correlation of two equal-length vectors; None with fewer than 3 pairs or a constant side."""
    a, b = np.asarray(a), np.asarray(b)
    if a.size < 3:
        return None
    ra, rb = rankdata(a), rankdata(b)
    ra -= ra.mean()
    rb -= rb.mean()
    den = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / den) if den > 0 else None


def compute_metrics(
    y: np.ndarray,
    q_pred: np.ndarray,
    quantiles: Sequence[float] | np.ndarray,
    series: np.ndarray | None = None,
) -> dict[str, Any]:
    """One-shot form of `MetricAccumulator`: the full result dict for one set of forecasts."""
    n_series = 1 if series is None else int(np.max(series)) + 1
    acc = MetricAccumulator(quantiles, np.asarray(y).shape[1], n_series)
    acc.update(y, q_pred, np.zeros(len(y), dtype=np.int64) if series is None else series)
    return acc.result()


class MetricAccumulator:
    """Streaming metrics: running sums per (series, horizon) on the host, fixed memory whatever the number of origins.

    `update(y (B, H), q_pred (B, H, Q), series (B,) int codes in [0, n_series))` skips entries whose actual is NaN
    and entries whose forecast has a NaN (counted in `n_missing_forecast`, so a baseline that could not forecast
    somewhere is visible instead of silently scoring on fewer origins). `result()` gives
    `{"overall": {...}, "per_horizon": [{...} for h = 1..H], "per_series": {code: {...}}, "quantiles": [...]}`; each
    block has q_risk {q: v}, pinball {q: mean}, mean_pinball, mae_median, coverage {"p10-p90": v},
    calibration {q: share}, hit_rate, ic, n, n_missing_forecast. Undefined values (nothing to average) are None.
    Series with no scored entry are left out of per_series.
    """

    def __init__(
        self,
        quantiles: Sequence[float] | np.ndarray,
        horizon: int,
        n_series: int = 1,
        ic_max_pairs: int = 2_000_000,
        seed: int = 0,
    ):
        self.quantiles = np.asarray(quantiles, dtype=np.float64)
        self.horizon, self.n_series = int(horizon), int(n_series)
        self._mid = median_index(self.quantiles)
        self._pairs = interval_pairs(self.quantiles)
        S, H, Q, P = self.n_series, self.horizon, self.quantiles.size, len(self._pairs)
        self._n = np.zeros((S, H))
        self._missing = np.zeros((S, H))
        self._abs_y = np.zeros((S, H))
        self._loss = np.zeros((S, H, Q))
        self._below = np.zeros((S, H, Q))  # ties count 1/2
        self._covered = np.zeros((S, H, P))
        self._abs_err = np.zeros((S, H))  # |y - median|
        self._dir_n = np.zeros((S, H))
        self._dir_hit = np.zeros((S, H))
        self._reservoir = _PairReservoir(ic_max_pairs, seed)

    def update(self, y: np.ndarray, q_pred: np.ndarray, series: np.ndarray) -> None:
        y = np.asarray(y, dtype=np.float64)  # (B, H)
        q_pred = np.asarray(q_pred, dtype=np.float64)  # (B, H, Q)
        series = np.asarray(series, dtype=np.int64)  # (B,)
        B, H, Q = q_pred.shape
        if y.shape != (B, H) or H != self.horizon or Q != self.quantiles.size or series.shape != (B,):
            raise ValueError(
                f"shapes y {y.shape}, q_pred {q_pred.shape}, series {series.shape} do not match "
                f"horizon {self.horizon} and {self.quantiles.size} quantiles"
            )
        if B == 0:
            return
        if series.min() < 0 or series.max() >= self.n_series:
            raise ValueError(
                f"series codes must be in [0, {self.n_series}), got {series.min()}..{series.max()}"
            )
        has_y = np.isfinite(y)  # (B, H)
        ok = has_y & np.isfinite(q_pred).all(axis=-1)  # (B, H)
        cell = series[:, None] * H + np.arange(H)  # (B, H) flat (series, horizon) index
        c = cell[ok]  # (M,) cell of each scored entry, row-major
        yo, po = y[ok], q_pred[ok]  # (M,), (M, Q)
        shape = (self.n_series, H)
        self._n += _cell_sums(c, np.ones(c.size), shape)
        self._missing += _cell_sums(cell[has_y & ~ok], np.ones(int((has_y & ~ok).sum())), shape)
        self._abs_y += _cell_sums(c, np.abs(yo), shape)
        diff = yo[:, None] - po  # (M, Q)
        self._loss += _cell_sums(c, np.maximum(self.quantiles * diff, (self.quantiles - 1.0) * diff), shape)
        self._below += _cell_sums(c, (diff < 0) + 0.5 * (diff == 0), shape)
        if self._pairs:
            lo, hi = [p[0] for p in self._pairs], [p[1] for p in self._pairs]
            inside = (po[:, lo] <= yo[:, None]) & (yo[:, None] <= po[:, hi])  # (M, P)
            self._covered += _cell_sums(c, inside.astype(np.float64), shape)
        if self._mid is not None:
            med = po[:, self._mid]  # (M,)
            self._abs_err += _cell_sums(c, np.abs(yo - med), shape)
            directional = (yo != 0) & (med != 0)  # zeros carry no direction
            self._dir_n += _cell_sums(c, directional.astype(np.float64), shape)
            self._dir_hit += _cell_sums(
                c, (directional & (np.sign(yo) == np.sign(med))).astype(np.float64), shape
            )
            steps = np.broadcast_to(np.arange(H), (B, H))[ok]  # (M,)
            self._reservoir.add(yo, med, c // H, steps)

    def result(self) -> dict[str, Any]:
        ic_y, ic_m, ic_s, ic_h = self._reservoir.pairs()
        sums = self._sums()
        overall = self._block({k: v.sum(axis=(0, 1)) for k, v in sums.items()}, ic_y, ic_m)
        per_h = []
        for h in range(self.horizon):
            sel = ic_h == h
            per_h.append(self._block({k: v[:, h].sum(axis=0) for k, v in sums.items()}, ic_y[sel], ic_m[sel]))
        per_s = {}
        for s in np.flatnonzero(self._n.sum(axis=1) > 0):
            sel = ic_s == s
            per_s[int(s)] = self._block({k: v[s].sum(axis=0) for k, v in sums.items()}, ic_y[sel], ic_m[sel])
        return {
            "quantiles": [float(q) for q in self.quantiles],
            "overall": overall,
            "per_horizon": per_h,
            "per_series": per_s,
            "ic_sampled": self._reservoir.sampled,
        }

    def _sums(self) -> dict[str, np.ndarray]:
        return {
            "n": self._n,
            "missing": self._missing,
            "abs_y": self._abs_y,
            "loss": self._loss,
            "below": self._below,
            "covered": self._covered,
            "abs_err": self._abs_err,
            "dir_n": self._dir_n,
            "dir_hit": self._dir_hit,
        }

    def _block(self, s: dict[str, np.ndarray], ic_y: np.ndarray, ic_m: np.ndarray) -> dict[str, Any]:
        n = float(s["n"])
        qs = [float(q) for q in self.quantiles]
        ratio = lambda a, b: float(a / b) if b > 0 else None  # noqa: E731
        has_mid = self._mid is not None
        return {
            "q_risk": {q: ratio(2.0 * s["loss"][i], s["abs_y"]) for i, q in enumerate(qs)},
            "pinball": {q: ratio(s["loss"][i], n) for i, q in enumerate(qs)},
            "mean_pinball": ratio(s["loss"].sum(), n * len(qs)),
            "mae_median": ratio(s["abs_err"], n) if has_mid else None,
            "coverage": {label: ratio(s["covered"][k], n) for k, (_, _, label) in enumerate(self._pairs)},
            "calibration": {q: ratio(s["below"][i], n) for i, q in enumerate(qs)},
            "hit_rate": ratio(s["dir_hit"], s["dir_n"]) if has_mid else None,
            "ic": spearman(ic_y, ic_m) if has_mid else None,
            "n": int(n),
            "n_missing_forecast": int(s["missing"]),
        }


class _PairReservoir:
    """(actual, median, series, step) tuples: all of them up to `cap`, then a uniform reservoir sample of `cap`.

    Stored as float32 / int32 / int16 in arrays that double in size as needed (never past `cap`). Sampling is
    Vitter's algorithm R applied a batch at a time; when two pairs of one batch draw the same slot the later one
    wins, a negligible departure from exact uniformity.
    """

    def __init__(self, cap: int, seed: int):
        self.cap, self.seen = int(cap), 0
        self._rng = np.random.default_rng(seed)
        self._y = np.empty(0, np.float32)
        self._m = np.empty(0, np.float32)
        self._s = np.empty(0, np.int32)
        self._h = np.empty(0, np.int16)
        self._len = 0

    @property
    def sampled(self) -> bool:
        return self.seen > self.cap

    def add(self, y: np.ndarray, m: np.ndarray, s: np.ndarray, h: np.ndarray) -> None:
        take = min(max(self.cap - self._len, 0), y.size)
        if take:
            self._grow(self._len + take)
            sl = slice(self._len, self._len + take)
            self._y[sl], self._m[sl], self._s[sl], self._h[sl] = y[:take], m[:take], s[:take], h[:take]
            self._len += take
        rest = y.size - take
        if rest:
            index = self.seen + take + np.arange(rest)  # global 0-based position of each remaining pair
            slot = self._rng.integers(0, index + 1)
            keep = slot < self.cap
            tgt = slot[keep]
            self._y[tgt], self._m[tgt] = y[take:][keep], m[take:][keep]
            self._s[tgt], self._h[tgt] = s[take:][keep], h[take:][keep]
        self.seen += y.size

    def pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        n = self._len
        return self._y[:n], self._m[:n], self._s[:n], self._h[:n]

    def _grow(self, need: int) -> None:
        if need <= self._y.size:
            return
        size = min(self.cap, max(need, 2 * self._y.size, 1024))
        for name in ("_y", "_m", "_s", "_h"):
            old = getattr(self, name)
            new = np.empty(size, old.dtype)
            new[: self._len] = old[: self._len]
            setattr(self, name, new)


def _cell_sums(cell: np.ndarray, w: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Sum weights w (M,) or (M, K) into (S, H) or (S, H, K) cells by flat cell index (M,); one bincount."""
    size = shape[0] * shape[1]
    if w.ndim == 1:
        return np.bincount(cell, weights=w, minlength=size).reshape(shape)
    k = w.shape[1]
    idx = (cell[:, None] * k + np.arange(k)).ravel()  # (M * K,)
    return np.bincount(idx, weights=w.ravel(), minlength=size * k).reshape(*shape, k)
