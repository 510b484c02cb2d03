"""Checkpoints you can kill: a run stopped at any step and resumed repeats the uninterrupted run bit for bit on CPU.

Compared exactly: every weight of model.safetensors and of the last checkpoint, the optimizer state, and every field
of metrics.jsonl except the two wall-clock ones (`seconds`, `samples_per_s`), which differ between any two runs.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import torch
from safetensors.torch import load_file

from foxhunt.cli import main
from foxhunt.train import loop, session
from foxhunt.train.resume import load_checkpoint
from tests.epochs import trained

REPO = Path(__file__).resolve().parents[2]
WALL_CLOCK = ("seconds", "samples_per_s")
EPOCHS, BATCH = 3, 32  # the 1h fixture has 322 training windows: 11 steps an epoch, 33 in all
KILL_SEED_VAR = "FOXHUNT_TEST_KILL_SEED"  # the seed of the SIGKILL test's step


def metrics(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in rows]


def assert_same_run(a: Path, b: Path) -> None:
    assert metrics(a) == metrics(b)
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    ca, cb = load_checkpoint(a / "checkpoint.pt"), load_checkpoint(b / "checkpoint.pt")
    assert all(torch.equal(ca["model"][k], cb["model"][k]) for k in ca["model"])
    for key in ("exp_avg", "exp_avg_sq", "steps"):
        assert all(torch.equal(x, y) for x, y in zip(ca["optimizer"][key], cb["optimizer"][key], strict=True))
    assert torch.equal(ca["rng_cpu"], cb["rng_cpu"])
    assert json.loads(ca["fit_state"])["global_step"] == json.loads(cb["fit_state"])["global_step"]


@pytest.fixture(scope="module")
def args(fixtures_dir) -> list[str]:
    tiny = ["--hidden-size", "8", "--attention-heads", "2", "--encoder-length", "16", "--horizon", "3",
            "--no-progress", "--threads", "1"]  # the `tiny` fixture's flags, for a module-wide run
    return [*tiny, "--parquet-file", str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"), "--epochs", str(EPOCHS),
            "--batch-size", str(BATCH), "--patience", "9", "--seed", "3", "--checkpoint-every", "4",
            "--test-fraction", "0"]  # two-way split: 11 training batches an epoch, which the step counts below assume


@pytest.fixture(scope="module")
def full(tmp_path_factory, args) -> Path:
    """The uninterrupted run every interrupted one must repeat exactly (shared: nothing writes to it)."""
    run = tmp_path_factory.mktemp("full") / "run"
    assert main(["train", *args, "--run-dir", str(run)]) == 0
    return run


def resume(run: Path) -> int:
    return main(["train", "--run-dir", str(run), "--resume", "--no-progress", "--threads", "1"])


def kill_step(seed: int) -> int:
    """The step the SIGKILL test kills at, drawn from `seed`: after the first checkpoint (step 4), up to the last."""
    return random.Random(seed).randrange(5, EPOCHS * 11 + 1)


def test_sigkill_at_a_random_step_then_resume_is_bit_identical(tmp_path, args, full):
    """A real SIGKILL (no handler runs) at a step of a subprocess drawn from KILL_SEED_VAR (default 0: step 32), so
    that a failure reproduces: the seed and the step are printed and in every failure message. Another seed
    (`FOXHUNT_TEST_KILL_SEED=7 pytest ...`) tries another step."""
    seed = int(os.environ.get(KILL_SEED_VAR, "0"))
    step = kill_step(seed)
    where = f"{KILL_SEED_VAR}={seed}: SIGKILL at step {step}"
    print(where)  # in the captured stdout of a failure
    part = tmp_path / "part"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "FOXHUNT_FAULT_INJECT": f"sigkill@train:{step}"}
    proc = subprocess.run([sys.executable, "-m", "foxhunt", "train", *args, "--run-dir", str(part)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, (where, proc.stderr[-2000:])
    done = json.loads(load_checkpoint(part / "checkpoint.pt")["fit_state"])["global_step"]
    assert done == max(s for s in range(0, step) if s % 4 == 0 or s % 11 == 0), where  # the last checkpoint kept
    assert resume(part) == 0, where
    assert_same_run(full, part)


def test_the_kill_step_is_the_seeds_and_seeds_reach_every_step():
    assert kill_step(0) == kill_step(0) == 32
    assert {kill_step(seed) for seed in range(400)} == set(range(5, EPOCHS * 11 + 1))


def test_sigterm_writes_a_checkpoint_at_that_step_and_resume_is_bit_identical(tmp_path, args, full, monkeypatch,
                                                                              capsys):
    """SIGTERM mid-epoch (sent by the process to itself while step 15 runs): checkpoint at step 15, status 143."""
    real = loop.warmup_cosine

    def lr_and_signal(step: int, *rest):  # called just before each optimizer step, with the steps done so far
        if step == 14:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(step, *rest)

    part = tmp_path / "part"
    monkeypatch.setattr(loop, "warmup_cosine", lr_and_signal)
    assert main(["train", *args, "--run-dir", str(part), "--checkpoint-every", "0"]) == 143
    monkeypatch.setattr(loop, "warmup_cosine", real)
    err = capsys.readouterr().err.strip().splitlines()
    assert "SIGTERM" in err[-1] and f"foxhunt train --run-dir {part} --resume" in err[-1]
    state = json.loads(load_checkpoint(part / "checkpoint.pt")["fit_state"])
    assert (state["global_step"], state["epoch"], state["epoch_batches"]) == (15, 1, 4)
    assert [r["epoch"] for r in metrics(part)] == [0, 1]  # epoch 0: the untrained model (its anchor) validated
    assert resume(part) == 0
    assert_same_run(full, part)


def test_a_second_signal_stops_at_once_and_keeps_the_last_checkpoint(tmp_path, args, monkeypatch, capsys):
    real = loop.warmup_cosine

    def two_signals(step: int, *rest):
        if step == 6:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        return real(step, *rest)

    run = tmp_path / "run"
    monkeypatch.setattr(loop, "warmup_cosine", two_signals)
    assert main(["train", *args, "--run-dir", str(run)]) == 130
    assert "--resume" in capsys.readouterr().err.strip().splitlines()[-1]
    assert json.loads(load_checkpoint(run / "checkpoint.pt")["fit_state"])["global_step"] == 4  # the one before
    assert not list(run.glob(".*.tmp"))


def test_resume_after_batch_size_auto_reuses_the_saved_sizes(tmp_path, tiny, fixtures_dir, monkeypatch, caplog):
    run = tmp_path / "run"
    data = ["--parquet-file", str(fixtures_dir / "generic_ohlcv_daily.parquet"), "--epochs", "2"]
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "kill@epoch:1")
    assert main(["train", *tiny, *data, "--run-dir", str(run), "--batch-size", "auto", "--memory-budget",
                 "64GiB"]) == 130  # on CPU the budget is the process's: pytest's own hundreds of MiB count
    monkeypatch.delenv("FOXHUNT_FAULT_INJECT")
    saved = json.loads((run / "config.json").read_text())["resolved"]

    def no_new_plan(*a, **k):
        raise AssertionError("a resumed run planned its batch sizes again")

    monkeypatch.setattr(session, "resolve_batch_sizes", no_new_plan)
    assert resume(run) == 0
    assert json.loads((run / "config.json").read_text())["resolved"] == saved
    assert [r["epoch"] for r in metrics(run)] == [0, 1, 2]
    assert len({r["train_samples"] for r in trained(metrics(run))}) == 1


def test_checkpoint_every_n_steps_writes_inside_the_epoch(tmp_path, args, monkeypatch):
    """`--checkpoint-every 4`: the run writes the checkpoint at steps 0 (epoch 0), 4, 8, 11 (epoch end), 12, ...; checked through
    the writer itself, so nothing about the file's time stamps is assumed."""
    steps: list[int] = []
    real = loop.save_checkpoint

    def spy(path, state):
        steps.append(json.loads(state["fit_state"])["global_step"])
        real(path, state)

    monkeypatch.setattr(loop, "save_checkpoint", spy)
    assert main(["train", *args, "--epochs", "1", "--run-dir", str(tmp_path / "run")]) == 0
    assert steps == [0, 4, 8, 11]  # 0: after epoch 0, the anchor's validation


