"""Where the pipeline runs its jobs: a standard concurrent.futures Executor, and `run_all`, the map of one stage's
jobs over it. `local` is a ProcessPoolExecutor of `--workers` spawned processes on this machine (one: this process
itself, `InProcess`, which also runs the one piece of a panel prepared in memory); `dask://HOST:PORT` is a Dask
cluster's (`Client.get_executor`), so that a panel larger than one machine's cores is prepared on many. The jobs
write the store's rows and their spills themselves: the store's folder must be one every worker sees.

Nothing here imports polars or numpy: the CLI opens the executor first, so that its processes import the jobs'
libraries while this one imports its own, and asks `may_piece` (the files' sizes alone) whether to start any.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing as mp
import os
import signal
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foxhunt.data.config import DataConfig
from foxhunt.data.io.discover import Source, expand_sources, is_parquet
from foxhunt.errors import InputError, ResourceError

LOCAL = "local"
DASK = "dask://"
CONNECT_TIMEOUT_S = 10  # an address nobody answers at: an error for people after this long, not a hang
QUIET = "foxhunt.data"  # the jobs log warnings only: the process that runs the pieces logs what they found
JOBS = ("foxhunt.data.prepare.read_stage", "foxhunt.data.prepare.load_stage", "foxhunt.data.prepare.write_stage")
# Below this many bars (about 2 GB prepared in memory) the panel is prepared in memory: the pieced path costs more
# CPU (a spawned worker imports polars and the rest, each piece's bars and features go through spills;
# benchmarks/store_20m.py), which only the bounded memory pays for.
MIN_ROWS = 4_000_000
PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass(frozen=True)
class Workers:
    """An executor and how many jobs it runs at once."""

    executor: Executor
    size: int


def check_executor(spec: str) -> str:
    """`spec` when it names an executor (`local`, `dask://HOST:PORT`); an InputError saying what does otherwise."""
    if spec == LOCAL or (spec.startswith(DASK) and len(spec) > len(DASK)):
        return spec
    raise InputError(f"--executor {spec!r} is not an executor: use `local` or `dask://HOST:PORT`")


@contextlib.contextmanager
def open_workers(spec: str, workers: int) -> Iterator[Workers]:
    """The executor `spec` names (check_executor), closed with the block. `local` starts its `workers` processes
    now, each importing the jobs' modules (`_start`)."""
    if check_executor(spec) != LOCAL:
        with _dask(spec) as dask:
            yield dask
        return
    if workers <= 1:
        yield Workers(InProcess(), 1)
        return
    # spawn, not fork: this process's polars and torch thread pools do not survive a fork
    pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_start)
    try:
        for _ in range(workers):  # a spawned pool starts a process per job waiting: all of them now
            pool.submit(int)
        yield Workers(pool, workers)
    finally:
        pool.shutdown(cancel_futures=True)  # waited for: their CPU time counts in this process's rusage


class InProcess(Executor):
    """Runs each job as it is submitted, in this process (`--workers 1`), logging as a worker process would."""

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        logger = logging.getLogger(QUIET)
        level = logger.level
        logger.setLevel(max(level, logging.WARNING))
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:
            future.set_exception(e)
        finally:
            logger.setLevel(level)
        return future


def _start() -> None:
    """A worker process: it ends with its parent (`die_with_parent`), one thread for OpenMP and for each data stage
    (the processes take the cores), quiet logs, and the jobs' modules imported before the first job comes."""
    die_with_parent()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from foxhunt.data.util.parallel import serial_process

    serial_process()
    logging.getLogger(QUIET).setLevel(logging.WARNING)
    for module in JOBS:
        __import__(module)


def die_with_parent() -> None:
    """Linux: the kernel kills this worker when the process that started it dies (prctl PR_SET_PDEATHSIG). A
    `prepare` killed with SIGKILL runs no cleanup, and its workers, blocked writing results to a pipe nobody reads,
    would otherwise live on forever holding their memory. The kernel's signal needs no thread watching the parent and
    reaches a worker blocked in any system call. A parent already gone when this runs (the signal is set too late
    for it) ends the worker at once. Elsewhere nothing is done."""
    if not sys.platform.startswith("linux"):
        return
    parent = mp.parent_process()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # no C library to ask: the worker lives as before
        return
    if parent is not None and os.getppid() != parent.pid:
        os._exit(1)


@contextlib.contextmanager
def _dask(spec: str) -> Iterator[Workers]:
    """The executor of the Dask scheduler at `spec` (dask://HOST:PORT), its client closed with the block."""
    try:
        from distributed import Client
    except ImportError:
        raise InputError(f"--executor {spec} needs Dask: pip install 'foxhunt[cluster]'") from None
    address = "tcp://" + spec.removeprefix(DASK)
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise InputError(f"--executor {spec}: no Dask scheduler answers at {address} ({e}); start one "
                         "(`dask scheduler`) or check the address") from None
    try:
        threads = sum(w["nthreads"] for w in client.scheduler_info()["workers"].values())
        yield Workers(client.get_executor(pure=False), max(threads, 1))
    finally:
        client.close()


def run_all(executor: Executor, fn: Callable, jobs_args: list[tuple], keep: type[Exception] | None = None) -> list:
    """`[fn(*args) for args in jobs_args]` on `executor`; once every job has ended, the first error is raised, but a
    job that raises `keep` gives that exception as its result."""
    futures = [executor.submit(fn, *args) for args in jobs_args]
    wait(futures)
    for f in futures:
        if isinstance(f.exception(), BrokenProcessPool):
            raise ResourceError("a `prepare` worker process died before its piece was done (most often killed for "
                                "memory; from a script, the spawned workers also need its code under `if __name__ "
                                "== '__main__':`): run with fewer --workers, or --workers 0 if the panel fits in "
                                "memory") from f.exception()
        if f.exception() is not None and not (keep is not None and isinstance(f.exception(), keep)):
            raise f.exception()
    return [f.exception() or f.result() for f in futures]


def may_piece(cfg: DataConfig, min_rows: int = MIN_ROWS, sources: list[Source] | None = None) -> bool:
    """Whether plan_pieces may cut the panel in pieces, from what costs next to nothing to look at: parquet files of
    `min_rows` bytes or more (a bar takes more than a byte) and no option that keeps the panel whole."""
    if keeps_whole(cfg):
        return False
    files = listed_files(cfg, sources)
    return bool(files) and all(is_parquet(f) for f in files) and sum(os.path.getsize(f) for f in files) >= min_rows


def listed_files(cfg: DataConfig, sources: list[Source] | None = None) -> list[Path]:
    """Every file `cfg.paths` names, in order: from `sources` (expand_sources' list) when the caller has them."""
    return [f for source in (expand_sources(cfg.paths) if sources is None else sources) for f in source.files]


def keeps_whole(cfg: DataConfig) -> bool:
    """Options under which the panel is prepared in one piece (see plan_pieces): --fill-gaps, --since, --until."""
    return bool(cfg.fill_gaps or cfg.since or cfg.until)
