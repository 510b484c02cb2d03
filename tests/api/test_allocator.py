"""foxhunt/allocator.py: polars' allocator hands freed pages back at once for every command but `prepare` (which
keeps them a few seconds for reuse), OpenMP spins briefly, both for the CLI and the Python API, and glibc's heap is
trimmed on request."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from foxhunt import cli
from foxhunt.allocator import (
    OPENMP_SPIN,
    POLARS_ALLOCATOR,
    PROMPT,
    REUSE,
    glibc,
    hand_back_freed_pages,
    process_settings,
    release_freed_memory,
)

SPIN, SPIN_VALUE = OPENMP_SPIN

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
    monkeypatch.delenv(SPIN, raising=False)
    assert cli.main([command, "--help"]) == 0
    assert os.environ.get(POLARS_ALLOCATOR) == setting
    assert os.environ.get(SPIN) == SPIN_VALUE


def test_process_settings_are_idempotent_and_keep_the_users_values() -> None:
    env: dict[str, str] = {}
    process_settings("train", env)
    assert env == {SPIN: SPIN_VALUE, POLARS_ALLOCATOR: PROMPT}
    process_settings("prepare", env)  # a second call changes nothing
    assert env == {SPIN: SPIN_VALUE, POLARS_ALLOCATOR: PROMPT}
    env = {SPIN: "0", POLARS_ALLOCATOR: "dirty_decay_ms:2000"}
    process_settings("prepare", env)
    assert env == {SPIN: "0", POLARS_ALLOCATOR: "dirty_decay_ms:2000"}


# Records the two settings at the moment torch and polars are first imported (what their libraries read then), runs
# the Python API as a notebook would, and prints them.
AT_IMPORT = """
import importlib.abc, json, os, sys
seen = {}
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name in ("torch", "polars") and name not in seen:
            seen[name] = [os.environ.get("GOMP_SPINCOUNT"), os.environ.get("_RJEM_MALLOC_CONF")]
        return None
sys.meta_path.insert(0, Watch())
if sys.argv[1] == "torch-first":
    import torch
import foxhunt
if sys.argv[1] == "forecaster":
    foxhunt.Forecaster.load(sys.argv[2])
else:
    foxhunt.fit(parquet_file=sys.argv[3], run_dir=sys.argv[2], epochs=1, hidden_size=8, attention_heads=2,
                  encoder_length=16, horizon=3, threads=1, progress=False)
print(json.dumps(seen))
"""


def _at_import(how: str, run_dir, daily_path, **env: str) -> dict[str, list[str | None]]:
    clean = {k: v for k, v in os.environ.items() if k not in (POLARS_ALLOCATOR, SPIN)}
    out = subprocess.run([sys.executable, "-c", AT_IMPORT, how, str(run_dir), str(daily_path)], capture_output=True,
                         text=True, env={**clean, **env}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_python_api_applies_the_clis_settings_before_torch_and_polars_load(tmp_path, daily_path) -> None:
    """`foxhunt.fit()` and `Forecaster` from Python run with the settings `foxhunt train` runs with (they are
    per process, read once when torch's OpenMP runtime and polars' jemalloc load: hence a fresh process each)."""
    run = tmp_path / "run"
    for how in ("train", "forecaster"):  # the forecaster loads the run the first one trained
        seen = _at_import(how, run, daily_path)
        assert seen["polars"] == [SPIN_VALUE, PROMPT]  # polars appends its own default before this: ours wins
        assert seen["torch"][0] == SPIN_VALUE
    # the user's own values are kept
    seen = _at_import("forecaster", run, daily_path, GOMP_SPINCOUNT="77", _RJEM_MALLOC_CONF="dirty_decay_ms:5")
    assert (seen["polars"], seen["torch"][0]) == (["77", "dirty_decay_ms:5"], "77")


def test_settings_that_come_too_late_are_named() -> None:
    """Set after torch or polars loaded, a setting reaches only the processes this one starts: the API says which."""
    code = ("import os, polars, torch\nfrom foxhunt.allocator import process_settings\n"
            "print(process_settings(), os.environ['GOMP_SPINCOUNT'])")
    clean = {k: v for k, v in os.environ.items() if k not in (POLARS_ALLOCATOR, SPIN)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean, check=True)
    assert out.stdout.split() == ["['GOMP_SPINCOUNT',", "'_RJEM_MALLOC_CONF']", SPIN_VALUE]


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
