"""No look-ahead: changing the bars after t changes nothing the model sees for a window that ends by t.

The perturbation jitters open, high, low, close and volume of every raw row after t independently (so ln(high/low)
changes too: the range target, the range volatility estimator and the range shock are covered), and the data go
through the real loader: contract selection, the roll, back-adjustment, --fill-gaps, features, scaling, windows.
Every field of the windows and batches up to t is compared, categorical fields, timestamps and contracts included,
and the test checks that the rows after t did change.

Integers, booleans, timestamps and names must be equal; floats equal to 1e-5 relative. Ratio back-adjustment
multiplies every earlier price by a factor that depends on later rolls: log returns and ranges are unchanged by that
only up to rounding (about 1e-15), while a leak of the jitter (2% on prices, 30% on volume) moves them by far more.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.batch import Batch
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.features.bar_features import raw_features
from foxhunt.data.features.scaling import apply_scalers, fit_scalers
from foxhunt.data.prepare import prepare_from_bars

HOUR = 3600 * 10**9
DAY = 24 * HOUR
SESSIONS = np.datetime64("2024-02-05", "D") + np.concatenate([np.arange(5), np.arange(7, 12), np.arange(14, 19)])
CUT = "2024-02-09"  # train cut (a trade date); t is drawn after it and before the last roll (near 2024-02-21)
# contract -> (price premium over the front, day of peak volume): ESH4 -> ESM4 early, ESM4 -> ESU4 late
CONTRACTS = {"ESH4": (1.000, -6), "ESM4": (1.004, 6), "ESU4": (1.008, 20)}


def raw_bars(seed: int) -> pl.DataFrame:
    """Hourly CME-session bars (17:00-16:00 CT) of three ES contracts and an index over 15 sessions, a quarter of
    the hours missing (the same hours for every symbol), as a raw file would hold them."""
    rng = np.random.default_rng(seed)
    opens = (SESSIONS - 1).astype("datetime64[ns]").astype(np.int64) + 23 * HOUR  # 17:00 CST the evening before
    ts = (opens[:, None] + np.arange(23) * HOUR).ravel()
    ts = np.sort(rng.choice(ts, size=int(len(ts) * 0.75), replace=False))
    day = (ts - ts[0]) / DAY
    base = 5000 * np.exp(np.cumsum(rng.normal(0, 0.003, len(ts))))
    frames = []
    for sym, (premium, peak) in {**CONTRACTS, "IDX": (0.999, 0)}.items():
        close = base * premium * np.exp(rng.normal(0, 0.0005, len(ts)))
        wick = np.abs(rng.normal(0, 0.002, (2, len(ts)))) * close
        vol = 1000 * np.exp(-(((day - peak) / 6) ** 2)) + rng.integers(1, 20, len(ts))
        opens = close * np.exp(rng.normal(0, 0.001, len(ts)))
        frames.append(
            pl.DataFrame(
                {
                    "ts_event": pl.Series(ts).cast(pl.Datetime("ns", "UTC")),
                    "symbol": sym,
                    "open": opens,
                    "high": np.maximum(opens, close) + wick[0] * 2,
                    "low": np.minimum(opens, close) - wick[1],
                    "close": close,
                    "volume": np.round(vol),
                }
            )
        )
    return pl.concat(frames).sort("ts_event", "symbol")


def jitter(raw: pl.DataFrame, t_ns: int, seed: int) -> pl.DataFrame:
    """Every row after t gets its own random factor on each of open, high, low, close and volume."""
    rng = np.random.default_rng(seed)
    n = raw.height
    later = pl.Series(raw["ts_event"].dt.epoch("ns").to_numpy() > t_ns)
    f = {c: pl.Series(np.exp(rng.normal(0, 0.02, n))) for c in ("open", "high", "low", "close")}
    v = pl.Series(np.exp(rng.normal(0, 0.3, n)))
    out = raw.with_columns(
        *[pl.when(later).then(pl.col(c) * f[c]).otherwise(pl.col(c)).alias(c) for c in f],
        pl.when(later).then((pl.col("volume") * v).round() + 1).otherwise(pl.col("volume")).alias("volume"),
    )
    # keep each bar consistent (high the largest price, low the smallest), or the loader drops it as bad; every
    # price still moves independently of the rest
    prices = ("open", "high", "low", "close")
    return out.with_columns(high=pl.max_horizontal(*prices), low=pl.min_horizontal(*prices))


def prepared(raw: pl.DataFrame, folder: Path, name: str, cfg: DataConfig) -> tuple[pl.DataFrame, PreparedData]:
    path = folder / f"{name}.parquet"
    raw.write_parquet(path)
    cfg = DataConfig(**{**cfg.to_dict(), "paths": (str(path),)})
    loaded = load_bars(cfg)
    return loaded.bars, prepare_from_bars(loaded, cfg)


def row_keys(p: PreparedData) -> np.ndarray:
    """(N,) 'series|ts' per row: rows of two runs are matched by series and time, not position."""
    w = p.windows
    names = np.asarray(w.series_names, dtype=object)[w.series_idx.numpy()]
    return np.char.add(np.char.add(names.astype(str), "|"), w.ts_ns.numpy().astype(str))


def assert_same(a: torch.Tensor | None, b: torch.Tensor | None, name: str) -> None:
    if a is None or b is None:  # an optional field (the anchor, without --anchor): absent from both
        assert a is None and b is None, name
    elif a.is_floating_point():
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, equal_nan=True, msg=name)
    else:
        assert torch.equal(a, b), name


def assert_same_values(a: object, b: object, path: str = "") -> None:
    """Nested dicts / lists of plain values (the fitted transform): equal, floats to 1e-9 relative."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for k in a:
            assert_same_values(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_values(x, y, f"{path}/{i}")
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12), path
    else:
        assert a == b, path


