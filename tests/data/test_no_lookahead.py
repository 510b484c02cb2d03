"""No look-ahead: changing bars after t never changes any feature, scaler or target scaling at rows <= t."""

from __future__ import annotations

import numpy as np
import polars as pl
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from foxhunt.data.config import DataConfig
from foxhunt.data.features import raw_features
from foxhunt.data.load import LoadedBars
from foxhunt.data.prepare import prepare_from_bars
from foxhunt.data.scaling import apply_scalers, fit_scalers

DAY = 86400 * 10**9
N = 70  # bars per series


def synth(seed: int) -> pl.DataFrame:
    """Two daily series with a roll in the middle of the first, sorted by (series, ts)."""
    rng = np.random.default_rng(seed)
    frames = []
    for name in ("A", "B"):
        close = 100 * np.exp(np.cumsum(rng.normal(0, 0.02, N)))
        wick = np.abs(rng.normal(0, 0.01, N)) * close
        contract = (
            np.where(np.arange(N) < N // 2, f"{name}1", f"{name}2") if name == "A" else np.full(N, name)
        )
        frames.append(
            pl.DataFrame(
                {
                    "series": [name] * N,
                    "ts": pl.Series(np.arange(N, dtype=np.int64) * DAY).cast(pl.Datetime("ns", "UTC")),
                    "open": close * np.exp(rng.normal(0, 0.005, N)),
                    "high": close + wick * 2,
                    "low": close - wick,
                    "close": close,
                    "volume": rng.integers(1, 1000, N).astype(np.float64),
                    "contract": contract,
                }
            )
        )
    return pl.concat(frames)


def perturb(bars: pl.DataFrame, after_day: int, seed: int) -> pl.DataFrame:
    """Scale the prices (and redraw the volume) of every bar after day `after_day`; earlier bars are untouched."""
    rng = np.random.default_rng(seed)
    later = pl.Series(bars["ts"].dt.epoch("ns").to_numpy() > after_day * DAY)
    factor = pl.Series(np.exp(rng.normal(0, 0.3, bars.height)))
    volume = pl.Series(rng.integers(1, 10**6, bars.height).astype(np.float64))
    return bars.with_columns(
        *[
            pl.when(later).then(pl.col(c) * factor).otherwise(pl.col(c)).alias(c)
            for c in ("open", "high", "low", "close")
        ],
        pl.when(later).then(volume).otherwise(pl.col("volume")).alias("volume"),
    )


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TARGETS = st.sampled_from(["log_return", "log_range"])
SCALINGS = st.sampled_from(["series", "volatility"])
ADJUST = st.sampled_from(["ratio", "none"])
ESTIMATORS = st.sampled_from(["returns", "range"])


@SETTINGS
@given(
    seed=st.integers(0, 10**6),
    t=st.integers(1, N - 2),
    target=TARGETS,
    scaling=SCALINGS,
    adjust=ADJUST,
    estimator=ESTIMATORS,
    vol_features=st.booleans(),
)
def test_features_and_trailing_scaling_are_causal(
    seed: int, t: int, target: str, scaling: str, adjust: str, estimator: str, vol_features: bool
) -> None:
    """With fixed scalers, every per-row value (inputs, EWMA volatility, target center/scale) at rows <= t is
    unchanged when rows after t change."""
    bars = synth(seed)
    names = ["A", "B"]
    sidx = np.searchsorted(names, bars["series"].to_numpy())
    feats = raw_features(bars, adjust, target)
    scalers = fit_scalers(
        feats,
        names,
        sidx,
        np.ones(len(sidx), dtype=bool),
        target,
        halflife=5.0,
        estimator=estimator,
        vol_features=vol_features,
    )
    other = raw_features(perturb(bars, t, seed + 1), adjust, target)
    keep = bars["ts"].dt.epoch("ns").to_numpy() <= t * DAY
    for c in ("log_return", "log_range", "log_volume", "roll", "target"):
        np.testing.assert_array_equal(other[c].to_numpy()[keep], feats[c].to_numpy()[keep])
    a = apply_scalers(feats, names, sidx, scalers, target, scaling)
    b = apply_scalers(other, names, sidx, scalers, target, scaling)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x[keep], y[keep])


@SETTINGS
@given(
    seed=st.integers(0, 10**6),
    cut=st.integers(25, 45),
    extra=st.integers(0, 20),
    target=TARGETS,
    scaling=SCALINGS,
    estimator=ESTIMATORS,
    vol_features=st.booleans(),
)
def test_prepared_rows_before_t_ignore_later_bars(
    seed: int, cut: int, extra: int, target: str, scaling: str, estimator: str, vol_features: bool
) -> None:
    """End to end, with the scalers fitted on rows before the train cut: perturbing bars after t (t >= cut) changes
    neither the fitted transform nor any row tensor at rows <= t."""
    t = cut + extra
    cut_date = str(np.datetime64(cut * DAY, "ns").astype("datetime64[D]"))
    cfg = DataConfig(
        encoder_length=6,
        horizon=3,
        train_end=cut_date,
        target=target,
        scaling=scaling,
        vol_estimator=estimator,
        vol_features=vol_features,
    )
    bars = synth(seed)
    p = prepare_from_bars(LoadedBars(bars, [], {}), cfg)
    q = prepare_from_bars(LoadedBars(perturb(bars, t, seed + 1), [], {}), cfg)
    assert q.transform.to_dict() == p.transform.to_dict()
    keep = torch.from_numpy(bars["ts"].dt.epoch("ns").to_numpy() <= t * DAY)
    w, v = p.windows, q.windows
    for name in ("cont", "static_cat", "target_raw", "center", "scale", "ts_ns"):
        assert torch.equal(getattr(w, name)[keep], getattr(v, name)[keep]), name
    # Windows whose rows all end by t are identical batches.
    ids = torch.arange(w.n_windows)
    done = ids[w.target_ns(ids)[:, -1] <= t * DAY]
    a, b = w.batch(done), v.batch(done)
    for name in ("known_cont", "observed_cont"):
        assert torch.equal(a.dense()[name], b.dense()[name]), name
    for name in ("static_cat", "target", "target_center", "target_scale"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
