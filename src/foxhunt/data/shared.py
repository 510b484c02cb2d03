"""Independent items shared between this thread and the pool thread, when the pool thread is free to help.

`parallel.map_threads` gives the pool thread a fixed share of the items, which waits behind whatever the pool is
running already (preparing submits the known inputs there for the whole fit). Here this thread takes items one at a
time from a shared queue and the pool thread joins in once it starts; if it has not started when the items run out,
it is cancelled, so this thread never waits for work queued behind another stage.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from foxhunt.data import parallel

T = TypeVar("T")


def map_shared(fn: Callable[[Any], T], items: Iterable[Any]) -> list[T]:
    """`[fn(x) for x in items]`, in order, the pool thread taking items too while it is free (see the module doc)."""
    items = list(items)
    if parallel.threads() <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    out: list[Any] = [None] * len(items)
    queue = iter(enumerate(items))
    lock = threading.Lock()
    stop = threading.Event()  # set when an item fails: neither thread takes another

    def work() -> None:
        while not stop.is_set():
            with lock:
                nxt = next(queue, None)
            if nxt is None:
                return
            try:
                out[nxt[0]] = fn(nxt[1])
            except BaseException:
                stop.set()
                raise

    helper = parallel.submit(work)
    try:
        work()
    except BaseException:
        helper.cancel()
        raise
    if not helper.cancel():  # started: it is finishing its last item (or raises the error of one)
        helper.result()
    return out
