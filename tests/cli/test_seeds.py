"""`foxhunt train --seeds N` on the daily fixture with the tiny model (2 seeds of 1 epoch, trained once for the
module): the best seed by validation loss becomes the run, seeds.json holds every seed, the console shows one line
per seed, the spread and the final claim against the strongest baseline; evaluate then opens with its verdict and the
seed spread. Also: --seeds with --resume, and --seeds 0, are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from foxhunt.cli import main
from foxhunt.train import seeds
from tests.train.test_resume import metrics  # metrics.jsonl bar the wall clock

SEED_FIELDS = {"seed", "best_epoch", "val_loss", "val_qrisk", "seconds", "peak_host_mb", "claim"}


def assert_same_training(a: Path, b: Path, what: str) -> None:
    """Two run directories hold the same weights (bit for bit), metrics (bar the wall clock) and calibration."""
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), what
    assert metrics(a) == metrics(b), what
    assert json.loads((a / "calibration.json").read_text()) == json.loads((b / "calibration.json").read_text()), what


@pytest.fixture(scope="module")
def seeded(tmp_path_factory, tiny_flags, daily_path):
    """(exit status, console lines, run directory) of one 2-seed run, captured in-process. Each seed's run
    directory, as it was before the kept one became the run (RUN/seeds/ is removed then), is copied to
    RUN/../seeds-before-promote."""
    import io
    import sys

    run = tmp_path_factory.mktemp("seeds") / "run"
    err, before = io.StringIO(), sys.stderr
    real = seeds.promote

    def copy_then_promote(run_dir, kept, record):
        shutil.copytree(run_dir.root / "seeds", run.parent / "seeds-before-promote")
        real(run_dir, kept, record)

    sys.stderr = err  # the console handler writes to whatever sys.stderr is (capsys is function-scoped)
    try:
        with pytest.MonkeyPatch.context() as patched:
            patched.setattr(seeds, "promote", copy_then_promote)
            code = main(["train", *tiny_flags, "--parquet-file", str(daily_path), "--epochs", "1", "--seed", "5",
                         "--seeds", "2", "--run-dir", str(run)])
    finally:
        sys.stderr = before
    return code, err.getvalue().splitlines(), run


def test_the_best_seed_by_validation_loss_becomes_the_run(seeded):
    code, _, run = seeded
    assert code == 0
    record = json.loads((run / "seeds.json").read_text())
    assert [s["seed"] for s in record["seeds"]] == [5, 6] and record["n"] == 2 and record["first_seed"] == 5
    assert all(set(s) == SEED_FIELDS for s in record["seeds"])
    kept = min(record["seeds"], key=lambda s: s["val_loss"])
    assert record["kept_seed"] == kept["seed"] and record["selected_by"] == "val_loss"
    losses = sorted(s["val_loss"] for s in record["seeds"])
    assert record["spread"]["val_loss"] == {"min": losses[0], "median": (losses[0] + losses[1]) / 2,
                                            "max": losses[1]}
    # the run directory is the kept seed's run: its metrics, its configuration, a loadable model
    best = min(metrics(run), key=lambda r: r["val_loss"])
    assert best["val_loss"] == kept["val_loss"] and best["val_qrisk"] == kept["val_qrisk"]
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["seed"] == kept["seed"] and config["train"]["run_dir"] == str(run)
    assert config["seeds"] == {"n": 2, "kept_seed": kept["seed"], "file": "seeds.json"}
    for name in ("model.safetensors", "model.json", "calibration.json", "checkpoint.pt", "memory.jsonl"):
        assert (run / name).is_file(), name
    assert not (run / "seeds").exists()  # the other seed's files are gone; its summary stays in seeds.json


def test_each_seed_is_the_run_its_lone_seed_gives(seeded, tiny_flags, daily_path, tmp_path):
    """The module's promise: seed S of `--seeds` trains exactly as `foxhunt train --seed S` would. Seed 6 trains
    after seed 5 in the same process, so anything the first seed leaves behind (random state, switches, caches)
    would show in the second's weights."""
    _, _, run = seeded
    record = json.loads((run / "seeds.json").read_text())
    for summary in record["seeds"]:
        seed = summary["seed"]
        lone = tmp_path / f"lone-{seed}"
        assert main(["train", *tiny_flags, "--parquet-file", str(daily_path), "--epochs", "1", "--seed", str(seed),
                     "--run-dir", str(lone)]) == 0
        assert_same_training(lone, run.parent / "seeds-before-promote" / f"seed-{seed}", f"seed {seed}")
        best = min(metrics(lone), key=lambda r: r["val_loss"])
        assert (summary["best_epoch"], summary["val_loss"], summary["val_qrisk"]) == (
            best["epoch"], best["val_loss"], best["val_qrisk"]), f"seed {seed}"
        if seed == record["kept_seed"]:
            assert_same_training(lone, run, f"the kept seed {seed}")  # the promoted run too


