"""`foxhunt prepare --executor`: where the pieces run. `local` is the crew of processes on this machine
(store/crew.py); `dask://HOST:PORT` hands the same jobs to a Dask cluster's workers through its
`concurrent.futures` executor, so that a panel larger than one machine's cores is prepared on many. The workers
write the store's rows and the spills themselves: the store's folder must be one every worker sees.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from typing import Any

from foxhunt.data.store.crew import Abandoned
from foxhunt.data.store.direct import drain
from foxhunt.errors import InputError

LOCAL = "local"
DASK = "dask://"
CONNECT_TIMEOUT_S = 10  # an address nobody answers at: an error for people after this long, not a hang


def check_executor(spec: str) -> str:
    """`spec` when it names an executor (`local`, `dask://HOST:PORT`); an InputError saying what does otherwise."""
    if spec == LOCAL or (spec.startswith(DASK) and len(spec) > len(DASK)):
        return spec
    raise InputError(f"--executor {spec!r} is not an executor: use `local` or `dask://HOST:PORT`")


class ExecutorCrew:
    """store/crew.Crew's interface on a concurrent.futures Executor whose workers may be on other machines.

    Each job waits for its own rows to be written before it returns (store/direct.py's queue is per process, and
    a remote worker cannot be asked to drain later), so `everywhere` runs in this process only."""

    def __init__(self, executor: Executor, processes: int) -> None:
        self.executor, self.processes = executor, processes

    def starmap(self, fn: Callable, jobs: list[tuple]) -> list:
        return self.starmap_async(fn, jobs).get()

    def starmap_async(self, fn: Callable, jobs: list[tuple]) -> _Submitted:
        # Submitted in job order: a load job waits only for pieces before it (store/early.py), which start first.
        return _Submitted([self.executor.submit(_drained_call, fn, *job) for job in jobs])

    def everywhere(self, fn: Callable, *args: Any) -> list:
        return [fn(*args)]

    def terminate(self) -> None:
        """Nothing to end: the cluster's workers are not this process's."""


class _Submitted:
    def __init__(self, futures: list[Future]) -> None:
        self.futures = futures

    def get(self) -> list:
        results, errors = [], []
        for f in self.futures:  # every job finishes before the first error is raised, as Crew's get does
            try:
                results.append(f.result())
            except BaseException as e:
                errors.append(e)
        if errors:
            raise min(errors, key=lambda e: isinstance(e, Abandoned))
        return results


def _drained_call(fn: Callable, *args: Any) -> Any:
    """`fn(*args)` in a worker, returning once the rows it queued are on their way to the store's files."""
    try:
        return fn(*args)
    finally:
        drain()


@contextlib.contextmanager
def dask_crew(spec: str) -> Iterator[ExecutorCrew]:
    """An ExecutorCrew on the Dask scheduler at `spec` (dask://HOST:PORT), its client closed with the block."""
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
        yield ExecutorCrew(client.get_executor(pure=False), max(threads, 1))
    finally:
        client.close()
