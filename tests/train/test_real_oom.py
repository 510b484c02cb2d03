"""A real allocation failure, not an injected one: `foxhunt train` in a subprocess whose training runs under an
address-space limit (RLIMIT_AS, on the training steps) sized between the step peaks of half the batch and the whole batch. The CPU allocator
then fails in the middle of the first step's forward pass with a RuntimeError ("DefaultCPUAllocator: can't allocate
memory"); the ladder retries, splits into micro-batches, and the run completes with the losses of an unlimited run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from foxhunt.cli import main

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and glibc's mallopt")

SCRIPT = Path(__file__).with_name("_oom_under_rlimit.py")
ARGS = ["--hidden-size", "32", "--attention-heads", "2", "--encoder-length", "64", "--horizon", "3", "--no-progress",
        "--threads", "1", "--batch-size", "64", "--validation-batch-size", "16", "--epochs", "1", "--dropout", "0",
        "--max-train-batches", "4"]


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_real_allocation_failure_mid_forward_is_recovered(tmp_path, fixtures_dir):
    args = [*ARGS, "--parquet-file", str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("FOXHUNT_FAULT_INJECT", None)
    limited = tmp_path / "limited"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(limited), *args], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sizes = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("{")))
    assert sizes["half_peak"] < sizes["headroom"] < sizes["full_peak"]
    memory = jsonl(limited / "memory.jsonl")
    rungs = [(m["phase"], m["batch"]) for m in memory if m["phase"].startswith("oom_")]
    assert rungs[:2] == [("oom_retry", 1), ("oom_split", 1)]  # the real failure, then the same failure on retry
    assert "micro-batches of 32" in memory[[m["phase"] for m in memory].index("oom_split")]["reason"]
    assert "oom_stop" not in [r[0] for r in rungs]

    clean = tmp_path / "clean"
    assert main(["train", *args, "--run-dir", str(clean)]) == 0
    a, b = jsonl(clean / "metrics.jsonl"), jsonl(limited / "metrics.jsonl")
    assert [r["train_samples"] for r in a] == [r["train_samples"] for r in b]
    for ra, rb in zip(a, b, strict=True):
        assert rb["train_loss"] == (None if ra["train_loss"] is None else pytest.approx(ra["train_loss"], rel=1e-5))
        assert rb["val_loss"] == pytest.approx(ra["val_loss"], rel=1e-5)
