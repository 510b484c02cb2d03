"""A backtest's overall rank IC is the mean of its folds' own: one pooled over the folds would rank the pairs of
different test periods against each other."""

from __future__ import annotations

import numpy as np
import pytest

from foxhunt.backtest.summary import metrics, with_fold_ic
from foxhunt.evaluate.metrics import compute_metrics

QS = (0.1, 0.5, 0.9)


def _fold(rng: np.random.Generator, level: float, n: int = 40) -> dict[str, np.ndarray]:
    """One fold's scored arrays, one series: the model's median follows the target; the baseline's is `level`, one
    number for the whole fold (as training quantiles' are)."""
    actual = rng.normal(level, 1.0, (n, 2))  # (K, D)
    model = (actual + rng.normal(0, 1.0, (n, 2)))[..., None] + np.array([-1.3, 0.0, 1.3])  # (K, D, Q)
    base = np.broadcast_to(np.array([level - 1.3, level, level + 1.3]), (n, 2, 3)).copy()
    return {"series": np.zeros(n, dtype=np.int64), "origin_ns": np.arange(n, dtype=np.int64) * 86_400 * 10**9,
            "actual": actual, "model": model, "baseline_training_quantiles": base}


def test_the_overall_ic_is_the_mean_of_the_folds_and_none_for_a_median_constant_in_each():
    rng = np.random.default_rng(0)
    folds = [_fold(rng, 0.0), _fold(rng, 2.0)]
    per_fold = [metrics(f, QS, ("ES",), True) for f in folds]
    pooled = metrics({k: np.concatenate([f[k] for f in folds]) for k in folds[0]}, QS, ("ES",), True)
    # pooled, the baseline's two levels rank the folds' targets: an IC no fold has
    assert pooled["baselines"]["training_quantiles"]["overall"]["ic"] > 0.3
    assert all(m["baselines"]["training_quantiles"]["overall"]["ic"] is None for m in per_fold)
    out = with_fold_ic(pooled, per_fold)
    assert out["baselines"]["training_quantiles"]["overall"]["ic"] is None
    assert all(b["ic"] is None for b in out["baselines"]["training_quantiles"]["per_horizon"])
    want = np.mean([m["model"]["overall"]["ic"] for m in per_fold])
    assert out["model"]["overall"]["ic"] == pytest.approx(want)
    assert out["model"]["per_series"]["ES"]["ic"] == pytest.approx(want)
    assert compute_metrics(folds[0]["actual"], folds[0]["model"], QS)["overall"]["ic"] == pytest.approx(
        per_fold[0]["model"]["overall"]["ic"])
