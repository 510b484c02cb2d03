"""The CLI declares each shared option once: every command that takes a group shows the same definitions, and
each command's --help reads at 80 columns."""

import re

import pytest
import typer
from typer.testing import CliRunner

from foxhunt.cli import app
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
