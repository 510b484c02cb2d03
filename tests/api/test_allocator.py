"""Importing foxhunt before polars makes polars' jemalloc hand freed pages back at once (foxhunt/__init__.py)."""

from __future__ import annotations

import os
import subprocess
import sys

FREE = """
import foxhunt, os
import numpy as np, polars as pl
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
a = pl.Series(np.ones(20_000_000))
b = a * 2.0  # 153 MiB that polars allocates
held = rss()
del b
print(os.environ["_RJEM_MALLOC_CONF"], held - rss())
"""


def _run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"} | env
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=environ).stdout.split()


def test_freed_frames_leave_rss_at_once() -> None:
    conf, released = _run(FREE)
    assert conf.endswith(",dirty_decay_ms:0,muzzy_decay_ms:0,thp:always,metadata_thp:always")  # after polars' own default, so it wins
    if sys.platform == "linux":
        assert int(released) > 100  # MiB back to the OS as soon as the frame is dropped


def test_a_users_setting_is_left_alone() -> None:
    conf, _ = _run(FREE, _RJEM_MALLOC_CONF="dirty_decay_ms:2000")
    assert conf.endswith(",dirty_decay_ms:2000")
    assert "dirty_decay_ms:0" not in conf
