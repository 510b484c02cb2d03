"""A batch of a feature store read with `pread`, so that the process maps none of the store's pages to build it.

Indexing a mapped array maps the page cache's folio around each row read, and a file's folios are large (ext4 and
xfs keep up to 2 MB per folio): a batch of 256 windows in 16 runs mapped ~50 MiB of a store for ~1 MiB of rows, all
of it counted in the process's RSS until unmapped. Reading the rows with `os.preadv` instead copies exactly the bytes
a batch needs out of the same page cache. The rows a batch reads (the union of its windows' rows, and the rows of the
known-input grid its forecast steps read) become a small WindowedData of their own, whose `batch` is the store's
batch bit for bit: local row numbers keep the order of the store's, so every deduplication comes out the same.

Legend: B batch, T = E + D window rows, D forecast steps, R rows the batch reads, G grid rows it reads.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from foxhunt.data.dataset.batch import Batch
from foxhunt.data.dataset.windows import WindowedData

if TYPE_CHECKING:  # imported where tensors are made: prepare's worker processes never need it
    import torch

GAP_ROWS = 64  # rows closer than this are read in one call, the rows between them included


class RowReader:
    """Rows of one mapped .npy array, read with pread from its file (the mapping itself is never touched)."""

    def __init__(self, path: Path, array: np.memmap):
        self.fd = os.open(path, os.O_RDONLY)
        self.offset = int(array.offset)
        self.dtype, self.tail = array.dtype, tuple(array.shape[1:])
        self.row_bytes = int(array.dtype.itemsize * int(np.prod(self.tail, dtype=np.int64)))

    def read(self, rows: np.ndarray) -> np.ndarray:
        """The rows `rows` (sorted, unique) of the array, (len(rows), *tail): one pread per cluster of nearby rows."""
        if self.row_bytes == 0 or len(rows) == 0:
            return np.empty((len(rows), *self.tail), dtype=self.dtype)
        cut = np.flatnonzero(np.diff(rows) > GAP_ROWS) + 1  # where a new cluster of nearby rows begins
        begin, end = np.concatenate([[0], cut]), np.concatenate([cut, [len(rows)]])  # (C,) into rows
        first = rows[begin].astype(np.int64)  # (C,) first row of each cluster
        size = rows[end - 1].astype(np.int64) - first + 1  # (C,) rows read per cluster
        buf = np.empty((int(size.sum()), *self.tail), dtype=self.dtype)
        raw, rb, at = memoryview(buf.reshape(-1).view(np.uint8)), self.row_bytes, 0
        for a, k in zip(first.tolist(), size.tolist(), strict=True):
            got = os.preadv(self.fd, [raw[at * rb : (at + k) * rb]], self.offset + a * rb)
            if got != k * rb:
                raise OSError(f"short read of a feature store file ({got} of {k * rb} bytes): the store is damaged")
            at += k
        shift = np.repeat(np.cumsum(size) - size - first, end - begin)  # (len(rows),) row -> its place in buf
        return buf[rows + shift]

    def close(self) -> None:
        os.close(self.fd)


# WindowedData fields that `batch` reads by row / by grid row; the others are passed through untouched (unread).
ROW_FIELDS = ("cont", "static_cat", "static_cont", "time_cat", "target_raw", "center", "scale", "known_base")
GRID_FIELDS = ("known_cont", "known_cat")


def pread_batch(windows: WindowedData, readers: dict[str, RowReader], ids: torch.Tensor) -> Batch:
    """windows.batch(ids), every array it reads read with pread (`readers`: field name -> reader)."""
    import torch

    ids_np = ids.long().numpy()
    order = np.unique(ids_np)
    starts = readers["starts"].read(order)[np.searchsorted(order, ids_np)]  # (B,) first row of each window
    t, e = windows.encoder_length + windows.horizon, windows.encoder_length
    rows = _cover(starts, t)  # (R,) sorted: the rows the windows cover
    local = {name: torch.from_numpy(readers[name].read(rows)) for name in ROW_FIELDS if name in readers}
    origin = np.searchsorted(rows, starts + (e - 1))  # (B,) local origin rows
    if windows.known_index is None:
        base = local["known_base"].numpy()
        grid = _cover(base[origin], windows.horizon)  # (G,)
        local["known_base"] = torch.from_numpy(np.searchsorted(grid, base).clip(max=len(grid) - 1))
    else:
        index = torch.from_numpy(readers["known_index"].read(rows))  # (R, D) int32 grid rows
        grid = np.unique(index.numpy()[origin].reshape(-1))
        local["known_index"] = torch.from_numpy(np.searchsorted(grid, index.numpy()).astype(np.int32))
    for name in GRID_FIELDS:
        local[name] = torch.from_numpy(readers[name].read(grid))
    local["starts"] = torch.from_numpy(np.searchsorted(rows, starts))  # (B,) local window starts, ids 0..B-1
    view = dataclasses.replace(windows, **local)
    return dataclasses.replace(WindowedData.batch(view, torch.arange(len(ids_np))), window=ids.long())


def _cover(first: np.ndarray, length: int) -> np.ndarray:
    """The sorted distinct rows of the spans [f, f + length) for f in `first`: the union of the spans, vectorized."""
    f = np.unique(first)  # (K,) sorted
    if len(f) == 0:  # no windows (a rank's empty share of a global batch): no rows
        return f.astype(np.int64)
    take = np.minimum(np.diff(f, append=f[-1] + length), length)  # (K,) rows of each span before the next begins
    return np.repeat(f, take) + (np.arange(int(take.sum())) - np.repeat(np.cumsum(take) - take, take))
