"""`foxhunt prepare` then `foxhunt train --features`: the same training as from the bars, refused with other data
options, resumable; `foxhunt predict --features`: the same forecasts as from the bars."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
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
    assert [r["epoch"] for r in jsonl(root / "part" / "metrics.jsonl")] == [0, 1]
    assert main(["train", "--run-dir", str(root / "part"), "--resume", "--no-progress", "--threads", "1"]) == 0
    return root


def test_training_from_the_store_matches_training_from_the_bars(runs):
    bars, store = runs / "bars", runs / "store-run"
    assert [r["epoch"] for r in losses(store)] == [0, 1, 2]
    assert losses(store) == losses(bars)
    wa, wb = load_file(str(bars / "model.safetensors")), load_file(str(store / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert json.loads((store / "data_summary.json").read_text()) == json.loads((bars / "data_summary.json").read_text())
    saved = json.loads((store / "config.json").read_text())["data"]
    assert saved["features"] == str(runs / "store") and saved["horizon"] == 3


def test_a_store_run_takes_the_digest_of_its_manifest_the_bars_run_computes_the_same(runs):
    """The store's digest was computed once by `prepare` (the pieced writer); a run from it records that digest
    without reading the arrays, and a run prepared in memory from the same bars hashes them to the same value."""
    manifest = json.loads((runs / "store" / "manifest.json").read_text())
    fingerprints = [json.loads((runs / run / "config.json").read_text())["data_fingerprint"]
                    for run in ("store-run", "bars")]
    assert fingerprints[0]["digest"] == fingerprints[1]["digest"] == manifest["digest"]


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


def test_a_store_of_another_format_is_refused_with_one_line_and_status_2(runs, tiny, capsys):
    old = Path(shutil.copytree(runs / "store", runs / "old-store"))
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["format_version"]  # as a store of an earlier foxhunt
    (old / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    code = main(["train", *tiny, "--features", str(old), "--run-dir", str(runs / "old-run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and not (runs / "old-run" / "checkpoint.pt").exists()
    assert err.startswith(f"foxhunt: error: {old / 'manifest.json'}: no format_version (written by foxhunt ")
    assert err.endswith("prepare the store again with this foxhunt (`foxhunt prepare`)")


def test_list_options_given_with_the_stores_own_values_are_accepted(runs):
    """--observed, --context, ... are lists in the store's manifest and tuples in a DataConfig: the same values
    given again (a --config file shared by prepare and train) are the store's, not other ones."""
    import foxhunt

    cfg = foxhunt.RunConfig.from_options(features=str(runs / "store"), observed="", context=[], horizon=3)
    assert (cfg.data.observed, cfg.data.context, cfg.data.features) == ((), (), str(runs / "store"))


