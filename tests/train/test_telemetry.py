"""MemoryTracker on CPU: the memory.jsonl record format, the [MEMORY] log line, per-batch sampling, peak resets."""

from __future__ import annotations

import json
import logging
import mmap
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from foxhunt.train.telemetry import MemoryTracker, format_line

KEYS = {
    "phase", "epoch", "batch", "device_allocated_mb", "device_reserved_mb", "device_peak_mb", "device_total_mb",
    "host_rss_mb", "host_anon_mb", "host_peak_mb", "time",
}  # fmt: skip
DEVICE_KEYS = ("device_allocated_mb", "device_reserved_mb", "device_peak_mb", "device_total_mb")


def tracker(tmp_path: Path, every: int = 0) -> MemoryTracker:
    return MemoryTracker(
        torch.device("cpu"), tmp_path / "memory.jsonl", logging.getLogger("test.memory"), every
    )


def read(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "memory.jsonl").read_text().splitlines()]


def test_cpu_records_have_exactly_the_keys_and_null_device_fields(tmp_path: Path) -> None:
    t = tracker(tmp_path)
    returned = [
        t.record("run_start"),
        t.record("epoch_start", epoch=1),
        t.record("val_batch", epoch=1, batch=3),
    ]
    recs = read(tmp_path)
    assert recs == returned
    assert [(r["phase"], r["epoch"], r["batch"]) for r in recs] == [
        ("run_start", None, None), ("epoch_start", 1, None), ("val_batch", 1, 3),
    ]  # fmt: skip
    for r in recs:
        assert set(r) == KEYS
        assert all(r[k] is None for k in DEVICE_KEYS)
        assert r["host_rss_mb"] > 0 and r["host_peak_mb"] >= r["host_rss_mb"]
        assert isinstance(r["time"], float)
    assert recs[0]["time"] <= recs[1]["time"] <= recs[2]["time"]


