"""Rows written into a store's preallocated .npy arrays from a thread of the writing process, past the page cache.

A buffered write copies every byte into a fresh page-cache page, and on the VM this was measured on that copy cost
1.5-2.4 CPU s a GB (the kernel's page allocation and the copy into memory nobody touched yet), besides the disk's
time: ~3-4 CPU s of a 20M-bar `prepare`'s ~36 went into putting its 1.9 GB store into the page cache. A direct
write (O_DIRECT) hands the disk the process's own buffer: 0.06 CPU s a GB (1 GiB written to ext4 here in 64 MiB
requests, twice each way: direct 1.4-1.6 s wall and 0.06 CPU s, buffered 1.6-2.4 s and 1.5-2.4 CPU s). The disk's
time is the thread's, not the caller's: `put` returns once the rows are queued.

Direct writes need file offsets, lengths and buffer addresses aligned to the device's block: each range's whole
blocks go direct from a page-aligned staging buffer, its partial first and last blocks (shared with the neighbour
pieces' rows) through the page cache, as does everything where the file system refuses O_DIRECT (tmpfs, some
network file systems). The queued rows are held until written, at most PENDING_BYTES of them: a slow disk slows
the caller rather than piling rows up in memory. `drain` waits for every queued write and raises the first error.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
from collections import deque
from pathlib import Path

import numpy as np

ALIGN = 4096  # a multiple of any device's logical block: offsets, lengths and the buffer of a direct write
# The staging buffer: a direct write copies up to this much into it, then hands it to the disk in one request. The
# request's size sets the disk's pace here: 512 MiB written direct in requests of 8, 32, 48, 64, 96 and 128 MiB, 6
# runs each, medians 271, 264, 366, 453, 519 and 450 MB/s (buffered writes and their writeback: ~330).
STAGE_BYTES = 64 << 20
REFUSED = frozenset({errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP})  # how a file system says no to O_DIRECT
PENDING_BYTES = 128 << 20  # queued rows held at most (a piece's row tensor is ~55 MB at 1.25M bars)


def put(path: Path, row0: int, value: np.ndarray) -> None:
    """Write `value` at row `row0` of the C-ordered .npy array at `path` (cast to its dtype, as assigning into the
    mapped array would), from this process's writer thread; `drain` waits for it. The caller must not change
    `value` afterwards (it is written from as it is, without a copy when its dtype is the file's)."""
    offset, dtype, row_bytes = npy_layout(path)
    put_at(path, offset + row0 * row_bytes, value, dtype)


def put_at(path: Path, offset: int, value: np.ndarray, dtype: np.dtype) -> None:
    """`put` at byte `offset` of the file `path`, `value` cast to `dtype`: for an array whose header is written
    later (store/early.py)."""
    data = np.ascontiguousarray(value, dtype=dtype).reshape(-1).view(np.uint8)  # (bytes,)
    if len(data):
        _writer().put(str(path), offset, data)


def drain() -> None:
    """Wait for every write `put` queued in this process; raise the first error one of them met (then forgotten:
    the next prepare in this process starts clean)."""
    if _WRITER is not None:
        _WRITER.drain()


def npy_layout(path: Path) -> tuple[int, np.dtype, int]:
    """(header bytes, dtype, bytes per row) of the C-ordered .npy array at `path`."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(f)
        return f.tell(), dtype, dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))


_WRITER: _Writer | None = None
_LOCK = threading.Lock()


def _writer() -> _Writer:
    global _WRITER
    with _LOCK:
        if _WRITER is None:
            _WRITER = _Writer()
        return _WRITER


class _Writer:
    """One thread writing queued (path, offset, bytes) in order."""

    def __init__(self) -> None:
        self.queue: deque[tuple[str, int, np.ndarray]] = deque()
        self.cond = threading.Condition()
        self.pending = 0  # bytes queued or being written
        self.error: Exception | None = None
        self.direct = hasattr(os, "O_DIRECT")  # False where there is none (macOS, Windows) or a file system refused it
        # Page-aligned, private (its pages count as the process's own), reused: touched once, up to the largest write.
        self.stage = mmap.mmap(-1, STAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) if self.direct else None
        threading.Thread(target=self._run, daemon=True, name="foxhunt-store-writer").start()

    def put(self, path: str, offset: int, data: np.ndarray) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.pending < PENDING_BYTES)  # one write may exceed it alone
            self.pending += len(data)
            self.queue.append((path, offset, data))
            self.cond.notify_all()

    def drain(self) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.pending == 0)
            error, self.error = self.error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(lambda: bool(self.queue))
                path, offset, data = self.queue[0]
            try:
                if self.error is None:  # after an error the rest is dropped: the store will not be finished
                    self._write(path, offset, data)
            except Exception as e:  # kept for `drain`: the thread goes on (a dead one would leave `put` waiting)
                self.error = e
            finally:
                with self.cond:
                    self.queue.popleft()
                    self.pending -= len(data)
                    self.cond.notify_all()

    def _write(self, path: str, offset: int, data: np.ndarray) -> None:
        end = offset + len(data)
        lo = min(-(-offset // ALIGN) * ALIGN, end)  # [lo, hi): the whole blocks of [offset, end)
        hi = max(end // ALIGN * ALIGN, lo)
        fd = os.open(path, os.O_WRONLY)
        try:
            _pwrite(fd, data[: lo - offset], offset)
            _pwrite(fd, data[hi - offset :], hi)
            done = self._direct(path, data[lo - offset : hi - offset], lo) if hi > lo else 0
            _pwrite(fd, data[lo - offset + done : hi - offset], lo + done)  # what did not go direct
        finally:
            os.close(fd)

    def _direct(self, path: str, blocks: np.ndarray, offset: int) -> int:
        """Write the whole blocks `blocks` at the aligned `offset` with O_DIRECT; how many bytes went (the caller
        writes the rest through the page cache: all of them where the file system refuses direct writes)."""
        if not self.direct:
            return 0
        try:
            fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
        except OSError as e:
            if e.errno not in REFUSED:
                raise
            self.direct = False
            return 0
        stage = np.frombuffer(self.stage, dtype=np.uint8)  # (STAGE_BYTES,)
        done = 0
        try:
            while done < len(blocks):
                n = min(STAGE_BYTES, len(blocks) - done)
                stage[:n] = blocks[done : done + n]
                try:
                    wrote = os.pwrite(fd, memoryview(self.stage)[:n], offset + done)
                except OSError as e:
                    if e.errno not in REFUSED:  # EINVAL: this file system's blocks are larger than ALIGN
                        raise
                    self.direct = False
                    return done
                done += wrote
                if wrote < n:  # a short direct write (the disk full, a signal): the rest through the page cache
                    return done
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
        return done


def _pwrite(fd: int, data: np.ndarray, offset: int) -> None:
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)
