"""Errors meant for people.

Anything the user can fix (a file, a column, a flag) raises `InputError`; the CLI prints its one-line
message and exits with status 2, never a traceback.
"""


class InputError(Exception):
    """Bad input: the message is one line naming the file/column/row, what is wrong and what to do."""

    exit_code = 2


class ResourceError(Exception):
    """The run cannot fit in the available memory; the message says what would fit."""

    exit_code = 3


class WriteError(Exception):
    """A file could not be written (disk full, permissions): a runtime failure, exit status 1. Nothing partial is
    left under the file's name."""

    exit_code = 1
