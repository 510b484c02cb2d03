"""The CLI declares each shared option once: every command that takes a group shows the same definitions, and
each command's --help reads at 80 columns."""

import re

import pytest
import typer
from typer.testing import CliRunner

from foxhunt.cli import app, main
from foxhunt.cli.options import CONSOLE_OPTIONS, DATA_OPTIONS, MODEL_OPTIONS, THREADS

COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]


def _definition(p):  # what a user sees of an option: its flags, default, help and panel
    return (p.name, tuple(p.opts), tuple(p.secondary_opts), p.default, p.help, getattr(p, "rich_help_panel", None))


# -v / -q in every command that logs (backtest and tune take train's); sample and memory-report log nothing.
LOGGING = ("train", "predict", "evaluate", "export", "prepare", "inspect", "plan-memory")


@pytest.mark.parametrize(("group", "commands"), [(DATA_OPTIONS, ("train", "prepare", "inspect", "plan-memory")),
                                                 (MODEL_OPTIONS, ("train", "plan-memory")),
                                                 (CONSOLE_OPTIONS, LOGGING),
                                                 ((THREADS,), ("train", "predict", "evaluate", "export", "plan-memory"))])
def test_a_group_is_the_same_options_on_every_command(group, commands) -> None:
    names = {p.name for p in group}
    seen = []
    for name in commands:
        params = {p.name: p for p in COMMANDS[name].params}
        assert names <= set(params), name
        seen.append([_definition(params[n]) for n in sorted(names)])
    assert all(s == seen[0] for s in seen)


def test_every_data_option_is_declared_once() -> None:
    import inspect as py_inspect

    import foxhunt.cli.data as data_cmds
    import foxhunt.cli.training as training_cmds

    for module in (data_cmds, training_cmds):  # no command writes a data option out in its own signature
        source = py_inspect.getsource(module)
        for p in DATA_OPTIONS:
            assert f"{p.name}:" not in source, (module.__name__, p.name)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_fits_80_columns(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "80", "TERM": "dumb"}, prog_name="foxhunt")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    flags = {o for p in COMMANDS[command].params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}
    shown = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", result.output))
    assert flags <= shown, sorted(flags - shown)  # each flag's name whole on one line, never cut by a wrap


# Each option is declared once, on its configuration field (foxhunt/flags.py): the CLI's options, the --config keys
# and foxhunt.fit's keywords are all derived from the fields. The tests below fail when an option is written out a
# second time anywhere, or when one of the three stops being derived.

# The configurations whose options each command takes (backtest and tune take train's through its parser too).
RUN_COMMANDS = {"train": ("DataConfig", "ModelConfig", "TrainConfig", "SessionConfig"), "prepare": ("DataConfig",),
                "inspect": ("DataConfig",), "plan-memory": ("DataConfig", "ModelConfig", "TrainConfig"),
                "backtest": ("BacktestConfig",), "tune": ("TuneConfig",)}
# A run command's options that configure nothing saved or trained: the command's own (where its output goes, how
# it works) and the CLI's (-v / -q, --config). They stay declared in cli/.
COMMAND_OWN = {"prepare": {"out", "workers", "executor"}, "inspect": {"files", "as_json"}}
CLI_OWN = {"verbose", "quiet", "config"}
# Commands that read a trained model declare a few flags of the same name with a meaning of their own: the store
# or the bars to forecast or check (not to train from), the forward pass's batch, the files overriding the model's.
OWN_MEANING = {("predict", "features"), ("predict", "batch_size"), ("predict", "covariates"), ("predict", "events"),
               ("evaluate", "features"), ("evaluate", "batch_size"), ("evaluate", "covariates"),
               ("evaluate", "events"), ("evaluate", "out_dir"), ("export", "parquet_file")}