def test_the_console_shows_each_seed_the_spread_and_the_claim_against_the_strongest_baseline(seeded):
    _, lines, run = seeded
    record = json.loads((run / "seeds.json").read_text())
    seed_lines = [line for line in lines if line.startswith(("seed 5 (1 of 2): ", "seed 6 (2 of 2): "))]
    assert len(seed_lines) == 2 and all(", val_loss " in line and " peak host " in line for line in seed_lines)
    spread = [line for line in lines if line.startswith("spread over 2 seeds (min / median / max): val_loss ")]
    assert len(spread) == 1 and spread[0].endswith(f"kept seed {record['kept_seed']} (lowest val_loss)")
    final = [line for line in lines if line.startswith("best epoch 1: val_loss ")]
    kept = next(s for s in record["seeds"] if s["seed"] == record["kept_seed"])
    assert final == [f"best epoch 1: val_loss {kept['val_loss']:.5f}; {kept['claim']}; run directory {run}"]
    # daily bars: the three baselines evaluate scores (no seasonal one), on validation
    assert " the strongest of 4 baselines, " in kept["claim"] and kept["claim"].startswith("validation q-risk p10 ")
    assert f"  foxhunt evaluate --model {run} --out-dir {run / 'eval'} --parquet-file " in "\n".join(lines)


def test_evaluate_opens_with_the_verdict_and_the_seed_spread(seeded, daily_path, tmp_path, capsys):
    _, _, run = seeded
    out = tmp_path / "eval"
    assert main(["evaluate", "--model", str(run), "--out-dir", str(out), "--parquet-file", str(daily_path),
                 "--threads", "1"]) == 0
    stdout = capsys.readouterr().out.splitlines()
    metrics = json.loads((out / "metrics.json").read_text())
    verdict = metrics["verdict"]
    assert stdout[0] == verdict["sentence"] and stdout[1] == verdict["seed_spread"]
    # calibration auto on this anchored model: the adaptive shifts if they beat its own quantiles on validation
    won = json.loads((run / "calibration.json").read_text())["adaptive"]["fitted_on"]["beats_own"]
    assert verdict["sentence"].startswith("The calibrated model " if won else "The model (uncalibrated) ")
    assert verdict["strongest"] in metrics["baselines"] and metrics["calibration"]["applied"] == won
    assert verdict["seed_spread"].startswith("validation q-risk over 2 seeds (seed ")
    report = Path(out / "report.html").read_text()
    head = report[report.index("<h1>"):report.index("<h2>")]
    assert '<p class="claim">' in head and verdict["strongest"] in head and "over 2 seeds" in head


def test_resume_with_seeds_and_zero_seeds_are_bad_input(tmp_path, capsys):
    assert main(["train", "--run-dir", str(tmp_path / "r"), "--resume", "--seeds", "3"]) == 2
    assert "--resume with --seeds is not supported; resume the kept run" in capsys.readouterr().err
    assert main(["train", "--run-dir", str(tmp_path / "r"), "--seeds", "0"]) == 2
    assert "--seeds 0: give the number of trainings to run, 1 or more" in capsys.readouterr().err
