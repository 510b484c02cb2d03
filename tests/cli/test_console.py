"""What `foxhunt train` prints at each verbosity, captured in-process on a fixture (a few seconds a run): the default
header, one line per epoch and the final lines; --verbose adds the plan table and the [MEMORY] records; --quiet keeps
the final line and warnings (and in predict and evaluate, the result and warnings); train.log holds everything
whatever the console showed."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path

import pytest

from foxhunt.cli import main
from foxhunt.console import ConsoleHandler

ES = "es_fut_ohlcv1h_databento.parquet"
PLAN_TABLE = "largest training batch that fits"
# the tiny model without --no-progress: the bar must stay off when stderr is not a terminal
SMALL = ["--hidden-size", "8", "--attention-heads", "2", "--encoder-length", "16", "--horizon", "3", "--threads", "1",
         "--epochs", "1", "--max-train-batches", "3", "--batch-size", "32"]


def train(tmp_path, fixtures_dir, capsys, *extra: str, name: str = "run") -> tuple[int, list[str], str, str]:
    """Exit status, console lines (stderr), train.log text and the run directory."""
    run = tmp_path / name
    code = main(["train", *SMALL, "--parquet-file", str(fixtures_dir / ES), "--run-dir", str(run), *extra])
    err = capsys.readouterr().err
    return code, err.splitlines(), (run / "train.log").read_text(), str(run)


def adaptive_won(run: str) -> bool:
    """The run's validation verdict on its adaptive shifts (train/calibrate.py): what --calibration auto applies."""
    return json.loads((Path(run) / "calibration.json").read_text())["adaptive"]["fitted_on"]["beats_own"]


def others(lines: list[str]) -> list[str]:
    """The lines that are not warnings (the shared test machine may warn that its CPUs are busy)."""
    return [line for line in lines if not line.startswith("WARNING ")]


def test_default_prints_the_header_one_line_per_epoch_and_the_final_lines(tmp_path, fixtures_dir, capsys):
    code, lines, log, run = train(tmp_path, fixtures_dir, capsys)
    assert code == 0
    text = "\n".join(lines)
    for start in ("run directory ", "data: es_fut_ohlcv1h_databento.parquet, ", "model: Temporal Fusion Transformer, ",
                  "plan: train batch 32 needs ", "baseline ", "best epoch "):
        assert sum(line.startswith(start) for line in lines) == 1, start
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert len(epochs) == 2 and epochs[0].startswith("epoch 0/1 (the anchor, untrained)  val_loss ")
    assert epochs[1].startswith("epoch 1/1  train_loss ") and all("mem peak host " in e for e in epochs)
    [cal] = [line for line in lines if line.startswith("calibration on validation (")]
    # and what the default (auto) gives this anchored model: the adaptive shifts if they beat its own quantiles on
    # validation, its own quantiles if not, as its calibration.json says
    change = r"pinball loss on validation [+-]\d+\.\d%"
    assert re.search(r"shifts saved; " + (rf"forecasts apply the adaptive shifts, started from the model's own "
                                           rf"quantiles \({change}\)$" if adaptive_won(run) else
                                           rf"forecasts are the model's own quantiles \(the adaptive shifts: {change}; "
                                           r"--calibration adaptive or fixed applies shifts anyway\)$"), cal), cal
    assert f"  foxhunt evaluate --model {run} --out-dir {run}/eval --parquet-file {fixtures_dir / ES}" in lines
    assert f"  foxhunt memory-report {run}" in lines
    assert "[MEMORY]" not in text and PLAN_TABLE not in text and "data summary:" not in text
    assert "\x1b[" not in text and "\r" not in text and "━" not in text  # not a terminal: no colour, no bar
    for line in lines:  # the file holds every console line, and the details besides
        assert line.strip() in log
    assert "[MEMORY] phase=val_end" in log and PLAN_TABLE in log and "data summary:" in log


def test_verbose_shows_the_plan_table_and_every_memory_record(tmp_path, fixtures_dir, capsys):
    code, lines, log, _ = train(tmp_path, fixtures_dir, capsys, "-v")
    assert code == 0
    text = "\n".join(lines)
    assert PLAN_TABLE in text and "data summary:" in text
    shown = re.findall(r"^\[MEMORY\] (phase=\S+)", text, re.MULTILINE)
    assert shown == re.findall(r"\[MEMORY\] (phase=\S+)", log)  # every record of the file, in its order
    assert {"phase=run_start", "phase=val_end", "phase=checkpoint"} <= set(shown)
    assert sum(line.startswith("epoch 1/1  ") for line in lines) == 1 and PLAN_TABLE in log


