"""foxhunt/allocator.py: polars' allocator hands freed pages back at once for every command but `prepare` (which
keeps them a few seconds for reuse), and glibc's heap is trimmed on request."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from foxhunt import cli
from foxhunt.allocator import (
    POLARS_ALLOCATOR,
    PROMPT,
    REUSE,
    glibc,
    hand_back_freed_pages,
    release_freed_memory,
)

FREE = """
import os, sys
from foxhunt.allocator import hand_back_freed_pages
if sys.argv[1] == "prompt":
    hand_back_freed_pages()
import numpy as np, polars as pl
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
a = pl.Series(np.ones(20_000_000))
b = a * 2.0  # 153 MiB that polars allocates
held = rss()
del b
print(os.environ["_RJEM_MALLOC_CONF"], held - rss())
"""


def _freed(mode: str) -> tuple[str, int]:
    env = {k: v for k, v in os.environ.items() if k != POLARS_ALLOCATOR}
    conf, released = subprocess.run([sys.executable, "-c", FREE, mode], capture_output=True, text=True, check=True,
                                     env=env).stdout.split()
    return conf, int(released)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")
def test_freed_frames_leave_rss_at_once_only_when_asked() -> None:
    conf, released = _freed("prompt")
    assert conf.endswith("," + PROMPT)  # after polars' own default, so it wins
    assert released > 100  # MiB back to the OS as soon as the frame is dropped
    conf, released = _freed("default")
    assert PROMPT not in conf
    assert released < 50  # polars' default keeps them for a while


def test_a_users_setting_is_left_alone() -> None:
    env = {POLARS_ALLOCATOR: "dirty_decay_ms:2000"}
    hand_back_freed_pages(env)
    assert env == {POLARS_ALLOCATOR: "dirty_decay_ms:2000"}
    env = {}
    hand_back_freed_pages(env)
    assert env == {POLARS_ALLOCATOR: PROMPT}


@pytest.mark.parametrize(("command", "setting"), [("train", PROMPT), ("predict", PROMPT), ("prepare", REUSE)])
def test_every_command_but_prepare_asks_for_it(monkeypatch, capsys, command: str, setting: str) -> None:
    monkeypatch.delenv(POLARS_ALLOCATOR, raising=False)
    assert cli.main([command, "--help"]) == 0
    assert os.environ.get(POLARS_ALLOCATOR) == setting


def _rss_mb() -> int:
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024


@pytest.mark.skipif(glibc() is None, reason="malloc_trim is glibc's; elsewhere release_freed_memory does nothing")
def test_release_freed_memory_hands_the_heaps_holes_back() -> None:
    blocks = [bytearray(4000) for _ in range(50_000)]  # ~190 MiB of heap blocks (above pymalloc's 512 bytes)
    pin = bytearray(4000)  # allocated after them: the heap's top stays in use, so free() alone cannot shrink it
    del blocks
    held = _rss_mb()
    release_freed_memory()
    assert held - _rss_mb() > 100
    del pin
