"""store/early.py: a piece's early rows land at its place (the counts of the pieces before it, published in any
order), the arrays come out as np.save writes them, and a failed piece stops the pieces waiting on it."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from foxhunt.data.store import direct, early, pieced


@pytest.mark.parametrize("dtype", ["int64", "float32", "bool"])
@pytest.mark.parametrize("n", [0, 7, 18_302_080, 10**15])
def test_the_header_is_the_one_np_save_writes(tmp_path, dtype, n):
    if n <= 7:
        np.save(tmp_path / "a.npy", np.zeros(n, dtype=dtype))
        assert (tmp_path / "a.npy").read_bytes()[: early.HEADER] == early.npy_header(np.dtype(dtype), (n,))
    assert len(early.npy_header(np.dtype(dtype), (n,))) == early.HEADER


def test_pieces_published_out_of_order_write_their_rows_at_their_places(tmp_path, monkeypatch):
    monkeypatch.setattr(direct, "_WRITER", None)
    rng = np.random.default_rng(5)
    lengths = [[3, 4], [5], [2, 6, 1]]  # rows of each series of each piece
    pieces = []
    for k, lens in enumerate(lengths):
        sidx = np.repeat(np.arange(len(lens)), lens)
        ts = np.concatenate([np.sort(rng.integers(0, 10**12, n)) for n in lens])
        starts = np.flatnonzero(rng.random(len(sidx)) < 0.5)
        pieces.append((k, sidx, ts, rng.normal(size=len(sidx)).astype(np.float32), starts))
    rows = sum(len(p[1]) for p in pieces)
    early.make_arrays(tmp_path, rows + 5)  # sized for the plan: more than the rows loaded
    spill = tmp_path / "spill"
    spill.mkdir()

    def load(k, sidx, ts, target, starts):
        if k == 0:
            time.sleep(0.05)  # the pieces after it wait for its counts
        early.publish(spill, k, int(sidx.max()) + 1, len(ts), len(starts))
        early.write_rows(tmp_path, *early.place(spill, k), ts, sidx, target, starts)

    threads = [threading.Thread(target=load, args=p) for p in reversed(pieces)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    direct.drain()
    windows = sum(len(p[4]) for p in pieces)
    entries = early.finish_arrays(tmp_path, rows, windows)
    row0 = np.cumsum([0, *(len(p[1]) for p in pieces)])
    series0 = np.cumsum([0, *(int(p[1].max()) + 1 for p in pieces)])
    expected = {
        "ts_ns": np.concatenate([p[2] for p in pieces]),
        "series_idx": np.concatenate([p[1] + s0 for p, s0 in zip(pieces, series0, strict=False)]),
        "real": np.ones(rows, dtype=bool),
        "target_raw": np.concatenate([p[3] for p in pieces]),
        "starts": np.concatenate([p[4] + r0 for p, r0 in zip(pieces, row0, strict=False)]),
    }
    for name, value in expected.items():
        np.save(tmp_path / "expected.npy", value.astype(early.WINDOW_ARRAYS[name][0]))
        assert (tmp_path / f"{name}.npy").read_bytes() == (tmp_path / "expected.npy").read_bytes(), name
        assert entries[name] == {"file": f"{name}.npy", "dtype": early.WINDOW_ARRAYS[name][0], "shape": [len(value)]}


def test_a_failed_piece_stops_the_pieces_waiting_for_its_counts(tmp_path):
    early.publish(tmp_path, 0, 1, 10, 4)
    assert early.place(tmp_path, 1) == (1, 10, 4)
    threading.Timer(0.05, early.failed, (tmp_path, 1)).start()
    with pytest.raises(early.PieceFailed, match="piece 1 failed"):
        early.place(tmp_path, 3)


def test_a_load_that_fails_says_so_before_it_raises(tmp_path, panel_cfg):
    with pytest.raises(Exception):  # noqa: B017 - no spill to read: whatever polars raises
        pieced._load(panel_cfg, 2, str(tmp_path), 1, [], (0, None), str(tmp_path))
    assert (tmp_path / "failed-2").exists()


def test_a_trail_job_waits_for_the_grid_and_stops_when_building_it_failed(tmp_path):
    threading.Timer(0.05, (tmp_path / pieced.GRID_READY).touch).start()
    assert pieced._grid_built(tmp_path) is True
    (tmp_path / pieced.GRID_READY).unlink()
    threading.Timer(0.05, (tmp_path / pieced.GRID_FAILED).touch).start()
    assert pieced._grid_built(tmp_path) is False


@pytest.fixture
def panel_cfg():
    from foxhunt.data.config import DataConfig

    return DataConfig(paths=("unused",), encoder_length=4, horizon=2)
