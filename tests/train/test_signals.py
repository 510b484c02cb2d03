"""SIGINT / SIGTERM sent to a real training process: a checkpoint at that step, status 130 / 143, one line naming
`--resume`; a signal before training started stops at once and says there is nothing to resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foxhunt.cli import main
from foxhunt.train import session
from foxhunt.train.resume import load_checkpoint

REPO = Path(__file__).resolve().parents[2]


def _stepped(checkpoint: Path) -> bool:
    """Whether `checkpoint` exists and holds at least one optimizer step (it is replaced atomically)."""
    return checkpoint.exists() and json.loads(load_checkpoint(checkpoint)["fit_state"])["global_step"] >= 1


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_writes_a_checkpoint_and_names_resume(tmp_path, tiny, fixtures_dir, sig, status):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "foxhunt", "train", *tiny, "--parquet-file",
           str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"), "--batch-size", "32", "--epochs", "50",
           "--checkpoint-every", "1", "--run-dir", str(run)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        # training has started: the first step's checkpoint is there (the anchored default writes one at epoch 0,
        # the untrained anchor's evaluation, before any step: a signal then would stop before training)
        while not _stepped(run / "checkpoint.pt"):
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be signalled"
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == status, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"foxhunt: interrupted by {signal.Signals(sig).name}"), last
    assert f"foxhunt train --run-dir {run} --resume" in last and "Traceback" not in err
    state = json.loads(load_checkpoint(run / "checkpoint.pt")["fit_state"])
    assert state["global_step"] >= 1 and state["epoch"] < 50
    assert not list(run.glob(".*.tmp"))


def test_a_signal_before_training_stops_at_once(tmp_path, tiny, monkeypatch, capsys):
    def signalled(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the signal should have stopped the run")

    monkeypatch.setattr(session, "prepare_data", signalled)
    assert main(["train", *tiny, "--run-dir", str(tmp_path / "run")]) == 143
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "SIGTERM" in last and "nothing to resume" in last
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handlers are gone after the run
