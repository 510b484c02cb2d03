"""The out-of-memory ladder (train/oom.py), driven by faults injected through FOXHUNT_FAULT_INJECT at every site:
each rung is a `[MEMORY]` record with its reason, and a run that climbed it ends with the losses and weights of a
clean run (within 1e-5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from foxhunt.cli import main
from tests.epochs import trained

ES = "es_fut_ohlcv1h_databento.parquet"


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run(tmp_path, tiny, fixtures_dir, name, *extra) -> tuple[int, Path]:
    out = tmp_path / name
    code = main(["train", *tiny, "--parquet-file", str(fixtures_dir / ES), "--epochs", "2", "--dropout", "0",
                 "--batch-size", "32", "--validation-batch-size", "16", "--run-dir", str(out), *extra])
    return code, out


def ladder(run_dir: Path) -> list[tuple[str, int | None]]:
    return [(m["phase"], m["batch"]) for m in jsonl(run_dir / "memory.jsonl") if m["phase"].startswith("oom_")]


def assert_same_run(clean: Path, faulty: Path) -> None:
    a, b = jsonl(clean / "metrics.jsonl"), jsonl(faulty / "metrics.jsonl")
    assert [r["epoch"] for r in a] == [r["epoch"] for r in b]
    assert [r["train_samples"] for r in a] == [r["train_samples"] for r in b]
    assert [r["val_samples"] for r in a] == [r["val_samples"] for r in b]
    for ra, rb in zip(a, b, strict=True):
        if ra["train_loss"] is None:  # epoch 0: the untrained model, which forecasts its anchor, validated
            assert rb["train_loss"] is None
        else:
            assert rb["train_loss"] == pytest.approx(ra["train_loss"], rel=1e-5, abs=1e-7)
        assert rb["val_loss"] == pytest.approx(ra["val_loss"], rel=1e-5, abs=1e-7)
    wa, wb = load_file(str(clean / "model.safetensors")), load_file(str(faulty / "model.safetensors"))
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-5, atol=1e-5, msg=k)


def test_every_rung_above_size_one_keeps_the_maths(tmp_path, tiny, fixtures_dir, monkeypatch):
    _, clean = run(tmp_path, tiny, fixtures_dir, "clean")
    # validation batch 2 fails 3 times (epoch 0's, the anchor's validation, comes first): retry, then batch 8, then
    # 4; train step 3 fails 4 times: retry, then micro-batches 16, 8, 4; a single OOM at step 12 (epoch 2) is
    # absorbed by the retry.
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "oom@train:3x4,oom@val:2x3,oom@train:12")
    code, faulty = run(tmp_path, tiny, fixtures_dir, "faulty")
    assert code == 0
    assert_same_run(clean, faulty)
    assert ladder(faulty) == [("oom_retry", 2), ("oom_halve", 2), ("oom_halve", 2),  # epoch 0's validation
                              ("oom_retry", 3), ("oom_split", 3), ("oom_split", 3), ("oom_split", 3),  # epoch 1
                              ("oom_retry", 12)]  # epoch 2's first step
    reasons = [m.get("reason", "") for m in jsonl(faulty / "memory.jsonl") if m["phase"].startswith("oom_")]
    validation, train = reasons[:3], reasons[3:7]
    assert "retrying the same batch once" in train[0]
    assert "micro-batches of 16" in train[1] and "effective batch 32 unchanged" in train[1]
    assert "micro-batches of 4" in train[3]
    assert "validation batch 2" in validation[1] and "batch size 8" in validation[1]
    log = (faulty / "train.log").read_text()
    assert "reason='out of memory in training step 3" in log


def test_uneven_micro_batches_keep_the_maths(tmp_path, tiny, fixtures_dir, monkeypatch):
    """Batches of 30: train step 3 fails 3 times (retry, micro-batches of 15, then 7), so from there every batch is
    split 7, 7, 7, 7, 2 (and each epoch's last, smaller batch unevenly too): a last micro-batch of another size,
    whose loss must weigh 2 / 30 for the run to end on a clean run's weights."""
    _, clean = run(tmp_path, tiny, fixtures_dir, "clean", "--batch-size", "30")
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "oom@train:3x3")
    code, faulty = run(tmp_path, tiny, fixtures_dir, "faulty", "--batch-size", "30")
    assert code == 0
    assert_same_run(clean, faulty)
    assert ladder(faulty) == [("oom_retry", 3), ("oom_split", 3), ("oom_split", 3)]
    reasons = [m["reason"] for m in jsonl(faulty / "memory.jsonl") if m["phase"] == "oom_split"]
    assert "micro-batches of 7" in reasons[-1] and "effective batch 30 unchanged" in reasons[-1]
    last = trained(jsonl(clean / "metrics.jsonl"))[0]["train_samples"] % 30
    assert last % 7, last  # the epoch's last batch is split unevenly as well


