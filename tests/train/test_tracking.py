"""`foxhunt train --track mlflow,tensorboard`: the run's own records copied to MLflow (a local SQLite store) and to
TensorBoard event files; a tracker that fails warns once and never stops training."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

pytest.importorskip("mlflow")
pytest.importorskip("sqlalchemy")
pytest.importorskip("tensorboard")

from mlflow.tracking import MlflowClient  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from foxhunt.cli import main  # noqa: E402
from foxhunt.errors import InputError  # noqa: E402
from foxhunt.train.run_dir import RunDir  # noqa: E402
from foxhunt.train.tracking import Tracking, TrackingConfig, epoch_scalars  # noqa: E402


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, daily_path, tiny_flags):
    """(run dir, MLflow URI) of a two-epoch tiny run tracked to both backends."""
    root = tmp_path_factory.mktemp("tracking")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    run = root / "run"
    assert main(["train", *tiny_flags, "--parquet-file", str(daily_path), "--epochs", "2", "--max-train-batches",
                 "2", "--patience", "5", "--run-dir", str(run), "--track", "mlflow", "--track", "tensorboard",
                 "--track-uri", uri]) == 0
    return run, uri


def test_mlflow_holds_the_params_epoch_metrics_memory_and_files(tracked):
    run, uri = tracked
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("foxhunt")
    (mlrun,) = client.search_runs([exp.experiment_id])
    assert mlrun.info.run_name == "run" and mlrun.info.status == "FINISHED"
    config = json.loads((run / "config.json").read_text())
    params = mlrun.data.params
    assert params["model.hidden_size"] == "8" and params["train.epochs"] == "2"
    assert params["resolved.batch_size"] == str(config["resolved"]["batch_size"])
    records = jsonl(run / "metrics.jsonl")
    assert [r["epoch"] for r in records] == [0, 1, 2]  # 0: the untrained model (its anchor), validated
    for key in ("val_loss", "train_loss", "val_qrisk_p50"):
        history = client.get_metric_history(mlrun.info.run_id, key)
        logged = [r for r in records if key != "train_loss" or r["epoch"] > 0]  # epoch 0 trains nothing
        assert [m.step for m in history] == [r["epoch"] for r in logged]
        want = [r["val_qrisk"]["0.5"] if key == "val_qrisk_p50" else r[key] for r in logged]
        assert [m.value for m in history] == pytest.approx(want)
    memory = client.get_metric_history(mlrun.info.run_id, "memory_host_rss_mb")
    assert [m.value for m in memory] == pytest.approx([r["host_rss_mb"] for r in jsonl(run / "memory.jsonl")])
    files = {f.path for f in client.list_artifacts(mlrun.info.run_id)}
    assert {"config.json", "metrics.jsonl", "memory.jsonl", "train.log", "calibration.json"} <= files


def test_tensorboard_event_files_hold_the_epoch_scalars(tracked):
    run, _ = tracked
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    records = jsonl(run / "metrics.jsonl")
    for key in ("val_loss", "train_loss", "lr"):
        scalars = events.Scalars(key)
        logged = [r for r in records if r[key] is not None]  # epoch 0 (the anchor, untrained) has no train_loss
        assert [s.step for s in scalars] == [r["epoch"] for r in logged] and logged[-1]["epoch"] == 2
        assert [s.value for s in scalars] == pytest.approx([r[key] for r in logged], rel=1e-6)
    assert len(events.Scalars("memory/host_rss_mb")) == len(jsonl(run / "memory.jsonl"))


def test_a_failing_tracker_warns_once_and_training_goes_on(tmp_path, monkeypatch, caplog):
    """mlflow missing: one warning naming the extra; the other backend and the JSONL files are untouched."""
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)  # `from mlflow.tracking import ...` fails
    run = RunDir(tmp_path)
    (tmp_path / "memory.jsonl").write_text('{"host_rss_mb": 1.0}\n{"host_rss_mb": 2.0}\n{"host_rss')  # torn tail
    tracking = Tracking(TrackingConfig(("mlflow", "tensorboard"), f"sqlite:///{tmp_path / 'db'}"), run)
    with caplog.at_level(logging.WARNING, logger="foxhunt"):
        tracking.start({"model": {"hidden_size": 8}})
        for epoch in (1, 2):
            tracking.epoch({"epoch": epoch, "val_loss": 1.0 / epoch, "val_qrisk": {"0.5": 0.3}, "best": True})
        tracking.finish()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "--track mlflow failed" in warnings[0] and "foxhunt[track]" in warnings[0]
    assert [b.name for b in tracking.backends] == ["tensorboard"]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [s.value for s in events.Scalars("memory/host_rss_mb")] == [1.0, 2.0]  # the torn line waits
    assert [s.step for s in events.Scalars("val_loss")] == [1, 2]


def test_track_values_parse_and_default_to_a_local_sqlite_store(tmp_path, monkeypatch):
    assert TrackingConfig.parse(["mlflow,tensorboard", "mlflow"]).backends == ("mlflow", "tensorboard")
    with pytest.raises(InputError, match="--track 'wandb' is not one of mlflow, tensorboard"):
        TrackingConfig.parse(["wandb"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert TrackingConfig(("mlflow",)).mlflow_uri() == f"sqlite:///{tmp_path.resolve() / 'runs' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://localhost:5000")
    assert TrackingConfig(("mlflow",)).mlflow_uri() == "http://localhost:5000"
    assert TrackingConfig(("mlflow",), "sqlite:///x.db").mlflow_uri() == "sqlite:///x.db"
    assert epoch_scalars({"epoch": 3, "val_loss": 0.5, "best": True, "val_qrisk": {"0.1": 0.2}}) == {
        "val_loss": 0.5, "val_qrisk_p10": 0.2}


def test_a_bad_track_flag_is_bad_input(tmp_path, capsys):
    assert main(["train", "--track", "wandb", "--run-dir", str(tmp_path / "r")]) == 2
    assert "--track 'wandb'" in capsys.readouterr().err



def test_a_resumed_run_continues_its_tensorboard_run_without_repeating_records(tmp_path, daily_path, tiny_flags):
    """Train one epoch tracked to TensorBoard, resume for a second: scalars at epochs [1, 2] and every memory record
    once, each at its own index (the resumed session forwards only what was written since)."""
    run = tmp_path / "run"
    common = ["--max-train-batches", "2", "--run-dir", str(run), "--track", "tensorboard"]
    assert main(["train", *tiny_flags, "--parquet-file", str(daily_path), "--epochs", "1", *common]) == 0
    assert json.loads((run / "tracking.json").read_text())["memory_records"] == len(jsonl(run / "memory.jsonl"))
    assert main(["train", "--resume", "--epochs", "2", "--no-progress", "--threads", "1", *common]) == 0
    records, memory = jsonl(run / "metrics.jsonl"), jsonl(run / "memory.jsonl")
    assert [r["epoch"] for r in records] == [0, 1, 2]
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    val = events.Scalars("val_loss")
    assert [(s.step, s.value) for s in val] == [(r["epoch"], pytest.approx(r["val_loss"], rel=1e-6)) for r in records]
    rss = events.Scalars("memory/host_rss_mb")
    assert [(s.step, s.value) for s in rss] == [(i, pytest.approx(r["host_rss_mb"], rel=1e-6))
                                                for i, r in enumerate(memory)]


def test_a_resumed_session_appends_to_its_mlflow_run(tracked, tmp_path):
    """A second session on a finished run (what `--resume` starts) logs to the same MLflow run: no new run, the
    parameters kept, epoch 3 after epochs 0-2, and no memory record forwarded twice."""
    run_path, uri = tracked
    db = tmp_path / "copy.db"  # the module's database stays as the other tests read it
    db.write_bytes(Path(uri.removeprefix("sqlite:///")).read_bytes())
    state = json.loads((run_path / "tracking.json").read_text())
    (run_path / "tracking.json").write_text(json.dumps({**state, "mlflow_uri": f"sqlite:///{db}"}))
    try:
        tracking = Tracking(TrackingConfig(("mlflow",), f"sqlite:///{db}"), RunDir(run_path))
        tracking.start({"model": {"hidden_size": 8}, "train": {"epochs": 3}})
        tracking.epoch({"epoch": 3, "val_loss": 0.5})
        tracking.finish()
    finally:
        (run_path / "tracking.json").write_text(json.dumps(state))
    client = MlflowClient(f"sqlite:///{db}")
    (mlrun,) = client.search_runs([client.get_experiment_by_name("foxhunt").experiment_id])
    assert mlrun.info.run_id == state["mlflow_run_id"] and mlrun.info.status == "FINISHED"
    assert mlrun.data.params["train.epochs"] == "2"  # MLflow parameters are immutable: the first session's stay
    assert [m.step for m in client.get_metric_history(mlrun.info.run_id, "val_loss")] == [0, 1, 2, 3]
    rss = client.get_metric_history(mlrun.info.run_id, "memory_host_rss_mb")
    assert [m.step for m in rss] == list(range(len(jsonl(run_path / "memory.jsonl"))))