# One non-default value for every option of a run: each must reach its own field (and nothing else).
RUN_VALUES = {
    "parquet_file": ["a.parquet", "b/"], "timestamp_col": "ts", "symbol_col": "sym", "timezone": "America/New_York",
    "date_format": "%Y-%m-%d %H:%M", "calendar": "24/7", "since": "2020-01-02", "until": "2024-01-01",
    "price_scale": 100.0, "contracts": "each", "adjust": "difference", "roll_confirm": 3, "target": "log_range",
    "encoder_length": 24, "horizon": 4, "train_end": "2022-01-01", "val_end": "2023-01-01", "val_fraction": 0.3,
    "test_fraction": 0.1, "scaling": "series", "vol_estimator": "returns", "vol_halflife": 7.5, "vol_features": True,
    "seasonality": False, "calendar_features": True, "fill_gaps": True, "observed": "vix,flow", "known": "hol",
    "covariates": ["c1.csv", "c2.csv"], "events": "ev.csv", "context": "NQ,ZN", "covariate_scaling": "global",
    "static": "sector", "categorical": "sector,hol",
    "hidden_size": 24, "attention_heads": 3, "dropout": 0.2, "lstm_layers": 2, "quantiles": "0.05,0.5,0.95",
    "quantile_head": "tied", "activation_checkpointing": True,
    "epochs": 7, "batch_size": 64, "validation_batch_size": 256, "learning_rate": 0.003, "weight_decay": 0.001,
    "grad_clip": 0.5, "warmup_fraction": 0.1, "patience": 4, "device": "cpu", "seed": 3, "run_dir": "runs/x",
    "memory_log_every": 10, "memory_budget": "2GiB", "optimizer_state": "cpu", "max_train_batches": 9, "threads": 2,
    "precision": "32", "window_run": 8, "loss_weight": "scale", "max_bad_steps": 6, "progress": False,
    "checkpoint_every": 50, "deterministic": True, "init_from": "runs/panel",
}


def _declared(*classes: str):
    """{class name: its options} and their names, of these configurations (train's by default)."""
    from foxhunt import flags
    from foxhunt.backtest.config import BacktestConfig
    from foxhunt.data.config import DataConfig
    from foxhunt.model.config import ModelConfig
    from foxhunt.train.config import SessionConfig, TrainConfig
    from foxhunt.tune.config import TuneConfig

    known = {c.__name__: c for c in (DataConfig, ModelConfig, TrainConfig, SessionConfig, BacktestConfig, TuneConfig)}
    chosen = [known[c] for c in classes or RUN_COMMANDS["train"]]
    return {cls.__name__: flags.options(cls) for cls in chosen}, flags.names(*chosen)


def _flags(values: dict) -> list[str]:
    """`values` as train's command line."""
    argv = []
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else f"--no-{flag[2:]}")
        else:
            argv += [x for v in (value if isinstance(value, list) else [value]) for x in (flag, str(v))]
    return argv


def _toml(values: dict) -> str:
    """`values` as a --config file: grouped in tables of its own naming, half the keys with dashes."""
    import json

    lines = ["[first]"]
    for i, (name, value) in enumerate(values.items()):
        if i == len(values) // 2:
            lines.append("[second.nested]")
        key = name.replace("_", "-") if i % 2 else name
        lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def passed_to_fit(monkeypatch):
    """What `foxhunt train` passes to foxhunt.fit (nothing is trained)."""
    import foxhunt.api.training

    calls = []
    monkeypatch.setattr(foxhunt.api.training, "fit", lambda *args, **kw: calls.append((args, kw)))
    return calls


@pytest.mark.parametrize("command", sorted(RUN_COMMANDS))
def test_every_option_of_a_run_command_is_one_declared_field_or_the_commands_own(command) -> None:
    declared, names = _declared(*RUN_COMMANDS[command])
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    by_name = {o.name: o for opts in declared.values() for o in opts}
    params = {p.name: p for p in COMMANDS[command].params}
    for name, p in params.items():
        if name in COMMAND_OWN.get(command, set()) | CLI_OWN:
            continue
        assert name in names, f"{command} --{name}: declared in cli/, not on a configuration field"
        o = by_name.get(name)
        if o is None:  # a switch: --use-gpu
            continue
        assert (p.help, p.rich_help_panel, p.required) == (o.help, o.panel, o.required), (command, name)
        if (command, name) != ("plan-memory", "memory_budget") and not o.required:  # plans for 4GiB by default
            assert p.default == o.text_default, (command, name)
    if command != "plan-memory":  # which takes some of the training options; only train reads a feature store
        expected = set(names) - ({"features"} if command in ("prepare", "inspect") else set())
        assert set(params) - CLI_OWN - COMMAND_OWN.get(command, set()) == expected


def test_commands_reading_a_model_redeclare_only_the_flags_whose_meaning_is_theirs() -> None:
    declared, names = _declared(*{c for cs in RUN_COMMANDS.values() for c in cs})
    helps: dict[str, set] = {}
    for o in (o for opts in declared.values() for o in opts):
        helps.setdefault(o.name, set()).add(o.help)
    for command in ("predict", "evaluate", "export"):
        for p in COMMANDS[command].params:
            if p.name in helps and p.help not in helps[p.name]:
                assert (command, p.name) in OWN_MEANING, f"{command} --{p.name} declared again with its own help"


