"""benchmarks/_memory.py, which the memory benchmarks (store_20m.py, windows_2m.py) measure with: every switch of a
memory trick still names what it replaces (a renamed function would leave the switch setting a name nobody reads,
and the benchmark measuring the trick switched on twice), the cgroup's memory file is found on cgroup v1 and v2, and
a process's memory figures add up."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _memory  # noqa: E402


@pytest.mark.parametrize("trick", sorted(_memory.TRICKS))
def test_every_switch_replaces_a_name_that_exists(trick: str) -> None:
    for module, attribute, stand_in in _memory.TRICKS[trick]:
        owner, last = _memory.target(module, attribute)
        assert callable(getattr(owner, last)) and getattr(owner, last) is not stand_in


def test_a_switch_of_a_name_that_is_gone_fails_loudly() -> None:
    with pytest.raises(AttributeError):
        _memory.target("foxhunt.data.store.put", "_gone")
    with pytest.raises(SystemExit, match="no trick named 'nope'"):
        _memory.names("direct,nope")
    assert _memory.names("direct+trim-grid, trim") == ["direct", "trim-grid", "trim"]


def test_the_cgroup_file_on_v1_and_v2(tmp_path: Path) -> None:
    v2 = tmp_path / "v2"
    (v2 / "user.slice" / "s").mkdir(parents=True)
    (v2 / "user.slice" / "s" / "memory.current").write_text("1048576\n")
    assert _memory.cgroup_file("0::/user.slice/s\n", v2) == v2 / "user.slice" / "s" / "memory.current"
    assert _memory.cgroup_mb(v2 / "user.slice" / "s" / "memory.current") == 1.0
    v1 = tmp_path / "v1"  # a hybrid mount: the v2 line names a folder without the memory controller's files
    (v1 / "memory" / "api" / "x").mkdir(parents=True)
    (v1 / "memory" / "api" / "x" / "memory.usage_in_bytes").write_text("2097152\n")
    text = "9:name=systemd:/\n4:memory:/api/x\n3:cpuset:/\n0::/\n"
    assert _memory.cgroup_file(text, v1) == v1 / "memory" / "api" / "x" / "memory.usage_in_bytes"
    assert _memory.cgroup_file("4:memory:/elsewhere\n0::/\n", v1) is None
    assert _memory.cgroup_mb(None) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_a_process_memory_is_its_anonymous_and_file_pages() -> None:
    got = _memory.status()
    assert got["RssAnon"] > 0 and got["RssFile"] > 0
    assert abs(got["VmRSS"] - got["RssAnon"] - got["RssFile"]) < 64  # and RssShmem, about none here
    quick = _memory.statm(os.getpid())
    assert abs(quick["RssAnon"] + quick["RssFile"] - quick["VmRSS"]) < 1e-6
    peaks = _memory.Peaks(every=0.001).start()
    block = bytearray(32 << 20)  # 32 MiB of anonymous memory, touched
    peaks.take()
    del block
    got = peaks.stop()
    assert got["RssAnon"] >= quick["RssAnon"] + 30 and got["tree_anon"] >= got["RssAnon"]
