"""MkDocs hook: a line `<!-- cli-reference -->` in a page becomes the reference of every foxhunt command.

mkdocs.yml names it (`hooks: [docs/hooks/cli_reference.py]`). The reference is generated from the CLI itself
(the typer app in foxhunt/cli, as click commands), so it cannot drift from `--help`: for each command a
heading (`## foxhunt NAME`), its usage and help text, and its arguments and options in tables (option with its
metavar, default, description), one table per help panel (Data, Model, Training, ...) in the order --help
shows them. The option cells are what `foxhunt NAME --help` prints, split into columns. Plain markdown (tables
need only MkDocs' default extensions); help texts are escaped outside their `code spans`, so `|`, `<` or `*`
in a help text cannot break a table or turn into HTML.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- cli-reference -->"
SRC = Path(__file__).resolve().parents[2] / "src"  # this checkout's code, before any other install of foxhunt
PLAIN_PANEL = "Options"
# click's "help  [default: x; required]": two spaces, then the last bracket
EXTRAS = re.compile(r"^(?P<help>.*?)(?:  |^)\[(?P<extras>[^\[\]]*)\]$", re.S)
SPECIAL = re.compile(r"([\\*_\[\]|<>])")
ESCAPE = {"<": "&lt;", ">": "&gt;"}


def on_page_markdown(markdown: str, page: Any = None, config: Any = None, files: Any = None) -> str:
    """Replace each marker line with the reference; a page without one is returned as it is."""
    if MARKER not in markdown:
        return markdown
    lines = markdown.split("\n")
    if not any(line.strip() == MARKER for line in lines):
        return markdown
    return "\n".join(foxhunt_reference() if line.strip() == MARKER else line for line in lines)


@functools.cache
def foxhunt_reference() -> str:
    """The reference of the foxhunt app (generated once per build)."""
    if SRC.is_dir() and str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    import typer.main

    from foxhunt.cli import app

    return reference(typer.main.get_command(app), "foxhunt")


def reference(root: Any, prog: str) -> str:
    """Markdown for the click command `root` (named `prog`) and every subcommand under it, depth first."""
    ctx = root.make_context(prog, [], resilient_parsing=True)
    parts = [section(root, ctx, prog)]
    for name, cmd, sub in walk(root, ctx, prog):
        parts.append(section(cmd, sub, name))
    return "\n\n".join(p for p in parts if p).rstrip() + "\n"


def walk(group: Any, ctx: Any, prefix: str) -> list[tuple[str, Any, Any]]:
    """(full name, command, its context) of each visible subcommand, in the order --help lists them."""
    out = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or getattr(cmd, "hidden", False):
            continue
        sub = cmd.make_context(name, [], parent=ctx, resilient_parsing=True)
        out.append((f"{prefix} {name}", cmd, sub))
        if hasattr(cmd, "list_commands"):
            out.extend(walk(cmd, sub, f"{prefix} {name}"))
    return out


def section(cmd: Any, ctx: Any, name: str) -> str:
    usage = " ".join([name, *cmd.collect_usage_pieces(ctx)])
    parts = [f"## {name}", f"```text\n{usage}\n```", help_text(cmd.help or "")]
    arguments = [p for p in cmd.params if p.param_type_name == "argument"]
    if arguments:
        parts.append("**Arguments**\n\n" + table(arguments, ctx, "Argument"))
    for panel, options in panels([p for p in cmd.params if p.param_type_name == "option"]):
        parts.append(f"**{panel}**\n\n" + table(options, ctx, "Option"))
    return "\n\n".join(p for p in parts if p)


def panels(options: list[Any]) -> list[tuple[str, list[Any]]]:
    """The visible options grouped by help panel: options without one first (as --help shows them), then each
    panel in the order its first option comes."""
    groups: dict[str, list[Any]] = {PLAIN_PANEL: []}
    for p in options:
        if not getattr(p, "hidden", False):
            groups.setdefault(getattr(p, "rich_help_panel", None) or PLAIN_PANEL, []).append(p)
    return [(k, v) for k, v in groups.items() if v]


def table(params: list[Any], ctx: Any, title: str) -> str:
    rows = [f"| {title} | Default | Description |", "| --- | --- | --- |"]
    for p in params:
        record = p.get_help_record(ctx)
        if record is None:
            continue
        flags, text = record
        text, extras = split_extras(text)
        shown = ", ".join(e if e == "required" else code(e) for e in extras)
        rows.append(f"| {code(flags)} | {shown} | {cell(text)} |")
    return "\n".join(rows)


def split_extras(text: str) -> tuple[str, list[str]]:
    """The help, and the default and the rest of click's "help  [default: x; x>=0; required]" (two spaces,
    then the last bracket)."""
    m = EXTRAS.match(text)
    if m is None:
        return text, []
    return m["help"], [e.strip().removeprefix("default:").strip() for e in m["extras"].split(";")]


def code(text: str) -> str:
    """`text` as a code span (a `|` inside one does not split a table cell; a backtick needs a longer fence).
    """
    text = " ".join(text.split())
    ticks = "``" if "`" in text else "`"
    return f"{ticks}{text}{ticks}" if ticks == "`" else f"{ticks} {text} {ticks}"


def cell(text: str) -> str:
    return escape(" ".join(text.split()))


def help_text(text: str) -> str:
    """A command's help as paragraphs: up to click's \\f, without its \\b no-rewrap markers, escaped."""
    text = text.split("\f", 1)[0]
    lines = [line for line in text.splitlines() if line.strip() != "\b"]
    return "\n".join(escape(line) for line in lines).strip()


def escape(text: str) -> str:
    """Markdown-escape `text` outside its `code spans`: a literal |, <, >, *, _, [, ], \\ in a help text."""
    pieces = re.split(r"(`[^`]*`)", text)
    return "".join(p if i % 2 else SPECIAL.sub(lambda m: ESCAPE.get(m[1], "\\" + m[1]), p)
                   for i, p in enumerate(pieces))
