"""The anchor one bar at a time (data/baselines/anchor_live.py) against the batch rows (anchor.anchor_rows) on the
same history: primed on the first bars and stepped through the rest, through unadjusted roll gaps; a series without
a fit and a series' first bar as the batch reads them."""

from __future__ import annotations

import numpy as np

from foxhunt.data.baselines.anchor import AnchorFit, anchor_rows, fallback
from foxhunt.data.baselines.anchor_live import LiveAnchor

from .test_anchor import PARAMS, QS, _series


def test_stepping_bar_by_bar_gives_the_batch_rows() -> None:
    r, first, scale = _series()
    r[np.arange(100, r.size, 60)] += 0.15  # roll gaps of ~10 sd: the filter's largest steps
    center = np.full(r.size, 2e-4)
    fit = AnchorFit("garch_t", {"A": PARAMS}, {"B": "only 24 finite training returns"})
    batch = anchor_rows(fit, ["A"], np.zeros(r.size, np.int64), r, first, center, scale, 3, QS).reshape(r.size, 3, 3)
    live = LiveAnchor(fit, 3, QS)
    live.prime("A", np.where(first, np.nan, r)[:50])
    got = [live.at(["A"], center[49:50], scale[49:50])[0]]
    for t in range(50, r.size):
        live.step("A", float(r[t]), False)
        got.append(live.at(["A"], center[t:t + 1], scale[t:t + 1])[0])
    np.testing.assert_allclose(np.stack(got), batch[49:], rtol=1e-5, atol=1e-6)
    # two series in one call: each reads its own state; the one without a fit, the standard normal quantiles
    both = live.at(["B", "A"], np.r_[center[-1], center[-1]], np.r_[scale[-1], scale[-1]])
    np.testing.assert_array_equal(both[0], fallback(1, 3, QS)[0])
    np.testing.assert_array_equal(both[1], got[-1])


def test_a_first_bar_starts_the_filter_as_the_batch_does() -> None:
    r, first, scale = _series(20)
    center = np.zeros(r.size)
    fit = AnchorFit("garch_t", {"A": PARAMS})
    batch = anchor_rows(fit, ["A"], np.zeros(r.size, np.int64), r, first, center, scale, 2, QS).reshape(r.size, 2, 3)
    live = LiveAnchor(fit, 2, QS)
    live.step("A", float(r[0]), True)  # its first bar: no return, the missing-return rule
    for t in range(1, r.size):
        live.step("A", float(r[t]), False)
    np.testing.assert_allclose(live.at(["A"], center[-1:], scale[-1:])[0], batch[-1], rtol=1e-5, atol=1e-6)
