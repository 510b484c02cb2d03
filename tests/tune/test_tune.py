"""`foxhunt tune` on the daily fixture with a tiny model: a killed search resumes to the total asked for, trials
never see the test period, best.toml is a `train --config` file, pruning ends a training run cleanly, and a
missing Optuna is one line naming the extra."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from foxhunt.cli import main
from foxhunt.errors import InputError
from foxhunt.settings import load_config_file
from foxhunt.tune.space import DEFAULT_SPACE, parse_space

optuna = pytest.importorskip("optuna")

SPACE = """
[dropout]
low = 0.0
high = 0.3
[learning-rate]
low = 1e-4
high = 1e-2
log = true
[scaling]
choices = ["series", "volatility"]
"""


@pytest.fixture(scope="module")
def search(tmp_path_factory, daily_path, tiny_flags) -> tuple[Path, list[str]]:
    """A search killed after 2 trials (the process ended; the study is in SQLite), then run again to 3."""
    out = tmp_path_factory.mktemp("tune")
    (out / "space.toml").write_text(SPACE)
    argv = ["tune", "--out-dir", str(out), "--search", str(out / "space.toml"), "--parquet-file", str(daily_path),
            *tiny_flags, "--epochs", "1", "--quiet"]
    assert main([*argv, "--trials", "2"]) == 0
    assert main([*argv, "--trials", "3"]) == 0
    return out, argv


def test_a_resumed_search_runs_only_the_missing_trials(search):
    out, _ = search
    study = optuna.load_study(study_name="foxhunt", storage=f"sqlite:///{out / 'study.db'}")
    trials = study.get_trials()
    assert [t.number for t in trials] == [0, 1, 2]
    assert len({json.dumps(t.params, sort_keys=True) for t in trials}) == 3
    assert sorted(p.name for p in (out / "trials").iterdir()) == ["trial-0000", "trial-0001", "trial-0002"]
    rows = json.loads((out / "summary.json").read_text())["trials"]
    assert [r["trial"] for r in rows] == [0, 1, 2] and all(r["seconds"] > 0 for r in rows)
    assert (out / "trials.csv").read_text().splitlines()[0].startswith("trial,state,val_qrisk")


def test_trials_never_train_or_validate_on_the_test_period(search):
    out, _ = search
    for run in (out / "trials").iterdir():
        s = json.loads((run / "data_summary.json").read_text())
        assert s["val_end"] is not None and s["windows"]["test"] > 0  # --test-fraction 0.2 by default
        assert s["ranges"]["train"]["last"] < s["train_end"] < s["val_end"]
        assert s["ranges"]["val"]["last"] < s["val_end"]


def test_best_toml_is_a_train_config_with_the_best_trial(search):
    out, _ = search
    study = optuna.load_study(study_name="foxhunt", storage=f"sqlite:///{out / 'study.db'}")
    best = study.best_trial
    train_options = {"hidden_size", "attention_heads", "encoder_length", "horizon", "progress", "threads", "epochs",
                     "parquet_file", "dropout", "learning_rate", "scaling"}
    values = load_config_file(out / "best.toml", train_options)
    assert {k: values[k] for k in best.params} == best.params
    assert values["epochs"] == 1 and values["hidden_size"] == 8
    assert best.value == min(t.value for t in study.get_trials() if t.value is not None)


def test_a_pruned_trial_ends_its_training_run_cleanly(tmp_path, daily_path, tiny_flags):
    from foxhunt import settings
    from foxhunt.train.session import train_run

    v = {"encoder_length": 16, "horizon": 3, "hidden_size": 8, "attention_heads": 2, "epochs": 3, "threads": 1,
         "progress": False, "run_dir": str(tmp_path / "run")}
    data = settings.data_config(v, (str(daily_path),))
    seen = []

    def prune(record):
        seen.append(record["epoch"])
        raise optuna.TrialPruned()

    handlers = list(logging.getLogger("foxhunt").handlers)
    with pytest.raises(optuna.TrialPruned):
        train_run(data, settings.model_config(v, data), settings.train_config(v), on_epoch=prune)
    assert seen == [1]  # stopped after the first epoch's report
    assert logging.getLogger("foxhunt").handlers == handlers  # the run's log file handler is gone
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1 and (tmp_path / "run" / "checkpoint.pt").exists()


def test_the_default_space_parses_and_a_bad_one_names_the_table():
    names = {"hidden_size", "attention_heads", "dropout", "learning_rate", "encoder_length", "scaling",
             "vol_estimator", "vol_halflife", "vol_features"}
    assert {p.name for p in parse_space(DEFAULT_SPACE, "default", names)} == names
    with pytest.raises(InputError, match=r"\[hidden-sise\] is not an option"):
        parse_space("[hidden-sise]\nchoices = [8]\n", "s.toml", names)
    with pytest.raises(InputError, match=r"\[dropout\]: needs numbers low < high"):
        parse_space("[dropout]\nlow = 0.3\nhigh = 0.1\n", "s.toml", names)


def test_without_optuna_one_line_names_the_extra(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna raises ImportError
    assert main(["tune", "--trials", "1", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'foxhunt[tune]'" in err and len(err.splitlines()) == 1


def test_the_readme_shows_the_default_space():
    import tomllib

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    block = readme.split("The default search space")[1].split("```toml")[1].split("```")[0]
    assert tomllib.loads(block) == tomllib.loads(DEFAULT_SPACE)


def test_a_study_refuses_other_fixed_options(search, capsys):
    _, argv = search
    assert main([*argv, "--trials", "3", "--epochs", "2"]) == 2
    assert "was started with other train options (--epochs: 1 then, 2 now)" in capsys.readouterr().err