def test_checkpoint_clock_is_time_based_without_a_step_count(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(loop.time, "monotonic", lambda: now[0])
    clock = loop.CheckpointClock(0, seconds=600)
    assert not clock.due(1)
    now[0] += 599
    assert not clock.due(2)
    now[0] += 2
    assert clock.due(3)
    clock.reset()
    assert not clock.due(4)
    assert loop.CheckpointClock(5).due(10) and not loop.CheckpointClock(5).due(11)


def test_deterministic_kernels_change_nothing_on_cpu_and_are_switched_off_after(tmp_path, tiny, fixtures_dir):
    """CPU kernels are deterministic already: --deterministic gives the same bits; the global switch is restored."""
    data = [*tiny, "--parquet-file", str(fixtures_dir / "generic_ohlcv_daily.parquet"), "--epochs", "1"]
    assert main(["train", *data, "--run-dir", str(tmp_path / "plain")]) == 0
    assert main(["train", *data, "--run-dir", str(tmp_path / "det"), "--deterministic"]) == 0
    assert metrics(tmp_path / "plain") == metrics(tmp_path / "det")
    wa, wb = load_file(str(tmp_path / "plain" / "model.safetensors")), load_file(str(tmp_path / "det" /
                                                                                     "model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert json.loads((tmp_path / "det" / "config.json").read_text())["train"]["deterministic"] is True
    assert not torch.are_deterministic_algorithms_enabled()
    assert "--deterministic: deterministic kernels" in (tmp_path / "det" / "train.log").read_text()


def test_restoring_unchanged_switches_does_not_call_torch(monkeypatch):
    """torch.use_deterministic_algorithms imports torch._inductor (about 2 s a process): a run without
    --deterministic must not call it when it puts the switches back."""
    from foxhunt.train.session import determinism_switches, set_determinism_switches

    calls = []
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda *a, **k: calls.append((a, k)))
    set_determinism_switches(*determinism_switches())
    assert calls == []
    set_determinism_switches(True, True, False, False)
    assert calls == [((True,), {"warn_only": True})]


def test_the_same_weights_are_written_as_the_same_bytes(tmp_path):
    """model.safetensors of two runs with the same weights is the same file, so that its SHA-256 (which
    calibration.json and the ONNX sidecar record) is the same: safetensors writes its metadata from a hash map in
    an order that changes from call to call, which made 2 keys two files at random."""
    from foxhunt.model.saved import save_weights, weights_digest

    torch.manual_seed(0)
    state = {f"block{i}.{name}": torch.randn(4, 3) for i in range(8) for name in ("weight", "bias")}
    digests = set()
    for k in range(16):
        save_weights(tmp_path / f"{k}.safetensors", state)
        digests.add(weights_digest(tmp_path / f"{k}.safetensors"))
    assert len(digests) == 1
    loaded = load_file(str(tmp_path / "0.safetensors"))
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)


def test_a_failed_checkpoint_write_keeps_the_previous_one_whole(tmp_path, monkeypatch):
    from foxhunt.errors import WriteError
    from foxhunt.train.resume import save_checkpoint

    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"model": {}, "fit_state": json.dumps({"global_step": 4})})

    def dies_half_way(obj, f):
        Path(f).write_bytes(b"half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(WriteError, match="No space left on device"):
        save_checkpoint(path, {"model": {}, "fit_state": json.dumps({"global_step": 8})})
    monkeypatch.undo()
    assert json.loads(load_checkpoint(path)["fit_state"])["global_step"] == 4
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


def test_runs_saved_by_the_previous_format_still_resume(tmp_path, tiny, fixtures_dir, monkeypatch):
    """A run from before mid-epoch checkpoints: config.json without the new options, a checkpoint without the format
    key or the in-epoch fields. It resumes at its epoch boundary."""
    run = tmp_path / "run"
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "kill@epoch:1")
    assert main(["train", *tiny, "--parquet-file", str(fixtures_dir / "generic_ohlcv_daily.parquet"), "--epochs",
                 "2", "--run-dir", str(run)]) == 130
    monkeypatch.delenv("FOXHUNT_FAULT_INJECT")
    config = json.loads((run / "config.json").read_text())
    for key in ("checkpoint_every", "deterministic"):
        del config["train"][key]
    (run / "config.json").write_text(json.dumps(config))
    state = load_checkpoint(run / "checkpoint.pt")
    new_fields = ("epoch_batches", "epoch_loss_sum", "epoch_seen", "epoch_seconds", "val_batch_size")
    fit_state = {k: v for k, v in json.loads(state["fit_state"]).items() if k not in new_fields}
    old = {k: v for k, v in state.items() if k not in ("format", "foxhunt_version")}
    torch.save({**old, "fit_state": json.dumps(fit_state)}, run / "checkpoint.pt")
    assert resume(run) == 0
    assert [r["epoch"] for r in metrics(run)] == [0, 1, 2]


