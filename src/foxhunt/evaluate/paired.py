"""The model against one baseline on the rows both cover: q-risk, skill and the Diebold-Mariano tests of
evaluate/significance.py, overall, per horizon and per series, and what was left out of the comparison and why.

A baseline cannot forecast everywhere the model does: GARCH-t needs 100 training returns, HAR a month of them, a
series that starts after the training cut has none, a rolling volatility needs two bars. Its q-risk over the origins
it covers and the model's over all of them are not comparable (on a panel of 39 futures, GARCH-t's 4 missing series
turned a 0.7% win into a 6.9% loss), so every skill, test and verdict is made on the (origin, step) pairs where the
actual is realised and both forecasts are finite, and the origins left out are counted per series with the reason.

`Comparison` is fed one series at a time (`add_series`): `foxhunt evaluate` streams a store's millions of origins and
holds one series' forecasts at a time (evaluate/accumulators.py); `compare` feeds it from whole arrays (training's
validation claim, a backtest's folds). What it keeps is per series and per horizon sums and the pooled differentials
per origin time, never per origin.

`result()` is metrics.json's `comparisons[baseline]`:
    origins, pairs           the origins (and (origin, step) pairs) both cover
    series                   the series compared
    left_out                 {"origins": n, "series": [names with no pair at all], "reasons": {name: why, with counts}}
    model_q_risk, baseline_q_risk, skill    {quantile: value} on those pairs (skill = 1 - model / baseline)
    dm                       {quantile: DMTest.to_dict()}: pooled over the panel
    series_won               {quantile: {"won", "won_significant", "lost_significant", "equal", "of"}}: series by
                             series (a series whose forecasts are equal to float rounding is neither won nor lost)
    per_horizon              [{"pairs", "model_q_risk", "baseline_q_risk", "skill"} for h = 1..D]
    per_series               {name: {"origins", "pairs", "model_q_risk", "baseline_q_risk", "skill", "dm"}}
Quantiles are keys as text (f"{q:g}"), as after a JSON round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from foxhunt.evaluate.metrics import pinball
from foxhunt.evaluate.significance import DMTest, PooledDifferentials, dm_tests

NO_HISTORY = "no forecast at these origins (too little history before them)"
CHUNK = 65_536  # origins whose losses are held at once: (2, C, D, Q) float64, 16 MB at D = 5, Q = 3


class Comparison:
    """The model against one baseline, fed a series at a time (see the module doc)."""

    def __init__(self, quantiles: Sequence[float], horizon: int):
        self.quantiles = np.asarray(quantiles, dtype=np.float64)
        self.horizon = int(horizon)
        n_q = len(self.quantiles)
        self.pooled = PooledDifferentials(n_q)
        self._h_loss = np.zeros((2, horizon, n_q))  # (model / baseline, D, Q) pinball sums
        self._h_abs = np.zeros(horizon)  # (D,) |y| sums
        self._h_n = np.zeros(horizon, dtype=np.int64)  # (D,) pairs
        self.series: dict[str, dict[str, Any]] = {}  # name -> its block, and its loss sums under "_sums"
        self.left: dict[str, tuple[int, str]] = {}  # name -> (origins left out, why)

    def add_series(self, name: str, origin_ns: np.ndarray, actual: np.ndarray, model: np.ndarray,
                   baseline: np.ndarray, why: str | None = None) -> None:
        """One series' origins in time order: `actual` (K, D), `model` and `baseline` quantiles (K, D, Q) on the
        target's scale. `why`: the reason the baseline has no forecast on this series, when it has none. The losses
        are computed CHUNK origins at a time; what the series keeps is its differentials (K, Q), 24 bytes an origin
        at Q = 3, for its own test."""
        if name in self.series or name in self.left:
            raise ValueError(f"series {name} was already added to this comparison")
        D, Q = self.horizon, len(self.quantiles)
        loss, abs_y, n = np.zeros((2, D, Q)), np.zeros(D), np.zeros(D, dtype=np.int64)  # this series' sums
        left, ds, times = 0, [], []
        for lo in range(0, len(actual), CHUNK):
            part = slice(lo, lo + CHUNK)
            y = np.asarray(actual[part], dtype=np.float64)  # (C, D)
            scored = np.isfinite(y) & np.isfinite(model[part]).all(axis=-1)  # (C, D) what the model is scored on
            ok = scored & np.isfinite(baseline[part]).all(axis=-1)  # (C, D) and the baseline too
            paired = ok.any(axis=1)  # (C,)
            left += int((scored.any(axis=1) & ~paired).sum())
            if not paired.any():
                continue
            y0 = np.where(ok, y, 0.0)
            losses = np.stack([np.where(ok[..., None], pinball(y0, np.where(ok[..., None], f[part], 0.0),
                                                               self.quantiles), 0.0)
                               for f in (model, baseline)])  # (2, C, D, Q)
            loss += losses.sum(axis=1)
            abs_y += np.abs(y0).sum(axis=0)
            n += ok.sum(axis=0)
            steps = ok.sum(axis=1)[paired]  # (C',) realised steps of each paired origin
            ds.append((losses[0] - losses[1]).sum(axis=1)[paired] / steps[:, None])  # (C', Q) mean over them
            times.append(np.asarray(origin_ns[part])[paired])
        if left:
            self.left[name] = (left, why or NO_HISTORY)
        if not ds:
            return
        d = np.concatenate(ds)  # (K', Q)
        self.pooled.add(np.concatenate(times), d)
        self._h_loss += loss
        self._h_abs += abs_y
        self._h_n += n
        sums = loss.sum(axis=1)  # (2, Q)
        self.series[name] = {"origins": len(d), "pairs": int(n.sum()),
                             **self._qrisk(sums[0], sums[1], float(abs_y.sum())),
                             "dm": self._tests(dm_tests(d, self.horizon, float(abs_y.sum() / n.sum()))),
                             "_sums": (sums, float(abs_y.sum()))}

    def result(self) -> dict[str, Any]:
        n_q = len(self.quantiles)
        model, base = np.zeros(n_q), np.zeros(n_q)
        abs_y = 0.0
        for block in self.series.values():
            (m, b), a = block["_sums"]
            model, base, abs_y = model + m, base + b, abs_y + a
        per_series = {name: {k: v for k, v in block.items() if k != "_sums"} for name, block in self.series.items()}
        pairs = sum(b["pairs"] for b in per_series.values())
        return {
            "origins": sum(b["origins"] for b in per_series.values()),
            "pairs": pairs,
            "series": len(per_series),
            "left_out": {"origins": sum(n for n, _ in self.left.values()),
                         "series": [name for name in self.left if name not in self.series],
                         "reasons": {name: why for name, (_, why) in self.left.items()},
                         "origins_by_series": {name: n for name, (n, _) in self.left.items()}},
            **self._qrisk(model, base, abs_y),
            "dm": self._tests(self.pooled.tests(self.horizon, abs_y / pairs if pairs else 0.0)),
            "series_won": self._won(per_series),
            "per_horizon": [{"pairs": int(self._h_n[h]), **self._qrisk(*self._h_loss[:, h], float(self._h_abs[h]))}
                            for h in range(self.horizon)],
            "per_series": per_series,
        }

    def _keys(self) -> list[str]:
        return [f"{q:g}" for q in self.quantiles]

    def _qrisk(self, model: np.ndarray, base: np.ndarray, abs_y: float) -> dict[str, dict[str, float | None]]:
        def ratio(x: float) -> float | None:
            return float(2.0 * x / abs_y) if abs_y > 0 else None

        keys = self._keys()
        m = {k: ratio(v) for k, v in zip(keys, model, strict=True)}
        b = {k: ratio(v) for k, v in zip(keys, base, strict=True)}
        sk = {k: (1.0 - mv / bv) if mv is not None and bv else None for k, mv, bv in
              zip(keys, m.values(), b.values(), strict=True)}
        return {"model_q_risk": m, "baseline_q_risk": b, "skill": sk}

    def _tests(self, tests: list[DMTest]) -> dict[str, dict[str, Any]]:
        return {k: t.to_dict() for k, t in zip(self._keys(), tests, strict=True)}

    def _won(self, per_series: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
        out = {}
        for k in self._keys():
            blocks = list(per_series.values())
            out[k] = {"won": sum(1 for b in blocks if (b["skill"][k] or 0.0) > 0 and not b["dm"][k]["equal"]),
                      "won_significant": sum(1 for b in blocks if b["dm"][k]["outcome"] == "better"),
                      "lost_significant": sum(1 for b in blocks if b["dm"][k]["outcome"] == "worse"),
                      "equal": sum(1 for b in blocks if b["dm"][k]["equal"]),
                      "of": len(blocks)}
        return out


def compare(series: np.ndarray, origin_ns: np.ndarray, actual: np.ndarray, model: np.ndarray, baseline: np.ndarray,
            quantiles: Sequence[float], names: Sequence[str],
            reasons: dict[str, str] | None = None) -> dict[str, Any]:
    """`Comparison.result()` of whole arrays: series codes (K,), origin times (K,), actual (K, D), model and baseline
    (K, D, Q), any order (each series is put in time order); `reasons`: series name -> why the baseline has no
    forecast there."""
    c = Comparison(quantiles, actual.shape[1])
    order = np.lexsort((origin_ns, series))  # by series, then time
    s_sorted = series[order]
    edges = [0, *(np.flatnonzero(s_sorted[1:] != s_sorted[:-1]) + 1), len(order)]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):  # a loop over series, each one vectorised
        pick = order[lo:hi]
        if len(pick):
            name = names[int(s_sorted[lo])]
            c.add_series(name, origin_ns[pick], actual[pick], model[pick], baseline[pick], (reasons or {}).get(name))
    return c.result()


def left_out_text(left: dict[str, Any] | None) -> str | None:
    """What a comparison left out, for people: `CS0 (GARCH baseline: only 43 finite training returns in this series
    (need >= 100)); NI0, ZC0 (no bars before ... to fit on); 12 origins of 3 other series (no forecast at these
    origins (too little history before them))`; None when nothing was."""
    if not left or not left.get("origins"):
        return None
    whole = set(left.get("series", []))
    reasons, counts = left.get("reasons", {}), left.get("origins_by_series", {})
    by_reason: dict[str, list[str]] = {}
    for name in whole:
        by_reason.setdefault(reasons.get(name, "?"), []).append(name)
    groups = sorted((sorted(names), why) for why, names in by_reason.items())
    parts = [f"{', '.join(names)} ({why})" for names, why in groups]
    partial = {name: n for name, n in counts.items() if name not in whole}
    if partial:
        why = sorted({reasons.get(name, NO_HISTORY) for name in partial})
        parts.append(f"{sum(partial.values()):,} origins of {len(partial)} {'other ' if whole else ''}series "
                     f"({'; '.join(why)})")
    return "; ".join(parts)
