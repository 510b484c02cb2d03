"""The preparing stage's cheaper paths give the bits of the plain formulations they replaced: standardization run by
run and piece by piece, UTC offsets from a table of the span, known inputs in chunks, rows taken as opaque items."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from foxhunt.data.bars import grid
from foxhunt.data.dataset.summary import _real_rows
from foxhunt.data.features import known, scaling
from foxhunt.data.features.bar_features import OBSERVED, raw_features
from foxhunt.data.features.fitstats import KeptRows, season_moments
from foxhunt.data.features.fitted import Moments, Scalers, SeriesScalers
from foxhunt.data.features.known import take_rows
from foxhunt.data.features.scaling import fit_scalers
from foxhunt.data.features.seasonality import Season
from foxhunt.data.util import clock
from tests.data.features.test_scaling import opts

MIN = 60 * 10**9
CT = "America/Chicago"


def _scalers(names: list[str]) -> Scalers:
    rng = np.random.default_rng(1)

    def entry() -> SeriesScalers:
        return SeriesScalers({c: Moments(float(rng.normal()), float(rng.uniform(0.5, 2))) for c in OBSERVED},
                             0.0, 1.0, 1.0)

    pooled = entry()
    return Scalers({n: entry() for n in names[:-1]}, pooled)  # the last series is unseen: the pooled scalers


def _plain(feats: pl.DataFrame, derived: dict, names: list[str], sidx: np.ndarray, sc: Scalers) -> np.ndarray:
    """standardize as it was: per-row copies of the mean and std, np.nan_to_num, then float32."""
    cols = []
    for c in scaling.observed_names(sc, opts()):
        x = derived[c] if c in derived else feats[c].to_numpy()
        if c != "roll":
            table = [sc.of(n).moments[c] for n in names]
            x = (x - np.array([t.mean for t in table])[sidx]) / np.array([t.std for t in table])[sidx]
        cols.append(np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0).astype(np.float32))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("order", ["sorted", "shuffled"])
def test_standardize_by_runs_and_pieces_is_the_per_row_formula(order, monkeypatch):
    rng = np.random.default_rng(0)
    names, n = ["A", "B", "C"], 100
    sidx = np.repeat(np.arange(3), [40, 35, 25])
    if order == "shuffled":  # many runs: per-row copies
        sidx = rng.permutation(sidx)
        monkeypatch.setattr(scaling, "RUNS_MAX", 2)
    monkeypatch.setattr(scaling, "PIECE_ROWS", 7)  # pieces end inside runs and at their ends
    feats = pl.DataFrame({c: rng.normal(size=n) for c in OBSERVED if c != "log_vol"})
    feats = feats.with_columns(pl.Series("log_return", np.where(np.arange(n) % 9 == 0, np.inf, feats["log_return"])),
                               pl.Series("log_range", np.where(np.arange(n) % 13 == 0, np.nan, feats["log_range"])))
    derived = {"log_vol": np.where(np.arange(n) % 17 == 0, -np.inf, rng.normal(size=n))}
    sc = _scalers(names)
    want = _plain(feats, derived, names, sidx, sc)
    got, _, _ = scaling.standardize(feats, names, sidx, sc, opts(), derived, np.zeros(n), np.ones(n))
    assert got.dtype == np.float32 and np.array_equal(got, want)
    out = np.full((n, 2 + want.shape[1]), 7.0, dtype=np.float32)  # written into columns of a wider array
    scaling.standardize(feats, names, sidx, sc, opts(), derived, np.zeros(n), np.ones(n), out=out[:, 2:])
    assert np.array_equal(out[:, 2:], want) and (out[:, :2] == 7.0).all()


def test_local_ns_table_of_the_span_is_the_runs_of_quarter_hours(monkeypatch):
    rng = np.random.default_rng(2)
    start = int(np.datetime64("2024-03-09T00:00", "ns").astype(np.int64))  # the DST weekend, then autumn's
    a = start + np.sort(rng.choice(20000, 6000, replace=False)) * MIN
    ts = np.concatenate([a, a[::3] + 240 * 24 * 60 * MIN, rng.permutation(a)[:500]])  # sorted runs, then any order
    monkeypatch.setattr(clock, "SPAN_ROWS", 10**9)  # never a table: one offset per run of quarter-hours
    runs = clock.local_ns(ts, CT)
    monkeypatch.setattr(clock, "SPAN_ROWS", 1)  # always a table
    table = clock.local_ns(ts, CT)
    assert np.array_equal(runs, table)
    wall = pl.Series(ts).cast(pl.Datetime("ns", "UTC")).dt.convert_time_zone(CT).dt.replace_time_zone(None)
    assert np.array_equal(table, wall.dt.epoch("ns").to_numpy())


def test_known_cont_in_chunks_is_known_columns(monkeypatch):
    ts = np.sort(np.random.default_rng(3).choice(10**6, 1000, replace=False)) * MIN + 1_700_000_000 * 10**9
    season = Season(CT, 3.0, tuple(np.linspace(0.5, 1.5, 1440).tolist()))
    want = np.stack(list(known.known_columns(ts, CT, True, None, season).values()), axis=-1).astype(np.float32)
    monkeypatch.setattr(known, "CHUNK_ROWS", 64)
    got = known.known_cont(np.concatenate([ts[::2], ts[1::2]]), CT, True, None, season)  # any order
    assert np.array_equal(got, np.concatenate([want[::2], want[1::2]]))


def test_take_rows_into_columns_is_fancy_indexing(monkeypatch):
    rng = np.random.default_rng(4)
    src = rng.normal(size=(50, 3)).astype(np.float32)
    idx = rng.integers(0, 50, 200)
    out = np.zeros((200, 5), dtype=np.float32)
    take_rows(src, idx, out[:, 1:4])
    assert np.array_equal(out[:, 1:4], src[idx]) and not out[:, [0, 4]].any()
    monkeypatch.setattr(known, "TAKE_ROWS", 7)  # several pieces and a short last one
    out[:] = 0
    take_rows(src, idx, out[:, 1:4])
    assert np.array_equal(out[:, 1:4], src[idx]) and not out[:, [0, 4]].any()
    whole = np.zeros((200, 3), dtype=np.float32)  # a contiguous `out`: one take
    take_rows(src, idx, whole)
    assert np.array_equal(whole, src[idx])


def test_season_moments_on_the_training_rows_is_the_whole_column_formula():
    rng = np.random.default_rng(5)
    n, s = 3000, 3
    g = np.repeat(np.arange(s), n // s)
    ts = 1_700_000_000 * 10**9 + np.tile(np.arange(n // s), s) * MIN
    x = rng.normal(size=n)
    valid = np.arange(n) % 50 != 0
    x[~valid] = np.nan
    keep = rng.random(n) < 0.7
    got = season_moments(ts, x, valid, KeptRows.of(keep, g, s), CT)
    both = keep & valid
    sq = np.array([np.add.reduce(x[both & (g == i)] ** 2) for i in range(s)])  # each series' run summed alone
    scale = sq / np.bincount(g[both], minlength=s)
    proxy = x**2 / scale[g]
    use = keep & np.isfinite(proxy)
    cell = g[use] * 1440 + ((clock.local_ns(ts[use], CT) % clock.DAY_NS) // MIN)
    assert np.array_equal(got["season:sq"], sq)
    assert np.array_equal(got["season:sums"].ravel(), np.bincount(cell, weights=proxy[use], minlength=s * 1440))
    assert np.array_equal(got["season:counts"].ravel(), np.bincount(cell, minlength=s * 1440))


def test_trailing_series_by_series_is_the_window_over_series(monkeypatch):
    rng = np.random.default_rng(6)
    n = 600
    close = 100 * np.exp(np.cumsum(rng.normal(0, 1e-3, n)))
    bars = pl.DataFrame({
        "series": ["A"] * 250 + ["B"] * 200 + ["C"] * 150, "ts": pl.Series(np.tile(np.arange(600) * MIN, 1))
        .cast(pl.Datetime("ns", "UTC")), "close": close, "high": close * 1.001, "low": close * 0.999,
        "volume": rng.integers(1, 9, n).astype(np.float64), "contract": ["X"] * n,
    })
    feats = raw_features(bars, "ratio", "log_range")
    names, sidx = ["A", "B", "C"], np.repeat(np.arange(3), [250, 200, 150])
    cfg = opts("log_range", "volatility", vol_halflife=5.0, vol_features=True)
    sc = fit_scalers(feats, names, sidx, np.arange(n) % 200 < 150, cfg)
    by_run = scaling.trailing(feats, names, sidx, sc, cfg)
    monkeypatch.setattr(scaling, "RUNS_SLICED", 0)  # polars windows over the series column
    over = scaling.trailing(feats, names, sidx, sc, cfg)
    assert by_run[0].keys() == over[0].keys() and len(by_run[0]) == 5
    assert all(np.array_equal(by_run[0][c], over[0][c], equal_nan=True) for c in by_run[0])
    assert np.array_equal(by_run[1], over[1]) and np.array_equal(by_run[2], over[2])


def test_distinct_is_unique_and_searchsorted():
    x = np.concatenate([np.arange(0, 50, 2), np.arange(0, 60, 3), [7, 7, 0]]).astype(np.int64)
    values, inverse = known.distinct(x)
    assert np.array_equal(values, np.unique(x)) and np.array_equal(inverse, np.searchsorted(values, x))
    assert [len(a) for a in known.distinct(x[:0])] == [0, 0]


@pytest.mark.parametrize("order", [[0, 1, 2], [2, 0, 1, 2]])
@pytest.mark.parametrize("future", [True, False])
def test_real_rows_by_run_is_the_mask_per_series(order, future):
    sidx = np.concatenate([np.full(5, i) for i in order])
    real = np.arange(len(sidx)) % 5 < (4 if future else 5)  # the last row of each run a future row, or none
    ts = np.arange(len(sidx), dtype=np.int64)[::-1] * 10
    want = [(int((real & (sidx == i)).sum()), int(ts[real & (sidx == i)].min()), int(ts[real & (sidx == i)].max()),
             int(np.flatnonzero(real & (sidx == i))[0])) for i in range(3)]
    assert _real_rows(sidx, real, ts, 3) == want


def test_closed_by_minute_of_the_week_is_the_weekday_formula():
    """The CME grid's table by minute of the week (from its Session) is the halt and weekend spelled by weekday."""
    rng = np.random.default_rng(7)
    wall = np.concatenate([rng.integers(-(10**17), 10**17, 20000), np.arange(-3 * 10**13, 3 * 10**13, 7 * 10**9 + 13)])
    minute, wd = (wall % clock.DAY_NS) // MIN, (wall // clock.DAY_NS + 3) % 7
    halt = (minute >= 16 * 60) & (minute < 17 * 60)  # 16:00-17:00 CT
    weekend = (wd == 5) | ((wd == 4) & (minute >= 16 * 60)) | ((wd == 6) & (minute < 17 * 60))  # Fri 16:00-Sun 17:00
    assert np.array_equal(grid._closed(wall, grid.default_grid("America/Chicago")), halt | weekend)


def test_train_moments_with_the_callers_minutes_are_those_without():
    rng = np.random.default_rng(10)
    n = 900
    ts = 1_709_900_000 * 10**9 + np.arange(n) * MIN
    close = 100 * np.exp(np.cumsum(rng.normal(0, 1e-3, n)))
    bars = pl.DataFrame({"series": ["A"] * 500 + ["B"] * 400, "ts": pl.Series(ts).cast(pl.Datetime("ns", "UTC")),
                         "close": close, "high": close * 1.002, "low": close * 0.998,
                         "volume": np.ones(n), "contract": ["X"] * n})
    feats = raw_features(bars, "ratio", "log_return")
    sidx = np.repeat([0, 1], [500, 400])
    keep = (np.arange(n) % 7 != 0) & ~feats["first"].to_numpy()
    minute = ((clock.local_ns(ts, CT) % clock.DAY_NS) // MIN).astype(np.int16)
    plain = scaling.train_moments(feats, sidx, 2, keep, "log_return", CT)
    given = scaling.train_moments(feats, sidx, 2, keep, "log_return", CT, minute=minute)
    assert plain.keys() == given.keys() and all(np.array_equal(plain[k], given[k]) for k in plain)
