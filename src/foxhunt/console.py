"""What reaches the console, and how it looks: verbosity, highlighted warnings, colour only on a terminal.

Every log record still reaches every file handler (a training run's train.log keeps them all); the console handler
decides what the person at the terminal sees. A record says how important it is to the console with
`extra=SHOW` (the default console shows it) or `extra=FINAL` (even `--quiet` shows it); an untagged INFO record is a
detail for `--verbose` (the memory plan table, every `[MEMORY]` record, the full data summary). Warnings and errors
show at every verbosity, prefixed with their level and, on a terminal, in colour.

-q and -v mean the same in every command that takes them; without either, the commands that do not train show every
INFO record, as they always have (foxhunt.cli.wiring.set_verbosity).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

QUIET, NORMAL, VERBOSE = 0, 1, 2
SHOW = {"console": NORMAL}  # `extra=` for a line the default console shows
FINAL = {"console": QUIET}  # `extra=` for a line every console shows, --quiet included

_COLOURS = {"WARNING": "\x1b[1;33m", "ERROR": "\x1b[1;31m"}  # bold yellow, bold red
_RESET = "\x1b[0m"


def is_terminal(stream: TextIO) -> bool:
    """A person is watching: a TTY, and NO_COLOR (https://no-color.org) not set. CI, pipes and log collectors get
    plain lines without a progress bar or colour codes."""
    try:
        return stream.isatty() and not os.environ.get("NO_COLOR")
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


def highlight(text: str, level: str, stream: TextIO) -> str:
    """`text` in bold yellow (WARNING) or red (ERROR) on a terminal; unchanged anywhere else."""
    return f"{_COLOURS[level]}{text}{_RESET}" if is_terminal(stream) else text


class ConsoleHandler(logging.StreamHandler):
    """Log records to whatever sys.stderr is when they are emitted (callers of main() may swap it between calls),
    filtered by `verbosity` (None: every INFO record, for commands without verbosity flags)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.verbosity: int | None = None
        self.warned: set[str] | None = None  # within `warn_once`: the warnings shown so far
        self.setFormatter(logging.Formatter("%(message)s"))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING and self.warned is not None:
            text = record.getMessage()
            if text in self.warned:
                return False
            self.warned.add(text)
        if record.levelno >= logging.WARNING or self.verbosity is None:
            return super().filter(record)
        return getattr(record, "console", VERBOSE) <= self.verbosity and super().filter(record)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno < logging.WARNING:
            return text
        level = "ERROR" if record.levelno >= logging.ERROR else "WARNING"
        return highlight(f"{level} {text}", level, self.stream)


def console_handler() -> ConsoleHandler | None:
    return next((h for h in logging.getLogger("foxhunt").handlers if isinstance(h, ConsoleHandler)), None)


@contextmanager
def warn_once() -> Iterator[None]:
    """Within it, the console shows each warning's text once: a backtest reads the same files for its plan and for
    each fold's training and scoring, and their data warnings (277 inconsistent rows dropped) are the same each time.
    File handlers (each fold's train.log) still get every record."""
    handler = console_handler()
    if handler is None or handler.warned is not None:  # no console, or an outer warn_once already counts
        yield
        return
    handler.warned = set()
    try:
        yield
    finally:
        handler.warned = None


def set_verbosity(verbosity: int | None) -> None:
    """QUIET, NORMAL or VERBOSE for the console handler of the `foxhunt` logger (None: show every INFO record)."""
    handler = console_handler()
    if handler is not None:
        handler.verbosity = verbosity


def show_progress() -> bool:
    """A progress bar helps only a person at a terminal who did not ask for --quiet."""
    handler = console_handler()
    if handler is not None and handler.verbosity == QUIET:
        return False
    return is_terminal(sys.stderr)
