"""Jobs run by `workers` processes of which this process is one: `workers - 1` spawned worker processes and this
one, each taking the next job as it finishes one (store/pieced.py's pieces).

This process works too rather than waiting for a pool of `workers` processes: it has imported the libraries
already, where each spawned worker spends CPU importing them (~0.7 s for polars, numpy and foxhunt.data; the
pieces' jobs need no torch), and it would otherwise sit idle. A crew can start before its jobs are known (`warm`:
the workers import those modules meanwhile). Results come back in the order of the jobs; the first error is raised
once every job taken has finished (a job Abandoned for another's failure gives way to that one's error). Jobs run
here log nothing below WARNING from `foxhunt.data` (the caller logs what the pieces found, as it does for the
workers).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing as mp
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from foxhunt.data.util.parallel import serial_process

QUIET = "foxhunt.data"
PIECED = "foxhunt.data.store.pieced"  # what `prepare`'s workers import (not torch: it is not needed there)
EVERYWHERE_TIMEOUT_S = 600.0  # a worker that never reaches `everywhere`'s barrier (it died): an error, not a hang
_BARRIER: Any = None  # in a worker: the crew's barrier (`everywhere`), inherited as the process starts


class Abandoned(RuntimeError):
    """Raised by a job that stopped because another job failed: the other's error is the one `get` raises, whichever
    came first (store/early.py's waits)."""


class Crew:
    """`workers - 1` spawned processes (none for `workers` <= 1) and this process."""

    def __init__(self, workers: int, warm: tuple[str, ...] = ()) -> None:
        # spawn, not fork: this process's polars and torch thread pools do not survive a fork. The workers are its
        # children, so their CPU time counts in its rusage once the pool is joined.
        self.processes = max(workers - 1, 0)
        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(self.processes) if self.processes else None  # passed as the workers start, not later
        self.pool = ctx.Pool(self.processes, initializer=quiet, initargs=(warm, barrier)) if self.processes else None

    def starmap(self, fn: Callable, jobs: list[tuple]) -> list:
        """`[fn(*job) for job in jobs]`, the jobs shared between the workers and this process."""
        return self.starmap_async(fn, jobs).get()

    def starmap_async(self, fn: Callable, jobs: list[tuple]) -> Shift:
        """The workers start on `jobs` now; `get()` has this process take jobs too and returns the results."""
        return Shift(self, fn, jobs)

    def everywhere(self, fn: Callable, *args: Any) -> list:
        """`fn(*args)` once in each process of the crew, this one first; the results. Each worker takes exactly one:
        it waits at a barrier for the others before it may take another. For what a process holds besides its jobs'
        results (store/direct.py's queued writes)."""
        pending = [self.pool.apply_async(_once, (fn, args)) for _ in range(self.processes)] if self.pool else []
        here = fn(*args)
        return [here, *(p.get(EVERYWHERE_TIMEOUT_S + 60) for p in pending)]

    def terminate(self) -> None:
        """End the workers now: while they still import (a crew that turned out not to be needed), or idle once their
        jobs are done."""
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool, self.processes = None, 0


class Shift:
    """Jobs under way: one thread per worker process hands it the next job (waiting on it, not holding the GIL)."""

    def __init__(self, crew: Crew, fn: Callable, jobs: list[tuple]) -> None:
        self.fn, self.jobs = fn, jobs
        self.results: list = [None] * len(jobs)
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.next = 0
        self.threads = [threading.Thread(target=self._hand, args=(crew.pool,), daemon=True)
                        for _ in range(crew.processes)]
        for t in self.threads:
            t.start()

    def _take(self) -> int | None:
        with self.lock:
            if self.errors or self.next >= len(self.jobs):
                return None
            self.next += 1
            return self.next - 1

    def _hand(self, pool: Any) -> None:
        while (i := self._take()) is not None:
            try:
                self.results[i] = pool.apply(self.fn, self.jobs[i])
            except BaseException as e:  # raised in the caller's thread by get()
                self.errors.append(e)

    def get(self) -> list:
        with quiet_here():
            while (i := self._take()) is not None:
                try:
                    self.results[i] = self.fn(*self.jobs[i])
                except BaseException as e:
                    self.errors.append(e)
        for t in self.threads:
            t.join()
        if self.errors:
            raise min(self.errors, key=lambda e: isinstance(e, Abandoned))  # the first that is not Abandoned
        return self.results


@contextlib.contextmanager
def crew(workers: int, warm: tuple[str, ...] = ()) -> Iterator[Crew]:
    """A Crew of `workers` processes, this one included; its processes end with the block. The workers import the
    modules `warm` as they start, so a crew started early has them imported by the time the jobs come.

    The workers are ended, not asked to exit: when the block ends every job's result is back and every write a job
    queued has been waited for (store/pieced.py's `_drained`), and a worker that exits on its own first frees all it
    imported and made (0.12-0.19 s at the end of a 20M-bar `prepare`)."""
    c = Crew(workers, warm)
    try:
        yield c
    finally:
        c.terminate()


def prepare_crew(workers: int) -> contextlib.AbstractContextManager[Crew]:
    """The crew of `foxhunt prepare` (`workers` processes; 1 or fewer: this one alone), its workers importing what
    the pieces need (store/pieced.py). The CLI starts it before it imports polars and the rest for the command
    (~0.6 s), so that the worker imports on the other core meanwhile: started after those imports, it was still
    importing when this process began reading the bars (store/build.prepare_store ends it at once where the panel is
    prepared in memory)."""
    return crew(workers, warm=(PIECED,))


def _once(fn: Callable, args: tuple) -> Any:
    """`fn(*args)` in a worker, then the wait for the crew's other workers (Crew.everywhere); its error after it."""
    try:
        return fn(*args)
    finally:
        _BARRIER.wait(EVERYWHERE_TIMEOUT_S)


def quiet(warm: tuple[str, ...] = (), barrier: Any = None) -> None:
    """In a worker process: one thread for OpenMP and for each stage (data/util/parallel.py), and `foxhunt.data` logs
    warnings only (the parent logs); then the modules `warm` are imported. `barrier`: the crew's (`everywhere`)."""
    global _BARRIER
    _BARRIER = barrier
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    serial_process()
    logging.getLogger(QUIET).setLevel(logging.WARNING)
    for module in warm:
        importlib.import_module(module)


@contextlib.contextmanager
def quiet_here() -> Iterator[None]:
    """`foxhunt.data` logs warnings only while this process runs jobs (what a worker process would not log)."""
    logger = logging.getLogger(QUIET)
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)
