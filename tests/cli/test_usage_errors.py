"""A bad option value, an unknown option or a missing one, in any command: foxhunt's one line naming the option, the
value and what it accepts, status 2; never click's three lines ("Usage: ...", "Try ...", "Error: ...").

Every case fails while the command line is parsed, before any file is read: milliseconds each."""

from __future__ import annotations

import pytest

from foxhunt.cli import main

MODEL = ["--model", "run"]


@pytest.mark.parametrize(
    "argv, line",
    [
        (["train", "--epochs", "one"], "--epochs must be a positive integer or 'auto', got 'one'"),
        (["train", "--hidden-size", "x"], "--hidden-size must be an integer, got 'x'"),
        (["train", "--learning-rate", "fast"], "--learning-rate must be a number, got 'fast'"),
        (["plan-memory", "--horizon", "3.5"], "--horizon must be an integer, got '3.5'"),
        (["prepare", "-o", "store", "--workers", "-1"], "--workers must be >= 0, got '-1'"),
        (["predict", *MODEL, "-o", "f.parquet", "--batch-size", "big"], "--batch-size must be an integer, got 'big'"),
        (["evaluate", *MODEL, "--out-dir", "ev", "--threads", "two"], "--threads must be an integer, got 'two'"),
        # a number out of the option's range stops at parsing too, not as an internal error of the forward pass
        (["predict", *MODEL, "-o", "f.parquet", "--batch-size", "0"], "--batch-size must be >= 1, got '0'"),
        (["evaluate", *MODEL, "--out-dir", "ev", "--batch-size", "-3"], "--batch-size must be >= 1, got '-3'"),
        (["predict", *MODEL, "-o", "f.parquet", "--threads", "-1"], "--threads must be >= 0, got '-1'"),
        (["export", *MODEL, "-o", "m.onnx", "--threads", "-1"], "--threads must be >= 0, got '-1'"),
        (["train", "--threads", "-1"], "--threads must be >= 0, got '-1'"),
        (["predict", *MODEL, "-o", "f.parquet", "--calibration", "adaptive", "--no-calibration"],
         "--calibration adaptive and --no-calibration contradict each other; pass one of them (--no-calibration is "
         "--calibration none)"),
        (["evaluate", *MODEL, "--out-dir", "ev", "--no-calibration", "--calibration", "fixed"],
         "--calibration fixed and --no-calibration contradict each other; pass one of them (--no-calibration is "
         "--calibration none)"),
        (["backtest", "--out-dir", "bt", "--folds", "x"], "--folds must be an integer, got 'x'"),
        # train's options through backtest's and tune's pass-through parse the same way
        (["backtest", "--out-dir", "bt", "--epochs", "one"], "--epochs must be a positive integer or 'auto', got 'one'"),
        (["tune", "--trials", "5", "--dropout", "high"], "--dropout must be a number, got 'high'"),
        (["tune", "--trials", "many"], "--trials must be an integer, got 'many'"),
    ],
)
def test_a_bad_option_value_is_one_line_naming_the_option_the_value_and_what_it_accepts(argv, line, capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err == f"foxhunt: error: {line}\n" and out == ""


@pytest.mark.parametrize(
    "argv, line",
    [
        (["evaluate", *MODEL, "--out-dir", "ev", "--zzz"],
         "`foxhunt evaluate` has no option --zzz; see `foxhunt evaluate --help`"),
        (["train", "--epoch", "3"],
         "`foxhunt train` has no option --epoch (did you mean --epochs?); see `foxhunt train --help`"),
        (["predict", "-o", "f.parquet"], "`foxhunt predict` needs --model PATH; see `foxhunt predict --help`"),
        (["memory-report"], "`foxhunt memory-report` needs RUN_DIR; see `foxhunt memory-report --help`"),
        (["train", "--epochs"], "option '--epochs' requires an argument; see `foxhunt train --help`"),
        (["trian"], "no such command 'trian' (did you mean 'train'?); see `foxhunt --help`"),
    ],
)
def test_an_unknown_or_missing_option_is_one_line_that_says_where_the_help_is(argv, line, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err == f"foxhunt: error: {line}\n"


def test_a_config_file_or_keyword_below_an_options_minimum_is_refused_as_the_flag_is():
    from foxhunt.errors import InputError
    from foxhunt.predict.config import PredictConfig
    from foxhunt.settings import build
    from foxhunt.train.config import TrainConfig

    with pytest.raises(InputError, match=r"^--batch-size must be >= 1, got 0$"):
        build(PredictConfig, {"model": "run", "out": "f.parquet", "batch_size": 0})
    with pytest.raises(InputError, match=r"^--threads must be >= 0, got '-1'$"):
        build(TrainConfig, {"threads": "-1"})
    assert build(TrainConfig, {"threads": 0}).num_threads == 0


def test_debug_adds_the_traceback_before_the_line(capsys):
    assert main(["train", "--epochs", "one", "--debug"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.endswith("foxhunt: error: --epochs must be a positive integer or "
                                                         "'auto', got 'one'\n")


def test_foxhunt_alone_still_shows_its_help(capsys):
    assert main([]) == 2
    assert capsys.readouterr().err.startswith("Usage: foxhunt [OPTIONS] COMMAND")
