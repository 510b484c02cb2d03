"""The one pipeline's plumbing (data/prepare): where each piece's rows and windows go, how the pieces' events keys
and a prediction's future rows make the grid's key spans, what the spills give back and what the sinks hold; a
panel prepared as one piece into a store imports no torch, and a saved model's transform prepares prediction data
only."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import driver, prepare_data
from foxhunt.data.prepare.grid import key_times, origins
from foxhunt.data.prepare.sink import MemorySink
from foxhunt.data.prepare.spill import FolderSpill, MemorySpill
from foxhunt.errors import InputError

BIG = np.iinfo(np.int64).max
SMALL = np.iinfo(np.int64).min


def _piece(lengths: list[int]) -> SimpleNamespace:
    return SimpleNamespace(lengths=np.array(lengths), names=[f"S{i}" for i in range(len(lengths))])


def test_places_offset_each_piece_by_the_rows_and_windows_before_it():
    """Windows of e + d = 5 rows: a series of L rows has max(L - 5, 0) (its first row has no return); a prediction
    appends d = 2 rows to each series, and each piece gets its series' future times."""
    loads = [_piece([10, 3]), _piece([7])]
    places = driver._places(loads, None, 3, 2)
    assert [(p.series0, p.row0, p.win0) for p in places] == [(0, 0, 0), (2, 13, 5), (3, 20, 7)]
    assert all(p.future is None for p in places)
    future = np.arange(6).reshape(3, 2)
    places = driver._places(loads, future, 3, 2)
    assert [(p.series0, p.row0, p.win0) for p in places] == [(0, 0, 0), (2, 17, 7), (3, 26, 11)]
    assert places[0].future.tolist() == [[0, 1], [2, 3]] and places[1].future.tolist() == [[4, 5]]
    assert places[2].future is None


def test_key_times_merge_the_pieces_and_a_predictions_future_rows():
    """Two pieces' first and last time under each of 3 keys (none holds key 2); a prediction's future rows read the
    key of their series' last bar (series 1: key 1, series 2: none), so key 1 reaches its series' last future time."""
    parts = [np.array([[5, 9], [BIG, SMALL], [BIG, SMALL]]), np.array([[2, 4], [7, 8], [BIG, SMALL]])]
    first, last = key_times(parts, None, None)
    assert first.tolist() == [2, 7, BIG] and last.tolist() == [9, 8, SMALL]
    future = np.array([[10, 11], [20, 21], [30, 31]])  # (S, D)
    first, last = key_times(parts, [np.array([0]), np.array([1, -1])], future)
    assert first.tolist() == [2, 7, BIG] and last.tolist() == [11, 21, SMALL]


def test_origins_are_the_pieces_times_and_the_future_ones_sorted_and_distinct():
    got = origins([np.array([1, 3, 5]), np.array([2, 3])], np.array([[6, 7], [5, 9]]))
    assert got.tolist() == [1, 2, 3, 5, 6, 7, 9]
    assert origins([np.array([4, 8])], None).tolist() == [4, 8]


def test_a_memory_sink_takes_its_one_pieces_arrays_as_they_are():
    sink = MemorySink()
    sink.allocate({"cont": ("float32", (4, 2)), "ts_ns": ("int64", (4,)), "time_cat": ("int64", (4, 0))})
    whole = np.arange(8, dtype=np.float32).reshape(4, 2)
    sink.put("cont", 0, whole)
    assert sink.array("cont") is whole  # not copied
    read_only = np.arange(4)
    read_only.flags.writeable = False
    sink.put("ts_ns", 0, read_only)
    assert sink.array("ts_ns").tolist() == [0, 1, 2, 3] and sink.array("ts_ns").flags.writeable  # torch's
    assert sink.array("time_cat").shape == (4, 0)  # nothing put: zeros of its shape
    index = np.zeros((4, 3), dtype=np.int32)
    sink.put("known_index", 0, index)  # sized by the grid: not allocated
    assert sink.array("known_index") is index
    with pytest.raises(AssertionError, match="one piece"):
        sink.put("cont", 0, whole)


@pytest.mark.parametrize("kind", ["folder", "memory"])
def test_a_spill_gives_back_what_was_put(tmp_path, kind):
    spill = FolderSpill(tmp_path) if kind == "folder" else MemorySpill()
    frame = pl.DataFrame({"a": [1.0, 2.0], "b": [True, False]})
    spill.put_frame("f", frame)
    spill.put_columns("c", {"x": np.array([1.5, 2.5]), "y": np.array([3.0, 4.0])})
    spill.put_array("s", np.array([3, 1, 2]))
    assert spill.frame("f").equals(frame) and spill.has("f") and spill.has("s") and not spill.has("t")
    assert {k: v.tolist() for k, v in spill.columns("c").items()} == {"x": [1.5, 2.5], "y": [3.0, 4.0]}
    assert spill.array("s").tolist() == [3, 1, 2]
    spill.drop("f", "s")
    assert not spill.has("f") and not spill.has("s") and spill.has("c")


def test_a_saved_models_transform_prepares_prediction_data_only(daily_path):
    """Fitting is skipped with a saved model's transform, and so are the splits: every bar is an origin."""
    cfg = DataConfig(paths=(str(daily_path),), encoder_length=16, horizon=3)
    transform = prepare_data(cfg).transform
    with pytest.raises(ValueError, match="for_prediction=True"):
        prepare_data(cfg, transform=transform)
    with pytest.raises(InputError, match="needs the fitted transform"):
        prepare_data(cfg, for_prediction=True)
    live = prepare_data(cfg, transform=transform, for_prediction=True)
    assert live.summary["mode"] == "predict" and len(live.splits["train"]) == len(live.splits["val"]) == 0
    assert live.transform is transform


def test_a_panel_prepared_as_one_piece_into_a_store_never_imports_torch(daily_path, tmp_path):
    """`foxhunt prepare` of a panel kept whole (small, or `--workers 0`) runs the pipeline as one piece straight
    into the store's files: no tensor is made, and torch (2.4 s, ~190 MiB to import) is never imported."""
    code = (
        "import sys\n"
        "from foxhunt.data.config import DataConfig\n"
        "from foxhunt.data.prepare import prepare_store\n"
        f"cfg = DataConfig(paths=({str(daily_path)!r},), encoder_length=16, horizon=3)\n"
        f"m = prepare_store(cfg, {str(tmp_path / 'store')!r}, workers=0)\n"
        "print(len(m['windows']['series_names']), 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["2", "False"]  # the fixture's two symbols
