"""memory-report on hand-written memory.jsonl files: per-phase numbers, the table, the plot, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foxhunt.errors import InputError
from foxhunt.evaluate.memory_report import load_memory, memory_report, phase_summary


def rec(phase: str, t: float, epoch: int | None = None, batch: int | None = None, alloc: float | None = None,
        peak: float | None = None, rss: float = 1000.0, host_peak: float | None = None) -> dict:  # fmt: skip
    cuda = alloc is not None
    return {
        "phase": phase, "epoch": epoch, "batch": batch,
        "device_allocated_mb": alloc, "device_reserved_mb": alloc and alloc + 100, "device_peak_mb": peak,
        "device_total_mb": 4096.0 if cuda else None, "host_rss_mb": rss, "host_peak_mb": host_peak or rss, "time": t,
    }  # fmt: skip


def write(path: Path, recs: list[dict], tail: str = "") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "memory.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + tail)
    return path


def leaky_gpu_run(tmp_path: Path) -> Path:
    """Validation keeps 50 MiB per batch in epoch 1 (the old trainer's bug) and 10 MiB per batch in epoch 2."""
    recs = [rec("run_start", 0, alloc=0, peak=0, rss=900), rec("epoch_start", 1, 1, alloc=100, peak=100)]
    recs += [rec("train_batch", 2 + i, 1, i + 1, alloc=100, peak=900) for i in range(2)]
    recs += [rec("val_start", 4, 1, alloc=100, peak=120)]
    recs += [
        rec("val_batch", 5 + i, 1, i + 1, alloc=100 + 50 * i, peak=300 + 50 * i, rss=1000 + 5 * i)
        for i in range(3)
    ]
    recs += [
        rec("val_end", 8, 1, alloc=200, peak=400, host_peak=1500),
        rec("epoch_start", 9, 2, alloc=110, peak=200),
    ]
    recs += [rec("val_batch", 10 + i, 2, i + 1, alloc=110 + 10 * i, peak=350, rss=1010) for i in range(2)]
    return write(tmp_path / "gpu", recs)


def test_phase_summary_growth_and_peaks(tmp_path: Path) -> None:
    s = phase_summary(load_memory(leaky_gpu_run(tmp_path) / "memory.jsonl"))
    rows = {r["phase"]: r for r in s.iter_rows(named=True)}
    assert list(rows) == ["run_start", "epoch_start", "train_batch", "val_start", "val_batch", "val_end"]
    v = rows["val_batch"]
    assert v["records"] == 5 and v["device_peak_mb"] == 400 and v["host_peak_mb"] == 1010
    assert v["device_growth_in_epoch_mb"] == 100  # epoch 1: 200 - 100 (epoch 2 grew 10)
    assert v["device_growth_run_mb"] == 20  # last (120) - first (100)
    assert v["host_growth_in_epoch_mb"] == 10 and v["host_growth_run_mb"] == 10
    start = rows["epoch_start"]
    assert start["device_growth_run_mb"] == 10 and start["device_growth_in_epoch_mb"] == 0
    assert rows["val_end"]["host_peak_mb"] == 1500


def test_report_table_and_png(tmp_path: Path) -> None:
    run = leaky_gpu_run(tmp_path)
    text, png = memory_report(run)
    assert png == run / "memory.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = text.splitlines()
    assert lines[0].startswith(f"{run / 'memory.jsonl'}: 12 records over 11.0 s")
    val = next(line for line in lines if line.startswith("val_batch"))
    assert val.split() == ["val_batch", "5", "400.0", "1010.0", "100.0", "20.0", "10.0", "10.0"]
    assert "device peak 900.0 MiB of 4096 MiB (22.0%)" in text and "host peak 1500.0 MiB" in text
    assert not list(run.glob(".memory.png.*"))  # written atomically: no temporary left behind


def test_cpu_run_shows_dashes_for_device_and_skips_a_torn_tail(tmp_path: Path) -> None:
    recs = [
        rec("run_start", 0.0, rss=500),
        rec("epoch_start", 1.0, 1, rss=520),
        rec("train_end", 2.5, 1, rss=530),
    ]
    run = write(tmp_path / "cpu", recs, tail='{"phase": "val_st')  # a run killed mid-write
    text, png = memory_report(run)
    row = next(line for line in text.splitlines() if line.startswith("train_end")).split()
    assert row == ["train_end", "1", "-", "530.0", "-", "-", "0.0", "0.0"]
    assert "device peak" not in text and png.exists()


def test_missing_and_empty_files_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nothing/memory\.jsonl: not found"):
        memory_report(tmp_path / "nothing")
    write(tmp_path / "empty", [])
    with pytest.raises(InputError, match=r"empty/memory\.jsonl: has no memory records"):
        memory_report(tmp_path / "empty")
    write(tmp_path / "junk", [], tail="not json\n")
    with pytest.raises(InputError, match=r"junk/memory\.jsonl: is not a foxhunt memory log"):
        memory_report(tmp_path / "junk")
    write(tmp_path / "other", [rec("run_start", 0.0), {"phase": "x", "step": 3}])
    with pytest.raises(InputError, match=r"other/memory\.jsonl: line 2 has no phase, time or host_rss_mb"):
        memory_report(tmp_path / "other")
