"""Out-of-memory errors are recovered from without losing progress (faults injected through FOXHUNT_FAULT_INJECT)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from foxhunt.cli import main


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run(tmp_path, tiny, fixtures_dir, name, *extra) -> tuple[int, Path]:
    out = tmp_path / name
    code = main(["train", *tiny, "--parquet-file", str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"),
                 "--epochs", "2", "--dropout", "0", "--batch-size", "32", "--validation-batch-size", "16",
                 "--run-dir", str(out), *extra])
    return code, out


def test_injected_ooms_change_nothing_but_the_micro_batch(tmp_path, tiny, fixtures_dir, monkeypatch):
    _, clean = run(tmp_path, tiny, fixtures_dir, "clean")
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "oom@train:3,oom@val:2,oom@train:9")
    code, faulty = run(tmp_path, tiny, fixtures_dir, "faulty")
    assert code == 0
    a, b = jsonl(clean / "metrics.jsonl"), jsonl(faulty / "metrics.jsonl")
    assert [r["epoch"] for r in a] == [r["epoch"] for r in b] == [1, 2]
    assert [r["train_samples"] for r in a] == [r["train_samples"] for r in b]
    assert [r["val_samples"] for r in a] == [r["val_samples"] for r in b]
    wa, wb = load_file(str(clean / "model.safetensors")), load_file(str(faulty / "model.safetensors"))
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-5, atol=1e-5, msg=k)
    for ra, rb in zip(a, b, strict=True):
        assert rb["val_loss"] == pytest.approx(ra["val_loss"], rel=1e-5)
    log = (faulty / "train.log").read_text()
    assert "micro-batches of 16" in log and "micro-batches of 8" in log  # halved twice, kept for the run
    assert "validation batch 2" in log
    phases = [m["phase"] for m in jsonl(faulty / "memory.jsonl")]
    assert phases.count("oom_recovered") == 3


def test_a_single_sample_that_does_not_fit_stops_with_advice(tmp_path, tiny, fixtures_dir, monkeypatch, capsys):
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "oom@train:2")
    code, out = run(tmp_path, tiny, fixtures_dir, "one", "--batch-size", "1")
    assert code == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    for advice in ("--encoder-length", "--hidden-size", "--optimizer-state cpu", "--activation-checkpointing"):
        assert advice in err
    assert not (out / "model.safetensors").exists()


def test_bad_fault_spec_is_a_clear_error(tmp_path, tiny, fixtures_dir, monkeypatch, capsys):
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "oom@trian:2")
    code, _ = run(tmp_path, tiny, fixtures_dir, "bad")
    assert code == 2
    assert "FOXHUNT_FAULT_INJECT" in capsys.readouterr().err
