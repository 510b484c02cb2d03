"""predict and evaluate without --parquet-file read the bars the model was trained on (its run's recorded files),
the bundled sample only for a model trained on it, and stop in one line when those files are gone."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from foxhunt.cli import main
from foxhunt.data.io.sample_path import DEFAULT_SEED, SAMPLE_VERSION
from foxhunt.errors import InputError
from foxhunt.predict.bar_range import training_bars


def model_dir(tmp_path: Path, paths: list[str]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "model.json").write_text(json.dumps({"data": {"paths": paths}}))
    return run


def test_the_runs_own_bars_are_read_and_said(tmp_path, daily_path, caplog):
    with caplog.at_level(logging.INFO, logger="foxhunt.evaluate"):
        assert training_bars(model_dir(tmp_path, [str(daily_path)])) == (str(daily_path),)
    assert f"reading the bars the model was trained on, {daily_path}" in caplog.text


def test_bars_that_are_gone_stop_naming_them(tmp_path):
    gone = str(tmp_path / "moved.parquet")
    with pytest.raises(InputError, match=r"trained on are not found: .*moved\.parquet.*pass --parquet-file"):
        training_bars(model_dir(tmp_path, [gone]))


def test_a_model_trained_on_the_sample_reads_the_sample(tmp_path, caplog):
    elsewhere = f"/nowhere/es_ohlcv1m_sample_v{SAMPLE_VERSION}_seed{DEFAULT_SEED}.parquet"  # another machine's cache
    with caplog.at_level(logging.INFO, logger="foxhunt.evaluate"):
        (path,) = training_bars(model_dir(tmp_path, [elsewhere]))
    assert Path(path).exists() and Path(path).name == Path(elsewhere).name
    assert "trained on the bundled ES sample" in caplog.text


def test_evaluate_without_bars_scores_the_runs_own_and_refuses_when_gone(tmp_path, daily_path, tiny_flags, capsys):
    bars = tmp_path / "bars.parquet"
    bars.write_bytes(daily_path.read_bytes())
    run = tmp_path / "trained"
    assert main(["train", "-f", str(bars), *tiny_flags, "--epochs", "1", "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(run), "--out-dir", str(tmp_path / "ev")]) == 0
    assert f"reading the bars the model was trained on, {bars}" in capsys.readouterr().err
    assert json.loads((tmp_path / "ev" / "metrics.json").read_text())["period"]["origins"] > 0
    bars.unlink()
    assert main(["predict", "--model", str(run), "--out", str(tmp_path / "fc.parquet")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trained on are not found" in err[0] and str(bars) in err[0]
