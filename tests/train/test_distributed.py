"""torchrun data-parallel training on CPU (gloo): 2 processes give the losses of 1 process with the same global batch.

One 2-process run serves every test here (launching torchrun costs three torch imports): rank 1 alone runs out of
memory at step 3, then kills itself with SIGKILL at step 13, one step after a checkpoint inside epoch 3 (injected
faults). So the same run shows that the ranks climb the out-of-memory ladder together, that rank 0 exits on its own
with a message when its peer dies, and that its checkpoint, counted in global batches, resumes in one process. That
run splits evenly; a second one (below) splits unevenly, so that rank 1 has no windows on each epoch's last step and
none to validate, is killed on such a step and resumed there on 2 ranks.

Tolerance: the two runs do the same arithmetic except for float32 summation order. The loss of a step is the sum of
two half-batch means weighted 1/2 each instead of one mean, and each gradient is the sum of two partial gradients
summed over fewer windows each: every step's update differs by a few float32 rounding errors (eps 1.2e-7), which 12
AdamW steps carry into the weights. Measured on this fixture: per-epoch losses agree to 3e-8 relative. RTOL 1e-5 is
300 times that, and 1,000 times smaller than what a sampler bug moves (a window seen twice or skipped changes an
epoch's training loss by about 1e-2 relative here).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foxhunt.cli import main
from foxhunt.train.resume import load_checkpoint

REPO = Path(__file__).resolve().parents[2]
RTOL = 1e-5
TIMEOUT_S = 240  # the 2-process run takes ~20 s of CPU; a hang in a collective would otherwise stall CI


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def flags(tiny_flags, daily_path) -> list[str]:
    return [*tiny_flags, "--parquet-file", str(daily_path), "--dropout", "0", "--epochs", "3", "--batch-size", "32",
            "--patience", "9", "--seed", "3", "--max-train-batches", "5", "--checkpoint-every", "12"]


@pytest.fixture(scope="module")
def one(tmp_path_factory, flags) -> Path:
    run = tmp_path_factory.mktemp("one") / "run"
    assert main(["train", *flags, "--run-dir", str(run)]) == 0
    return run


def torchrun(args: list[str], faults: str = "") -> subprocess.CompletedProcess:
    """`foxhunt train ARGS` on 2 gloo ranks, with FOXHUNT_FAULT_INJECT `faults` armed on rank 1."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1",
           "FOXHUNT_FAULT_INJECT": faults, "FOXHUNT_FAULT_RANK": "1", "FOXHUNT_DIST_TIMEOUT_S": "60"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", "localhost:0", "-m", "foxhunt", "train", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO)


@pytest.fixture(scope="module")
def two(tmp_path_factory, flags) -> tuple[Path, subprocess.CompletedProcess, float]:
    """2 ranks under torchrun (5 steps an epoch); rank 1 runs out of memory at step 3 and dies at step 13."""
    run = tmp_path_factory.mktemp("two") / "run"
    t0 = time.monotonic()
    done = torchrun([*flags, "--run-dir", str(run)], "oom@train:3,sigkill@train:13")
    return run, done, time.monotonic() - t0


def assert_same_epoch(a: dict, b: dict) -> None:
    assert (a["epoch"], a["train_samples"], a["val_samples"]) == (b["epoch"], b["train_samples"], b["val_samples"])
    for key in ("train_loss", "val_loss"):  # epoch 0 (the untrained model, its anchor) has no train_loss
        assert b[key] == (None if a[key] is None else pytest.approx(a[key], rel=RTOL)), key
    assert b["val_qrisk"] == pytest.approx(a["val_qrisk"], rel=RTOL)


def test_two_ranks_give_the_losses_of_one_process(one, two):
    run, done, _ = two
    assert "distributed: 2 ranks (gloo), global batch split across them (the last batch of an epoch may leave some " \
        "ranks a window fewer, or none)" in done.stderr
    ref, got = metrics(one), metrics(run)
    assert [r["epoch"] for r in got] == [0, 1, 2]  # rank 1 died in epoch 3
    for a, b in zip(ref, got, strict=False):
        assert_same_epoch(a, b)


def test_rank_zero_alone_writes_and_logs(two):
    run, done, _ = two
    assert done.stderr.count("run directory ") == 1  # rank 1's console shows errors only
    assert sorted(p.name for p in run.iterdir()) == sorted(
        ["checkpoint.pt", "config.json", "data_summary.json", "memory.jsonl", "metrics.jsonl", "model.json",
         "model.safetensors", "rolls.json", "train.log"])
    assert json.loads((run / "config.json").read_text())["resolved"]["batch_size"] == 32  # the global batch


def test_an_out_of_memory_on_one_rank_is_retried_by_all(two):
    run, done, _ = two
    rungs = [json.loads(line) for line in (run / "memory.jsonl").read_text().splitlines()]
    retry = [r for r in rungs if r["phase"].startswith("oom")]
    assert [(r["phase"], r["batch"]) for r in retry] == [("oom_retry", 3)]  # rank 0 climbed it with rank 1
    assert "micro-batch 16 of batch 32" in retry[0]["reason"]  # each rank's share of the global batch


def test_a_dead_rank_stops_the_others_with_a_message(two):
    _, done, seconds = two
    assert done.returncode != 0
    assert "exitcode  : -9" in done.stderr  # torchrun's summary names rank 1's SIGKILL
    assert "rank 0 of 2: another rank stopped or stopped answering" in done.stderr
    assert seconds < TIMEOUT_S