# predict and evaluate: their options are the fields of their records (predict/config.py, evaluate/config.py), but
# for the bars (train's --parquet-file), torch's threads and -v / -q, which they take as train declares them.
FORECAST_SHARED = {"parquet_file", "threads"} | CLI_OWN


def _forecast_config(command: str) -> type:
    from foxhunt.evaluate.config import EvaluateConfig
    from foxhunt.predict.config import PredictConfig

    return {"predict": PredictConfig, "evaluate": EvaluateConfig}[command]


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_every_option_of_predict_and_evaluate_is_a_field_of_their_record(command) -> None:
    from foxhunt import flags

    declared = {o.name: o for o in flags.options(_forecast_config(command))}
    params = {p.name: p for p in COMMANDS[command].params}
    assert set(params) - FORECAST_SHARED == set(declared)
    for name, o in declared.items():
        p = params[name]
        assert (p.help, p.rich_help_panel, p.required) == (o.help, o.panel, o.required), (command, name)
        assert o.required or p.default == o.text_default, (command, name)
    train, _ = _declared()
    trains = {o.name: o for opts in train.values() for o in opts}
    for name in ("since", "until", "device"):  # the training run's options again, the model's by default
        assert declared[name].help == trains[name].help


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_predict_and_evaluate_build_their_record_from_the_command_line(command, monkeypatch, tmp_path) -> None:
    """What was typed reaches the record's fields, read as a config's options are; the rest are its defaults."""
    from pathlib import Path

    import foxhunt.api.forecaster
    import foxhunt.evaluate.run

    seen = []

    def stop(*args, **kw):
        seen.append(args)
        raise typer.Exit(0)

    monkeypatch.setattr(foxhunt.evaluate.run, "evaluate_run", stop)
    monkeypatch.setattr(foxhunt.api.forecaster.Forecaster, "load", lambda *a, **kw: stop(kw))
    cls = _forecast_config(command)
    out = ["--out", "f.parquet"] if command == "predict" else ["--out-dir", "o"]
    assert main([command, "--model", "m", *out, "-f", "a.parquet", "--start", "2024-01-02", "--batch-size", "8",
                 "--calibration", "adaptive", "--covariates", "c1.csv", "--covariates", "c2.csv",
                 "--timezone", "America/New_York", "--threads", "1"]) == 0
    if command == "evaluate":
        cfg, paths = seen[0]
        assert paths == ("a.parquet",)
        assert cfg == cls(model=Path("m"), out_dir=Path("o"), start="2024-01-02", batch_size=8,
                          calibration="adaptive", covariates=("c1.csv", "c2.csv"), timezone="America/New_York")
        assert (cfg.method, cfg.device, cfg.since, cfg.features) == ("adaptive", "cpu", None, None)
    else:
        assert seen[0][0] == {"covariates": ("c1.csv", "c2.csv"), "events": None, "since": None, "until": None,
                           "timezone": "America/New_York", "calibration": "adaptive"}


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_a_store_with_since_is_refused_before_a_model_is_read(command, tmp_path, capsys) -> None:
    out = ["--out", str(tmp_path / "f.parquet")] if command == "predict" else ["--out-dir", str(tmp_path / "o")]
    code = main([command, "--model", str(tmp_path / "no-model"), *out, "--features", str(tmp_path / "store"),
                 "--since", "2024-01-01"])
    err = capsys.readouterr().err
    assert code == 2 and "--since / --until bound the bars read" in err, err
    assert not (tmp_path / "o").exists() and not (tmp_path / "f.parquet").exists()


def test_no_default_is_written_out_again() -> None:
    """A string default of a field appears in no module that derives options (a name that is also an option name,
    like "device", is a name; "foxhunt", tune's study name, is also the package's logger)."""
    import ast
    from pathlib import Path

    import foxhunt

    declared, names = _declared(*{c for cs in RUN_COMMANDS.values() for c in cs})
    defaults = {o.text_default for opts in declared.values() for o in opts if isinstance(o.text_default, str)}
    src = Path(foxhunt.__file__).parent
    for path in ("settings.py", "api/training.py", "cli/options.py", "cli/training.py", "cli/data.py"):
        consts = [n.value for n in ast.walk(ast.parse((src / path).read_text())) if isinstance(n, ast.Constant)]
        repeated = sorted({c for c in consts if isinstance(c, str) and c in defaults - {"foxhunt"} and c not in names})
        assert not repeated, f"{path} writes out the defaults {repeated}"


def test_settings_names_no_option() -> None:
    """settings.py reads values by the declarations: no option's name (or a `.get` per option) in it."""
    import ast
    from pathlib import Path

    import foxhunt.settings

    names = {p.name for p in COMMANDS["train"].params} - CLI_OWN
    tree = ast.parse(Path(foxhunt.settings.__file__).read_text())
    consts = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not consts & names, sorted(consts & names)
    gets = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "get"]
    assert not gets, f"settings.py lines {gets} read an option by name"


