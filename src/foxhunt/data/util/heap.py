"""When work handed to a pool thread (data/util/parallel.py) should give its freed memory back to the kernel at once.

glibc gives each thread that allocates its own heap (arena), and memory freed into one is reused only by
allocations of the thread that owns it. numpy arrays of millions of rows made on the pool thread, once freed, would
stay resident in its heap while the caller allocates the next stage beside them (2M bars: the loader's peak rose
from 1.5x to 1.6-1.7x the final tensors). Trimming the heaps (allocator.release_freed_memory) after such work hands
them back; a small load skips it, as a trim costs more than the little memory it frees.
"""

from __future__ import annotations

from foxhunt.allocator import release_freed_memory
from foxhunt.data.util import parallel

TRIM_ROWS = 1 << 17  # below this many rows the pool thread's arrays are too small to trim for


def trims(rows: int) -> bool:
    """Whether work on `rows` rows that this thread hands to the pool should trim the heaps once freed (decided here:
    a pool thread's own `parallel.threads()` is 1)."""
    return parallel.threads() > 1 and rows >= TRIM_ROWS


def trim(when: bool) -> None:
    """Hand the C heaps' freed memory back to the kernel when `when` (a `trims` answer)."""
    if when:
        release_freed_memory()
