"""Bad input and runtime failures across the whole CLI: status 2 (bad input) or 1 (runtime failure), one line naming
the thing and the fix, no traceback unless --debug, and nothing left behind that looks complete."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest
import torch

from foxhunt.cli import main
from foxhunt.data.dataset.saved_format import FORMAT_VERSION
from foxhunt.model import saved as saved_module
from foxhunt.model.saved import load_model
from foxhunt.train import resume as resume_module
from foxhunt.train import session

DAILY = "generic_ohlcv_daily.parquet"


@pytest.fixture(scope="module")
def trained(tmp_path_factory, fixtures_dir) -> Path:
    run = tmp_path_factory.mktemp("trained") / "run"
    tiny = ["--hidden-size", "8", "--attention-heads", "2", "--encoder-length", "16", "--horizon", "3",
            "--no-progress", "--threads", "1"]
    assert main(["train", *tiny, "--parquet-file", str(fixtures_dir / DAILY), "--epochs", "1",
                 "--run-dir", str(run)]) == 0
    return run


@pytest.fixture
def model(tmp_path, trained) -> Path:
    """A private copy of the trained run, free to damage."""
    return Path(shutil.copytree(trained, tmp_path / "model"))


def one_line(capsys, code: int, status: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert code == status, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("foxhunt: ")
    for needle in needles:
        assert needle in last, last
    return last


def predict(model: Path, fixtures_dir: Path, out: Path, *extra: str) -> int:
    return main(["predict", "--model", str(model), "--parquet-file", str(fixtures_dir / DAILY), "--out", str(out),
                 "--threads", "1", *extra])


@pytest.mark.parametrize(
    "damage, needles",
    [
        (lambda m: shutil.rmtree(m) or m.mkdir(), ["model.json: not found", "--model"]),
        (lambda m: shutil.rmtree(m) or m.write_text("x"), ["not a directory"]),
        (lambda m: (m / "model.json").unlink(), ["--resume"]),  # killed before its first model: checkpoint only
        (lambda m: (m / "model.safetensors").write_bytes((m / "model.safetensors").read_bytes()[:200]),
         ["model.safetensors: unreadable"]),
        (lambda m: (m / "model.json").write_text((m / "model.json").read_text()[:100]),
         ["model.json: not a foxhunt model"]),
        (lambda m: (m / "model.json").write_text(json.dumps({**json.loads((m / "model.json").read_text()),
                                                             "foxhunt_version": "99.0.0"})),
         ["foxhunt 99.0.0", "upgrade foxhunt"]),
        (lambda m: _resave(m / "model.json", lambda d: d.pop("format_version")),
         ["model.json: no format_version", f"reads format {FORMAT_VERSION} only", "retrain"]),
        (lambda m: _resave(m / "model.json", lambda d: d.update(format_version=FORMAT_VERSION - 1)),
         [f"model.json: format_version {FORMAT_VERSION - 1}", "retrain"]),
    ],
    ids=["empty-dir", "a-file", "half-written", "weights-cut-short", "json-cut-short", "newer-foxhunt",
         "format-removed", "format-older"],
)
def test_a_bad_model_directory_is_one_line_and_status_2(model, tmp_path, fixtures_dir, capsys, damage, needles):
    damage(model)
    out = tmp_path / "f.parquet"
    one_line(capsys, predict(model, fixtures_dir, out), 2, *needles)
    assert not out.exists()
    code = main(["evaluate", "--model", str(model), "--parquet-file", str(fixtures_dir / DAILY), "--out-dir",
                 str(tmp_path / "ev"), "--threads", "1"])
    one_line(capsys, code, 2, *needles)
    assert not (tmp_path / "ev" / "metrics.json").exists()


def _resave(path: Path, change) -> None:
    """Rewrite the JSON file `path` after `change` (a function of its object, in place)."""
    saved = json.loads(path.read_text())
    change(saved)
    path.write_text(json.dumps(saved))


def test_a_current_run_loads_and_its_model_json_round_trips_exactly(trained):
    """The run just trained is of this format and loads; its transform and data options are written back as read."""
    saved = json.loads((trained / "model.json").read_text())
    assert saved["format_version"] == FORMAT_VERSION
    lm = load_model(trained)
    assert json.loads(json.dumps(lm.transform.to_dict())) == saved["transform"]
    assert json.loads(json.dumps(lm.data_cfg.to_dict())) == saved["data"]


def test_a_run_of_another_format_is_not_resumed(model, capsys):
    _resave(model / "config.json", lambda d: d.pop("format_version"))
    one_line(capsys, resume(model), 2, "config.json: no format_version", "train again")


def test_features_that_do_not_match_the_model_are_named(model, tmp_path, fixtures_dir, capsys):
    meta = json.loads((model / "model.json").read_text())
    feats = meta["schema"]["features"]
    i = next(k for k, f in enumerate(feats) if f["kind"] == "continuous")
    feats[i]["name"] = "volume_of_the_moon"  # same sizes, so the weights still load
    (model / "model.json").write_text(json.dumps(meta))
    out = tmp_path / "f.parquet"
    one_line(capsys, predict(model, fixtures_dir, out), 2, "features do not match", "volume_of_the_moon", DAILY)
    assert not out.exists()
    code = main(["evaluate", "--model", str(model), "--parquet-file", str(fixtures_dir / DAILY), "--out-dir",
                 str(tmp_path / "ev"), "--threads", "1"])
    one_line(capsys, code, 2, "features do not match")


def resume(run: Path) -> int:
    return main(["train", "--run-dir", str(run), "--resume", "--no-progress", "--threads", "1"])


def test_a_truncated_checkpoint_is_one_line_and_status_2(model, capsys):
    data = (model / "checkpoint.pt").read_bytes()
    (model / "checkpoint.pt").write_bytes(data[: len(data) // 2])
    one_line(capsys, resume(model), 2, "checkpoint.pt: unreadable checkpoint", "truncated")


def test_a_checkpoint_from_a_newer_foxhunt_is_one_line_and_status_2(model, capsys):
    state = torch.load(model / "checkpoint.pt", weights_only=True)
    torch.save({**state, "format": resume_module.CHECKPOINT_FORMAT + 1, "foxhunt_version": "99.0.0"},
               model / "checkpoint.pt")
    one_line(capsys, resume(model), 2, "checkpoint.pt", "99.0.0", "upgrade foxhunt")


def test_an_unwritable_run_directory_is_one_line_and_status_2(tmp_path, tiny, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = main(["train", *tiny, "--run-dir", str(blocker / "run")])
    one_line(capsys, code, 2, "--run-dir", "cannot write there")


def fill_disk(real):
    """A writer that starts writing, then fails as a full disk does."""

    def writer(*args, **kwargs):
        path = next(a for a in args if isinstance(a, (str, Path)))
        Path(path).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    return writer


@pytest.mark.parametrize("target", ["weights", "checkpoint"])
def test_a_full_disk_while_writing_is_status_1_and_leaves_nothing_that_looks_complete(
        tmp_path, tiny, fixtures_dir, monkeypatch, capsys, target):
    if target == "weights":
        monkeypatch.setattr(saved_module, "save_file", fill_disk(saved_module.save_file))
    else:
        monkeypatch.setattr(resume_module.torch, "save", fill_disk(torch.save))
    run = tmp_path / "run"
    code = main(["train", *tiny, "--parquet-file", str(fixtures_dir / DAILY), "--epochs", "1", "--run-dir", str(run)])
    monkeypatch.undo()
    name = "model.safetensors" if target == "weights" else "checkpoint.pt"
    one_line(capsys, code, 1, f"cannot write {run / name}", "No space left on device")
    assert not (run / name).exists() and not list(run.glob(".*.tmp"))
    if target == "weights":  # no weights: the directory is not a model, and says so
        one_line(capsys, predict(run, fixtures_dir, tmp_path / "f.parquet"), 2, "model.safetensors: not found")


def test_an_unwritable_predict_output_is_status_1(trained, tmp_path, fixtures_dir, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    one_line(capsys, predict(trained, fixtures_dir, blocker / "f.parquet"), 1, "cannot write", "a-file")


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(tmp_path, tiny, monkeypatch, capsys):
    def boom(*a, **k):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(session, "prepare_data", boom)
    args = ["train", *tiny, "--run-dir", str(tmp_path / "run")]
    one_line(capsys, main(args), 1, "internal error: RuntimeError: boom", "--debug")
    assert main([*args[:1], "--debug", *args[1:]]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "second line" in err and err.strip().splitlines()[-1].startswith("foxhunt: ")


def test_a_checkpoint_from_another_model_is_one_line_and_status_2(model, capsys):
    state = torch.load(model / "checkpoint.pt", weights_only=True)
    name = next(iter(state["model"]))
    state["model"][name] = torch.zeros(3, 1)  # a weight of another shape
    torch.save(state, model / "checkpoint.pt")
    one_line(capsys, resume(model), 2, "checkpoint.pt does not fit the run")


def test_train_end_without_val_end_names_val_end_not_test_fraction(tmp_path, tiny, fixtures_dir, capsys):
    """--test-fraction divides the time only without --train-end: with --train-end alone the run used to hold out
    no test period without a word. Refused, naming both fixes; --test-fraction 0 says no test period is meant."""
    args = ["train", *tiny, "--parquet-file", str(fixtures_dir / DAILY), "--epochs", "1", "--train-end", "2024-07-01"]
    code = main([*args, "--run-dir", str(tmp_path / "refused")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("foxhunt: error: --train-end 2024-07-01 without --val-end holds out no test period")
    assert "--test-fraction 0.2 applies only without --train-end" in err and "add --val-end DATE" in err
    assert "or pass --test-fraction 0" in err and not (tmp_path / "refused").exists()
    assert main([*args, "--test-fraction", "0", "--run-dir", str(tmp_path / "run")]) == 0
    summary = json.loads((tmp_path / "run" / "data_summary.json").read_text())
    assert summary["train_end"].startswith("2024-07-01") and summary["val_end"] is None
