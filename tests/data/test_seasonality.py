"""The intraday volatility profile (data/features/seasonality.py): hand-computed fits, the exchange clock, train-only fitting,
and its two inputs (known `tod_vol`, observed `log_vol_season`) in prepared data."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from foxhunt.data.bars.load import LoadedBars
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.features.scaling import apply_scalers, fit_scalers
from foxhunt.data.features.schema import Kind, Role
from foxhunt.data.features.seasonality import MINUTES, fit_profile, minute_of_day, profile_at, smooth_circular
from foxhunt.data.prepare import prepare_from_bars
from tests.data.test_scaling import prep, synth

MIN = 60 * 10**9
DAY = 1440 * MIN


def test_raw_profile_is_the_root_of_the_mean_proxy_per_minute_over_the_overall_mean() -> None:
    # minute 0: proxies 1 and 3 (mean 2); minute 1: 4; overall mean 8/3; a row outside the training mask is ignored
    ts = np.array([0, DAY, MIN, 2 * DAY + MIN])
    proxy = np.array([1.0, 3.0, 4.0, 1000.0])
    season = fit_profile(ts, proxy, np.array([True, True, True, False]), "UTC", bandwidth=0.0)
    p = np.asarray(season["profile"])
    assert len(p) == MINUTES
    assert p[0] == pytest.approx(math.sqrt(2 / (8 / 3)))
    assert p[1] == pytest.approx(math.sqrt(4 / (8 / 3)))
    assert np.all(p[2:] == 1.0)  # minutes without a training bar: 1 (no information)


def test_kernel_smoother_pools_neighbouring_minutes_by_gaussian_weight() -> None:
    sums, counts = np.zeros(MINUTES), np.zeros(MINUTES)
    sums[0], counts[0] = 4.0, 2.0
    sums[1], counts[1] = 4.0, 1.0
    k1, k2 = math.exp(-0.5), math.exp(-2.0)  # Gaussian weights at distances 1 and 2, bandwidth 1
    out = smooth_circular(sums, counts, 1.0)
    assert out[0] == pytest.approx((4 + k1 * 4) / (2 + k1 * 1))
    assert out[1] == pytest.approx((k1 * 4 + 4) / (k1 * 2 + 1))
    assert out[MINUTES - 1] == pytest.approx((k1 * 4 + k2 * 4) / (k1 * 2 + k2 * 1))  # wraps around midnight
    raw = smooth_circular(sums, counts, 0.0)
    assert raw[0] == 2.0 and raw[1] == 4.0 and np.isnan(raw[2])


def test_profile_follows_the_exchange_clock_across_dst() -> None:
    # 08:30 CT is 14:30 UTC in winter (CST) and 13:30 UTC in summer (CDT): the same minute of the exchange day
    winter = int(np.datetime64("2024-03-08T14:30", "ns").astype(np.int64))
    summer = int(np.datetime64("2024-03-11T13:30", "ns").astype(np.int64))
    assert minute_of_day(np.array([winter, summer]), "America/Chicago").tolist() == [510, 510]
    season = {"tz": "America/Chicago", "profile": np.arange(MINUTES, dtype=float).tolist()}
    assert profile_at(np.array([[winter, summer]]), season).tolist() == [[510.0, 510.0]]


def names(p: PreparedData, role: Role) -> list[str]:
    return [f.name for f in p.schema.group(role, Kind.CONTINUOUS)]


def intraday(n_days: int = 6, seed: int = 0) -> pl.DataFrame:
    """1-minute bars 24 h a day whose volatility is 3x higher in the first 60 minutes of each UTC hour 14."""
    rng = np.random.default_rng(seed)
    ts = np.arange(n_days * 1440, dtype=np.int64) * MIN
    sd = np.where((ts % DAY) // MIN // 60 == 14, 3e-4, 1e-4)
    close = 5000 * np.exp(np.cumsum(rng.normal(0, 1, len(ts)) * sd))
    wick = np.abs(rng.normal(0, 1, len(ts))) * sd * close
    return pl.DataFrame({
        "series": "ES", "ts": pl.Series(ts).cast(pl.Datetime("ns", "UTC")), "open": close, "high": close + wick,
        "low": close - wick, "close": close, "volume": np.full(len(ts), 10.0), "contract": "ESH4",
    })


def test_prepared_intraday_data_carry_the_profile_as_known_and_observed_inputs() -> None:
    cfg = DataConfig(encoder_length=10, horizon=3, exchange_tz="UTC", test_fraction=0.0)
    p = prepare_from_bars(LoadedBars(intraday(), [], {}), cfg)
    season = p.transform.scalers["season"]
    prof = np.asarray(season["profile"])
    busy, calm = prof[14 * 60 + 10 : 14 * 60 + 50].mean(), np.r_[prof[: 13 * 60], prof[16 * 60 :]].mean()
    assert busy / calm == pytest.approx(3.0, rel=0.2)  # the 3x volatility hour, recovered from 4 training days
    known = names(p, Role.KNOWN)
    observed = names(p, Role.OBSERVED)
    assert "tod_vol" in known and observed[-1] == "log_vol_season"
    w = p.windows
    col = known.index("tod_vol")
    ids = p.splits["val"][:50]
    dec = w.batch(ids).dense()["known_cont"][:, w.encoder_length :, col].numpy()  # (B, D)
    np.testing.assert_allclose(dec, np.log(profile_at(w.decoder_ns(ids).numpy(), season)), rtol=1e-6)
    # fitted on the training rows only: changing later bars changes nothing
    bars = intraday()
    later = bars["ts"].dt.epoch("ns") >= int(bars["ts"].dt.epoch("ns").max() * 0.81)
    bumped = bars.with_columns(pl.when(later).then(pl.col("high") * 1.01).otherwise(pl.col("high")).alias("high"))
    assert prepare_from_bars(LoadedBars(bumped, [], {}), cfg).transform.scalers["season"] == season


def test_daily_bars_and_no_seasonality_have_no_profile() -> None:
    p = prepare_from_bars(LoadedBars(synth(200), [], {}), DataConfig(encoder_length=10, horizon=3))
    assert "season" not in p.transform.scalers
    assert "tod_vol" not in names(p, Role.KNOWN)
    cfg = DataConfig(encoder_length=10, horizon=3, exchange_tz="UTC", seasonality=False)
    q = prepare_from_bars(LoadedBars(intraday(), [], {}), cfg)
    assert "season" not in q.transform.scalers and "log_vol_season" not in names(q, Role.OBSERVED)


def test_a_flat_profile_leaves_volatility_scaling_and_the_trailing_volatility_unchanged() -> None:
    # daily bars all sit at minute 0 of the UTC day: the fitted profile is 1 everywhere
    feats, names, sidx = prep(synth(80))
    train = np.ones(len(sidx), bool)
    sc = fit_scalers(feats, names, sidx, train, "log_return")
    flat = fit_scalers(feats, names, sidx, train, "log_return", season_tz="UTC")
    assert flat["season"]["profile"] == pytest.approx([1.0] * MINUTES)
    obs, _, scale = apply_scalers(feats, names, sidx, sc, "log_return", "volatility")
    obs_f, _, scale_f = apply_scalers(feats, names, sidx, flat, "log_return", "volatility")
    np.testing.assert_allclose(scale_f, scale, rtol=1e-6)
    np.testing.assert_allclose(obs_f[:, -1], obs[:, 3], rtol=1e-5, atol=1e-6)  # log_vol_season == log_vol
