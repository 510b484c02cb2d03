"""Preparing on two threads gives the bits of preparing on one: the known grid computed beside the trail stage, and
the outputs of prepare_from_bars either way."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

from foxhunt.data.bars.grid import default_grid
from foxhunt.data.bars.load import LoadedBars
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset import featurize, types
from foxhunt.data.dataset.windows import assign_splits, window_starts
from foxhunt.data.features import fitstats, known
from foxhunt.data.features.seasonality import Season
from foxhunt.data.prepare import prepare_from_bars

MIN = 60 * 10**9
CT = "America/Chicago"
SEASON = Season(CT, 3.0, tuple(np.linspace(0.5, 1.5, 1440).tolist()))


def _minutes_apart(n: int, seed: int) -> np.ndarray:
    return np.sort(np.random.default_rng(seed).choice(10**6, n, replace=False)) * MIN + 1_700_000_000 * 10**9


def test_distinct_as_int32_is_distinct():
    x = np.concatenate([np.arange(0, 50, 2), np.arange(0, 60, 3), [7, 7, 0]]).astype(np.int64)
    values, inverse = known.distinct(x, np.int32)
    assert inverse.dtype == np.int32
    assert np.array_equal(values, known.distinct(x)[0]) and np.array_equal(inverse, known.distinct(x)[1])


def _bars() -> pl.DataFrame:
    """Two series of 1-minute bars over a few sessions, one with gaps (off the lattice of the other)."""
    rng = np.random.default_rng(0)
    start = int(np.datetime64("2024-03-04T14:30", "ns").astype(np.int64))
    frames = []
    for name, keep in (("ES", 1.0), ("NQ", 0.7)):
        ts = start + np.flatnonzero(rng.random(6000) < keep) * MIN
        close = 5000 * np.exp(np.cumsum(rng.normal(0, 1e-3, len(ts))))
        frames.append(pl.DataFrame({
            "series": name, "ts": pl.Series(ts).cast(pl.Datetime("ns", "UTC")), "open": close, "high": close * 1.001,
            "low": close * 0.999, "close": close, "volume": rng.integers(1, 50, len(ts)).astype(np.float64),
            "contract": name + "H4",
        }))
    return pl.concat(frames)


def _arrays(p: types.PreparedData) -> dict:
    w = p.windows
    out = {k: v for k, v in vars(w).items() if isinstance(v, torch.Tensor)}
    out.update({f"split_{k}": v for k, v in p.splits.items()})
    return out


@pytest.mark.parametrize(("seasonality", "extra"), [(True, {"vol_features": True}), (False, {"calendar_features": True})])
def test_two_threads_prepare_the_bits_of_one(seasonality, extra, monkeypatch):
    cfg = DataConfig(encoder_length=16, horizon=4, val_fraction=0.3, scaling="volatility", seasonality=seasonality,
                     **extra)
    bars = _bars()
    monkeypatch.setenv("FOXHUNT_DATA_THREADS", "1")
    one = prepare_from_bars(LoadedBars(bars, [], {}), cfg)
    monkeypatch.setenv("FOXHUNT_DATA_THREADS", "2")
    two = prepare_from_bars(LoadedBars(bars, [], {}), cfg)
    assert (one.transform.scalers.season is not None) == seasonality
    assert one.transform.to_dict() == two.transform.to_dict() and one.summary == two.summary
    a, b = _arrays(one), _arrays(two)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_window_splits_are_the_starts_and_their_splits():
    ts = np.arange(40, dtype=np.int64) * MIN
    first, end = np.array([0, 25]), np.array([25, 40])
    starts, split = featurize.window_splits(ts, first, end, 4, 2, (20 * MIN, 30 * MIN), 0)
    want = window_starts(first, end, 6)
    assert np.array_equal(starts, want)
    ref = assign_splits(ts[want + 4], ts[want + 5], 20 * MIN, 30 * MIN, 0)
    assert all(np.array_equal(split.ids[k], ref.ids[k]) for k in ref.ids) and split.purged == ref.purged


@pytest.mark.parametrize("g", [[0, 0, 0, 2, 2, 3], [2, 0, 0, 3, 2, 0]])
def test_by_series_is_the_gathered_op(g):
    g = np.array(g * 50)
    x = np.random.default_rng(5).normal(size=len(g))
    sel = fitstats.select(np.arange(len(g)) % 7 != 3, g, 5)
    assert sel.grouped == bool(np.all(np.diff(g) >= 0))
    xv, per = x[sel.at], np.array([0.5, 2.0, -1.0, 3.0, 7.0])
    for op in (np.subtract, np.divide):
        assert np.array_equal(fitstats.by_series(op, xv, sel, per), op(xv, per[sel.g]))


def test_season_moments_given_the_squares_are_those_computed():
    rng = np.random.default_rng(6)
    n = 3000
    ts = 1_709_900_000 * 10**9 + np.arange(n) * MIN
    g = np.repeat(np.arange(3), n // 3)
    x = np.abs(rng.normal(size=n))
    keep = rng.random(n) < 0.8
    kept = fitstats.select(keep, g, 3)
    x2 = x[kept.at] ** 2
    squares = (x2, fitstats.squares_of(x[kept.at], kept, "r", x2)["r:sq"])
    rows = fitstats.KeptRows(keep, g, 3, kept)
    want = fitstats.season_moments(ts, x, np.ones(n, bool), rows, CT)
    got = fitstats.season_moments(ts, x, np.ones(n, bool), rows, CT, squares=squares)
    assert want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)


@pytest.mark.parametrize("season", [None, SEASON])
def test_the_shared_grids_rows_are_the_known_inputs_of_each_bars_timestamp(season, monkeypatch):
    """Rows take their known inputs from the grid's table, or (a time no forecast step lands on) from the grid's
    rows of their own, a chunk of rows at a time: each the value known_cont gives the time."""
    rng = np.random.default_rng(7)
    start = int(np.datetime64("2024-03-04T14:30", "ns").astype(np.int64))
    ts = np.concatenate([start + np.sort(rng.choice(3000, n, replace=False)) * MIN for n in (2000, 1500)])
    ts[100] += 17 * 10**9  # a stamp off the minute grid: no forecast grid lands on it
    grid = known.shared_grid(known.sorted_distinct(ts), MIN, 3, CT, True, None, season, default_grid(CT))
    assert len(grid.extra_ts) >= 2  # the first stamp and the one off the grid
    monkeypatch.setattr(known, "CHUNK_ROWS", 512)
    width = 5 + (season is not None)
    out = np.zeros((len(ts), width + 3), dtype=np.float32)
    got = grid.rows(ts, out[:, 1:1 + width])
    want = known.known_cont(ts, CT, True, None, season)  # (N, Kr) straight from the definition
    assert np.array_equal(out[:, 1:1 + width], want) and not out[:, [0, width + 1, width + 2]].any()
    # the grid's table: its own known inputs, whichever stamps it shares with the bars
    assert np.array_equal(grid.cont, known.known_cont(grid.ts, CT, True, None, season))
    # each row's forecast steps: the grid's times after it
    rows = got.base[:, None] + np.arange(3) if got.index is None else got.index
    assert np.array_equal(grid.ts[rows], known.decoder_timestamps(ts, MIN, 3, True, CT))


def test_take_rows_via_an_index_is_the_composed_gather(monkeypatch):
    rng = np.random.default_rng(8)
    src = rng.normal(size=(30, 2)).astype(np.float32)
    via = rng.integers(0, 30, 12)
    idx = rng.integers(0, 12, 100)
    monkeypatch.setattr(known, "TAKE_ROWS", 7)
    for out in (np.zeros((100, 2), dtype=np.float32), np.zeros((100, 5), dtype=np.float32)[:, 1:3]):
        known.take_rows(src, idx, out, via=via)
        assert np.array_equal(out, src[via[idx]])
