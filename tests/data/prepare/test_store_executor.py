"""prepare/executor.py and the jobs' plumbing: jobs come back in order on any executor, the first error is raised once
every job has ended, a worker process needs no torch, and `put` writes rows where assigning into the mapped array
puts them."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from foxhunt.data.prepare.executor import InProcess, open_workers
from foxhunt.data.prepare.executor import run_all as _map
from foxhunt.data.store.put import put
from foxhunt.errors import ResourceError

REPO = Path(__file__).resolve().parents[3]


def _power(x: int, y: int) -> int:
    if y < 0:
        raise ValueError(f"negative power {y}")
    logging.getLogger("foxhunt.data").info("job %d", x)
    return x**y


def test_results_come_in_the_order_of_the_jobs_and_this_process_logs_no_job(caplog):
    with caplog.at_level(logging.INFO, logger="foxhunt.data"), open_workers("local", 1) as pool:
        assert isinstance(pool.executor, InProcess) and pool.size == 1
        assert _map(pool.executor, _power, [(k, 2) for k in range(7)]) == [k**2 for k in range(7)]
        assert logging.getLogger("foxhunt.data").level == logging.INFO  # as it was before the jobs
    assert not caplog.records


@pytest.mark.parametrize("workers", [1, 2])
def test_the_first_error_is_raised_after_every_job_ended(workers):
    with open_workers("local", workers) as pool, pytest.raises(ValueError, match="negative power -1"):
        _map(pool.executor, _power, [(1, 1), (2, -1), (3, -2), (4, 1)])


def test_a_worker_that_dies_is_an_error_for_people_not_a_hang():
    """A worker killed (for memory, say) breaks the pool: the error says what most often causes it and what to do."""
    with open_workers("local", 2) as pool, pytest.raises(ResourceError, match="worker process died"):
        _map(pool.executor, os._exit, [(1,), (1,)])


def _modules_after_importing_the_jobs() -> tuple[bool, bool]:
    import sys

    import foxhunt.data.prepare.load_stage  # noqa: F401 - what a worker imports to run a piece's jobs
    import foxhunt.data.prepare.read_stage  # noqa: F401
    import foxhunt.data.prepare.write_stage  # noqa: F401

    return "torch" in sys.modules, "polars" in sys.modules


def test_a_worker_runs_the_pieces_jobs_without_importing_torch():
    """A spawned worker imports what the jobs need (polars, numpy) and not torch (~2 CPU s and ~190 MiB of RSS)."""
    with open_workers("local", 2) as pool:
        assert pool.size == 2
        assert pool.executor.submit(_modules_after_importing_the_jobs).result() == (False, True)


@pytest.mark.parametrize("dtype,width", [("float32", 7), ("int64", 1), ("bool", 40), ("int32", 0)])
def test_put_writes_rows_where_assigning_into_the_mapped_array_does(tmp_path, dtype, width):
    rng = np.random.default_rng(3)
    shape = (901, width) if width else (901,)
    cuts = np.unique(np.r_[0, rng.integers(1, 901, 6), 901])
    parts = [(int(a), (rng.normal(size=(b - a, *shape[1:])) * 100)) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    mapped = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", dtype=dtype, shape=shape)
    for row0, value in parts:
        mapped[row0 : row0 + len(value)] = value  # float64 cast to the file's dtype
    mapped.flush()
    del mapped
    array = np.lib.format.open_memmap(tmp_path / "b.npy", mode="w+", dtype=dtype, shape=shape)
    del array
    for row0, value in parts[::-1]:  # in any order: each at its own place
        put(tmp_path / "b.npy", row0, value)
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()


ORPHANS = """
import os, sys, time
from foxhunt.data.prepare.executor import open_workers

if __name__ == "__main__":
    with open_workers("local", 2) as pool:
        for f in [pool.executor.submit(time.sleep, 1) for _ in range(2)]:  # each worker has run its initializer
            f.result()
        print(" ".join(str(p) for p in pool.executor._processes), flush=True)
        time.sleep(120)
"""


def _gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # killed, not yet reaped by its new parent
    except psutil.NoSuchProcess:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_end_when_their_parent_is_killed(tmp_path):
    """`kill -9` of a `prepare` runs no cleanup: its workers, re-parented, must not live on holding memory."""
    script = tmp_path / "orphans.py"
    script.write_text(ORPHANS)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO / "src"))})
    workers = []
    try:
        workers = [int(p) for p in parent.stdout.readline().split()]
        assert len(workers) == 2
        parent.kill()
        parent.wait(30)
        deadline = time.monotonic() + 20
        while not all(_gone(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(_gone(p) for p in workers), "a worker outlived its killed parent"
    finally:
        parent.kill()
        for pid in workers:  # on failure: leave no orphan behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
