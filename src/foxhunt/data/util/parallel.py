"""Threads for the independent parts of one stage of loading (columns, series, pieces of rows).

numpy's loops on large arrays and polars' queries release the GIL, so two threads over independent parts of a
stage use the second core that a single process otherwise leaves idle. Where processes already fill the cores
(`foxhunt prepare` in pieces: prepare/executor.py), the same code runs in the calling thread: in a worker process for good
(`serial_process`), in this one while it takes jobs too (`serial`). A pool thread never splits its own work again.

`FOXHUNT_DATA_THREADS` sets the number of threads (1: all serial); the default is the cores this process may use,
at most MAX_THREADS.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
MAX_THREADS = 2  # more buys little: the stages split into two large parts, and memory grows with each one
ENV = "FOXHUNT_DATA_THREADS"

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_serial = 0  # > 0: every stage runs in its calling thread
_here = threading.local()  # .pool: this is a pool thread


def threads() -> int:
    """How many threads a stage may use here: 1 in a pool thread, under `serial` and after `serial_process`."""
    if _serial or getattr(_here, "pool", False):
        return 1
    given = os.environ.get(ENV, "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, MAX_THREADS))


def serial_process() -> None:
    """From now on this process runs every stage in its calling thread (its cores are taken by other processes)."""
    global _serial
    _serial += 1


@contextlib.contextmanager
def serial() -> Iterator[None]:
    """Every stage runs in its calling thread while the block runs (other processes take the cores meanwhile)."""
    global _serial
    with _lock:
        _serial += 1
    try:
        yield
    finally:
        with _lock:
            _serial -= 1


def submit(fn: Callable[..., T], *args: Any) -> Future[T]:
    """`fn(*args)` on a pool thread, or run now in this thread when `threads()` is 1; `.result()` gives its value
    (or raises its error)."""
    if threads() <= 1:
        done: Future[T] = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as e:  # raised by .result(), as a pool thread's would be
            done.set_exception(e)
        return done
    return _executor().submit(fn, *args)


def map_threads(fn: Callable[[Any], T], items: Iterable[Any]) -> list[T]:
    """`[fn(x) for x in items]`, in order, this thread and a pool thread taking items one at a time.

    The pool thread joins in once it starts; if it has not started when the items run out (it may be busy with an
    earlier `submit`), it is cancelled, so this thread never waits for work queued behind another stage. An item's
    error stops both threads from taking more and reaches the caller."""
    items = list(items)
    if threads() <= 1 or len(items) <= 1:
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

    helper = _executor().submit(work)
    try:
        work()
    except BaseException:
        helper.cancel()
        raise
    if not helper.cancel():  # started: it is finishing its last item (or raises the error of one)
        helper.result()
    return out


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(threads() - 1, 1), thread_name_prefix="foxhunt-data",
                                       initializer=_mark_pool_thread)
        return _pool


def _mark_pool_thread() -> None:
    _here.pool = True
