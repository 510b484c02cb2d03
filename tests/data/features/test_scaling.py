"""Scalers are fitted on training rows only; trailing-volatility scaling matches a plain recursion."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from foxhunt.data.config import DataConfig
from foxhunt.data.features.bar_features import OBSERVED, VOL_OBSERVED, raw_features
from foxhunt.data.features.fitstats import moments_of, select, sums
from foxhunt.data.features.scaling import VOL_FLOOR, apply_scalers, fit_scalers, observed_names
from foxhunt.errors import InputError

DAY = 86400 * 10**9


def opts(target: str = "log_return", scaling: str = "series", **kw) -> DataConfig:
    """The options scalers are fitted and applied under: the returns estimator, halflife 20, no vol features unless
    `kw` says otherwise."""
    return DataConfig(**{"target": target, "scaling": scaling, "vol_estimator": "returns", "vol_halflife": 20.0,
                         "seasonality": False, **kw})


def synth(n: int, names: tuple[str, ...] = ("A", "B"), seed: int = 0) -> pl.DataFrame:
    """Daily bars, `n` per series, sorted by (series, ts); each series with its own volatility."""
    rng = np.random.default_rng(seed)
    frames = []
    for k, name in enumerate(names):
        close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01 * (k + 1), n)))
        wick = np.abs(rng.normal(0, 0.005, n)) * close
        frames.append(
            pl.DataFrame(
                {
                    "series": [name] * n,
                    "ts": pl.Series(np.arange(n, dtype=np.int64) * DAY).cast(pl.Datetime("ns", "UTC")),
                    "open": close,
                    "high": close + wick,
                    "low": close - wick,
                    "close": close,
                    "volume": rng.integers(1, 1000, n).astype(np.float64),
                    "contract": [name] * n,
                }
            )
        )
    return pl.concat(frames)


def prep(bars: pl.DataFrame, target: str = "log_return"):
    feats = raw_features(bars, "ratio", target)
    names = sorted(set(bars["series"]))
    sidx = np.searchsorted(names, bars["series"].to_numpy())
    return feats, names, sidx


def test_series_scalers_are_train_statistics_and_ignore_later_rows() -> None:
    bars = synth(60)
    feats, names, sidx = prep(bars)
    train = bars["ts"].dt.epoch("ns").to_numpy() < 40 * DAY
    sc = fit_scalers(feats, names, sidx, train, opts())
    for name in names:
        rows = (bars["series"].to_numpy() == name) & train & ~feats["first"].to_numpy()
        r = feats["log_return"].to_numpy()[rows]
        assert rows.sum() == 39  # the first row of each series has no return
        assert sc.series[name].moments["log_return"].mean == pytest.approx(r.mean())
        assert sc.series[name].moments["log_return"].std == pytest.approx(r.std(ddof=1))
        assert (sc.series[name].center, sc.series[name].scale) == (0.0, pytest.approx(r.std(ddof=1)))
    # Changing every row at or after the cut changes nothing that was fitted.
    later = bars["ts"].dt.epoch("ns").to_numpy() >= 40 * DAY
    bumped = bars.with_columns(
        [
            pl.when(pl.Series(later)).then(pl.col(c) * 3).otherwise(pl.col(c)).alias(c)
            for c in ("high", "close", "volume")
        ]
    )
    assert fit_scalers(*prep(bumped), train, opts()) == sc


def test_unseen_series_falls_back_to_pooled_scalers() -> None:
    bars = synth(30)
    feats, names, sidx = prep(bars)
    train = np.ones(len(sidx), dtype=bool)
    sc = fit_scalers(feats, names, sidx, train, opts())
    r = feats["log_return"].to_numpy()[~feats["first"].to_numpy()]
    assert sc.pooled.moments["log_return"].std == pytest.approx(r.std(ddof=1))
    renamed = prep(bars.with_columns(pl.col("series").replace({"B": "NEW"})))
    obs, center, scale = apply_scalers(*renamed, sc, opts())
    new = renamed[0]["series"].to_numpy() == "NEW"
    assert np.allclose(scale[new], sc.pooled.scale)
    j = OBSERVED.index("log_return")
    pooled = sc.pooled.moments["log_return"]
    want = (renamed[0]["log_return"].to_numpy() - pooled.mean) / pooled.std
    np.testing.assert_allclose(obs[new, j], want[new], rtol=1e-5, atol=1e-6)


def test_observed_inputs_standardized_per_series() -> None:
    bars = synth(50)
    feats, names, sidx = prep(bars)
    sc = fit_scalers(feats, names, sidx, np.ones(len(sidx), dtype=bool), opts())
    obs, center, scale = apply_scalers(feats, names, sidx, sc, opts())
    a = bars["series"].to_numpy() == "A"
    for c in ("log_return", "log_range", "log_volume"):
        m, s = sc.series["A"].moments[c].mean, sc.series["A"].moments[c].std
        want = (feats[c].to_numpy()[a] - m) / s
        np.testing.assert_allclose(obs[a, OBSERVED.index(c)], want, rtol=1e-5, atol=1e-6)
    assert np.all(center == 0.0)
    assert np.allclose(scale[a], sc.series["A"].scale)


def naive_ewm(x: np.ndarray, seed: float, halflife: float) -> np.ndarray:
    """Reference recursion: y_0 = seed, y_t = lam * y_{t-1} + (1 - lam) * x_t."""
    lam = 0.5 ** (1 / halflife)
    y = np.empty(len(x))
    y[0] = seed
    for t in range(1, len(x)):
        y[t] = lam * y[t - 1] + (1 - lam) * x[t]
    return y


def test_volatility_scale_is_a_seeded_causal_ewma() -> None:
    bars = synth(80)
    feats, names, sidx = prep(bars)
    train = bars["ts"].dt.epoch("ns").to_numpy() < 50 * DAY
    sc = fit_scalers(feats, names, sidx, train, opts())
    obs, center, scale = apply_scalers(feats, names, sidx, sc, opts(scaling="volatility"))
    for name in names:
        rows = bars["series"].to_numpy() == name
        s = sc.series[name].moments["log_return"].std
        r = feats["log_return"].to_numpy()[rows]
        vol = np.maximum(np.sqrt(naive_ewm(r**2, s**2, opts().vol_halflife)), VOL_FLOOR * s)
        np.testing.assert_allclose(scale[rows], vol, rtol=1e-5)
        assert np.all(center[rows] == 0.0)
        j = OBSERVED.index("log_vol")
        lv = sc.series[name].moments["log_vol"]
        np.testing.assert_allclose(obs[rows, j], (np.log(vol) - lv.mean) / lv.std, rtol=1e-4, atol=1e-5)


def test_volatility_scaling_of_log_range_uses_trailing_mean_and_std() -> None:
    bars = synth(60)
    feats, names, sidx = prep(bars, target="log_range")
    sc = fit_scalers(feats, names, sidx, np.ones(len(sidx), dtype=bool), opts("log_range"))
    _, center, scale = apply_scalers(feats, names, sidx, sc, opts("log_range", "volatility"))
    rows = bars["series"].to_numpy() == "A"
    t = sc.series["A"]
    assert t.center == pytest.approx(sc.series["A"].moments["log_range"].mean)
    x = feats["log_range"].to_numpy()[rows]
    m = naive_ewm(x, t.center, opts().vol_halflife)
    q = naive_ewm(x**2, t.center ** 2 + t.scale ** 2, opts().vol_halflife)
    np.testing.assert_allclose(center[rows], m, rtol=1e-5)
    np.testing.assert_allclose(
        scale[rows], np.sqrt(np.maximum(q - m**2, (VOL_FLOOR * t.scale) ** 2)), rtol=1e-4
    )


def test_volatility_floor() -> None:
    bars = synth(220).with_columns(
        pl.when(pl.col("ts").dt.epoch("ns") >= 20 * DAY).then(100.0).otherwise(pl.col("close")).alias("close")
    )  # flat prices after day 20: 200 zero returns decay the EWMA far below the floor
    feats, names, sidx = prep(bars)
    sc = fit_scalers(feats, names, sidx, bars["ts"].dt.epoch("ns").to_numpy() < 20 * DAY, opts())
    _, _, scale = apply_scalers(feats, names, sidx, sc, opts(scaling="volatility"))
    last = bars["series"].to_numpy() == "A"
    assert scale[last][-1] == pytest.approx(VOL_FLOOR * sc.series["A"].moments["log_return"].std, rel=1e-5)


def test_series_with_too_few_training_rows_borrows_the_pooled_std() -> None:
    """One training return has no std: the pooled std is used (not 1, which would swamp a return's scale)."""
    bars = synth(30)
    feats, names, sidx = prep(bars)
    day = bars["ts"].dt.epoch("ns").to_numpy() // DAY
    train = (bars["series"].to_numpy() == "A") | (day < 2)  # B has rows 0 (no return) and 1 in training
    sc = fit_scalers(feats, names, sidx, train, opts())
    assert sc.series["B"].moments["log_return"].std == sc.pooled.moments["log_return"].std < 0.1
    assert sc.series["B"].scale == sc.pooled.moments["log_return"].std
    assert sc.series["B"].moments["log_return"].mean == pytest.approx(feats["log_return"][30 + 1])


def test_range_estimator_is_an_ewma_of_scaled_squared_ranges() -> None:
    """sigma_t = sqrt(EWMA(k x^2)) with k = mean(r^2) / mean(x^2) on training rows: a volatility in return units."""
    bars = synth(80)
    feats, names, sidx = prep(bars)
    train = bars["ts"].dt.epoch("ns").to_numpy() < 50 * DAY
    ranged = opts(scaling="volatility", vol_halflife=5.0, vol_estimator="range")
    sc = fit_scalers(feats, names, sidx, train, ranged)
    obs, center, scale = apply_scalers(feats, names, sidx, sc, ranged)
    assert obs.shape[1] == len(OBSERVED)
    for name in names:
        rows = bars["series"].to_numpy() == name
        fit = rows & train & ~feats["first"].to_numpy()
        r, x = feats["log_return"].to_numpy(), feats["log_range"].to_numpy()
        k = np.mean(r[fit] ** 2) / np.mean(x[fit] ** 2)
        assert sc.series[name].range_k == pytest.approx(k)
        s = sc.series[name].moments["log_return"].std
        vol = np.maximum(np.sqrt(naive_ewm(k * x[rows] ** 2, s**2, 5.0)), VOL_FLOOR * s)
        np.testing.assert_allclose(scale[rows], vol, rtol=1e-5)
        assert np.all(center[rows] == 0.0)
        # log_range as the target: a scale model, center 0 and the trailing RMS range.
        _, c2, s2 = apply_scalers(feats, names, sidx, sc, replace(ranged, target="log_range", anchor="auto"))
        assert np.all(c2[rows] == 0.0)
        np.testing.assert_allclose(s2[rows], vol / np.sqrt(k), rtol=1e-5)


def test_vol_features_are_shocks_in_units_of_the_volatility_known_before_them() -> None:
    bars = synth(60)
    feats, names, sidx = prep(bars)
    hl = 8.0
    cfg = opts(scaling="volatility", vol_halflife=hl, vol_features=True)
    sc = fit_scalers(feats, names, sidx, np.ones(len(sidx), bool), cfg)
    obs, _, scale = apply_scalers(feats, names, sidx, sc, cfg)
    cols = observed_names(sc, cfg)
    assert cols == OBSERVED + VOL_OBSERVED and obs.shape[1] == len(cols)
    rows = bars["series"].to_numpy() == "B"
    s = sc.series["B"].moments["log_return"].std
    r, x = feats["log_return"].to_numpy()[rows], feats["log_range"].to_numpy()[rows]
    k = sc.series["B"].range_k

    def vol(h: float) -> np.ndarray:
        return np.maximum(np.sqrt(naive_ewm(r**2, s**2, h)), VOL_FLOOR * s)

    before = np.concatenate([[s], vol(hl)[:-1]])  # sigma_{t-1}; the seed on the first row
    want = {
        "shock": r / before,
        "range_shock": np.sqrt(k) * x / before,
        "log_vol_fast": np.log(vol(hl / 4) / vol(hl)),
        "log_vol_slow": np.log(vol(hl * 4) / vol(hl)),
    }
    for c, raw in want.items():
        m, sd = sc.series["B"].moments[c].mean, sc.series["B"].moments[c].std
        # Standardized with the statistics of the training rows (all rows but each series' first here).
        assert m == pytest.approx(raw[1:].mean()) and sd == pytest.approx(raw[1:].std(ddof=1))
        np.testing.assert_allclose(obs[rows, cols.index(c)], (raw - m) / sd, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(scale[rows], vol(hl), rtol=1e-5)


def test_unknown_estimator_is_refused() -> None:
    with pytest.raises(InputError, match="--vol-estimator"):
        opts(vol_estimator="garch")


def test_series_sums_are_each_runs_own_and_bincounts_for_ungrouped_rows() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(1e6, 1.0, 700)  # a large mean: a sum's bits depend on the order its values are added in
    g = np.repeat([0, 2, 3], [300, 150, 250])  # series 1 has no row
    sel = select(np.ones(len(x), dtype=bool), g, 4)
    assert sel.grouped
    got = sums(x, sel)
    assert got[1] == 0.0
    for i, (lo, hi) in {0: (0, 300), 2: (300, 450), 3: (450, 700)}.items():
        assert got[i] == np.add.reduce(x[lo:hi])  # its own run, summed alone
        # A piece holding this series alone (the pieced `prepare`) gets the same bits, moments too.
        alone = select(np.ones(hi - lo, dtype=bool), np.zeros(hi - lo, dtype=np.int64), 1)
        assert sums(x[lo:hi], alone)[0] == got[i]
        whole, piece = moments_of(x, sel, "x"), moments_of(x[lo:hi], alone, "x")
        assert (whole["x:mean"][i], whole["x:m2"][i]) == (piece["x:mean"][0], piece["x:m2"][0])
    assert np.allclose(got, np.bincount(g, weights=x, minlength=4), rtol=1e-12, atol=0)
    # Rows not grouped by series: np.bincount, row by row.
    shuffled = rng.permutation(len(x))
    loose = select(np.ones(len(x), dtype=bool), g[shuffled], 4)
    assert not loose.grouped
    assert np.array_equal(sums(x[shuffled], loose), np.bincount(g[shuffled], weights=x[shuffled], minlength=4))
