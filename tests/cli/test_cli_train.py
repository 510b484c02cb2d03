"""`foxhunt train` end to end, in-process, on the users' real formats (each run takes seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from foxhunt.cli import main
from foxhunt.model.saved import load_model
from foxhunt.model.tft import variable_names
from foxhunt.train.precision import cpu_runs_bf16_lstm

METRIC_KEYS = {"epoch", "train_loss", "val_loss", "val_qrisk", "lr", "samples_per_s", "seconds"}
MEMORY_KEYS = {"phase", "epoch", "batch", "device_allocated_mb", "device_reserved_mb", "device_peak_mb",
               "device_total_mb", "host_rss_mb", "time"}


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def train(tmp_path: Path, tiny: list[str], *args: str, name: str = "run") -> tuple[int, Path]:
    run = tmp_path / name
    code = main(["train", *tiny, "--run-dir", str(run), *args])
    return code, run


@pytest.mark.parametrize(
    "fixture, extra",
    [
        ("es_fut_ohlcv1h_databento.parquet", []),
        ("es_fut_ohlcv1m_databento.parquet", ["--max-train-batches", "8"]),
        ("generic_ohlcv_daily.parquet", []),
        ("generic_ohlcv_daily.csv", []),
    ],
)
def test_train_writes_a_complete_run_directory(tmp_path, tiny, fixtures_dir, fixture, extra):
    code, run = train(tmp_path, tiny, "--parquet-file", str(fixtures_dir / fixture), "--epochs", "2",
                      "--batch-size", "32", *extra)
    assert code == 0
    for name in ("config.json", "data_summary.json", "rolls.json", "metrics.jsonl", "memory.jsonl",
                 "model.safetensors", "model.json", "checkpoint.pt", "train.log"):
        assert (run / name).exists(), name
    assert not list(run.glob(".*.tmp")), "temporary files left behind"
    records = jsonl(run / "metrics.jsonl")
    assert [r["epoch"] for r in records] == [0, 1, 2]  # 0: the untrained model (its anchor), validated
    for r in records:
        assert METRIC_KEYS <= set(r)
        assert set(r["val_qrisk"]) == {"0.1", "0.5", "0.9"}
        assert r["val_loss"] > 0
    for r in records[1:]:
        assert r["train_loss"] > 0 and r["samples_per_s"] > 0
    assert records[0]["train_loss"] is None and records[0]["train_samples"] == 0
    config = json.loads((run / "config.json").read_text())
    assert config["n_params"] > 0
    assert config["data"]["encoder_length"] == 16 and config["model"]["hidden_size"] == 8
    assert config["data_fingerprint"]["files"][0]["rows"] > 0
    memory = jsonl(run / "memory.jsonl")
    assert {"run_start", "model_built", "epoch_start", "train_end", "val_start", "val_end", "checkpoint"} <= {
        m["phase"] for m in memory}
    assert all(set(m) >= MEMORY_KEYS for m in memory)
    assert all(m["device_allocated_mb"] is None for m in memory)  # CPU run
    lm = load_model(run)  # everything needed to forecast is in the run directory
    assert lm.model_cfg.hidden_size == 8
    # the saved names are in the order of the model's selection-weight columns (known inputs first in the encoder)
    static, encoder, decoder = variable_names(lm.schema)
    assert lm.meta["variables"] == {"static": static, "encoder": encoder, "decoder": decoder}
    assert encoder[: len(decoder)] == decoder
    assert "epoch 2/2" in (run / "train.log").read_text()


def test_continuous_roll_is_written_for_databento_minutes(tmp_path, tiny, fixtures_dir):
    code, run = train(tmp_path, tiny, "--parquet-file", str(fixtures_dir / "es_fut_ohlcv1m_databento.parquet"),
                      "--epochs", "1", "--max-train-batches", "2", "--roll-confirm", "1")
    assert code == 0
    rolls = json.loads((run / "rolls.json").read_text())
    assert [(r["root"], r["from"], r["to"], r["reason"]) for r in rolls] == [("ES", "ESH4", "ESM4", "volume")]
    assert rolls[0]["trade_date"] == "2024-03-08"  # one session of ESM4's lead (03-07) is enough with --roll-confirm 1
    assert json.loads((run / "config.json").read_text())["data"]["roll_confirm"] == 1


def test_seeded_cpu_runs_repeat_bit_for_bit(tmp_path, tiny, fixtures_dir):
    args = ["--parquet-file", str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"), "--epochs", "2", "--seed", "7"]
    _, a = train(tmp_path, tiny, *args, name="a")
    _, b = train(tmp_path, tiny, *args, name="b")
    strip = lambda rs: [{k: v for k, v in r.items() if k not in ("seconds", "samples_per_s")} for r in rs]  # noqa: E731
    assert strip(jsonl(a / "metrics.jsonl")) == strip(jsonl(b / "metrics.jsonl"))
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_resume_continues_exactly_where_a_killed_run_stopped(tmp_path, tiny, fixtures_dir, monkeypatch):
    args = ["--parquet-file", str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"), "--patience", "9",
            "--epochs", "3"]
    _, full = train(tmp_path, tiny, *args, name="full")
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "kill@epoch:1")  # as if killed right after epoch 1's checkpoint
    code, part = train(tmp_path, tiny, *args, name="part")
    assert code == 130 and [r["epoch"] for r in jsonl(part / "metrics.jsonl")] == [0, 1]
    monkeypatch.delenv("FOXHUNT_FAULT_INJECT")
    # the run's saved options are used: only where it is and that it resumes need saying
    assert main(["train", "--run-dir", str(part), "--resume", "--no-progress", "--threads", "1"]) == 0
    a, b = jsonl(full / "metrics.jsonl"), jsonl(part / "metrics.jsonl")
    assert [r["epoch"] for r in b] == [0, 1, 2, 3]
    for ra, rb in zip(a, b, strict=True):
        assert rb["train_loss"] == (None if ra["train_loss"] is None else pytest.approx(ra["train_loss"], rel=1e-6))
        assert rb["val_loss"] == pytest.approx(ra["val_loss"], rel=1e-6)


def test_config_file_supplies_options_and_flags_override(tmp_path, tiny, fixtures_dir):
    cfg = tmp_path / "run.toml"
    cfg.write_text('[train]\nepochs = 2\nbatch-size = 16\n[model]\nquantiles = "0.2,0.5,0.8"\n')
    code, run = train(tmp_path, tiny, "--parquet-file", str(fixtures_dir / "generic_ohlcv_daily.parquet"),
                      "--config", str(cfg), "--epochs", "1")
    assert code == 0
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["epochs"] == 1  # the flag wins
    assert config["train"]["batch_size"] == 16  # from the file
    assert config["model"]["quantiles"] == [0.2, 0.5, 0.8]


def test_config_file_with_an_unknown_key_is_a_clear_error(tmp_path, tiny, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text("epochz = 3\n")
    code, _ = train(tmp_path, tiny, "--config", str(cfg))
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "epochz" in err[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_use_gpu_without_a_gpu_is_a_one_line_error(tmp_path, tiny, fixtures_dir, capsys):
    code, run = train(tmp_path, tiny, "--parquet-file", str(fixtures_dir / "generic_ohlcv_daily.parquet"),
                      "--use-gpu")
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "GPU" in err[0] and "Traceback" not in err[0]
    assert not (run / "model.safetensors").exists()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--parquet-file", "does/not/exist.parquet"], "does/not/exist.parquet"),
        (["--epochs", "0"], "--epochs"),
        (["--batch-size", "auto"], "--memory-budget"),
        (["--quantiles", "0.9,0.1"], "--quantiles"),
        (["--target", "price"], "--target"),
        (["--window-run", "0"], "--window-run"),
        (["--precision", "fp8"], "--precision"),
        (["--precision", "16-mixed"], "16-mixed needs a CUDA device"),  # on the CPU that runs the tests
        (["--quantile-head", "sorted"], "--quantile-head must be one of independent | tied"),
    ],
)
def test_bad_input_stops_with_one_line_and_status_2(tmp_path, tiny, fixtures_dir, capsys, args, needle):
    code, run = train(tmp_path, tiny, *args)
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("foxhunt: error:")]
    assert len(errors) == 1 and needle in errors[0] and err.strip().endswith(errors[0])
    assert not (run / "model.safetensors").exists()


def test_a_finished_run_is_not_overwritten(tmp_path, tiny, fixtures_dir, capsys):
    args = ["--parquet-file", str(fixtures_dir / "generic_ohlcv_daily.parquet"), "--epochs", "1"]
    assert train(tmp_path, tiny, *args)[0] == 0
    assert train(tmp_path, tiny, *args)[0] == 2
    assert "--resume" in capsys.readouterr().err


def test_python_dash_m_and_help_tell_the_same_story(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("train", "inspect", "predict", "evaluate", "plan-memory", "memory-report", "sample"):
        assert command in out
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--parquet-file", "--batch-size", "--validation-batch-size", "--epochs", "--use-gpu"):
        assert flag in out


def test_resume_refuses_to_change_the_model_and_can_extend_training(tmp_path, tiny, fixtures_dir, capsys):
    args = ["--parquet-file", str(fixtures_dir / "generic_ohlcv_daily.parquet"), "--epochs", "1"]
    _, run = train(tmp_path, tiny, *args)
    assert main(["train", "--run-dir", str(run), "--resume", "--hidden-size", "32"]) == 2
    assert "--hidden-size cannot change when resuming" in capsys.readouterr().err
    assert main(["train", "--run-dir", str(run), "--resume", "--epochs", "2", "--no-progress"]) == 0
    assert [r["epoch"] for r in jsonl(run / "metrics.jsonl")] == [0, 1, 2]


def test_bf16_and_single_window_runs_train_end_to_end(tmp_path, tiny, fixtures_dir, capsys):
    """--precision bf16 on CPU and --window-run 1 (plain shuffling) are recorded and train to the end. On a CPU
    without a bfloat16 LSTM kernel, bf16 stops in one line (exit 2) and the run is made in fp32."""
    data = ["--parquet-file", str(fixtures_dir / "generic_ohlcv_daily.parquet"), "--epochs", "1"]
    precision = "bf16" if cpu_runs_bf16_lstm() else "32"
    if precision == "32":
        code, refused = train(tmp_path, tiny, *data, "--precision", "bf16", name="refused")
        assert code == 2 and "no bfloat16 LSTM" in capsys.readouterr().err
        assert not (refused / "model.safetensors").exists()
    code, run = train(tmp_path, tiny, *data, "--precision", precision, "--window-run", "1")
    assert code == 0
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["resolved"]["precision"] == precision and cfg["train"]["window_run"] == 1
    assert (run / "model.safetensors").exists()


def test_tied_quantile_head_end_to_end(tmp_path, tiny, daily_path, capsys):
    """`train --quantile-head tied` with five quantiles saves the head in model.json; `evaluate` finds no crossed
    (origin, horizon) pair in the model's own quantiles after one epoch (the independent head, trained so, crossed
    in all 366)."""
    code, run = train(tmp_path, tiny, "--parquet-file", str(daily_path), "--epochs", "1", "--quantile-head", "tied",
                      "--quantiles", "0.05,0.25,0.5,0.75,0.95")
    assert code == 0
    assert json.loads((run / "model.json").read_text())["model"]["quantile_head"] == "tied"
    out = tmp_path / "eval"
    assert main(["evaluate", "--model", str(run), "--parquet-file", str(daily_path), "--out-dir", str(out)]) == 0
    crossings = json.loads((out / "metrics.json").read_text())["quantile_crossings"]
    assert crossings["pairs"] > 0 and crossings["crossed_pairs"] == 0
    assert "crossed" not in capsys.readouterr().err
