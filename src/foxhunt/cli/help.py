"""`--help` that reads at 80 columns: click's plain help, with each command's options in the panels their
declarations give them.

typer's rich help draws every panel as a table of five columns (flag, short flag, `--no-` flag, short `--no-`
flag, type) before the text: at 80 columns the `--no-calendar-features` column alone leaves the text ~20
characters and cuts long flags with "…". click's definition list puts a flag too long for its column on a line of
its own instead, so the help is plain click (app.py) and this module adds what plain click lacks:

- the panels: typer's plain help lists every option under "Options"; PanelCommand writes one section per
  `rich_help_panel`, in the order of flags.PANELS (a panel not declared there is an error), then "Options"
  for the few without one (--config, --help);
- wrapping that never breaks a word at its hyphens (click's does: `--parquet-` / `file`), so a flag in a
  sentence is whole on one line;
- one flag column for all of a command's panels (at most FLAG_COLUMN wide), so that they line up;
- a help's "[default: ...]" kept whole, and a default told in words shown without typer's parentheses.

What --help does not say for want of room (each option's help is one line: tests/cli/test_help_width.py) is in
the docs.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from foxhunt.flags import PANELS

FLAG_COLUMN = 24  # the longest flag with its metavar that shares a line with its help (--validation-batch-size N)
SPACING = 2
Context = TyperCommand.context_class  # click's, vendored by typer >= 0.20 or click itself
Formatter = Context.formatter_class


def wrap(text: str, width: int, indent: str = "", first: str | None = None) -> list[str]:
    """The paragraphs of `text` (split at blank lines) filled to lines of `width` (the indent included), words
    never broken (a long one has its line); the first line starts with `first` instead of `indent` if given, a
    blank line between paragraphs."""
    lines: list[str] = []
    for i, para in enumerate(p for p in text.split("\n\n") if p.strip()):
        if i:
            lines.append("")
        lines += textwrap.wrap(" ".join(para.split()), width, initial_indent=indent if i or first is None else first,
                               subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)
    return lines


class HelpFormatter(Formatter):  # type: ignore[misc,valid-type]
    """click's formatter with `wrap` for its text and a definition list whose flag column the caller may fix."""

    def write_text(self, text: str) -> None:
        indent = " " * self.current_indent
        self.write("\n".join(wrap(text, self.width, indent)) + "\n")

    def write_dl(self, rows: Sequence[tuple[str, str]], col_max: int = FLAG_COLUMN, col_spacing: int = SPACING,
                 column: int | None = None) -> None:
        """click's definition list (a flag, its help beside it), with the help's "[default: ...]" kept whole:
        after the help on its last line when it fits there, else on lines of its own."""
        rows = list(rows)
        if column is None:
            column = min(max((len(first) for first, _ in rows), default=0), col_max)
        margin = " " * (self.current_indent + column + col_spacing)
        width = max(self.width, len(margin) + 10)
        for first, second in rows:
            head = " " * self.current_indent + first
            if not second or len(first) > column:  # a flag too long for the column: its help on the next line
                self.write(head + "\n")
                head = ""
            if not second:
                continue
            text, _, extra = second.rpartition("  [") if second.endswith("]") else (second, "", "")
            body = wrap(text or f"[{extra}", width, margin, first=head.ljust(len(margin)) if head else margin)
            if text and extra:
                tail = f"{body[-1]} [{extra}"
                body[-1:] = [tail] if len(tail) <= width else [body[-1], *wrap(f"[{extra}", width, margin)]
            self.write("\n".join(body) + "\n")


class HelpContext(Context):  # type: ignore[misc,valid-type]
    formatter_class = HelpFormatter


class PanelCommand(TyperCommand):
    """A command whose plain --help lists its options by panel."""

    context_class = HelpContext

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments: list[tuple[str, str]] = []
        panels: dict[str | None, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            shown = getattr(param, "show_default", None)
            if isinstance(shown, str):  # typer writes a default told in words as "[default: (words)]"
                record = (record[0], record[1].replace(f"default: ({shown})", f"default: {shown}"))
            if param.param_type_name == "argument":  # its name alone, as the usage line writes it
                name = (param.metavar or str(param.name).upper()) + ("..." if param.nargs != 1 else "")
                arguments.append((name, record[1]))
            else:
                panels.setdefault(getattr(param, "rich_help_panel", None), []).append(record)
        rows = [r for rs in (arguments, *panels.values()) for r in rs]
        column = min(max(len(first) for first, _ in rows), FLAG_COLUMN) if rows else 0
        order = sorted(panels, key=lambda p: len(PANELS) if p is None else PANELS.index(p))
        for name, records in (("Arguments", arguments), *((p or "Options", panels[p]) for p in order)):
            if records:
                with formatter.section(name):
                    formatter.write_dl(records, column=column)


class PanelGroup(TyperGroup):
    """The app: its command list wrapped as the commands' help is."""

    context_class = HelpContext


class Typer(typer.Typer):
    """typer's app whose commands are PanelCommands unless one says otherwise."""

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **settings: Any) -> Any:
        return super().command(name, cls=cls or PanelCommand, **settings)
