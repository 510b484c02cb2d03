"""The non-finite guard (train/guard.py): a batch with a NaN/inf loss or gradient norm takes no optimizer step, is
counted in metrics.jsonl and named in the log; --max-bad-steps in a row stop the run with the last good checkpoint
as it was; non-finite weights are never written."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import foxhunt.train.loop as loop
from foxhunt.cli import main
from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data
from foxhunt.errors import NonFiniteError
from foxhunt.model.config import ModelConfig
from foxhunt.model.tft import TemporalFusionTransformer
from foxhunt.train import faults
from foxhunt.train.faults import ENV_VAR
from foxhunt.train.guard import check_finite
from foxhunt.train.optim import AdamW
from foxhunt.train.step import TrainStepper
from foxhunt.train.telemetry import MemoryTracker
from tests.epochs import trained

ES = "es_fut_ohlcv1h_databento.parquet"


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run(tmp_path, tiny, fixtures_dir, name, *extra) -> tuple[int, Path]:
    out = tmp_path / name
    code = main(["train", *tiny, "--parquet-file", str(fixtures_dir / ES), "--epochs", "2", "--batch-size", "32",
                 "--validation-batch-size", "64", "--run-dir", str(out), *extra])
    return code, out


def all_finite(path: Path) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in load_file(str(path)).values())


def test_a_nan_batch_is_skipped_counted_and_named(tmp_path, tiny, fixtures_dir, monkeypatch):
    _, clean = run(tmp_path, tiny, fixtures_dir, "clean")
    monkeypatch.setenv(ENV_VAR, "nan@train:3")
    code, out = run(tmp_path, tiny, fixtures_dir, "nan")
    assert code == 0
    records = trained(jsonl(out / "metrics.jsonl"))
    assert [r["bad_steps"] for r in records] == [1, 0]
    clean_records = trained(jsonl(clean / "metrics.jsonl"))
    assert records[0]["train_samples"] == clean_records[0]["train_samples"] - 32  # the skipped batch is not counted
    assert all(r["train_loss"] == r["train_loss"] and r["val_loss"] == r["val_loss"] for r in records)  # not NaN
    assert all_finite(out / "model.safetensors")
    log = (out / "train.log").read_text()
    assert "non-finite training step 3 (epoch 1): loss nan" in log
    assert "skipped it (no optimizer step); series ES; bars 2024-" in log and "1 in a row (stop at 5)" in log


def test_max_bad_steps_in_a_row_stop_and_keep_the_last_good_checkpoint(tmp_path, tiny, fixtures_dir, monkeypatch,
                                                                      capsys):
    saved: list[bytes] = []
    real_save = loop.save_checkpoint

    def recording_save(path, state):  # what each save wrote, byte for byte
        real_save(path, state)
        saved.append(Path(path).read_bytes())

    monkeypatch.setattr(loop, "save_checkpoint", recording_save)
    monkeypatch.setenv(ENV_VAR, "nan@train:14x3")  # steps 14, 15, 16: the 3rd to 5th of epoch 2 (11 a epoch)
    code, out = run(tmp_path, tiny, fixtures_dir, "stop", "--max-bad-steps", "3")
    assert code == 4
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("foxhunt: not finite: 3 training steps in a row had a non-finite loss or gradient norm")
    assert "step 16, epoch 2, series ES; bars" in err and "kept the last good checkpoint.pt" in err
    assert "--max-bad-steps" in err
    assert saved and (out / "checkpoint.pt").read_bytes() == saved[-1]  # untouched since the last good save
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert json.loads(ckpt["fit_state"])["epoch"] == 1
    assert all(bool(torch.isfinite(t).all()) for t in ckpt["model"].values())
    assert all_finite(out / "model.safetensors")
    records = jsonl(out / "metrics.jsonl")
    assert records[-1] == {"event": "stopped_non_finite", "epoch": 2, "bad_steps": 3, "bad_steps_in_a_row": 3}


def test_bad_steps_apart_do_not_stop_the_run(tmp_path, tiny, fixtures_dir, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "nan@train:2x2,nan@train:5x2")
    code, out = run(tmp_path, tiny, fixtures_dir, "apart", "--max-bad-steps", "3", "--epochs", "1")
    assert code == 0
    assert trained(jsonl(out / "metrics.jsonl"))[0]["bad_steps"] == 4


def test_non_finite_weights_are_never_written(tmp_path, tiny, fixtures_dir, monkeypatch, capsys):
    real = loop.state_to_cpu

    def poisoned(model):
        state = real(model)
        next(iter(state.values())).view(-1)[0] = float("nan")
        return state

    monkeypatch.setattr(loop, "state_to_cpu", poisoned)
    code, out = run(tmp_path, tiny, fixtures_dir, "poisoned", "--epochs", "1")
    assert code == 4
    assert "not writing model.safetensors" in capsys.readouterr().err
    assert not (out / "model.safetensors").exists() and not (out / "checkpoint.pt").exists()


def test_check_finite_names_the_tensor() -> None:
    check_finite({"a": torch.ones(3), "codes": torch.tensor([1, 2])}, "x")
    with pytest.raises(NonFiniteError, match="b holds NaN or inf: not writing checkpoint.pt"):
        check_finite({"a": torch.ones(3), "b": torch.tensor([1.0, float("inf")])}, "checkpoint.pt")


def test_max_bad_steps_must_be_positive(tmp_path, tiny, fixtures_dir, capsys):
    code, _ = run(tmp_path, tiny, fixtures_dir, "zero", "--max-bad-steps", "0")
    assert code == 2
    assert "--max-bad-steps must be at least 1" in capsys.readouterr().err


def test_a_skipped_step_changes_neither_weights_nor_optimizer_state(fixtures_dir):
    data = prepare_data(DataConfig(paths=(str(fixtures_dir / ES),), encoder_length=16, horizon=3))
    torch.manual_seed(0)
    model = TemporalFusionTransformer(data.schema.sizes, ModelConfig(hidden_size=8, attention_heads=2,
                                                                     encoder_length=16, horizon=3, dropout=0.0))
    opt = AdamW(list(model.parameters()), lr=1e-2, weight_decay=1e-4)
    stepper = TrainStepper(model, opt, torch.tensor([0.1, 0.5, 0.9]), 1.0, torch.device("cpu"),
                           MemoryTracker("cpu", None, logging.getLogger("test")))
    ids = data.splits["train"]
    with faults.armed("nan@train:2"):
        assert stepper.step(data.windows.batch(ids[:16]), 1, 1) is not None
        weights = {k: v.clone() for k, v in model.state_dict().items()}
        moments = [t.clone() for t in opt.exp_avg + opt.exp_avg_sq + opt.steps]
        assert stepper.step(data.windows.batch(ids[16:32]), 2, 1) is None
    loss, norm = stepper.last_bad
    assert loss != loss and norm != norm  # NaN: the loss and the gradients it made
    for k, v in model.state_dict().items():
        assert torch.equal(v, weights[k]), k
    for before, after in zip(moments, opt.exp_avg + opt.exp_avg_sq + opt.steps, strict=True):
        assert torch.equal(before, after)
    assert all(p.grad is None for p in model.parameters())
    assert stepper.step(data.windows.batch(ids[32:48]), 3, 1) is not None  # the next batch trains as usual
