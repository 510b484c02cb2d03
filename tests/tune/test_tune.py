"""`foxhunt tune` on the daily fixture with a tiny model: a killed search resumes to the total asked for, trials
never see the test period (judged from the windows they batched), each trial's value is its run's recorded
validation q-risk, a space cannot move the split, best.toml is a `train --config` file, pruning ends a training run
cleanly, and a missing Optuna is one line naming the extra."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import typer

from foxhunt.cli import app, main
from foxhunt.data.config import DataConfig
from foxhunt.errors import InputError
from foxhunt.settings import load_config_file
from foxhunt.tune.space import DEFAULT_SPACE, FIXED, Param, parse_space

optuna = pytest.importorskip("optuna")

# The search space of `search`, whose flags type --hidden-size 8 and --attention-heads 2: those two are fixed, so the
# study searches the other three.
SPACE = """
[hidden-size]
choices = [16, 32]
[attention-heads]
choices = [1, 4]
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


@dataclasses.dataclass
class Batched:
    """What one trial's training run gathered into batches: its windows' count and their last forecast bar (ns)."""

    windows: int = 0
    last_target_ns: int = -1

    def add(self, windows, ids) -> None:
        if len(ids):
            self.windows += len(ids)
            self.last_target_ns = max(self.last_target_ns, int(windows.target_ns(ids, extrapolated=True).max()))


@pytest.fixture(scope="module")
def batched() -> dict[str, dict[str, Batched]]:
    """trial-NNNN -> {"train": the training batches, "any": every batch (training, validation, calibration)},
    filled by `search` as its trials run."""
    return {}