@pytest.mark.parametrize("command", ["train", "prepare", "plan-memory", "backtest", "tune"])
def test_the_config_file_keys_are_the_long_flag_names(command, tmp_path) -> None:
    """Each option of a command taking --config is its long flag's name: `batch-size = 64` is `--batch-size 64`."""
    from foxhunt.settings import load_config_file

    params = [p for p in COMMANDS[command].params if p.param_type_name == "option"]
    for p in params:
        assert p.name == max(p.opts, key=len)[2:].replace("-", "_"), (command, p.opts)
    cfg = tmp_path / "all.toml"
    cfg.write_text("\n".join(f"{p.name.replace('_', '-')} = 1" for p in params) + "\n")
    assert set(load_config_file(cfg, (p.name for p in params))) == {p.name for p in params}


def test_backtest_and_tune_read_their_own_options_and_trains_from_one_config_file(tmp_path, monkeypatch) -> None:
    import foxhunt.backtest.run

    seen = []
    monkeypatch.setattr(foxhunt.backtest.run, "run_backtest", lambda *configs: seen.append(configs))
    cfg = tmp_path / "bt.toml"
    cfg.write_text('[backtest]\nfolds = 3\ntest-length = "6mo"\nrefit = "once"\n[train]\nepochs = 2\nhidden-size = 12\n')
    assert main(["backtest", "--out-dir", str(tmp_path / "bt"), "--config", str(cfg), "--folds", "4",
                 "--parquet-file", "x.parquet", "--threads", "1"]) == 0
    (bt, data, model, train), = seen
    assert (bt.folds, str(bt.test_length), str(bt.val_length), bt.refit) == (4, "6mo", "6mo", 0)
    assert (data.paths, model.hidden_size, train.epochs, train.num_threads) == (("x.parquet",), 12, 2, 1)


def test_fit_takes_exactly_the_declared_options() -> None:
    import inspect as py_inspect

    import foxhunt

    train = {p.name for p in COMMANDS["train"].params} - CLI_OWN
    keywords = [p.name for p in py_inspect.signature(foxhunt.fit).parameters.values()
                if p.kind is py_inspect.Parameter.KEYWORD_ONLY]
    assert sorted(keywords) == sorted(train)
    with pytest.raises(foxhunt.InputError, match=r"unknown option\(s\) hiden_size \(did you mean hidden_size\?\)"):
        foxhunt.fit(hiden_size=8)


def test_flags_a_config_file_and_keywords_build_the_same_run(tmp_path, passed_to_fit, monkeypatch) -> None:
    """Every option, given a non-default value on the command line, in a grouped --config file or as a keyword,
    reaches the same field: the three are one declaration read three ways."""
    import dataclasses

    import foxhunt
    from foxhunt.data.config import DataConfig

    declared, names = _declared()
    session = {o.name for o in declared["SessionConfig"]}
    # a store, --device cuda: below; --anchor needs a returns target and the independent head, which RUN_VALUES
    # change: test_anchor_reaches_its_field_three_ways
    assert set(RUN_VALUES) == set(names) - session - {"features", "use_gpu", "anchor"}
    monkeypatch.setattr(DataConfig, "__post_init__", lambda self: None)  # the names above need no real files
    cfg = tmp_path / "run.toml"
    cfg.write_text(_toml(RUN_VALUES))
    for argv in (_flags(RUN_VALUES), ["--config", str(cfg)]):
        assert main(["train", *argv]) == 0
    assert [args for args, _ in passed_to_fit] == [(), ()]
    built = [foxhunt.RunConfig.from_options(**kw).to_dict() for _, kw in passed_to_fit]
    built.append(foxhunt.RunConfig.from_options(**RUN_VALUES).to_dict())
    assert built[0] == built[1] == built[2]
    defaults = foxhunt.RunConfig.from_options(parquet_file="a.parquet").to_dict()
    for section, values in built[0].items():
        same = [k for k, v in values.items() if v == defaults[section][k] and k not in ("encoder_length", "horizon",
                                                                                          "exchange_tz", "train_start",
                                                                                          "features", "anchor", "anchored")]
        assert not same, f"{section}: {same} kept their defaults"
    assert dataclasses.asdict(foxhunt.RunConfig.from_options(parquet_file="a", use_gpu=True).training)["device"] == "cuda"


