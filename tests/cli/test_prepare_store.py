"""`foxhunt prepare` then `foxhunt train --features`: the same training as from the bars, refused with other data
options, resumable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from foxhunt.cli import main

DATA_FLAGS = ("--encoder-length", "16", "--horizon", "3")


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def losses(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("seconds", "samples_per_s")} for r in jsonl(run / "metrics.jsonl")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_flags, daily_path):
    """A store prepared from the daily fixture, two epochs trained from it and from the bars, and a store run
    killed after epoch 1 and resumed."""
    root = tmp_path_factory.mktemp("prepare-store")
    store = root / "store"
    assert main(["prepare", "--parquet-file", str(daily_path), *DATA_FLAGS, "--out", str(store)]) == 0
    common = [*tiny_flags, "--epochs", "2", "--patience", "9"]
    assert main(["train", *common, "--parquet-file", str(daily_path), "--run-dir", str(root / "bars")]) == 0
    # the data flags typed again with the store's own values are accepted
    assert main(["train", *common, "--features", str(store), "--run-dir", str(root / "store-run")]) == 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FOXHUNT_FAULT_INJECT", "kill@epoch:1")  # as if killed right after epoch 1's checkpoint
        assert main(["train", *common, "--features", str(store), "--run-dir", str(root / "part")]) == 130
    assert len(jsonl(root / "part" / "metrics.jsonl")) == 1
    assert main(["train", "--run-dir", str(root / "part"), "--resume", "--no-progress", "--threads", "1"]) == 0
    return root


def test_training_from_the_store_matches_training_from_the_bars(runs):
    bars, store = runs / "bars", runs / "store-run"
    assert [r["epoch"] for r in losses(store)] == [1, 2]
    assert losses(store) == losses(bars)
    wa, wb = load_file(str(bars / "model.safetensors")), load_file(str(store / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert json.loads((store / "data_summary.json").read_text()) == json.loads((bars / "data_summary.json").read_text())
    saved = json.loads((store / "config.json").read_text())["data"]
    assert saved["features"] == str(runs / "store") and saved["horizon"] == 3


def test_a_store_trained_run_resumes_where_it_stopped(runs):
    assert losses(runs / "part") == losses(runs / "store-run")


def test_other_data_options_are_refused_with_one_line_and_status_2(runs, tiny, capsys):
    capsys.readouterr()
    code = main(["train", *tiny, "--features", str(runs / "store"), "--horizon", "7", "--run-dir",
                 str(runs / "refused")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err == (f"foxhunt: error: --horizon 7 differs from the feature store {runs / 'store'}, prepared with "
                   "--horizon 3; drop --horizon to use the store as prepared, or run `foxhunt prepare` with "
                   "--horizon 7 into a new store")
    assert not (runs / "refused" / "checkpoint.pt").exists()


def test_prepare_says_what_it_wrote_and_parquet_with_features_is_refused(runs, tiny, daily_path, capsys):
    capsys.readouterr()
    code = main(["train", *tiny, "--features", str(runs / "store"), "--parquet-file", str(daily_path)])
    assert code == 2 and "pass one" in capsys.readouterr().err
    assert main(["prepare", "--parquet-file", str(daily_path), *DATA_FLAGS, "--out", str(runs / "again")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote the feature store {runs / 'again'}: 600 rows, 562 windows,")