def test_log_line_format(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    t = tracker(tmp_path)
    with caplog.at_level(logging.INFO, logger="test.memory"):
        t.record("val_batch", epoch=2, batch=7)
        t.record("run_start")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert re.fullmatch(
        r"\[MEMORY\] phase=val_batch epoch=2 batch=7 device=cpu host_rss=\d+\.\dMiB host_peak=\d+\.\dMiB",
        lines[0],
    )
    assert lines[1].startswith("[MEMORY] phase=run_start epoch=- batch=- device=cpu ")


def test_cuda_record_line_shows_device_numbers() -> None:
    rec = {
        "phase": "train_batch", "epoch": 1, "batch": 40, "device_allocated_mb": 812.25, "device_reserved_mb": 1024.0,
        "device_peak_mb": 2047.5, "device_total_mb": 4096.0, "host_rss_mb": 1500.0, "host_peak_mb": 1600.04,
        "time": 0.0, "device_nvml_used_mb": 1300.0,
    }  # fmt: skip
    assert format_line(rec) == (
        "[MEMORY] phase=train_batch epoch=1 batch=40 device_allocated=812.2MiB device_reserved=1024.0MiB "
        "device_peak=2047.5MiB device_total=4096MiB device_nvml_used=1300.0MiB host_rss=1500.0MiB host_peak=1600.0MiB"
    )


def test_maybe_record_samples_every_n_batches(tmp_path: Path) -> None:
    t = tracker(tmp_path, every=2)
    for b in range(1, 6):
        t.maybe_record("train_batch", 1, b)
    assert [r["batch"] for r in read(tmp_path)] == [2, 4]
    off = MemoryTracker(
        torch.device("cpu"), tmp_path / "off.jsonl", logging.getLogger("test.memory"), every=0
    )
    for b in range(1, 6):
        off.maybe_record("train_batch", 1, b)
    assert not (tmp_path / "off.jsonl").exists()


def test_no_file_without_a_path(tmp_path: Path) -> None:
    rec = MemoryTracker(torch.device("cpu"), None, logging.getLogger("test.memory")).record(
        "checkpoint", epoch=1
    )
    assert rec["phase"] == "checkpoint" and list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc/self/clear_refs")
def test_host_peak_belongs_to_the_phase_that_just_ended(tmp_path: Path) -> None:
    t = tracker(tmp_path)
    t.record("train_end", epoch=1)
    block = mmap.mmap(-1, 64 * 2**20)  # 64 MiB straight from the kernel (malloc might reuse resident heap)
    for offset in range(0, len(block), mmap.PAGESIZE):
        block[offset] = 1  # touch every page
    block.close()
    spike = t.record("val_end", epoch=1)
    calm = t.record("checkpoint", epoch=1)
    assert (
        spike["host_peak_mb"] - spike["host_rss_mb"] > 48
    )  # the freed 64 MiB shows in this record's peak only
    assert calm["host_peak_mb"] - calm["host_rss_mb"] < 16


CHURN = """
import ctypes, re, sys
from pathlib import Path
from foxhunt.train.telemetry import pin_host_allocator
rss = lambda: int(re.search(r"^VmRSS:\\s+(\\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) // 1024
if sys.argv[1] == "pin":
    assert pin_host_allocator()
ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand free heap back first, so a block cannot reuse pages already counted
base = rss()
for _ in range(4):
    block = b"\\1" * (8 << 20)  # 8 MiB, touched, then freed
    del block
print(rss() - base)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_pinned_allocator_returns_freed_blocks_to_the_kernel() -> None:
    # Any MALLOC_* or GLIBC_TUNABLES setting of the environment (or a preloaded allocator) turns glibc's dynamic
    # threshold off or replaces glibc: the child gets a clean one, so that the two runs differ only by the pin.
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES", "LD_PRELOAD"))
    }

    def growth(mode: str) -> int:
        out = subprocess.run(
            [sys.executable, "-c", CHURN, mode], check=True, capture_output=True, text=True, env=env
        )
        return int(out.stdout.split()[-1])

    assert growth("pin") <= 1  # every 8 MiB block had its own mmap, unmapped on free
    unpinned = growth("default")
    if unpinned < 7:  # the control: without the pin the same churn must leave a block resident
        pytest.skip(
            f"this C library did not keep a freed 8 MiB block resident without the pin (+{unpinned} MiB)"
        )



STATUS = "VmPeak:\t 9000000 kB\nVmHWM:\t 3100000 kB\nVmRSS:\t 3000000 kB\nRssAnon:\t  500000 kB\nRssFile:\t 2500000 kB\n"


@pytest.fixture
def status(tmp_path, monkeypatch) -> Path:
    """/proc/self/status of a process that maps a store: 2.4 GiB of its 2.9 GiB resident set are file pages."""
    from foxhunt.train import telemetry

    path = tmp_path / "status"
    path.write_text(STATUS)
    monkeypatch.setattr(telemetry, "_STATUS", path)
    return path


def test_a_record_takes_the_resident_set_its_anonymous_part_and_its_peak_from_one_read(tmp_path, status, monkeypatch):
    reads = []
    read_text = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: reads.append(self) or read_text(self, *a, **k))
    rec = tracker(tmp_path).record("run_start")
    assert (rec["host_rss_mb"], rec["host_anon_mb"], rec["host_peak_mb"]) == (3_000_000 / 1024, 500_000 / 1024,
                                                                              3_100_000 / 1024)
    assert reads.count(status) == 3  # the record's one, and the peak's reset checked as the tracker starts and after


def test_what_a_cpu_plan_holds_outside_the_step_is_the_processs_own_memory(status):
    """A mapped store's file pages are page cache, which MemAvailable already counts as free: what a CPU plan holds
    outside the step is the process's own memory (RssAnon) less the weights, not its resident set."""
    from foxhunt.train import telemetry

    model = torch.nn.Linear(1000, 1000)  # 4,004,000 bytes of weights
    assert telemetry.held_outside_step(model) == 500_000 * 1024 - 4_004_000