def test_a_two_rank_checkpoint_resumes_in_one_process(one, two, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(two[0], run)  # the other tests read the 2-rank run as it was left
    fit_state = json.loads(load_checkpoint(run / "checkpoint.pt")["fit_state"])
    assert (fit_state["epoch"], fit_state["epoch_batches"], fit_state["global_step"]) == (2, 2, 12)  # in epoch 3
    assert main(["train", "--run-dir", str(run), "--resume", "--no-progress", "--threads", "1"]) == 0
    ref, got = metrics(one), metrics(run)
    assert [r["epoch"] for r in got] == [0, 1, 2, 3]
    for a, b in zip(ref, got, strict=True):
        assert_same_epoch(a, b)


# An uneven split: 245 training windows in global batches of 122 (61 a rank) leave the third step of each epoch 1
# window, so rank 1's shard is empty there; the one validation window leaves rank 1 none to validate. The rank with
# nothing to do must still take part in every collective (series-mask draws, the loss-weight reference, the status
# and gradient all-reduces, the validation sums, the stop/checkpoint agreement) and add zeros to each.
UNEVEN_SPLIT = "windows train 245 / val 1 / test 187"


@pytest.fixture(scope="module")
def uneven_flags(tiny_flags, fixtures_dir) -> list[str]:
    return [*tiny_flags, "--parquet-file", str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"),
            "--train-end", "2024-03-05T14:00", "--val-end", "2024-03-05T17:00", "--batch-size", "122",
            "--epochs", "3", "--patience", "9", "--dropout", "0", "--seed", "3", "--loss-weight", "scale",
            "--checkpoint-every", "5"]


@pytest.fixture(scope="module")
def uneven_one(tmp_path_factory, uneven_flags) -> Path:
    run = tmp_path_factory.mktemp("uneven_one") / "run"
    assert main(["train", *uneven_flags, "--run-dir", str(run)]) == 0
    return run


@pytest.fixture(scope="module")
def uneven_two(tmp_path_factory, uneven_flags) -> dict:
    """2 ranks on the uneven split; rank 1 kills itself at step 6 (the 1-window batch of epoch 2, where its shard
    is empty), one step after a checkpoint; then 2 ranks resume from there, so the resumed run starts on that batch."""
    run = tmp_path_factory.mktemp("uneven_two") / "run"
    killed = torchrun([*uneven_flags, "--run-dir", str(run)], "sigkill@train:6")
    assert "exitcode  : -9" in killed.stderr, killed.stderr[-3000:]  # rank 1 reached step 6 on an empty shard
    before = {"metrics": metrics(run), "fit_state": json.loads(load_checkpoint(run / "checkpoint.pt")["fit_state"])}
    resumed = torchrun(["--run-dir", str(run), "--resume", "--no-progress", "--threads", "1"])
    return {"run": run, "killed": killed, "resumed": resumed, **before}


def test_a_rank_without_training_or_validation_windows_still_steps_and_gives_one_process_losses(uneven_one,
                                                                                                 uneven_two):
    killed = uneven_two["killed"]
    assert UNEVEN_SPLIT in killed.stderr
    assert "rank 0 of 2: another rank stopped or stopped answering" in killed.stderr  # at step 6, not before
    ref, got = metrics(uneven_one), uneven_two["metrics"]
    assert [r["epoch"] for r in got] == [0, 1]  # epoch 1: its last step and its validation left rank 1 nothing
    assert_same_epoch(ref[0], got[0])
    assert_same_epoch(ref[1], got[1])


def test_a_resume_onto_a_batch_smaller_than_the_ranks_gives_one_process_losses(uneven_one, uneven_two):
    state = uneven_two["fit_state"]
    assert (state["epoch"], state["epoch_batches"], state["global_step"]) == (1, 2, 5)  # next: the 1-window batch
    resumed = uneven_two["resumed"]
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming at epoch 2, batch 2 (step 5" in resumed.stderr
    ref, got = metrics(uneven_one), metrics(uneven_two["run"])
    assert [r["train_samples"] for r in ref] == [0] + [245] * 3 and [r["val_samples"] for r in ref] == [3] * 4
    assert [r["epoch"] for r in got] == [0, 1, 2, 3]
    for a, b in zip(ref, got, strict=True):
        assert_same_epoch(a, b)


def test_two_ranks_with_inputs_of_your_own_give_the_losses_of_one_process(tmp_path, flags, daily_path):
    """A covariate file, a known column and an events file under torchrun: every rank prepares the same inputs."""
    import numpy as np
    import polars as pl

    days = pl.read_parquet(daily_path).select(pl.col("timestamp").unique().sort())
    rng = np.random.default_rng(0)
    span = pl.datetime_range(days["timestamp"].min(), days["timestamp"].max() + pl.duration(days=30), "1d",
                             eager=True)
    pl.DataFrame({"time": span, "vix": rng.normal(15, 3, len(span)), "flag": (rng.random(len(span)) < 0.1) * 1.0}
                 ).write_csv(tmp_path / "cov.csv")
    pl.DataFrame({"time": span[::25], "name": "release"}).write_csv(tmp_path / "events.csv")
    own = ["--observed", "vix", "--known", "flag", "--covariates", str(tmp_path / "cov.csv"), "--events",
           str(tmp_path / "events.csv"), "--epochs", "2", "--checkpoint-every", "0"]
    single, ranks = tmp_path / "one", tmp_path / "two"
    assert main(["train", *flags, *own, "--run-dir", str(single)]) == 0
    done = torchrun([*flags, *own, "--run-dir", str(ranks)])
    assert done.returncode == 0, done.stderr[-2000:]
    for a, b in zip(metrics(single), metrics(ranks), strict=True):
        assert_same_epoch(a, b)
    assert json.loads((ranks / "model.json").read_text())["transform"]["inputs"]["known"] == ["flag"]
