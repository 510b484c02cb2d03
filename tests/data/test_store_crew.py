"""store/crew.py: jobs shared between worker processes and this one come back in order, and an error is raised."""

from __future__ import annotations

import logging

import pytest

from foxhunt.data.store.crew import crew


def _power(x: int, y: int) -> int:
    if y < 0:
        raise ValueError(f"negative power {y}")
    logging.getLogger("foxhunt.data").info("job %d", x)
    return x**y


def test_results_come_in_the_order_of_the_jobs_and_this_process_logs_no_job(caplog):
    with caplog.at_level(logging.INFO, logger="foxhunt.data"), crew(1) as c:
        assert c.starmap(_power, [(k, 2) for k in range(7)]) == [k**2 for k in range(7)]
        shift = c.starmap_async(_power, [(2, k) for k in range(4)])
        assert shift.get() == [1, 2, 4, 8]
        assert logging.getLogger("foxhunt.data").level == logging.INFO  # as it was before the jobs
    assert not caplog.records


def test_the_first_error_is_raised_after_the_jobs_taken():
    with crew(1) as c, pytest.raises(ValueError, match="negative power -1"):
        c.starmap(_power, [(1, 1), (2, -1), (3, 1)])


def _modules_after_importing_the_jobs() -> tuple[bool, bool]:
    import sys

    import foxhunt.data.store.pieced  # noqa: F401 - what a worker imports to run a piece's jobs

    return "torch" in sys.modules, "polars" in sys.modules


def test_a_worker_runs_the_pieces_jobs_without_importing_torch():
    """A spawned worker imports what the jobs need (polars, numpy) and not torch, ~2 CPU s and ~190 MiB of RSS."""
    with crew(2) as c:
        assert c.pool is not None
        assert c.pool.apply(_modules_after_importing_the_jobs) == (False, True)


def _pid_after(seconds: float) -> int:
    import os
    import time

    time.sleep(seconds)
    return os.getpid()


def test_everywhere_runs_once_in_each_process_even_when_one_worker_is_quick():
    """Each worker takes exactly one call (the barrier), so a drain reaches every process's writer thread."""
    import os

    with crew(3) as c:
        for _ in range(2):  # the barrier resets for the next call
            pids = c.everywhere(_pid_after, 0.0)
            assert pids[0] == os.getpid() and len(set(pids)) == 3
    with crew(1) as c:
        assert c.everywhere(_pid_after, 0.0) == [os.getpid()]


def _fails_or_gives_way(k: int) -> int:
    import time

    from foxhunt.data.store.crew import Abandoned

    if k == 1:
        raise Abandoned("job 1 stopped: another job failed")  # raised first
    time.sleep(0.2)
    if k == 2:
        raise ValueError("job 2: the error to report")
    return k


def test_the_error_raised_is_the_failure_not_a_job_abandoned_for_it():
    """Two jobs at once: the one abandoned fails first, the failure it gave way to 0.2 s later."""
    with crew(2) as c, pytest.raises(ValueError, match="the error to report"):
        c.starmap(_fails_or_gives_way, [(2,), (1,)])