def test_the_command_line_beats_the_file_which_beats_the_default(tmp_path, passed_to_fit) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text('[train]\nepochs = 4\nbatch-size = "auto"\n[model]\nhidden_size = 12\n')
    assert main(["train", "--config", str(cfg), "--epochs", "2", "-q"]) == 0
    (_, kw), = passed_to_fit
    assert kw == {"epochs": 2, "batch_size": "auto", "hidden_size": 12}  # -q and --config are the CLI's own


@pytest.mark.parametrize("keywords, line", [
    ({"horizon": "x"}, "--horizon must be an integer, got 'x'"),
    ({"batch_size": "big"}, "--batch-size must be a positive integer or 'auto', got 'big'"),
    ({"quantiles": "0.1,x"}, "--quantiles must be comma-separated numbers like 0.1,0.5,0.9, got '0.1,x'"),
    ({"memory_budget": "lots"}, "--memory-budget 'lots' is not understood; write e.g. 4GiB, 512MiB, 4GB or a count "
                                "of bytes"),
    ({"use_gpu": True, "device": "cpu"}, "--use-gpu contradicts --device cpu; pass one of them"),
])
def test_a_bad_value_is_the_same_line_from_a_flag_a_file_or_a_keyword(keywords, line, tmp_path, capsys) -> None:
    import foxhunt

    cfg = tmp_path / "bad.toml"
    cfg.write_text(_toml(keywords))
    for argv in (_flags(keywords), ["--config", str(cfg)]):
        assert main(["train", *argv]) == 2
        assert capsys.readouterr().err == f"foxhunt: error: {line}\n"
    with pytest.raises(foxhunt.InputError) as e:
        foxhunt.RunConfig.from_options(**keywords)
    assert str(e.value) == line


def test_resuming_takes_training_options_and_refuses_other_data_or_model_options(tmp_path) -> None:
    """A resumed run's options given now: training ones override the saved ones, a data or model option must be
    the run's (one given with the run's own value is no change, e.g. from the run's --config file)."""
    import json

    import foxhunt
    from foxhunt.data.dataset.saved_format import FORMAT_VERSION

    run = tmp_path / "run"
    run.mkdir()
    saved = foxhunt.RunConfig.from_options(parquet_file="a.parquet", hidden_size=8, encoder_length=16)
    (run / "config.json").write_text(json.dumps({**saved.to_dict(), "format_version": FORMAT_VERSION}))
    cfg = foxhunt.RunConfig.resumed(run, epochs=3, threads=2, use_gpu=True, hidden_size=8, encoder_length=16,
                                    parquet_file="a.parquet")
    assert (cfg.training.epochs, cfg.training.num_threads, cfg.training.device) == (3, 2, "cuda")
    # a run saved with relative paths (before runs saved them absolute) resumes with them resolved, as read
    assert (cfg.data, cfg.model) == (saved.data.with_absolute_paths(), saved.model)
    assert cfg.training.run_dir == str(run)
    with pytest.raises(foxhunt.InputError, match="--hidden-size cannot change when resuming .*--hidden-size 8"):
        foxhunt.RunConfig.resumed(run, hidden_size=32)
    with pytest.raises(foxhunt.InputError, match="--horizon cannot change"):
        foxhunt.RunConfig.resumed(run, horizon=4)


def test_the_configurations_declare_options_without_the_cli() -> None:
    """data/, model/ and train/ carry plain metadata: importing them (and settings) loads neither typer nor cli/."""
    import subprocess
    import sys

    code = ("import sys, foxhunt.flags, foxhunt.data.config, foxhunt.model.config, foxhunt.train.config, "
            "foxhunt.settings; print(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click') "
            "or m.startswith('foxhunt.cli')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]"]


def test_anchor_reaches_its_field_three_ways(tmp_path, passed_to_fit, monkeypatch) -> None:
    """--anchor on the command line, in a --config file and as a keyword: the data's field, and the model anchored."""
    import foxhunt
    from foxhunt.data.config import DataConfig

    monkeypatch.setattr(DataConfig, "__post_init__", lambda self: None)
    values = {"parquet_file": ["a.parquet"], "anchor": "garch_t"}
    cfg = tmp_path / "run.toml"
    cfg.write_text(_toml(values))
    for argv in (_flags(values), ["--config", str(cfg)]):
        assert main(["train", *argv]) == 0
    built = [foxhunt.RunConfig.from_options(**kw) for _, kw in passed_to_fit]
    built.append(foxhunt.RunConfig.from_options(**values))
    assert [(r.data.anchor, r.model.anchored, r.data.quantiles) for r in built] == [("garch_t", True, (0.1, 0.5, 0.9))] * 3