def test_prepare_says_what_it_wrote_and_parquet_with_features_is_refused(runs, tiny, daily_path, capsys):
    capsys.readouterr()
    code = main(["train", *tiny, "--features", str(runs / "store"), "--parquet-file", str(daily_path)])
    assert code == 2 and "pass one" in capsys.readouterr().err
    assert main(["prepare", "--parquet-file", str(daily_path), *DATA_FLAGS, "--out", str(runs / "again")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote the feature store {runs / 'again'}: 600 rows, 562 windows,")
    assert ("600 rows, 562 windows, 554 of them in the splits (train 322 / val 116 / test 116); 8 purged at the "
            "split boundaries; ") in out
    # inspect counts the same windows in the same words, its totals only: each split's count is on its own line
    assert main(["inspect", "--parquet-file", str(daily_path), *DATA_FLAGS]) == 0
    lines = capsys.readouterr().out.splitlines()
    (line,) = [x for x in lines if x.startswith("windows ")]
    assert line.removeprefix("windows").strip() == "562 windows, 554 of them in the splits; 8 purged at the split boundaries"
    assert [x.split()[:2] for x in lines if x.startswith(("train ", "val ", "test "))] == [
        ["train", "322"], ["val", "116"], ["test", "116"]]


def test_predict_from_the_store_forecasts_its_windows_as_from_the_bars(runs, daily_path, capsys):
    """Every window of the store is an origin; each forecast is the one predicting from the bars gives (batches of
    other windows may move the last float32 bit), and the store has no live origin."""
    model, out = runs / "store-run", runs / "predict"
    assert main(["predict", "--model", str(model), "--features", str(runs / "store"), "--out", str(out / "s.parquet"),
                 "--threads", "1"]) == 0
    assert "(562 origins)" in capsys.readouterr().out
    assert main(["predict", "--model", str(model), "--parquet-file", str(daily_path), "--out",
                 str(out / "b.parquet"), "--threads", "1"]) == 0
    keys = ["symbol", "origin", "horizon", "target_time"]
    store, bars = (pl.read_parquet(out / f"{k}.parquet") for k in ("s", "b"))
    both = store.join(bars, on=keys, how="left", suffix="_bars")
    assert store.height == 562 * 3 and both.height == store.height and both["p50_bars"].null_count() == 0
    assert bars["origin"].max() > store["origin"].max()  # the bars' last origins need targets past the store's end
    for q in ("p10", "p50", "p90"):
        np.testing.assert_allclose(both[q].to_numpy(), both[f"{q}_bars"].to_numpy(), rtol=1e-5, atol=1e-7)
    assert both["actual"].equals(both["actual_bars"], check_names=False)
    # a model trained on the same bars with the same options has the store's transform: its store is accepted
    assert main(["predict", "--model", str(runs / "bars"), "--features", str(runs / "store"), "--out",
                 str(out / "m.parquet"), "--threads", "1"]) == 0


def test_predict_refuses_a_store_prepared_otherwise_and_both_inputs(runs, daily_path, capsys):
    other = runs / "other-store"  # a later validation period: other training rows, other scalers
    assert main(["prepare", "--parquet-file", str(daily_path), *DATA_FLAGS, "--val-fraction", "0.3",
                 "--out", str(other)]) == 0
    capsys.readouterr()
    out = runs / "refused.parquet"
    code = main(["predict", "--model", str(runs / "store-run"), "--features", str(other), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and not out.exists()
    assert err == (f"foxhunt: error: --features {other}: prepared with other series, scalers or bar spacing than the "
                   "model was trained with; predict from the bars with --parquet-file, or from a store prepared with "
                   "the model's data options")
    code = main(["predict", "--model", str(runs / "store-run"), "--features", str(runs / "store"), "--parquet-file",
                 str(daily_path), "--out", str(out)])
    assert code == 2 and "pass one" in capsys.readouterr().err and not out.exists()


def test_resuming_from_a_store_prepared_again_from_other_bars_is_refused(tmp_path, tiny, daily_path, monkeypatch,
                                                                        capsys):
    """A store prepared again into the same --out from bars cut short is other data: --resume stops with one line
    (exit 2) naming the store, as it does for a changed file."""
    bars, store, run = tmp_path / "bars.parquet", tmp_path / "store", tmp_path / "run"
    shutil.copyfile(daily_path, bars)
    assert main(["prepare", "--parquet-file", str(bars), *DATA_FLAGS, "--out", str(store)]) == 0
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "kill@epoch:1")
    assert main(["train", *tiny, "--epochs", "2", "--features", str(store), "--run-dir", str(run)]) == 130
    monkeypatch.delenv("FOXHUNT_FAULT_INJECT")
    pl.read_parquet(daily_path).head(-200).write_parquet(bars)
    assert main(["prepare", "--parquet-file", str(bars), *DATA_FLAGS, "--out", str(store)]) == 0
    capsys.readouterr()
    assert main(["train", "--run-dir", str(run), "--resume", "--no-progress", "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"foxhunt: error: {run}: the feature store {store} changed since this run started (")
    assert "windows train/val/test" in err and "--init-from" in err


def test_prepare_removes_what_a_killed_prepare_left_beside_the_store_and_says_so(tmp_path, daily_path, capsys):
    """A `prepare` killed with SIGKILL leaves its hidden build and spill folders; the next one into the same place
    removes those of this host whose process is gone, one line each, and leaves alone the rest: a live process's,
    another host's, and one whose name carries no owner."""
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    host, store = socket.gethostname(), tmp_path / "store"
    stale = [tmp_path / f".store.{host}-{dead.pid}.ab12cd34.tmp", tmp_path / f".store.pieces.{host}-{dead.pid}.x_9y8z7w"]
    kept = [tmp_path / f".store.{host}-{os.getpid()}.ab12cd34.tmp", tmp_path / f".store.pieces.elsewhere-{dead.pid}.abc",
            tmp_path / ".store.qwertyui.tmp"]
    for folder in stale + kept:
        folder.mkdir()
        (folder / "part.arrow").write_bytes(b"x" * 1000)
    capsys.readouterr()
    assert main(["prepare", "--parquet-file", str(daily_path), *DATA_FLAGS, "--out", str(store)]) == 0
    err = capsys.readouterr().err
    assert not any(f.exists() for f in stale) and all(f.exists() for f in kept)
    for folder in stale:
        assert f"removed {folder} (0 MiB), left by a `foxhunt prepare` (process {dead.pid}) that was killed" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["store", *(f.name for f in kept)])


def test_ctrl_c_in_prepare_says_so_in_one_line(tmp_path, daily_path, monkeypatch, capsys):
    """typer turns Ctrl-C into a silent exit 130; foxhunt says it in one line, and nothing is left."""
    import foxhunt.data.prepare

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(foxhunt.data.prepare, "prepare_store", interrupted)
    capsys.readouterr()
    assert main(["prepare", "--parquet-file", str(daily_path), "--out", str(tmp_path / "store")]) == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith("foxhunt: interrupted; nothing half-written was left") and "\n" not in err
    assert not list(tmp_path.iterdir())
