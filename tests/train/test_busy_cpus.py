"""The start-up warning when other processes hold the cores (torch's threads would wait on each other)."""

from __future__ import annotations

import logging

import pytest

from foxhunt.train import session


@pytest.mark.parametrize(
    ("loadavg", "threads", "warned"),
    [
        ("0.90 0.50 0.20 1/300 999", 2, False),  # a high load average but nothing else running now: no warning
        ("1.20 0.50 0.20 2/300 999", 2, True),  # one other runnable thread on 2 cores
        ("1.20 0.50 0.20 2/300 999", 1, False),  # one torch thread does not wait on another
    ],
)
def test_warns_only_when_other_threads_run_now(monkeypatch, caplog, loadavg, threads, warned):
    class FakePath:
        def __init__(self, _: str) -> None:
            pass

        def read_text(self) -> str:
            return loadavg

    monkeypatch.setattr(session, "Path", FakePath)
    monkeypatch.setattr(session.torch, "get_num_threads", lambda: threads)
    monkeypatch.setattr(session.os, "cpu_count", lambda: 2)
    with caplog.at_level(logging.WARNING, logger="foxhunt.train"):
        session.warn_if_cpus_busy()
    assert ("--threads 1 may be faster" in caplog.text) == warned
