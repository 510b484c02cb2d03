"""`foxhunt train --init-from RUN` end to end: a tiny model trained on two futures, fine-tuned on the S&P 500 (a
series it never saw), resumed without RUN (another RUN on --resume refused); and refused in one line before any bars
are read."""

from __future__ import annotations

import json
import shutil

from foxhunt.cli import main


def test_init_from_a_run_on_another_market_then_resume_without_it(tmp_path, tiny, daily_path, spx_path, capsys):
    panel, spx = tmp_path / "panel", tmp_path / "spx"
    assert main(["train", *tiny, "--epochs", "1", "--parquet-file", str(daily_path), "--run-dir", str(panel)]) == 0
    capsys.readouterr()
    fine_tune = ["train", *tiny, "--epochs", "1", "--parquet-file", str(spx_path), "--since", "2015-01-01",
                 "--run-dir", str(spx), "--init-from", str(panel)]
    assert main(fine_tune) == 0
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("--init-from"))
    n = json.loads((spx / "config.json").read_text())["n_params"]
    assert line == (f"--init-from {panel}: all {n:,} weights from its model; series: 0 known there, 1 new (SPX) "
                    "starting from its unknown row; scalers and calibration fitted here")
    record = json.loads((spx / "config.json").read_text())
    assert record["train"]["init_from"] == str(panel)
    assert record["init_from"] == {"run": str(panel), "weights_taken": n, "weights": n, "fresh": [],
                                   "categories_known": {"series": 0}, "categories_new": {"series": ["SPX"]}}
    shutil.rmtree(panel)  # a resumed run continues from its checkpoint: RUN is not read again
    assert main(["train", "--run-dir", str(spx), "--resume", "--epochs", "2", "--no-progress", "--threads", "1"]) == 0
    err = capsys.readouterr().err
    assert "resuming at epoch 2" in err and "--init-from" not in err
    assert json.loads((spx / "config.json").read_text())["init_from"] == record["init_from"]
    assert [json.loads(r)["epoch"] for r in (spx / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]
    resume = ["train", "--run-dir", str(spx), "--resume", "--epochs", "3", "--no-progress", "--threads", "1"]
    assert main([*resume, "--init-from", str(tmp_path / "elsewhere")]) == 2  # not ignored without a word
    assert capsys.readouterr().err == (f"foxhunt: error: --init-from cannot change when resuming (the run was started "
                                       f"from {panel}); drop it or start a new run with it\n")
    assert [json.loads(r)["epoch"] for r in (spx / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]

    assert main(["train", *tiny, "--hidden-size", "12", "--parquet-file", str(spx_path), "--run-dir",
                 str(tmp_path / "other"), "--init-from", str(spx)]) == 2
    out = capsys.readouterr()
    assert out.err == (f"foxhunt: error: --init-from {spx}: another architecture (hidden size 8 there, 12 here); "
                       "train with --hidden-size 8 to start from it, or without --init-from\n")
