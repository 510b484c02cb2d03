"""SeriesScorer: the metrics of forecasts added batch by batch, baselines scored a series at a time, are those of
scoring everything at once, and so are its comparisons of the model with each baseline on the rows both forecast;
each series keeps only its latest FAN_POINTS origins for the report."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data
from foxhunt.evaluate.paired import compare
from foxhunt.evaluate.scored import Scored, score, scored_windows
from foxhunt.evaluate.scoring import FAN_POINTS, SeriesScorer, span_of
from foxhunt.evaluate.series_baselines import baselines

QS = (0.1, 0.5, 0.9)


@pytest.fixture(scope="module")
def case(fixtures_dir):
    """The ES 1-minute fixture's panel of several series (the calendar spread is a series of its own), its
    validation windows with made-up model quantiles, calibrated and raw, and some origins without an actual."""
    cfg = DataConfig(paths=(str(fixtures_dir / "es_fut_ohlcv1m_databento.parquet"),), encoder_length=16, horizon=3,
                     contracts="each")
    data = prepare_data(cfg)
    ids = data.splits["val"]
    base = scored_windows(data.windows, ids, np.empty((len(ids), 3, 0)))
    rng = np.random.default_rng(0)
    spread = np.abs(rng.normal(size=(len(ids), 3, 1))) * 1e-3
    q = np.sort(rng.normal(scale=1e-4, size=(len(ids), 3, 1)) + spread * np.array([-1.28, 0.0, 1.28]), axis=-1)
    actual = base.actual.copy()
    actual[::97] = np.nan  # origins with no realised target are not scored
    scored = Scored(base.series, base.origin_row, base.origin_ns, q, actual, q * 1.5)
    return data, scored


def _close(a, b, path=""):
    """Equal up to the order of floating-point sums (batch by batch against all at once)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float) and not (math.isnan(a) and math.isnan(b)):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15), path
    else:
        assert a == b, path


@pytest.mark.parametrize("batch", [7, 1024, 10**9])
def test_batch_by_batch_is_all_at_once(case, batch):
    data, scored = case
    names = data.windows.series_names
    assert len(names) >= 2 and len(np.unique(scored.series)) >= 2
    cut = int(scored.origin_ns.min()) + 1
    scorer = SeriesScorer(data, QS, cut, raw=True)
    for a in range(0, len(scored), batch):  # pieces that end inside a series and span two
        scorer.add(scored.subset(slice(a, a + batch)))
    got = scorer.results()
    keep = ~np.isnan(scored.actual).all(axis=1)
    ref = scored.subset(keep)
    _close(got.model, score(ref.actual, ref.quantiles, ref.series, QS, names, True))
    _close(got.raw, score(ref.actual, ref.raw, ref.series, QS, names, True))
    expected, why = baselines(data, ref, cut, QS)
    assert set(got.baselines) == set(expected) == set(got.comparisons) == set(got.raw_comparisons) == {
        "training_quantiles", "rolling_vol", "garch_t", "seasonal_rolling_vol", "har"}
    for k, f in expected.items():
        _close(got.baselines[k], score(ref.actual, f, ref.series, QS, names, True), k)
        _close(got.comparisons[k], compare(ref.series, ref.origin_ns, ref.actual, ref.quantiles, f, QS, names,
                                           why.get(k)), k)
        _close(got.raw_comparisons[k], compare(ref.series, ref.origin_ns, ref.actual, ref.raw, f, QS, names,
                                               why.get(k)), k)
    for s in np.unique(ref.series):
        latest = ref.subset(np.flatnonzero(ref.series == s)[-FAN_POINTS:])
        fan = scorer.fans[int(s)]
        assert len(fan) == min(FAN_POINTS, int((ref.series == s).sum()))
        np.testing.assert_array_equal(fan.origin_ns, latest.origin_ns)
        np.testing.assert_array_equal(fan.quantiles, latest.quantiles)


def test_the_span_counts_the_origins_with_an_actual(case):
    data, _ = case
    ids = data.splits["val"]
    span = span_of(data, ids)
    on, actual = data.windows.origin_ns(ids).numpy(), data.windows.actual(ids)
    has = torch.isfinite(actual).any(dim=1).numpy()
    assert (span.origins, span.first_ns, span.last_ns) == (int(has.sum()), int(on[has].min()), int(on[has].max()))
