"""SHA-256 of named arrays, the same whether they are held in memory or saved as `.npy` files: what says that two
prepared datasets are the same (train/resume.py, a store's manifest) and keys the baselines' cache
(evaluate/validation.py).

Each array adds its name, dtype and shape, then its bytes in C order. A `.npy` file is a short header and those
bytes, so `npy_digest` of saved arrays equals `tensor_digest` of the arrays themselves.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

CHUNK = 16 << 20  # bytes read at a time from a file


def tensor_digest(arrays: Iterable[tuple[str, np.ndarray]]) -> str:
    """The SHA-256 of `arrays` (name, array): the buffers are read where they lie (a mapped array is not copied, but
    every page of it is read)."""
    digest = hashlib.sha256()
    for name, array in arrays:
        a = np.ascontiguousarray(array)
        _head(digest, name, a.dtype, a.shape)
        digest.update(a.reshape(-1).view(np.uint8))
    return digest.hexdigest()


def npy_digest(files: Iterable[tuple[str, Path]]) -> str:
    """`tensor_digest` of the arrays saved in `files` (name, path of a .npy file), read through a small buffer: the
    process's memory stays flat, and the pages read are dropped from the page cache after (a store just written
    direct, past the cache, is not pulled into it by its digest)."""
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK)
    for name, path in files:
        header = np.load(path, mmap_mode="r")  # reads the header only
        _head(digest, name, header.dtype, header.shape)
        offset = header.offset
        del header
        with open(path, "rb", buffering=0) as f:
            f.seek(offset)
            while n := f.readinto(buffer):
                digest.update(memoryview(buffer)[:n])
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return digest.hexdigest()


def _head(digest: Any, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    digest.update(f"{name} {dtype} {tuple(shape)};".encode())