@pytest.fixture(scope="module")
def search(tmp_path_factory, daily_path, tiny_flags, batched) -> tuple[Path, list[str]]:
    """A search killed after 2 trials (the process ended; the study is in SQLite), then run again to 3; two epochs,
    so that a trial's value is the epoch early stopping kept, not simply the last. Every batch a trial gathers
    is noted in `batched`: the training ones where the training loop takes them (Dist.batches), all of them where
    any batch is built (WindowedData.batch)."""
    from foxhunt.data.dataset.windows import WindowedData
    from foxhunt.train import distributed, session

    run_train, train_batches, any_batch = session.train_run, distributed.Dist.batches, WindowedData.batch
    trial: list[str] = []

    def train_run(data_cfg, model_cfg, cfg, *args, **kwargs):
        trial[:] = [Path(cfg.run_dir).name]
        batched[trial[0]] = {"train": Batched(), "any": Batched()}
        return run_train(data_cfg, model_cfg, cfg, *args, **kwargs)

    def spy_train(self, windows, *args, **kwargs):
        for item in train_batches(self, windows, *args, **kwargs):
            batched[trial[0]]["train"].add(windows, item[0].window)
            yield item

    def spy_any(self, ids):
        batched[trial[0]]["any"].add(self, ids)
        return any_batch(self, ids)

    out = tmp_path_factory.mktemp("tune")
    (out / "space.toml").write_text(SPACE)
    argv = ["tune", "--out-dir", str(out), "--search", str(out / "space.toml"), "--parquet-file", str(daily_path),
            *tiny_flags, "--epochs", "2", "--quiet"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(session, "train_run", train_run)
        mp.setattr(distributed.Dist, "batches", spy_train)
        mp.setattr(WindowedData, "batch", spy_any)
        assert main([*argv, "--trials", "2"]) == 0
        assert main([*argv, "--trials", "3"]) == 0
    return out, argv


def _ns(text: str) -> int:
    dt = datetime.fromisoformat(text)
    dt = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    return (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


def _qrisk(record: dict) -> float:
    return sum(record["val_qrisk"].values()) / len(record["val_qrisk"])


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


def test_trials_never_train_or_validate_on_the_test_period(search, batched):
    out, _ = search
    runs = sorted((out / "trials").iterdir())
    assert sorted(batched) == [run.name for run in runs]  # every trial's batches were seen
    for run in runs:
        s = json.loads((run / "data_summary.json").read_text())
        assert s["val_end"] is not None and s["windows"]["test"] > 0  # --test-fraction 0.2 by default
        assert s["ranges"]["train"]["last"] < s["train_end"] < s["val_end"]
        assert s["ranges"]["val"]["last"] < s["val_end"]
        # The windows the run actually gathered: every forecast bar of a training window before the train cut
        # (purged), and of any window it batched (validation, calibration too) before the test period.
        used = batched[run.name]
        assert used["train"].windows >= s["windows"]["train"] and used["any"].windows > used["train"].windows
        assert used["train"].last_target_ns < _ns(s["train_end"]), run.name
        assert used["any"].last_target_ns < _ns(s["val_end"]), run.name


def reported_as_recorded(out: Path) -> list[tuple[list[dict], float | None]]:
    """Check every trial of the study in `out`: what it reported to Optuna after each epoch, and its value, are the
    validation q-risk (mean over quantiles) its run wrote to metrics.jsonl, the value at the epoch early stopping
    kept (the last that improved). Returns each trial's epoch records and value."""
    study = optuna.load_study(study_name="foxhunt", storage=f"sqlite:///{out / 'study.db'}")
    seen = []
    for t in study.get_trials():
        lines = (Path(t.user_attrs["run_dir"]) / "metrics.jsonl").read_text().splitlines()
        epochs = [r for r in map(json.loads, lines) if "val_qrisk" in r]
        assert t.intermediate_values == pytest.approx({r["epoch"]: _qrisk(r) for r in epochs}, rel=1e-12, abs=0)
        if t.state.name == "COMPLETE":
            kept = [r for r in epochs if r["best"]][-1]
            assert t.value == pytest.approx(_qrisk(kept), rel=1e-12, abs=0), t.number
        seen.append((epochs, t.value if t.state.name == "COMPLETE" else None))
    return seen


def test_each_trial_reports_the_validation_qrisk_its_run_recorded(search):
    out, _ = search
    assert any(value is not None for _, value in reported_as_recorded(out))


def test_a_trials_value_is_the_epoch_early_stopping_kept(tmp_path, daily_path, tiny_flags):
    """At --learning-rate 0.1 the later epochs validate worse than the first (a CPU run repeats bit for bit): the
    trial's value is the first epoch's q-risk, not the last one's."""
    (tmp_path / "space.toml").write_text("[dropout]\nchoices = [0.0]\n")
    assert main(["tune", "--trials", "1", "--out-dir", str(tmp_path), "--search", str(tmp_path / "space.toml"),
                 "--parquet-file", str(daily_path), *tiny_flags, "--epochs", "3", "--learning-rate", "0.1",
                 "--quiet"]) == 0
    [(epochs, value)] = reported_as_recorded(tmp_path)
    assert [r["best"] for r in epochs] == [True, False, False, False]  # epoch 0: the untrained model, its anchor
    assert value == pytest.approx(_qrisk(epochs[0]), rel=1e-12, abs=0) and value != _qrisk(epochs[-1])


def test_best_toml_is_a_train_config_with_the_best_trial(search):
    out, _ = search
    study = optuna.load_study(study_name="foxhunt", storage=f"sqlite:///{out / 'study.db'}")
    best = study.best_trial
    train_options = {"hidden_size", "attention_heads", "encoder_length", "horizon", "progress", "threads", "epochs",
                     "parquet_file", "dropout", "learning_rate", "scaling"}
    values = load_config_file(out / "best.toml", train_options)
    assert {k: values[k] for k in best.params} == best.params
    assert values["epochs"] == 2 and values["hidden_size"] == 8
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
    assert seen == [0]  # stopped after the first report: epoch 0's, the untrained model (its anchor) validated
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


def test_the_docs_show_the_default_space():
    import tomllib

    page = (Path(__file__).resolve().parents[2] / "docs" / "forecasts.md").read_text(encoding="utf-8")
    block = page.split("The default search space")[1].split("```toml")[1].split("```")[0]
    assert tomllib.loads(block) == tomllib.loads(DEFAULT_SPACE)


def test_a_study_refuses_other_fixed_options(search, capsys):
    _, argv = search
    assert main([*argv, "--trials", "3", "--epochs", "3"]) == 2
    assert "was started with other train options (--epochs: 2 then, 3 now)" in capsys.readouterr().err


def test_a_typed_option_the_space_holds_is_fixed_in_every_trial_and_in_best_toml(search, capsys):
    out, argv = search
    for run in sorted((out / "trials").iterdir()):
        model = json.loads((run / "config.json").read_text())["model"]
        assert (model["hidden_size"], model["attention_heads"]) == (8, 2), run.name  # typed, not [16, 32] / [1, 4]
    study = optuna.load_study(study_name="foxhunt", storage=f"sqlite:///{out / 'study.db'}")
    assert all(set(t.params) == {"dropout", "learning_rate", "scaling"} for t in study.get_trials())
    best = load_config_file(out / "best.toml", {"hidden_size", "attention_heads", "dropout", "learning_rate",
                                                "scaling", "encoder_length", "horizon", "progress", "threads",
                                                "epochs", "parquet_file"})
    assert (best["hidden_size"], best["attention_heads"]) == (8, 2)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["searched"] == ["dropout", "learning_rate", "scaling"]
    assert summary["fixed"]["hidden_size"] == 8 and summary["fixed"]["attention_heads"] == 2
    assert "param:hidden_size" not in (out / "trials.csv").read_text().splitlines()[0]
    assert main([*argv, "--trials", "3"]) == 0  # the study is complete: no trial runs, the outputs are rewritten
    assert "searching 3 of 5 options; fixed by you: --hidden-size 8, --attention-heads 2" in capsys.readouterr().err


def test_the_epochs_column_counts_the_trained_epochs(search):
    """Epoch 0, the untrained anchor a trial validates first, is not a trained epoch (train numbers them from 1)."""
    out, _ = search
    rows = json.loads((out / "summary.json").read_text())["trials"]
    csv = (out / "trials.csv").read_text().splitlines()
    column = csv[0].split(",").index("epochs")
    for row, line in zip(rows, csv[1:], strict=True):
        records = map(json.loads, (out / "trials" / f"trial-{row['trial']:04d}" / "metrics.jsonl").read_text()
                      .splitlines())
        trained = sum(1 for r in records if "val_qrisk" in r and r["train_loss"] is not None)
        assert row["epochs"] == trained == int(line.split(",")[column]), row
        assert row["state"] != "COMPLETE" or trained == 2, row  # --epochs 2


def test_a_study_refusal_says_an_option_is_not_given_now(search, capsys):
    _, argv = search
    i = argv.index("--encoder-length")
    assert main([*argv[:i], *argv[i + 2:], "--trials", "3"]) == 2
    err = capsys.readouterr().err
    assert "(--encoder-length: 16 then, not given now)" in err and "None" not in err, err


def test_a_space_whose_every_option_is_typed_is_refused_before_any_trial(tmp_path, daily_path, tiny_flags, capsys):
    space = tmp_path / "space.toml"
    space.write_text("[hidden-size]\nchoices = [16, 32]\n[encoder-length]\nchoices = [24, 32]\n")
    code = main(["tune", "--trials", "1", "--out-dir", str(tmp_path / "out"), "--search", str(space),
                 "--parquet-file", str(daily_path), *tiny_flags, "--epochs", "1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{space}: every option it searches is typed (--hidden-size, --encoder-length)" in err
    assert not (tmp_path / "out" / "trials").exists()


def test_drawn_heads_or_hidden_sizes_fit_the_fixed_other(caplog):
    """Attention heads must divide the hidden size: with one fixed (typed or its default), the other is drawn only
    among the values that fit, and a space where none does is refused."""
    from foxhunt.tune.run import searched_space

    space = parse_space(DEFAULT_SPACE, "default", _train_options())
    with caplog.at_level(logging.INFO, logger="foxhunt.tune"):
        heads = {p.name: p for p in searched_space(space, {"hidden_size": 6}, {"hidden_size": 6}, "d")}
    assert "hidden_size" not in heads and heads["attention_heads"].choices == (1, 2)
    assert "--attention-heads drawn from 1, 2 only: attention heads must divide the hidden size (--hidden-size 6)" \
        in caplog.text
    ranged = (Param("hidden_size", low=8, high=40, step=4), Param("dropout", low=0.0, high=0.3))
    sizes = {p.name: p for p in searched_space(ranged, {"attention_heads": 8}, {"attention_heads": 8}, "d")}
    assert sizes["hidden_size"].choices == (8, 16, 24, 32, 40) and sizes["dropout"] == ranged[1]
    fits = parse_space("[attention-heads]\nchoices = [2, 4]\n[dropout]\nlow = 0.0\nhigh = 0.3\n", "d",
                       {"attention_heads", "dropout"})
    assert searched_space(fits, {}, {"hidden_size": 8}, "d") == fits  # every choice divides 8: the space as written
    with pytest.raises(InputError, match=r"^s\.toml: no \[attention-heads\] value divides --hidden-size 5 "):
        searched_space(fits, {"hidden_size": 5}, {"hidden_size": 5}, "s.toml")


def _train_options() -> set[str]:
    return {p.name for p in typer.main.get_command(app).commands["train"].params}  # type: ignore[attr-defined]


def test_a_space_that_moves_the_split_is_refused_before_any_trial(tmp_path, daily_path, tiny_flags, capsys):
    space = tmp_path / "space.toml"
    space.write_text('[dropout]\nlow = 0.0\nhigh = 0.3\n[train-end]\nchoices = ["2024-06-03", "2024-09-02"]\n'
                     "[test_fraction]\nlow = 0.0\nhigh = 0.3\n")
    code = main(["tune", "--trials", "2", "--out-dir", str(tmp_path / "out"), "--search", str(space),
                 "--parquet-file", str(daily_path), *tiny_flags, "--epochs", "1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{space}: [train-end], [test_fraction] cannot be searched" in err and "flags of `foxhunt tune`" in err
    assert not (tmp_path / "out" / "trials").exists()


@pytest.mark.parametrize("name", sorted(FIXED))
def test_each_option_that_moves_the_split_or_the_data_is_refused_in_a_space(name):
    key = name.replace("_", "-")
    with pytest.raises(InputError, match=rf"^s\.toml: \[{key}\] cannot be searched"):
        parse_space(f"[{key}]\nchoices = [1, 2]\n", "s.toml", _train_options())


def test_every_data_option_is_classed_searchable_or_fixed():
    """A new data option must be placed: either trials may draw it (it shapes the inputs only) or it is FIXED."""
    shapes_inputs = {"encoder_length", "scaling", "vol_estimator", "vol_halflife", "vol_features", "seasonality",
                     "calendar_features", "observed", "known", "covariates", "events", "context", "covariate_scaling",
                     "static", "categorical", "anchor"}
    # quantile_head: the model's option, copied onto DataConfig (for --anchor auto), searched as a model option
    data = {f.name for f in dataclasses.fields(DataConfig)} - {"paths", "quantile_head"} | {"parquet_file"}
    options = _train_options()
    assert (data & options) - FIXED == shapes_inputs
    assert FIXED - {"train_start"} <= options  # train_start has no flag (backtest sets it) but is fixed all the same
    assert {p.name for p in parse_space(DEFAULT_SPACE, "default", options)}.isdisjoint(FIXED)


def test_train_end_without_val_end_is_refused_before_any_trial(tmp_path, daily_path, tiny_flags, capsys):
    code = main(["tune", "--trials", "1", "--out-dir", str(tmp_path / "out"), "--parquet-file", str(daily_path),
                 *tiny_flags, "--epochs", "1", "--quiet", "--train-end", "2024-07-01"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "--train-end 2024-07-01 without --val-end holds out no test period" in err
    assert "--test-fraction 0.2 applies only without --train-end" in err and "add --val-end DATE" in err
    assert not (tmp_path / "out" / "trials").exists()
