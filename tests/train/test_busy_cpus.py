"""The start-up warning when other processes hold the cores (torch's threads would wait on each other), and only
then: the job's own runnable threads (its pools still spinning, its children, a pool's sibling workers) are not
others."""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor

import psutil
import pytest

from foxhunt.train import session


def fake_loadavg(monkeypatch, loadavg: str) -> None:
    class FakePath:
        def __init__(self, _: str) -> None:
            pass

        def read_text(self) -> str:
            return loadavg

    monkeypatch.setattr(session, "Path", FakePath)


@pytest.mark.parametrize(
    ("loadavg", "threads", "warned"),
    [
        ("0.90 0.50 0.20 1/300 999", 2, False),  # a high load average but nothing else running now: no warning
        ("1.20 0.50 0.20 2/300 999", 2, True),  # one other runnable thread on 2 cores
        ("1.20 0.50 0.20 2/300 999", 1, False),  # one torch thread does not wait on another
    ],
)
def test_warns_only_when_other_threads_run_now(monkeypatch, caplog, loadavg, threads, warned):
    fake_loadavg(monkeypatch, loadavg)
    monkeypatch.setattr(session, "own_runnable_threads", lambda: 1)  # this thread alone: nothing of the job's spins
    monkeypatch.setattr(session.torch, "get_num_threads", lambda: threads)
    monkeypatch.setattr(session.os, "cpu_count", lambda: 2)
    with caplog.at_level(logging.WARNING, logger="foxhunt.train"):
        session.warn_if_cpus_busy()
    assert ("--threads 1 may be faster" in caplog.text) == warned


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_the_jobs_own_busy_process_is_no_other(monkeypatch, caplog):
    """A child of this process spinning (as a backtest's workers, or its own pools right after reading the bars):
    the scheduler counts it runnable, and it is the job's own, so no warning; the same count from elsewhere warns."""
    child = multiprocessing.get_context("spawn").Process(target=spin, args=(60,), daemon=True)
    child.start()
    try:
        deadline = time.monotonic() + 30
        while psutil.Process(child.pid).status() != psutil.STATUS_RUNNING and time.monotonic() < deadline:
            time.sleep(0.05)  # past its start-up: spinning, so always runnable
        assert session.own_runnable_threads() >= 2  # this thread and the child's
        fake_loadavg(monkeypatch, "1.20 0.50 0.20 2/300 999")  # this thread and the child, nothing else
        monkeypatch.setattr(session.torch, "get_num_threads", lambda: 2)
        monkeypatch.setattr(session.os, "cpu_count", lambda: 2)
        with caplog.at_level(logging.WARNING, logger="foxhunt.train"):
            session.warn_if_cpus_busy()
            assert "the CPUs are busy" not in caplog.text
            monkeypatch.setattr(session, "own_runnable_threads", lambda: 1)  # the same load from another process
            session.warn_if_cpus_busy()
        assert "the CPUs are busy (1 other runnable thread on 2 cores)" in caplog.text
    finally:
        child.kill()
        child.join()


def test_a_pool_worker_counts_its_owner_and_sibling_workers_as_the_job():
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        seen = [pool.submit(session.job_pids) for _ in range(2)]
        workers = {c.pid for c in psutil.Process().children()}
        for fut in seen:
            pids = set(fut.result())
            assert os.getpid() in pids and workers <= pids
