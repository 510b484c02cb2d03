"""How polars' allocator hands freed memory back: chosen per command, before polars loads.

polars allocates through its own jemalloc, which it sets to keep freed pages for 0.5-1 s before handing them back
(polars/__init__.py appends `_RJEM_MALLOC_CONF` to its own setting; jemalloc reads it once, when polars loads).
Loading bars frees one stage's frame as the next is built, a few tenths of a second apart, so the kept pages stack
up into RSS that nothing uses. Handing them back at once costs page faults when the next stage allocates; huge pages
(where the kernel allows them) make those 512x fewer. Measured:
- benchmarks/windows_2m.py (load and window 2M bars in one process, as `train`, `predict` and `evaluate` do), 7 runs
  each on an idle 2-core machine: polars' default peaks at 2.11-2.33x the final tensors above the libraries, this at
  1.50-1.52x, in the same time; without huge pages it cost ~0.5 s more.
- benchmarks/store_20m.py (`prepare` in pieces, 20M bars): 51.5 s wall, 83 CPU s with it against 44 s and 71 CPU s
  with polars' default, for the same peak (1.8 GiB): `prepare` keeps polars' default.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

POLARS_ALLOCATOR = "_RJEM_MALLOC_CONF"
PROMPT = "dirty_decay_ms:0,muzzy_decay_ms:0,thp:always,metadata_thp:always"


def hand_back_freed_pages(environ: MutableMapping[str, str] = os.environ) -> None:
    """Ask polars' jemalloc to return freed pages at once, in this process if polars has not loaded yet and in the
    processes it starts. A value the user set is left alone."""
    environ.setdefault(POLARS_ALLOCATOR, PROMPT)
