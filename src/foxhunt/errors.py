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


class NonFiniteError(Exception):
    """Training produced NaN or inf that skipping batches could not contain; the last good checkpoint is kept."""

    exit_code = 4


class WriteError(OSError):
    """A file could not be written (disk full, permissions): a runtime failure, exit status 1. Nothing partial is
    left under the file's name. An OSError (with the cause's errno and strerror), so callers that handle OSError
    around a write keep working."""

    exit_code = 1

    def __init__(self, message: str, cause: OSError | None = None):
        super().__init__(message)
        if cause is not None:
            self.errno, self.strerror, self.filename = cause.errno, cause.strerror, cause.filename

    def __str__(self) -> str:
        return str(self.args[0])


class RankLost(Exception):  # noqa: N818 (what happened to another process, not a bug in this one)
    """Another rank of a distributed run stopped (crashed, killed, out of memory) or stopped answering; this rank
    exits too, saying so in one line (train/distributed.py)."""

    exit_code = 1
