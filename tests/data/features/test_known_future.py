"""The decoder's known inputs are a function of the origin alone (issue 9, item 5).

For every window, the known inputs at its forecast steps equal the calendar of the regular grid after its origin
(`known.decoder_features`, computed from the origin timestamp, the bar interval and the step index only), whichever
bars follow; training windows and `predict` therefore see the same values.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from foxhunt.data.bars.load import LoadedBars, load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.features.known import decoder_features, decoder_known, distinct_union, sorted_distinct
from foxhunt.data.prepare import prepare_from_bars

SEC = 10**9
CT = "America/Chicago"


def sparse_seconds(seed: int = 0, traded: float = 0.6, n: int = 3000) -> pl.DataFrame:
    """One series of 1-second bars, `traded` of the seconds having a trade, inside one CME session."""
    rng = np.random.default_rng(seed)
    start = int(np.datetime64("2024-02-06T15:00", "ns").astype(np.int64))  # Tue 09:00 CST
    ts = start + np.flatnonzero(rng.random(n) < traded) * SEC
    close = 5000 * np.exp(np.cumsum(rng.normal(0, 1e-4, len(ts))))
    return pl.DataFrame(
        {
            "series": "ES",
            "ts": pl.Series(ts).cast(pl.Datetime("ns", "UTC")),
            "open": close,
            "high": close * 1.0001,
            "low": close * 0.9999,
            "close": close,
            "volume": rng.integers(1, 50, len(ts)).astype(np.float64),
            "contract": "ESH4",
        }
    )


def prepare(bars: pl.DataFrame, **kw) -> PreparedData:
    cfg = DataConfig(encoder_length=10, horizon=6, val_fraction=0.3, **kw)
    return prepare_from_bars(LoadedBars(bars, [], {}), cfg)


def assert_decoder_from_origin(p: PreparedData, ids: torch.Tensor) -> None:
    """The batch's known inputs at forecast steps == the calendar of the grid after each origin, computed anew."""
    w, tf = p.windows, p.transform
    want = decoder_features(w.origin_ns(ids).numpy(), tf.bar_spacing_ns, w.horizon, tf.exchange_tz, tf.intraday,
                            tf.session_calendar, tf.scalers.season)  # (B, D, Kr)
    got = w.batch(ids).dense()["known_cont"][:, w.encoder_length :, : w.n_known_cont]  # (B, D, Kr)
    assert torch.equal(got, torch.from_numpy(want))


def test_every_training_window_of_a_sparse_file_sees_only_what_the_origin_knows() -> None:
    p = prepare(sparse_seconds())
    ids = p.splits["train"]
    w = p.windows
    # the file is sparse: most windows' forecast bars are not the next grid steps
    gappy = (w.target_ns(ids) != w.decoder_ns(ids)).any(dim=1).float().mean()
    assert gappy > 0.9
    assert p.summary["windows_with_gaps"] / w.n_windows > 0.9
    assert p.transform.bar_spacing_ns == SEC
    assert_decoder_from_origin(p, ids)
    assert_decoder_from_origin(p, p.splits["val"])


def test_fixture_windows_see_only_what_the_origin_knows(fixtures_dir: Path) -> None:
    cfg = DataConfig(paths=(str(fixtures_dir / "es_fut_ohlcv1m_databento.parquet"),), encoder_length=16, horizon=8)
    p = prepare_from_bars(load_bars(cfg), cfg)
    assert_decoder_from_origin(p, torch.cat([p.splits["train"], p.splits["val"]]))


