"""The window index and batch() against a naive per-window reference (the Python loops live only here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.data.dataset.run_order import RunOrder
from foxhunt.data.dataset.windows import (
    OFF_GRID_CHUNK,
    WindowedData,
    assign_splits,
    off_grid_windows,
    series_bounds,
    window_starts,
)

E, D = 4, 3
T = E + D


def naive_starts(lengths: list[int], window_length: int) -> list[int]:
    out, first = [], 0
    for n in lengths:
        out += [s for s in range(first + 1, first + n) if s + window_length <= first + n]
        first += n
    return out


@pytest.mark.parametrize("lengths", [[10], [8, 7, 20], [3, 12, 1, 9], [7, 8], [1]])
def test_window_starts_match_naive(lengths: list[int]) -> None:
    sidx = np.repeat(np.arange(len(lengths)), lengths)
    first, end = series_bounds(sidx)
    assert window_starts(first, end, T).tolist() == naive_starts(lengths, T)


def make_windowed(lengths: list[int], seed: int = 0) -> WindowedData:
    g = torch.Generator().manual_seed(seed)
    n = sum(lengths)
    sidx = np.repeat(np.arange(len(lengths)), lengths)
    first, end = series_bounds(sidx)
    real = torch.ones(n, dtype=torch.bool)
    real[torch.from_numpy(end - 1)] = False  # pretend the last row of each series was appended for prediction
    target = torch.randn(n, generator=g)
    target[~real] = float("nan")
    u = n + D  # a known-input table of its own: one grid point per row and D more at the end
    return WindowedData(
        cont=torch.randn(n, 5, generator=g),  # 2 known, 3 observed
        static_cat=torch.from_numpy(sidx + 1)[:, None],
        time_cat=torch.randint(0, 9, (n, 2), generator=g),  # 1 known, 1 observed categorical
        target_raw=target,
        center=torch.randn(n, generator=g),
        scale=torch.rand(n, generator=g) + 0.5,
        ts_ns=torch.arange(n, dtype=torch.int64) * 1000,
        real=real,
        series_idx=torch.from_numpy(sidx),
        starts=torch.from_numpy(window_starts(first, end, T)),
        encoder_length=E,
        horizon=D,
        n_known_cont=2,
        n_known_cat=1,
        series_names=tuple(f"S{i}" for i in range(len(lengths))),
        known_cont=torch.randn(u, 2, generator=g),
        known_cat=torch.randint(0, 9, (u, 1), generator=g),
        known_ts=torch.arange(u, dtype=torch.int64) * 1000 + 500,
        known_base=torch.arange(n, dtype=torch.int64),  # step k of origin row o: table row o + k - 1
    )


def test_batch_matches_naive_reference() -> None:
    w = make_windowed([12, 9, 15])
    ids = torch.tensor([0, 5, w.n_windows - 1, 3, 7])
    b = w.batch(ids)
    dense = b.dense()  # per-window views of the deduplicated rows
    rel = (torch.arange(T) - (E - 1)).float() / E
    for i, wid in enumerate(ids.tolist()):
        s = int(w.starts[wid])
        o = s + E - 1
        rows = list(range(s, s + T))
        assert len(set(w.series_idx[rows].tolist())) == 1  # a window never crosses series
        steps = list(range(o, o + D))  # known-input table rows of the forecast steps: from the origin alone
        assert torch.equal(dense["known_cont"][i, :E, :2], w.cont[rows[:E], :2])
        assert torch.equal(dense["known_cont"][i, E:, :2], w.known_cont[steps])
        assert torch.equal(dense["known_cont"][i, :, 2], rel)
        assert torch.equal(dense["observed_cont"][i], w.cont[rows[:E], 2:])
        assert torch.equal(dense["known_cat"][i, :E], w.time_cat[rows[:E], :1])
        assert torch.equal(dense["known_cat"][i, E:], w.known_cat[steps])
        assert w.decoder_ns(ids)[i].tolist() == w.known_ts[steps].tolist()
        assert torch.equal(dense["observed_cat"][i], w.time_cat[rows[:E], 1:])
        assert torch.equal(b.static_cat[i], w.static_cat[o])
        raw = w.target_raw[rows[E:]]
        torch.testing.assert_close(b.target[i], (raw - w.center[o]) / w.scale[o], equal_nan=True)
        assert b.target_center[i] == w.center[o] and b.target_scale[i] == w.scale[o]
        assert w.origin_ns(ids)[i] == w.ts_ns[o]
        want_ts = [int(w.ts_ns[r]) if w.real[r] else -1 for r in rows[E:]]
        assert w.target_ns(ids)[i].tolist() == want_ts
        assert w.target_ns(ids, extrapolated=True)[i].tolist() == w.ts_ns[rows[E:]].tolist()
        torch.testing.assert_close(w.actual(ids)[i], raw, equal_nan=True)
        assert w.series_code(ids)[i] == w.series_idx[o] + 1
    assert b.window.tolist() == ids.tolist()
    assert b.static_cont.shape == (len(ids), 0)


def test_batch_stores_each_bar_once_and_keeps_observed_out_of_forecast_rows() -> None:
    w = make_windowed([40])
    ids = torch.arange(8)  # 8 consecutive windows: E + 7 distinct encoder bars, D + 7 forecast bars
    b = w.batch(ids)
    assert b.enc_cont.shape == (E + 7, 5) and b.enc_cat.shape == (E + 7, 2)
    assert b.dec_cont.shape == (D + 7, 2) and b.dec_cat.shape == (D + 7, 1)  # known inputs only
    assert b.pos_cont.shape == (T, 1)
    assert b.enc_index.shape == (8, E) and b.dec_index.shape == (8, D)
    half = b.slice(2, 5)  # micro-batch: per-window tensors sliced, rows shared
    assert len(half) == 3 and half.enc_cont is b.enc_cont
    assert torch.equal(half.dense()["observed_cont"], b.dense()["observed_cont"][2:5])


def test_the_run_order_is_a_permutation_of_consecutive_runs() -> None:
    g = torch.Generator().manual_seed(3)
    for n, run in ((100, 16), (17, 4), (5, 8), (9, 1)):
        perm = RunOrder(n, run, g).take(0, n)
        assert sorted(perm.tolist()) == list(range(n))
        if run > 1 and n > run:
            steps = perm.diff()
            assert (steps == 1).sum() >= n - 2 * (n // run + 1)  # only run boundaries break the order
            assert perm.tolist() != list(range(n))


def test_the_run_order_with_a_stride_keep_a_runs_windows_a_stride_apart() -> None:
    g = torch.Generator().manual_seed(5)
    n, run, stride = 200, 8, 5
    perm = RunOrder(n, run, g, stride=stride).take(0, n)
    assert sorted(perm.tolist()) == list(range(n))
    steps = perm.diff()
    # inside a run the windows are `stride` apart; only run (and lane) boundaries break that
    assert (steps == stride).sum() >= n - 2 * (n // run + stride + 1)


def test_iter_batches_cover_every_window_once() -> None:
    w = make_windowed([30, 25])
    ids = torch.arange(w.n_windows)
    seen = [
        b.window for b in w.iter_batches(ids, 8, shuffle=True, generator=torch.Generator().manual_seed(1))
    ]
    assert [len(x) for x in seen[:-1]] == [8] * (len(seen) - 1)
    allw = torch.cat(seen)
    assert sorted(allw.tolist()) == ids.tolist() and allw.tolist() != ids.tolist()
    in_order = torch.cat([b.window for b in w.iter_batches(ids, 8)])
    assert in_order.tolist() == ids.tolist()


def test_split_assignment_and_purging() -> None:
    # Windows by (first forecast bar, last forecast bar); train cut 10, val cut 20.
    first = np.array([3, 8, 9, 10, 15, 18, 19, 20, 25])
    last = np.array([5, 9, 11, 12, 17, 20, 22, 22, 27])
    r = assign_splits(first, last, 10, 20)
    assert r.ids["train"].tolist() == [0, 1]  # window 2 starts in train but ends after the cut: purged
    assert r.ids["val"].tolist() == [3, 4]  # windows 5 and 6 cross the val end: purged
    assert r.ids["test"].tolist() == [7, 8]
    assert r.purged == {"train": 1, "val": 2}
    open_end = assign_splits(first, last, 10, None)
    assert open_end.ids["val"].tolist() == [3, 4, 5, 6, 7, 8] and open_end.ids["test"].tolist() == []
    assert open_end.purged == {"train": 1, "val": 0}



def test_off_grid_counts_the_same_in_chunks() -> None:
    w = make_windowed([40, 25, 31])
    on = torch.arange(1, len(w.ts_ns), 3)  # these rows sit on the grid step before them (known_ts[r - 1])
    w.ts_ns[on] = w.known_ts[on - 1]
    want = sum(int(w.ts_ns[o + D] != w.known_ts[o + D - 1]) for o in (w.starts + E - 1).tolist())
    assert 0 < want < w.n_windows
    def off_grid(chunk: int) -> int:
        index = None if w.known_index is None else w.known_index[:, -1].numpy()
        return off_grid_windows(w.starts.numpy(), w.ts_ns.numpy(), w.known_ts.numpy(), E, D, w.known_base.numpy(),
                                index, chunk)

    assert off_grid(7) == off_grid(OFF_GRID_CHUNK) == want
