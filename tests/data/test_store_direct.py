"""store/direct.py: rows written past the page cache land where assigning into the mapped array puts them, whole
blocks direct and partial ones buffered, or all buffered where the file system refuses O_DIRECT; errors surface at
drain, and the rows queued stay within PENDING_BYTES."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from foxhunt.data.store import direct


@pytest.fixture
def writer(monkeypatch):
    """A fresh writer thread for each test, with a staging buffer of a few blocks (many direct writes per row)."""
    monkeypatch.setattr(direct, "_WRITER", None)
    monkeypatch.setattr(direct, "STAGE_BYTES", 3 * direct.ALIGN)
    yield
    direct.drain()


def _expected_and_written(tmp_path, dtype, shape, parts):
    """The file assigning each (row0, value) of `parts` into the mapped array gives, and the one `put` gives."""
    mapped = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", dtype=dtype, shape=shape)
    for row0, value in parts:
        mapped[row0 : row0 + len(value)] = value
    mapped.flush()
    del mapped
    np.lib.format.open_memmap(tmp_path / "b.npy", mode="w+", dtype=dtype, shape=shape)
    for row0, value in parts:
        direct.put(tmp_path / "b.npy", row0, value)
    direct.drain()
    return (tmp_path / "a.npy").read_bytes(), (tmp_path / "b.npy").read_bytes()


def _parts(rng, rows, width):
    """Adjacent runs of rows of uneven lengths: their ends fall inside blocks that two runs share."""
    cuts = np.unique(np.r_[0, rng.integers(1, rows, 6), rows])
    return [(int(a), rng.normal(size=(b - a, width))) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def _takes_o_direct(folder) -> bool:
    try:
        fd = os.open(folder / "probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    except (OSError, AttributeError):  # tmpfs refuses it; macOS has no O_DIRECT
        return False
    os.close(fd)
    return True


@pytest.mark.parametrize("dtype,width", [("float32", 7), ("int64", 1), ("bool", 40)])
def test_adjacent_rows_written_direct_equal_the_mapped_arrays_bytes(tmp_path, writer, monkeypatch, dtype, width):
    went = []
    direct_write = direct._Writer._direct
    monkeypatch.setattr(direct._Writer, "_direct", lambda self, *a: went.append(direct_write(self, *a)) or went[-1])
    rng = np.random.default_rng(3)
    parts = [(a, (v * 100).astype(dtype)) for a, v in _parts(rng, 9001, width)]
    expected, written = _expected_and_written(tmp_path, dtype, (9001, width), parts)
    assert written == expected
    if _takes_o_direct(tmp_path):  # whole blocks went direct, the rest through the page cache
        assert sum(went) > len(written) // 2 and all(n % direct.ALIGN == 0 for n in went)
    else:
        assert sum(went) == 0


@pytest.mark.parametrize("code", [errno.EINVAL, errno.EOPNOTSUPP])  # tmpfs; some network file systems
def test_where_o_direct_is_refused_every_byte_goes_through_the_page_cache(tmp_path, writer, monkeypatch, code):
    opened = os.open
    refused = []

    def no_direct(path, flags, *args):
        if flags & getattr(os, "O_DIRECT", 0):
            refused.append(path)
            raise OSError(code, os.strerror(code))
        return opened(path, flags, *args)

    monkeypatch.setattr(direct.os, "open", no_direct)
    rng = np.random.default_rng(4)
    parts = [(a, v.astype("float32")) for a, v in _parts(rng, 5000, 5)]
    expected, written = _expected_and_written(tmp_path, "float32", (5000, 5), parts)
    assert written == expected
    if hasattr(os, "O_DIRECT"):
        assert len(refused) == 1 and direct._WRITER.direct is False  # asked once, then never again


def test_a_failed_write_is_raised_by_drain_once(tmp_path, writer, monkeypatch):
    np.lib.format.open_memmap(tmp_path / "b.npy", mode="w+", dtype="int64", shape=(10,))

    def full(*_):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(direct.os, "pwrite", full)
    direct.put(tmp_path / "b.npy", 3, np.arange(4))
    with pytest.raises(OSError, match="No space left"):
        direct.drain()
    direct.drain()  # forgotten once raised: the next prepare in this process starts clean


def test_the_rows_queued_stay_within_the_bound(tmp_path, writer, monkeypatch):
    """A slow disk holds the caller back: no more than PENDING_BYTES (or one write alone) wait in memory."""
    import time

    monkeypatch.setattr(direct, "PENDING_BYTES", 3000)
    seen = []
    write = direct._Writer._write

    def slow(self, path, offset, data):
        seen.append(self.pending)
        time.sleep(0.01)
        write(self, path, offset, data)

    monkeypatch.setattr(direct._Writer, "_write", slow)
    np.lib.format.open_memmap(tmp_path / "b.npy", mode="w+", dtype="int64", shape=(2000,))
    for k in range(10):
        direct.put(tmp_path / "b.npy", 200 * k, np.arange(200) + k)  # 1600 bytes each
    direct.drain()
    assert max(seen) <= 3000 + 1600 and len(seen) == 10
    assert np.array_equal(np.load(tmp_path / "b.npy"), np.arange(2000) % 200 + np.arange(2000) // 200)


def test_small_rows_and_rows_of_no_bytes_are_written_as_assigning_does(tmp_path, writer):
    for dtype, value in (("float32", np.arange(12.0).reshape(4, 3) / 7), ("int64", np.arange(4)[:, None]),
                         ("bool", np.array([True, False, True])), ("int64", np.zeros((3, 0)))):
        shape = (9, *value.shape[1:])
        mapped = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", dtype=dtype, shape=shape)
        mapped[2:2 + len(value)] = value
        del mapped
        np.lib.format.open_memmap(tmp_path / "b.npy", mode="w+", dtype=dtype, shape=shape)
        direct.put(tmp_path / "b.npy", 2, value)
        direct.drain()
        assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()


def test_an_unexpected_error_is_raised_by_drain_and_the_writer_goes_on(tmp_path, writer, monkeypatch):
    np.lib.format.open_memmap(tmp_path / "b.npy", mode="w+", dtype="int64", shape=(10,))
    write = direct._Writer._write
    calls = []

    def once(self, *args):
        calls.append(args)
        if len(calls) == 1:
            raise ValueError("a bug in the writer")
        write(self, *args)

    monkeypatch.setattr(direct._Writer, "_write", once)
    direct.put(tmp_path / "b.npy", 0, np.arange(4))
    with pytest.raises(ValueError, match="a bug"):
        direct.drain()
    direct.put(tmp_path / "b.npy", 4, np.arange(4))  # the thread is alive: this write is done, not left waiting
    direct.drain()
    assert np.array_equal(np.load(tmp_path / "b.npy")[4:8], np.arange(4))


def test_without_o_direct_at_all_the_rows_go_through_the_page_cache(tmp_path, writer, monkeypatch):
    """macOS and Windows have no O_DIRECT: no staging buffer is made, and the bytes are the same."""
    if hasattr(os, "O_DIRECT"):
        monkeypatch.delattr(direct.os, "O_DIRECT")
    rng = np.random.default_rng(6)
    parts = [(a, v.astype("float32")) for a, v in _parts(rng, 3000, 4)]
    expected, written = _expected_and_written(tmp_path, "float32", (3000, 4), parts)
    assert written == expected
    assert direct._WRITER.direct is False and direct._WRITER.stage is None
