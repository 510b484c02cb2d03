"""Rows written into a store's .npy arrays at a piece's place (`put`), their whole disk blocks past the page cache.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from pathlib import Path

import numpy as np


def put(path: Path, row0: int, value: np.ndarray) -> None:
    """Write `value` at row `row0` of the .npy array at `path` (made by open_memmap; cast to its dtype, as assigning
    into the mapped array would). Its whole disk blocks go past the page cache (`_direct`): copying 2 GB of rows into
    fresh page-cache pages, and waiting while the kernel throttles a process that dirties them faster than the disk
    takes them, made a 20M-bar `prepare` 1.3-2x slower. The partial first and last blocks (shared with the
    neighbouring pieces' rows), and everything where the file system refuses O_DIRECT, go through the page cache."""
    array = np.load(path, mmap_mode="r")  # reads the header only
    data = np.ascontiguousarray(value, dtype=array.dtype).reshape(-1).view(np.uint8)  # (bytes,)
    offset = array.offset + row0 * int(np.prod(array.shape[1:], dtype=np.int64)) * array.dtype.itemsize
    end = offset + len(data)
    lo = min(-(-offset // ALIGN) * ALIGN, end)  # [lo, hi): the whole blocks of [offset, end)
    hi = max(end // ALIGN * ALIGN, lo)
    with open(path, "r+b", buffering=0) as f:
        _pwrite(f.fileno(), data[: lo - offset], offset)
        _pwrite(f.fileno(), data[hi - offset :], hi)
        done = _direct(path, data[lo - offset : hi - offset], lo)
        _pwrite(f.fileno(), data[lo - offset + done : hi - offset], lo + done)  # what did not go direct


ALIGN = 4096  # a multiple of any device's logical block: offsets, lengths and the buffer of a direct write
STAGE_BYTES = 64 << 20  # the page-aligned buffer a direct write copies through
REFUSED = (errno.EINVAL, errno.EOPNOTSUPP)  # a file system that takes no O_DIRECT (tmpfs), or not these blocks


def _direct(path: Path, blocks: np.ndarray, offset: int) -> int:
    """Write the whole blocks `blocks` at the aligned `offset` with O_DIRECT; how many bytes went (0 where the file
    system refuses it: the caller writes the rest through the page cache). 2 GiB of rows: 2.0 s wall and 0.5 s CPU
    against 4.0-5.0 s and 3.7-4.9 s (and 2 GiB of dirty page cache) without it, for its 64 MiB staging buffer
    (benchmarks/store_put.py)."""
    if not len(blocks) or not hasattr(os, "O_DIRECT"):
        return 0
    try:
        fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    except OSError as e:
        if e.errno in REFUSED:
            return 0
        raise
    stage = _stage()
    done = 0
    try:
        while done < len(blocks):
            n = min(len(stage), len(blocks) - done)
            stage[:n] = blocks[done : done + n].data
            try:
                wrote = os.pwrite(fd, memoryview(stage)[:n], offset + done)
            except OSError as e:
                if e.errno in REFUSED:
                    return done
                raise
            done += wrote
            if wrote < n:  # a short write (disk full, a signal): the rest through the page cache
                return done
    finally:
        os.close(fd)
    return done


_THREAD = threading.local()


def _stage() -> mmap.mmap:
    """This thread's staging buffer for direct writes: anonymous memory (page-aligned), made once and reused, so that
    its pages are faulted in once (a fresh one per write faulted in every byte written)."""
    if getattr(_THREAD, "stage", None) is None:
        _THREAD.stage = mmap.mmap(-1, STAGE_BYTES)
    return _THREAD.stage


def _pwrite(fd: int, data: np.ndarray, offset: int) -> None:
    view, done = memoryview(data), 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)