def test_quiet_prints_only_the_final_line_and_warnings(tmp_path, fixtures_dir, capsys):
    code, lines, log, run = train(tmp_path, fixtures_dir, capsys, "--quiet")
    assert code == 0
    assert len(others(lines)) == 1 and others(lines)[0].startswith("best epoch ")
    assert others(lines)[0].endswith(f"run directory {run}")
    assert "[MEMORY] phase=val_end" in log and PLAN_TABLE in log and "epoch 1/1  " in log
    # -q means the same in the commands that use the run: no data or calibration lines, the result on stdout
    model = ["--model", run, "--parquet-file", str(fixtures_dir / ES), "--threads", "1"]
    predict = ["predict", *model, "--out", str(tmp_path / "f.parquet")]
    assert main(predict) == 0
    said = "calibrated forecasts: adaptive scaled shifts per series, started from the model's own quantiles" \
        if adaptive_won(run) else "calibration none (--calibration auto: the adaptive shifts did not beat"
    assert said in capsys.readouterr().err  # what -q hides
    assert main([*predict, "-q"]) == 0
    out, err = capsys.readouterr()
    assert others(err.splitlines()) == [] and out.startswith("wrote ")
    assert main(["evaluate", *model, "--out-dir", str(tmp_path / "eval"), "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert others(err.splitlines()) == [] and "qrisk p10" in out and out.endswith("report.html\n")


def test_an_injected_oom_is_a_highlighted_line_at_the_default_verbosity(tmp_path, fixtures_dir, capsys,
                                                                        monkeypatch):
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "oom@train:2")
    code, lines, log, _ = train(tmp_path, fixtures_dir, capsys)
    assert code == 0
    oom = [line for line in lines if line.startswith("WARNING out of memory in training step 2")]
    assert len(oom) == 1 and "retrying" in oom[0]
    summary = next(line for line in lines if " in this run (" in line)
    assert summary.startswith("WARNING ") and "out of memory in training step 2" in summary
    assert "[MEMORY]" not in "\n".join(lines)
    assert "reason='out of memory in training step 2" in log  # the record, with its reason, in the file


def test_a_skipped_non_finite_batch_is_a_highlighted_line_even_when_quiet(tmp_path, fixtures_dir, capsys,
                                                                         monkeypatch):
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "nan@train:2")
    code, lines, _, _ = train(tmp_path, fixtures_dir, capsys, "-q")
    assert code == 0
    assert any(line.startswith("WARNING non-finite training step 2 ") for line in lines)
    assert len(others(lines)) == 1 and others(lines)[0].startswith("best epoch ")


def test_resume_takes_the_verbosity_flags_and_says_the_sizes_are_the_saved_ones(tmp_path, fixtures_dir, capsys,
                                                                                 monkeypatch):
    monkeypatch.setenv("FOXHUNT_FAULT_INJECT", "kill@epoch:1")
    code, _, _, run = train(tmp_path, fixtures_dir, capsys, "--epochs", "2")
    assert code == 130
    monkeypatch.delenv("FOXHUNT_FAULT_INJECT")
    assert main(["train", "--run-dir", run, "--resume", "-v"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert any(line.startswith("plan: ") and line.endswith("(as resolved when the run started)") for line in lines)
    assert any(line.startswith("resuming at epoch 2") for line in lines)
    assert any(line.startswith("epoch 2/2  ") for line in lines)


def test_verbose_and_quiet_together_are_bad_input(tmp_path, fixtures_dir, capsys):
    code = main(["train", *SMALL, "--parquet-file", str(fixtures_dir / ES), "--run-dir", str(tmp_path / "r"),
                 "-v", "-q"])
    assert code == 2 and "--verbose and --quiet" in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal, no_color, coloured", [(True, "", True), (True, "1", False), (False, "", False)])
def test_warnings_are_coloured_only_on_a_terminal(monkeypatch, terminal, no_color, coloured):
    monkeypatch.setenv("NO_COLOR", no_color)
    stream = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    handler = ConsoleHandler()
    handler.verbosity = 1
    for level, msg in ((logging.WARNING, "low memory"), (logging.INFO, "detail"), (logging.ERROR, "broken")):
        handler.handle(logging.LogRecord("foxhunt.x", level, __file__, 1, msg, None, None))
    expected = (["\x1b[1;33mWARNING low memory\x1b[0m", "\x1b[1;31mERROR broken\x1b[0m"] if coloured
                else ["WARNING low memory", "ERROR broken"])  # the untagged INFO record is a --verbose detail
    assert stream.getvalue().splitlines() == expected


def test_results_on_the_bundled_sample_say_it_is_simulated(tmp_path, fixtures_dir, capsys):
    """A quant must not take a claim on the generated sample for evidence on real ES: the data line and the final
    claim both say it is simulated; a user's own file is never called that."""
    run = tmp_path / "sample"
    code = main(["train", *SMALL, "--run-dir", str(run)])  # no file: the bundled sample
    lines = others(capsys.readouterr().err.splitlines())
    assert code == 0
    assert [line for line in lines if line.startswith("data: ")][0].startswith("data: bundled ES sample (simulated), ")
    final = [line for line in lines if line.startswith("best epoch ")]
    assert len(final) == 1 and "the bundled sample is a simulation" in final[0] and "not evidence on real ES" in final[0]
    _, own, _, _ = train(tmp_path, fixtures_dir, capsys, name="own")
    assert not any("simulat" in line for line in own)
