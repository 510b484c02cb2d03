"""The store rows a piece writes as soon as it is loaded: those that depend only on where the piece's rows start
(timestamps, series index, `real`, targets, the contracts' own moves and window starts: 603 MB of a 20M-bar store's
2.1 GB), so that the disk takes them while the pieces are still loading rather than all of the store in the last
third of `prepare`, where a slow disk (~300 MB/s) made the pieces wait 1.3-2.6 s for it at the end.

A piece's place is the sum of the counts of the pieces before it. Each load job publishes its counts once it has
its series (`publish`), and waits for those of the pieces before it before writing (`place`): jobs are handed out
in piece order, so every piece waited for is loading or done, and a piece that failed says so (`failed`). The
arrays exist before their length is known: each file is sized for the planned bar count (an upper bound: loading
drops rows, it never adds one), its rows written after a header of HEADER bytes, and the header written and the
file cut to its length once every piece is loaded (`finish_arrays`), as the .npy np.save writes.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from foxhunt.data.features.features import own_move_columns
from foxhunt.data.store.crew import Abandoned
from foxhunt.data.store.direct import put_at
from foxhunt.data.store.layout import OWN_DTYPE, WINDOW_ARRAYS, own_array

EARLY = ("ts_ns", "series_idx", "real", "target_raw", "starts")  # each (N,), starts (W,)
HEADER = 128  # bytes of a .npy 1.0 header of a 1-D array: 10 + its dict, padded to a multiple of 64
POLL_S = 0.002  # how often a waiting job looks for what it waits for (`wait_for`)


class PieceFailed(Abandoned):
    """A piece before this one failed: its error is the one reported (store/crew.py)."""


def early_arrays(target: str) -> tuple[str, ...]:
    """The arrays a load job writes for a store of `target`: EARLY, then each own move column (`own_array`)."""
    return (*EARLY, *(own_array(c) for c in own_move_columns(target)))


def make_arrays(store: Path, rows: int, names: tuple[str, ...] = EARLY) -> None:
    """The files of the arrays `names` (early_arrays) in `store`, sized for `rows` bars (sparse: nothing is
    written)."""
    for name in names:
        with open(store / f"{name}.npy", "xb") as f:
            f.truncate(HEADER + rows * _dtype(name).itemsize)


def publish(spill: Path, k: int, series: int, rows: int, windows: int) -> None:
    """Piece `k`'s counts, for the pieces after it (written whole, then renamed: never read half-written)."""
    tmp = spill / f"counts-{k}.tmp"
    tmp.write_text(f"{series} {rows} {windows}")
    os.replace(tmp, spill / f"counts-{k}")


def failed(spill: Path, k: int) -> None:
    """Tell the pieces after `k` that its counts will never come."""
    (spill / f"failed-{k}").touch()


def place(spill: Path, k: int) -> tuple[int, int, int]:
    """(series, rows, windows) of pieces 0..k-1 together, once each has published them."""
    total = np.zeros(3, dtype=np.int64)
    for j in range(k):
        path = spill / f"counts-{j}"
        if not wait_for(path, lambda: any(spill.glob("failed-*"))):
            raise PieceFailed(f"piece {j} failed before piece {k} could be placed")
        total += np.array(path.read_text().split(), dtype=np.int64)
    series, rows, windows = (int(x) for x in total)
    return series, rows, windows


def wait_for(path: Path, failed: Callable[[], bool]) -> bool:
    """Wait until the file `path` exists (True), or until `failed()` says it never will (False): how one process's
    job waits for what another makes in the spill folder (a piece's counts; the grid, store/pieced.py)."""
    while not path.exists():
        if failed():
            return False
        time.sleep(POLL_S)
    return True


def write_rows(store: Path, series0: int, row0: int, win0: int, ts: np.ndarray, sidx: np.ndarray,
               target: np.ndarray, starts: np.ndarray, own: Mapping[str, np.ndarray] | None = None) -> None:
    """A piece's early rows at its place: `ts` (n,) in ns, series index `sidx` (n,) within the piece, `target` (n,),
    window starts `starts` (w,) within the piece, and each own move column (n,) by name in `own`; from this
    process's writer thread (store/direct.py)."""
    for name, value, at in (("ts_ns", ts, row0), ("series_idx", sidx + series0, row0),
                            ("real", np.ones(len(ts), dtype=bool), row0), ("target_raw", target, row0),
                            ("starts", starts + row0, win0),
                            *((own_array(c), column, row0) for c, column in (own or {}).items())):
        dtype = _dtype(name)
        put_at(store / f"{name}.npy", HEADER + at * dtype.itemsize, value, dtype)


def finish_arrays(store: Path, rows: int, windows: int, names: tuple[str, ...] = EARLY) -> dict[str, dict]:
    """Write the header of each array of `names` (early_arrays) and cut its file to its length; their manifest
    entries (save_array's)."""
    entries = {}
    for name in names:
        dtype = _dtype(name)
        n = windows if name == "starts" else rows
        header = npy_header(dtype, (n,))
        with open(store / f"{name}.npy", "r+b") as f:
            f.write(header)
            f.truncate(HEADER + n * dtype.itemsize)
        entries[name] = {"file": f"{name}.npy", "dtype": str(dtype), "shape": [n]}
    return entries


def _dtype(name: str) -> np.dtype:
    return np.dtype(WINDOW_ARRAYS[name][0] if name in WINDOW_ARRAYS else OWN_DTYPE)


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The .npy 1.0 header np.save writes for an array of `dtype` and `shape` (HEADER bytes for any 1-D one)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})
    header = buffer.getvalue()
    if len(header) != HEADER:
        raise AssertionError(f"a .npy header of {len(header)} bytes for {dtype} {shape}, not {HEADER}")
    return header
