"""How freed memory goes back to the kernel: polars' allocator, chosen per command before polars loads, and glibc's
heap, trimmed after the known grid (features/known.py) and before the windowed rows (dataset/featurize.py).

polars allocates through its own jemalloc, which it sets to keep freed pages for 0.5-1 s before handing them back
(polars/__init__.py appends `_RJEM_MALLOC_CONF` to its own setting; jemalloc reads it once, when polars loads).
Loading bars frees one stage's frame as the next is built, a few tenths of a second apart, so the kept pages stack
up into RSS that nothing uses. Handing them back at once costs page faults when the next stage allocates; huge pages
(where the kernel allows them) make those 512x fewer: loading then peaks near 1.5x its final tensors instead of over
2x, in the same time. `prepare` does the opposite (REUSE): each piece's stages free and allocate frames of the same
sizes a second or two apart, so it keeps freed pages ~3 s and reuses them without the page fault and zeroing a fresh
one costs, then hands them back at once (no MADV_FREE stage, whose pages count in RSS until the kernel takes them).
The measurements: benchmarks/RESULTS.md (windows_2m, store_20m).

Beside them, one OpenMP setting (OPENMP_SPIN), read when torch loads its OpenMP runtime. `process_settings` applies
all of them in one place, for the CLI (cli.main, per command) and for the Python API (foxhunt/api/__init__.py, when
`foxhunt.train` or `foxhunt.Forecaster` is first used): both must run before torch and polars are imported, and a
value the user set in the environment is left alone.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import MutableMapping
from typing import Any

POLARS_ALLOCATOR = "_RJEM_MALLOC_CONF"
PROMPT = "dirty_decay_ms:0,muzzy_decay_ms:0,thp:always,metadata_thp:always"
REUSE = "dirty_decay_ms:3000,muzzy_decay_ms:0,thp:always,metadata_thp:always"  # `prepare`: pages kept ~3 s


# OpenMP's worker threads spin while they wait for the next parallel region. torch's default spin (300,000
# iterations) is long: beside one other busy process on 2 cores a 2-thread training step ran at 399 samples/s,
# against 1,367 on an idle machine. Not spinning at all (OMP_WAIT_POLICY=PASSIVE) gave 1,208 busy but 1,028
# idle; a short spin of 10,000 gave 1,821 idle and 475 busy. The short spin is the default here; on a busy
# machine `--threads 1` avoids the waiting altogether (the start-up log says when the CPUs are busy). Read
# when torch loads its OpenMP runtime (libgomp reads its environment once, when it loads).
OPENMP_SPIN = ("GOMP_SPINCOUNT", "10000")


def process_settings(command: str = "", environ: MutableMapping[str, str] = os.environ) -> list[str]:
    """Set the allocator and OpenMP settings of this process (and of those it starts) for `command` (a CLI command's
    name; "" for the Python API, which runs no `prepare`): OPENMP_SPIN and polars_allocator_for. Idempotent; a value
    already in `environ` (the user's, or an earlier call's) is left alone.

    Returns the settings this process runs without because the library that reads them was imported first: torch
    (OpenMP; the processes it starts still get it) or polars (which rewrites the variable as it loads)."""
    late = [OPENMP_SPIN[0]] if "torch" in sys.modules and OPENMP_SPIN[0] not in environ else []
    environ.setdefault(*OPENMP_SPIN)
    polars_allocator_for(command, environ)
    if "polars" in sys.modules and not environ[POLARS_ALLOCATOR].endswith((PROMPT, REUSE)):
        late.append(POLARS_ALLOCATOR)
    return late


def hand_back_freed_pages(environ: MutableMapping[str, str] = os.environ) -> None:
    """Ask polars' jemalloc to return freed pages at once, in this process if polars has not loaded yet and in the
    processes it starts. A value the user set is left alone."""
    environ.setdefault(POLARS_ALLOCATOR, PROMPT)


def polars_allocator_for(command: str, environ: MutableMapping[str, str] = os.environ) -> None:
    """Set polars' allocator for the CLI command `command` (before polars loads): REUSE for `prepare`, PROMPT
    (hand_back_freed_pages) for every other. A value the user set is left alone."""
    environ.setdefault(POLARS_ALLOCATOR, REUSE if command == "prepare" else PROMPT)


def glibc() -> Any | None:
    """glibc's C library (for malloc_trim and mallopt), or None where the C library is another (macOS, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None


def release_freed_memory() -> None:
    """Hand the C heap's freed memory back to the kernel (glibc's malloc_trim; elsewhere nothing): after the known
    grid and before the windowed rows, 12-19 MiB of RssAnon at the peak of 2M bars (benchmarks/RESULTS.md, the
    memory tricks).

    glibc serves blocks below its mmap threshold from the heap, and it raises that threshold (up to 32 MiB) each
    time a large block is freed, so the (N,) temporaries of fitting stay resident once freed and the row tensor
    allocated next adds its memory on top of them."""
    libc = glibc()
    if libc is not None:
        libc.malloc_trim(0)