def test_skipped_non_finite_steps_survive_a_mid_epoch_kill(tmp_path, args):
    """A NaN step before a SIGKILL mid-epoch is still counted in that epoch's `bad_steps` after --resume, as in the
    uninterrupted run with the same fault."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    for run, spec, status in ((whole, "nan@train:2", 0), (part, "nan@train:2,sigkill@train:7", -signal.SIGKILL)):
        env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "FOXHUNT_FAULT_INJECT": spec}
        proc = subprocess.run([sys.executable, "-m", "foxhunt", "train", *args, "--run-dir", str(run)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == status, (spec, proc.returncode, proc.stderr[-2000:])  # the kill must fire
    state = json.loads(load_checkpoint(part / "checkpoint.pt")["fit_state"])
    assert (state["global_step"], state["epoch"], state["epoch_batches"]) == (4, 0, 4)  # the kill at step 7 kept 4
    assert resume(part) == 0
    assert [r["bad_steps"] for r in trained(metrics(whole))] == [1, 0, 0]
    assert_same_run(whole, part)


def test_a_new_batch_size_is_refused_when_the_run_stopped_mid_epoch(tmp_path, args):
    """The checkpoint counts batches of the saved size: another --batch-size would repeat some windows and skip
    others, so it stops with one line naming the size to use (exit 2)."""
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "FOXHUNT_FAULT_INJECT": "sigkill@train:6"}
    proc = subprocess.run([sys.executable, "-m", "foxhunt", "train", *args, "--run-dir", str(run)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    again = [sys.executable, "-m", "foxhunt", "train", "--run-dir", str(run), "--resume", "--no-progress",
             "--threads", "1"]
    env.pop("FOXHUNT_FAULT_INJECT")
    proc = subprocess.run([*again, "--batch-size", "16"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and f"--batch-size {BATCH}" in proc.stderr and "Traceback" not in proc.stderr


def test_resume_refuses_changed_data_and_resumes_the_same_bars_rewritten(tmp_path, tiny, daily_path, monkeypatch,
                                                                         capsys):
    """--resume after the input file changed (its last bars cut: windows move between the splits) stops with one
    line naming what changed and the ways out, before any file of the run is rewritten; the same bars written again
    (a new modification time) resume, and the run repeats the uninterrupted one bit for bit."""
    bars = tmp_path / "bars.parquet"
    shutil.copyfile(daily_path, bars)
    flags = [*tiny, "--parquet-file", str(bars), "--epochs", "2", "--patience", "9"]
    assert main(["train", *flags, "--run-dir", str(tmp_path / "whole")]) == 0
    run = tmp_path / "run"
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "kill@epoch:1")
    assert main(["train", *flags, "--run-dir", str(run)]) == 130
    monkeypatch.delenv("FOXHUNT_FAULT_INJECT")
    written = {p.name: p.read_bytes() for p in run.iterdir() if p.suffix == ".json"}
    pl.read_parquet(daily_path).head(-200).write_parquet(bars)
    capsys.readouterr()
    assert resume(run) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"foxhunt: error: {run}: the input data changed since this run started")
    assert f"{bars} " in err and " rows" in err and "windows train/val/test" in err
    assert "--run-dir" in err and f"--init-from {run}" in err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.suffix == ".json"} == written
    shutil.copyfile(daily_path, bars)  # the same bytes again, a new modification time
    assert resume(run) == 0
    assert_same_run(tmp_path / "whole", run)


def test_what_changed_names_values_alone_when_counts_agree():
    from foxhunt.train.resume import _what_changed

    fp = {"files": [{"path": "a.parquet", "size_bytes": 10, "rows": 5}], "windows": {"train": 3, "val": 1, "test": 0},
          "digest": "x"}
    assert _what_changed(fp, {**fp, "digest": "y"}) == "the same files, dates and window counts, other values"
    moved = {**fp, "files": [{"path": "a.parquet", "size_bytes": 1_200, "rows": 4}], "windows": {"train": 2, "val": 1}}
    assert _what_changed(fp, moved) == "a.parquet 10 now 1,200 bytes, 5 now 4 rows; windows train/val/test 3/1/0 now 2/1/0"


def test_a_stopped_run_says_so_where_its_model_is_loaded_and_a_finished_one_does_not(tmp_path, tiny, daily_path,
                                                                                     monkeypatch, caplog, capsys):
    """Stopped after epoch 1 of 2, the run's model.json records it; predict (and every reader that loads the model
    to forecast: evaluate, export, Forecaster.load) warns in one line naming --resume. Resumed to the end, it is
    finished and nothing is said."""
    from foxhunt.api.forecaster import Forecaster

    run = tmp_path / "run"
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "kill@epoch:1")
    assert main(["train", *tiny, "--parquet-file", str(daily_path), "--epochs", "2", "--run-dir", str(run)]) == 130
    monkeypatch.delenv("FOXHUNT_FAULT_INJECT")
    assert json.loads((run / "model.json").read_text())["training"] == {"finished": False, "epoch": 1, "epochs": 2}
    note = (f"{run}: its training stopped at epoch 1 of 2, before it finished: this is its best epoch so far, without "
            f"calibration; finish it with `foxhunt train --run-dir {run} --resume`")
    capsys.readouterr()
    assert main(["predict", "--model", str(run), "--parquet-file", str(daily_path), "--out",
                 str(tmp_path / "f.parquet"), "--quiet"]) == 0
    assert note in capsys.readouterr().err.splitlines()[0]
    logger = logging.getLogger("foxhunt")  # the CLI's console handler keeps foxhunt's records from the root logger
    logger.addHandler(caplog.handler)
    try:
        caplog.clear()
        Forecaster.load(run)
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [note]
        assert resume(run) == 0
        assert json.loads((run / "model.json").read_text())["training"] == {"finished": True, "epoch": 2, "epochs": 2}
        caplog.clear()
        Forecaster.load(run)
        assert not [r for r in caplog.records if "stopped" in r.getMessage()]
    finally:
        logger.removeHandler(caplog.handler)


def test_a_stores_digest_is_read_from_its_manifest_and_data_in_memory_is_hashed_on_rank_0_alone(tmp_path, daily_path,
                                                                                                monkeypatch):
    """Hashing reads every page of the arrays (a mapped store's into the resident set): a --features run takes the
    digest its manifest holds, or none from an older store (the resume then goes unchecked, as a run from before
    the digest does); data prepared in memory is hashed by rank 0, which writes config.json and refuses a changed
    resume, and by no other torchrun rank."""
    from foxhunt.data.config import DataConfig
    from foxhunt.data.prepare import prepare_data
    from foxhunt.data.store import write_store
    from foxhunt.train.distributed import Dist
    from foxhunt.train.resume import prepared_digest, refuse_changed_data

    cfg = DataConfig(paths=(str(daily_path),), encoder_length=16, horizon=3)
    data = prepare_data(cfg)
    digest = prepared_digest(data)
    store = tmp_path / "store"
    write_store(data, cfg, store)
    main_rank, other_rank = Dist(rank=0, world_size=2), Dist(rank=1, world_size=2)
    hashed = []
    monkeypatch.setattr(session, "prepared_digest", lambda d: hashed.append(d) or digest)
    stored = DataConfig.from_dict({**cfg.to_dict(), "features": str(store)})
    assert session._digest(stored, data, main_rank) == digest and not hashed
    assert session._digest(cfg, data, other_rank) is None and not hashed
    assert session._digest(cfg, data, main_rank) == digest and len(hashed) == 1
    manifest = json.loads((store / "manifest.json").read_text())
    del manifest["digest"]  # a store written before its manifest kept the digest
    (store / "manifest.json").write_text(json.dumps(manifest))
    assert session._digest(stored, data, main_rank) is None
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"data_fingerprint": {"digest": "other"}}))
    refuse_changed_data(config, {"windows": {}}, "the feature store")  # no digest now: unchecked
