"""The sidecar's volatility-scaling recipe is enough: numpy, given only its words' recipe and the JSON scaler
numbers, rebuilds the center and scale that data/scaling.trailing gives every bar (the scale at a window's origin
unscales the exported graph's output). No export here: the recipe is a function of the fitted scalers alone."""

from __future__ import annotations

import json
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import numpy as np
import polars as pl
import pytest

from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.features.scaling import fit_scalers, trailing
from foxhunt.export.sidecar import scaling_words, trailing_words
from tests.data.features.test_scaling import opts, prep, synth
from tests.data.features.test_seasonality import intraday

TZ = "America/Chicago"


def ewma(v: np.ndarray, a: float) -> np.ndarray:
    m = np.empty_like(v)
    m[0] = v[0]
    for t in range(1, len(v)):
        m[t] = (1 - a) * m[t - 1] + a * v[t]
    return m


def minute_of_day(ts_ns: np.ndarray, tz: str) -> np.ndarray:
    """Independent of foxhunt: the local wall-clock minute through zoneinfo, one timestamp at a time."""
    import datetime as dt

    zone = ZoneInfo(tz)
    out = []
    for ns in ts_ns.tolist():
        t = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC).astimezone(zone)
        out.append(t.hour * 60 + t.minute)
    return np.array(out)


def rebuilt(side: dict, feats: pl.DataFrame, names: list[str], sidx: np.ndarray, target: str) -> np.ndarray:
    """The scale per bar, as the sidecar's center_scale words say, from the sidecar's numbers."""
    sc = side["scalers"]
    ret, rng = ("price_change", "price_range") if target == "price_change" else ("log_return", "log_range")
    a = 1 - 0.5 ** (1 / sc["halflife"])
    season = sc.get("season")
    scale = np.empty(len(sidx))
    for s, name in enumerate(names):
        rows = np.flatnonzero(sidx == s)
        entry = sc["series"][name]
        std, k = entry[ret]["std"], entry["range_k"]["value"]
        x = feats[rng].to_numpy()[rows]
        v = k * x**2 if sc["estimator"] == "range" else feats[ret].to_numpy()[rows] ** 2
        p = np.ones(len(rows))
        if season:
            p = np.asarray(season["profile"])[minute_of_day(feats["ts"].dt.epoch("ns").to_numpy()[rows], season["tz"])]
        v = v / p**2
        v[0] = std**2  # the series' first bar: the seed
        sigma = np.maximum(np.sqrt(ewma(v, a)), 0.1 * std) * p
        scale[rows] = sigma if target in ("log_return", "price_change") else sigma / np.sqrt(k)
    return scale


@pytest.mark.parametrize(
    "bars, target, estimator, season_tz",
    [
        ("intraday", "log_return", "range", TZ),  # the defaults on intraday bars: range estimator, session profile
        ("daily", "log_return", "returns", None),
        ("intraday", "log_range", "range", TZ),
        ("daily", "price_change", "range", None),
    ],
)
def test_the_volatility_recipe_rebuilds_every_bars_scale(bars, target, estimator, season_tz):
    frame = intraday(n_days=3) if bars == "intraday" else synth(120)
    feats, names, sidx = prep(frame, target)
    train = np.arange(len(sidx)) < int(0.7 * len(sidx))
    cfg = opts(target, "volatility", vol_halflife=5.0, vol_estimator=estimator)
    scalers = fit_scalers(feats, names, sidx, train, cfg, season_tz)
    lm = SimpleNamespace(transform=FittedTransform(tuple(names), scalers, cfg), schema=SimpleNamespace(target=target))
    side = json.loads(json.dumps(scaling_words(lm, set())))  # what another language reads
    words = side["center_scale"]
    assert "0.5^(1 / scalers.halflife)" in words and ("p(t)" in words) == (season_tz is not None)
    assert ("sqrt(k)" in words) == (target == "log_range")
    _, center, scale = trailing(feats, names, sidx, scalers, cfg)
    np.testing.assert_array_equal(center, 0.0)
    np.testing.assert_allclose(rebuilt(side, feats, names, sidx, target), scale, rtol=1e-9)


@pytest.mark.parametrize("bars, estimator, season_tz", [("intraday", "range", TZ), ("daily", "returns", None)])
def test_the_log_vol_words_rebuild_log_vol_and_log_vol_season(bars, estimator, season_tz):
    """`features.log_vol` / `log_vol_season` say the exact seeding: the EWMA's value on a series' first bar is std^2
    itself (that bar's proxy unused), which numpy follows here to foxhunt's inputs; read as "seed, then update on the
    first bar" it would be off on the early bars. The season words define the proxy and its profile lookup."""
    frame = intraday(n_days=3) if bars == "intraday" else synth(120)
    feats, names, sidx = prep(frame, "log_return")
    cfg = opts("log_return", "volatility", vol_halflife=5.0, vol_estimator=estimator)
    scalers = fit_scalers(feats, names, sidx, np.arange(len(sidx)) < int(0.7 * len(sidx)), cfg, season_tz)
    tf = FittedTransform(tuple(names), scalers, cfg)
    words = trailing_words(tf, "log_return")
    assert "m_0 = std^2 on the series' first bar" in words["log_vol"] and "v_0 is not used" in words["log_vol"]
    assert ("log_vol_season" in words) == (season_tz is not None)
    if season_tz is not None:
        assert "divided by p(t)^2" in words["log_vol_season"] and "scalers.season.tz" in words["log_vol_season"]
        assert "the seed is not divided by p^2" in words["log_vol_season"]
    side = json.loads(json.dumps(scaling_words(SimpleNamespace(transform=tf, schema=SimpleNamespace(
        target="log_return")), set())))
    sc = side["scalers"]
    recipe = words["log_vol"][words["log_vol"].index("m_0"):words["log_vol"].index(" (the same recipe")]
    deseasonalized = recipe.replace("a v_t ", "a v_t / p(t)^2 ") if season_tz is not None else recipe
    assert deseasonalized in side["center_scale"]  # one recipe, in the same words, for the inputs and the scale
    derived = trailing(feats, names, sidx, scalers, cfg)[0]
    a = 1 - 0.5 ** (1 / sc["halflife"])
    for s, name in enumerate(names):
        rows = np.flatnonzero(sidx == s)
        entry = sc["series"][name]
        std, k = entry["log_return"]["std"], entry["range_k"]["value"]
        v = k * feats["log_range"].to_numpy()[rows] ** 2 if estimator == "range" else feats["log_return"].to_numpy()[
            rows] ** 2
        seeded = v.copy()
        seeded[0] = std**2  # the seed itself on the first bar
        log_vol = np.log(np.maximum(np.sqrt(ewma(seeded, a)), 0.1 * std))
        np.testing.assert_allclose(log_vol, derived["log_vol"][rows], rtol=1e-9)
        literal = np.concatenate([[(1 - a) * std**2 + a * np.nan_to_num(v[0])], v[1:]])  # seed, then update on bar 0
        assert not np.allclose(np.log(np.maximum(np.sqrt(ewma(literal, a)), 0.1 * std))[:3], log_vol[:3], rtol=1e-9)
        if season_tz is not None:
            p = np.asarray(sc["season"]["profile"])[minute_of_day(feats["ts"].dt.epoch("ns").to_numpy()[rows],
                                                                 sc["season"]["tz"])]
            ds = v / p**2
            ds[0] = std**2
            np.testing.assert_allclose(np.log(np.maximum(np.sqrt(ewma(ds, a)), 0.1 * std)),
                                       derived["log_vol_season"][rows], rtol=1e-9)