def assert_batches_equal(a: Batch, b: Batch) -> None:
    for name in Batch.__dataclass_fields__:
        if name != "window":  # window ids are positions; the windows themselves are matched by key
            assert_same(getattr(a, name), getattr(b, name), name)


ADJUST_CONTRACTS = [
    pytest.param(
        adjust,
        contracts,
        id=f"{adjust}-{contracts}",
    )
    for adjust in ("ratio", "difference", "none")
    for contracts in ("auto", "continuous", "each")
]


@pytest.mark.parametrize(("adjust", "contracts"), ADJUST_CONTRACTS)
# No shrinking: a failing end-to-end example is printed as drawn (shrinking one takes minutes).
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None,
          derandomize=True, phases=[Phase.explicit, Phase.generate])
@given(
    seed=st.integers(0, 10**6),
    t_hours=st.integers(0, 9 * 24),
    target=st.sampled_from(["log_return", "log_range"]),
    scaling=st.sampled_from(["series", "volatility"]),
    estimator=st.sampled_from(["returns", "range"]),
    vol_features=st.booleans(),
    fill=st.booleans(),
)
def test_windows_up_to_t_ignore_every_later_bar(
    adjust: str, contracts: str, seed: int, t_hours: int, target: str, scaling: str, estimator: str,
    vol_features: bool, fill: bool,
) -> None:
    cfg = DataConfig(
        encoder_length=8, horizon=3, train_end=CUT, contracts=contracts, adjust=adjust, target=target,
        scaling=scaling, vol_estimator=estimator, vol_halflife=5.0, vol_features=vol_features, fill_gaps=fill,
    )
    t_ns = int(np.datetime64(CUT, "ns").astype(np.int64)) + t_hours * HOUR
    raw = raw_bars(seed)
    other = jitter(raw, t_ns, seed + 1)
    later = (raw["ts_event"].dt.epoch("ns") > t_ns).to_numpy()
    for c in ("open", "high", "low", "close", "volume"):  # the perturbation did change the rows after t
        # volume is rounded to whole contracts, so a thin bar (1-20 lots) can round back to its own value
        assert (raw[c].to_numpy()[later] != other[c].to_numpy()[later]).mean() > (0.75 if c == "volume" else 0.9), c
        assert np.array_equal(raw[c].to_numpy()[~later], other[c].to_numpy()[~later]), c
    with tempfile.TemporaryDirectory() as tmp:
        bars_p, p = prepared(raw, Path(tmp), "a", cfg)
        bars_q, q = prepared(other, Path(tmp), "b", cfg)

    # The loaded bars up to t: same series, timestamps, contracts (and filled flags).
    def upto(bars: pl.DataFrame) -> pl.DataFrame:
        return bars.filter(pl.col("ts").dt.epoch("ns") <= t_ns).drop("open", "high", "low", "close", "volume")

    assert upto(bars_p).equals(upto(bars_q))
    assert_same_values(q.transform.to_dict(), p.transform.to_dict())  # scalers fitted before the cut <= t

    # Every per-row tensor at rows up to t, rows matched by (series, ts).
    kp, kq = row_keys(p), row_keys(q)
    w, v = p.windows, q.windows
    rows_p = np.flatnonzero(w.ts_ns.numpy() <= t_ns)
    pos_q = {k: i for i, k in enumerate(kq)}
    rows_q = np.array([pos_q[k] for k in kp[rows_p]])
    for name in ("cont", "static_cat", "time_cat", "target_raw", "center", "scale", "ts_ns", "real"):
        assert_same(getattr(w, name)[rows_p], getattr(v, name)[rows_q], name)
    assert [w.series_names[i] for i in w.series_idx[rows_p]] == [v.series_names[i] for i in v.series_idx[rows_q]]

    # Every window whose last forecast bar is at or before t: identical batches, timestamps and actuals.
    ids_p = torch.arange(w.n_windows)
    ids_p = ids_p[w.target_ns(ids_p)[:, -1] <= t_ns]
    start_q = {int(s): i for i, s in enumerate(v.starts.tolist())}
    ids_q = torch.tensor([start_q[int(rows_q[np.searchsorted(rows_p, int(s))])] for s in w.starts[ids_p]],
                         dtype=torch.int64)
    assert len(ids_p) > 0
    assert_batches_equal(w.batch(ids_p), v.batch(ids_q))
    for fn in ("origin_ns", "target_ns", "decoder_ns", "actual", "series_code"):
        assert_same(getattr(w, fn)(ids_p), getattr(v, fn)(ids_q), fn)
    for split in ("train", "val", "test"):  # the same windows are in the same split
        in_p = torch.isin(ids_p, p.splits[split])
        assert torch.equal(in_p, torch.isin(ids_q, q.splits[split])), split

    # ... and the bars after t did reach the data (the test is not vacuous).
    both = [(i, pos_q[k]) for i, k in enumerate(kp) if i not in set(rows_p.tolist()) and k in pos_q]
    if both:
        ia, ib = (torch.tensor(x) for x in zip(*both, strict=True))
        assert not torch.equal(w.target_raw[ia], v.target_raw[ib])