def test_the_original_failure_one_transient_oom_at_validation_batch_size_one(tmp_path, tiny, fixtures_dir,
                                                                            monkeypatch):
    """The issue's report: --validation-batch-size 1 and oom@val:3 ended the run with exit 3. Now it retries."""
    extra = ("--validation-batch-size", "1", "--max-train-batches", "4")
    _, clean = run(tmp_path, tiny, fixtures_dir, "clean", *extra)
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "oom@val:3")
    code, faulty = run(tmp_path, tiny, fixtures_dir, "faulty", *extra)
    assert code == 0
    assert_same_run(clean, faulty)
    assert ladder(faulty) == [("oom_retry", 3)]


def test_at_size_one_activation_checkpointing_keeps_the_maths(tmp_path, tiny, fixtures_dir, monkeypatch):
    extra = ("--batch-size", "1", "--max-train-batches", "12")
    _, clean = run(tmp_path, tiny, fixtures_dir, "clean", *extra)
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "oom@train:4x2")  # retry, then checkpointing (nothing to split)
    code, faulty = run(tmp_path, tiny, fixtures_dir, "faulty", *extra)
    assert code == 0
    assert_same_run(clean, faulty)
    assert ladder(faulty) == [("oom_retry", 4), ("oom_checkpointing", 4)]


def test_a_single_sample_that_never_fits_stops_after_the_whole_ladder(tmp_path, tiny, fixtures_dir, monkeypatch,
                                                                     capsys):
    # step 2 fails 4 times: retry, micro-batch 1 (of 2), checkpointing, and (CPU: no host move) stop
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "oom@train:2x4")
    code, out = run(tmp_path, tiny, fixtures_dir, "one", "--batch-size", "2")
    assert code == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "a single training sample does not fit in memory: step 2" in err
    for said in ("a retry", "micro-batches down to 1", "--activation-checkpointing", "--optimizer-state cpu",
                 "largest micro-batch that completed a step in this run was 2", "what would fit",
                 "--encoder-length", "--hidden-size", "--memory-budget"):
        assert said in err
    assert ladder(out) == [("oom_retry", 2), ("oom_split", 2), ("oom_checkpointing", 2), ("oom_stop", 2)]
    # what was kept is epoch 0's, the untrained model that forecasts its anchor: no trained epoch ended
    assert [r["epoch"] for r in jsonl(out / "metrics.jsonl")] == [0]


def test_a_validation_sample_that_never_fits_stops_with_what_would_fit(tmp_path, tiny, fixtures_dir, monkeypatch,
                                                                      capsys):
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "oom@val:2x2")
    code, out = run(tmp_path, tiny, fixtures_dir, "val", "--validation-batch-size", "1", "--max-train-batches", "2")
    assert code == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "a single validation sample does not fit in memory: batch 2" in err
    assert "largest validation batch that fitted in this run was 1" in err and "what would fit" in err
    assert ladder(out) == [("oom_retry", 2), ("oom_stop", 2)]


def test_bad_fault_spec_is_a_clear_error(tmp_path, tiny, fixtures_dir, monkeypatch, capsys):
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "oom@trian:2")
    code, _ = run(tmp_path, tiny, fixtures_dir, "bad")
    assert code == 2
    assert "FOXHUNT_FAULT_INJECT" in capsys.readouterr().err
