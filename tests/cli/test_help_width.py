"""Every --help reads on an 80-column terminal: no line over 80, nothing cut, every flag whole, options in their
panels, and each option's help one line (plus the "[default: ...]" when it does not fit beside it).

The bound on an option is two lines of help: its sentence on one line (what the docs explain at length is not
repeated here) and the default click appends, which goes to the next line when the sentence leaves no room. A
`--flag / --no-flag` pair too long for the flag column has a line of its own above its help, not counted."""

from __future__ import annotations

import re

import pytest
import typer

from foxhunt.cli import app, main

WIDTH = 80
COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]
UNPANELLED = {"help", "config"}  # the options every command has, under "Options"
FLAG = re.compile(r"(?<![\w-])--?[a-zA-Z][a-zA-Z0-9-]*")


@pytest.fixture
def render(monkeypatch, capsys):
    """`foxhunt ... --help` as a terminal of WIDTH columns shows it: through main(), which sizes the help from
    $COLUMNS (typer's CliRunner would force click's width to 80 whatever COLUMNS says, 2 more than a terminal)."""

    def run(*args: str, width: int = WIDTH) -> str:
        monkeypatch.setenv("COLUMNS", str(width))
        monkeypatch.setenv("TERM", "dumb")
        capsys.readouterr()
        assert main([*args, "--help"]) == 0
        return capsys.readouterr().out

    return run


def records(text: str) -> dict[str, list[tuple[str, list[str]]]]:
    """Each section's (flag column, help lines), read off the rendered help: a record starts two spaces in, its
    help continues on lines indented further; the flag column ends at the first gap of two spaces."""
    sections: dict[str, list[tuple[str, list[str]]]] = {}
    current: list[tuple[str, list[str]]] | None = None
    for line in text.splitlines():
        if re.fullmatch(r"[A-Z][\w ]*:", line):
            current = sections.setdefault(line[:-1], [])
        elif current is not None and re.match(r"  \S", line):
            head, *rest = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            current.append((head, rest))
        elif not line.strip():
            current = None
        elif current is not None:
            current[-1][1].append(line.strip())
    return sections


def test_the_help_is_really_rendered_80_wide(render) -> None:
    """A narrower render would pass the checks below trivially, one that ignored $COLUMNS would not test it: the
    help follows the terminal's width, and at 80 its text fills lines to click's 78."""
    assert max(len(line) for line in render("train", width=60).splitlines()) <= 60
    assert 74 <= max(len(line) for line in render("train").splitlines()) <= WIDTH


def test_the_command_list_fits_and_each_summary_is_whole(render) -> None:
    out = render()
    assert max(len(line) for line in out.splitlines()) <= WIDTH and "…" not in out
    listed = dict(records(out)["Commands"])
    assert set(listed) == set(COMMANDS)
    for name, summary in listed.items():
        assert len(summary) == 1 and not summary[0].endswith("..."), (name, summary)  # click cuts with "..."
    assert "--debug" in dict(records(out)["Options"])


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_reads_at_80_columns(render, command: str) -> None:
    out = render(command)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= WIDTH, max(lines, key=len)
    assert "…" not in out
    assert not [line for line in lines if re.search(r"\w-$", line)]  # no word broken at its hyphen (--parquet- / file)
    sections = records(out)
    for param in COMMANDS[command].params:
        if param.param_type_name != "option" or param.hidden:
            continue
        flags = {*param.opts, *param.secondary_opts}
        found = [(name, head, text) for name, rs in sections.items() for head, text in rs
                 if flags & set(FLAG.findall(head))]
        assert len(found) == 1, (param.name, found)
        section, head, text = found[0]
        assert set(FLAG.findall(head)) == flags, (param.name, head)  # every flag whole, in the flag column
        assert section == (param.rich_help_panel or "Options"), (param.name, section)
        assert param.rich_help_panel or param.name in UNPANELLED, f"--{param.name} has no panel"
        assert 1 <= len(text) <= 2, (param.name, text)
        assert text[0].startswith(param.help or ""), (param.name, text)  # the sentence on one line


def test_end_help_says_the_bound_select_origins_keeps() -> None:
    """--end keeps first forecast steps before a time, and through a bare date's whole day (parse_time, then
    select_origins' first < end): its one line says so, not 'latest' (which would include the time itself)."""
    import datetime as dt

    from foxhunt.predict.origins import parse_time

    day = int(dt.datetime(2024, 9, 30, tzinfo=dt.UTC).timestamp() * 1e9)
    assert parse_time("2024-09-30", "--end", end=True) == day + 86_400 * 10**9  # the whole day, then exclusive
    assert parse_time("2024-09-30T00:00", "--end", end=True) == day
    (end,) = [p for p in COMMANDS["predict"].params if p.name == "end"]
    assert "before" in end.help and "through date" in end.help and "Latest" not in end.help