@settings(max_examples=30, deadline=None, database=None, derandomize=True)
@given(
    seed=st.integers(0, 10**6),
    t=st.integers(1, 200),
    target=st.sampled_from(["log_return", "log_range"]),
    scaling=st.sampled_from(["series", "volatility"]),
    adjust=st.sampled_from(["ratio", "none"]),
    estimator=st.sampled_from(["returns", "range"]),
    vol_features=st.booleans(),
)
def test_features_and_trailing_scaling_are_causal(
    seed: int, t: int, target: str, scaling: str, adjust: str, estimator: str, vol_features: bool
) -> None:
    """Unit level, with fixed scalers: each per-row value at rows <= t (inputs, EWMA volatility, target center and
    scale) is unchanged when open, high, low, close and volume of the rows after t are jittered independently."""
    raw = raw_bars(seed).filter(pl.col("symbol").is_in(["ESM4", "IDX"]))
    bars = raw.select(
        series="symbol", ts="ts_event", open="open", high="high", low="low", close="close", volume="volume",
        contract="symbol",
    ).sort("series", "ts")
    t_ns = int(bars["ts"].dt.epoch("ns").sort()[t])
    moved = jitter(bars.rename({"ts": "ts_event"}), t_ns, seed + 1).rename({"ts_event": "ts"})
    names = ["ESM4", "IDX"]
    sidx = np.searchsorted(names, bars["series"].to_numpy())
    feats = raw_features(bars, adjust, target)
    cfg = DataConfig(target=target, scaling=scaling, vol_halflife=5.0, vol_estimator=estimator,
                     vol_features=vol_features)
    scalers = fit_scalers(feats, names, sidx, np.ones(len(sidx), dtype=bool), cfg)
    other = raw_features(moved, adjust, target)
    keep = bars["ts"].dt.epoch("ns").to_numpy() <= t_ns
    for c in ("log_return", "log_range", "log_volume", "roll", "target"):
        np.testing.assert_array_equal(other[c].to_numpy()[keep], feats[c].to_numpy()[keep])
        if c != "roll":
            assert (other[c].to_numpy()[~keep] != feats[c].to_numpy()[~keep]).any(), c
    a = apply_scalers(feats, names, sidx, scalers, cfg)
    b = apply_scalers(other, names, sidx, scalers, cfg)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x[keep], y[keep])