def test_removing_later_bars_leaves_the_decoder_inputs_unchanged() -> None:
    """The decoder's known inputs do not tell which bars after the origin exist."""
    bars = sparse_seconds(seed=1, traded=0.9)
    rng = np.random.default_rng(2)
    t = int(bars["ts"].dt.epoch("ns")[bars.height // 2])
    drop = (bars["ts"].dt.epoch("ns").to_numpy() > t) & (rng.random(bars.height) < 0.5)
    thinner = bars.filter(pl.Series(~drop))
    p, q = prepare(bars, train_end="2024-02-06T15:10"), prepare(thinner, train_end="2024-02-06T15:10")
    ids = torch.arange(p.windows.n_windows)
    ids = ids[p.windows.origin_ns(ids) <= t]
    ids = ids[ids < q.windows.n_windows]  # rows up to t are the same in both, so are these windows
    assert torch.equal(p.windows.origin_ns(ids), q.windows.origin_ns(ids))
    assert not torch.equal(p.windows.target_ns(ids), q.windows.target_ns(ids))  # the later bars did move
    dp, dq = p.windows.batch(ids).dense(), q.windows.batch(ids).dense()
    assert torch.equal(dp["known_cont"], dq["known_cont"])


def test_training_and_prediction_give_an_origin_the_same_decoder_inputs() -> None:
    bars = sparse_seconds(seed=3)
    p = prepare(bars)
    cfg = DataConfig(encoder_length=10, horizon=6)
    live = prepare_from_bars(LoadedBars(bars, [], {}), cfg, transform=p.transform, for_prediction=True)
    train_ids = p.splits["train"]
    live_ids = live.splits["test"]
    # match origins by timestamp: prediction has every origin, the live one after the last bar included
    pos = {int(o): i for i, o in enumerate(live.windows.origin_ns(live_ids))}
    match = torch.tensor([pos[int(o)] for o in p.windows.origin_ns(train_ids)])
    a = p.windows.batch(train_ids).dense()["known_cont"]
    b = live.windows.batch(live_ids[match]).dense()["known_cont"]
    assert torch.equal(a, b)
    last = live_ids[-1:]  # the live forecast: its forecast rows are the extrapolated grid itself
    assert torch.equal(live.windows.decoder_ns(last), live.windows.target_ns(last, extrapolated=True))


def test_prediction_uses_the_models_bar_interval_not_the_files() -> None:
    """A prediction file that happens to be sparser keeps the model's grid (the median spacing of its training)."""
    p = prepare(sparse_seconds(seed=4, traded=0.9))
    thin = sparse_seconds(seed=5, traded=0.3)  # median gap 2-3 s
    live = prepare_from_bars(LoadedBars(thin, [], {}), DataConfig(encoder_length=10, horizon=6),
                             transform=p.transform, for_prediction=True)
    ids = live.splits["test"][-5:]
    steps = live.windows.decoder_ns(ids) - live.windows.origin_ns(ids)[:, None]
    assert steps.tolist() == [list(range(SEC, 7 * SEC, SEC))] * 5


@pytest.mark.parametrize("chunk_cells", [1 << 24, 16])
@pytest.mark.parametrize("offset_ns", [0, 17])
def test_table_storage_matches_the_definition(offset_ns: int, chunk_cells: int, monkeypatch) -> None:
    """Aligned bars use the lattice layout (base + step); bars off the lattice the full index. Same values, in one
    chunk of origins or many."""
    monkeypatch.setattr("foxhunt.data.features.known.CHUNK_CELLS", chunk_cells)
    rng = np.random.default_rng(6)
    start = int(np.datetime64("2024-03-08T20:00", "ns").astype(np.int64))  # Fri 14:00 CST: crosses the weekend
    ts = start + np.sort(rng.choice(600, 300, replace=False)) * 60 * SEC
    ts[::7] += offset_ns  # some bars off the minute
    known = decoder_known(ts, 60 * SEC, 5, CT, True, None)
    assert (known.index is None) == (offset_ns == 0)
    rows = known.base[:, None] + np.arange(5) if known.index is None else known.index
    np.testing.assert_array_equal(known.cont[rows], decoder_features(ts, 60 * SEC, 5, CT, True, None))


def test_old_transforms_without_a_spacing_use_the_files() -> None:
    bars = sparse_seconds(seed=7, traded=0.95)
    p = prepare(bars)
    old = replace(p.transform, bar_spacing_ns=0)
    live = prepare_from_bars(LoadedBars(bars, [], {}), DataConfig(encoder_length=10, horizon=6), transform=old,
                             for_prediction=True)
    ids = live.splits["test"][-1:]
    assert (live.windows.decoder_ns(ids) - live.windows.origin_ns(ids)[:, None]).tolist() == [
        list(range(SEC, 7 * SEC, SEC))
    ]


@pytest.mark.parametrize("case", ["lattice", "off_lattice", "sparse", "one_value", "empty"])
def test_distinct_union_is_the_sorted_distinct_concatenation(case: str) -> None:
    rng = np.random.default_rng(7)
    minute = 60 * 10**9
    origin = 1_700_000_000 * 10**9 + 30 * 10**9  # not a multiple of the step: offsets count from the least value
    parts = [origin + minute * np.flatnonzero(rng.random(5000) < 0.7) + k * minute for k in range(4)]
    if case == "off_lattice":
        parts[2] = np.sort(np.r_[parts[2], origin + 17])  # one value off the minutes' lattice
    elif case == "sparse":
        parts[1] = np.r_[parts[1], origin + 10**7 * minute]  # a lattice far longer than the values
    elif case == "one_value":
        parts = [np.array([origin]), np.array([origin]), np.array([], dtype=np.int64)]
    elif case == "empty":
        parts = [np.array([], dtype=np.int64)] * 2
    want = sorted_distinct(np.concatenate(parts))
    got = distinct_union(parts)
    assert got.dtype == np.int64
    assert np.array_equal(got, want)
