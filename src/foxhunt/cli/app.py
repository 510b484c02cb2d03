"""The `foxhunt` app and `main(argv)`: the exit statuses and one-line errors of every command.

`main(argv)` runs in-process (tests call it that way) and returns the exit status: 0 done, 2 bad input, 1 a runtime
failure, 3 does not fit in memory, 4 training stopped on non-finite losses or gradients, 130/143 stopped by
SIGINT/SIGTERM; each failure is one line on stderr, with the traceback only under --debug. The commands register
themselves on `app` in their own modules (foxhunt/cli/__init__.py imports them).
"""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Annotated

import typer

from foxhunt.allocator import process_settings
from foxhunt.cli.help import PanelGroup, Typer
from foxhunt.cli.usage import UsageError, shows_help, usage_line
from foxhunt.errors import InputError, NonFiniteError, RankLost, ResourceError, WriteError

# typer >= 0.20 vendors click; older versions use click itself. Either way this is click's base exception.
ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")

app = Typer(
    cls=PanelGroup,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help, in panels (foxhunt.cli.help): it reads at 80 columns
    help="Temporal Fusion Transformers on futures bars: multi-horizon quantile forecasts that train to the end "
    "without running out of memory.",
)

def _setup_logging() -> None:
    """One console handler on the `foxhunt` logger, showing every INFO record until a command sets a verbosity."""
    from foxhunt.console import ConsoleHandler, console_handler, set_verbosity

    logger = logging.getLogger("foxhunt")
    if console_handler() is None:
        logger.addHandler(ConsoleHandler())
    set_verbosity(None)  # main() may run many commands in one process (tests): each starts from the default
    logger.setLevel(logging.INFO)
    logger.propagate = False


DEBUG_FLAG = "--debug"
# Ctrl-C: every file foxhunt writes is written whole or not at all (a training run says how to resume on its own)
SIGINT_STATUS = 130  # no command returns it: typer returns it for a KeyboardInterrupt it caught
INTERRUPTED = ("interrupted; nothing half-written was left (run the command again: a backtest resumes at its first "
               "unfinished fold)")


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option(DEBUG_FLAG, help="Show the traceback of an error (accepted anywhere).")]
    = False,
) -> None:
    """Temporal Fusion Transformers on futures bars."""


def main(argv: list[str] | None = None) -> int:
    """Run the CLI in-process; returns the exit status instead of raising SystemExit.

    0 done; 2 bad input; 1 a runtime failure (a file that cannot be written, an unexpected error); 3 does not fit in
    memory; 128 + N stopped by signal N (130 SIGINT, 143 SIGTERM). Each failure is one line on stderr, with the
    traceback only under --debug."""
    args = sys.argv[1:] if argv is None else list(argv)
    debug = DEBUG_FLAG in args
    args = [a for a in args if a != DEBUG_FLAG]
    process_settings(args[0] if args else "")  # OpenMP and polars' allocator: before a command imports torch, polars
    _setup_logging()
    logging.raiseExceptions = debug  # a log line that cannot be written (full disk) must not print a traceback
    from foxhunt.console import highlight
    from foxhunt.train.interrupt import Interrupted

    def fail(line: str, e: BaseException, code: int) -> int:
        if debug:
            traceback.print_exception(e, file=sys.stderr)
        print(highlight(f"foxhunt: {line}", "ERROR", sys.stderr), file=sys.stderr)
        return code

    try:
        result = app(args=args, prog_name="foxhunt", standalone_mode=False)
        if result == SIGINT_STATUS:  # typer's own catch of Ctrl-C: the status alone, without a word
            return fail(INTERRUPTED, KeyboardInterrupt(), SIGINT_STATUS)
        return int(result) if isinstance(result, int) else 0
    except InputError as e:
        return fail(f"error: {e}", e, InputError.exit_code)
    except ResourceError as e:
        return fail(f"out of memory: {e}", e, ResourceError.exit_code)
    except NonFiniteError as e:
        return fail(f"not finite: {e}", e, NonFiniteError.exit_code)
    except WriteError as e:
        return fail(f"error: {e}", e, WriteError.exit_code)
    except Interrupted as e:
        return fail(str(e), e, e.exit_code)
    except RankLost as e:  # its line is on the console already: logged when the peer was lost, in case torchrun's
        if debug:  # SIGTERM to the remaining ranks ends this process before it gets here
            traceback.print_exception(e, file=sys.stderr)
        return RankLost.exit_code
    except KeyboardInterrupt as e:
        return fail(INTERRUPTED, e, SIGINT_STATUS)
    except typer.Exit as e:
        return int(e.exit_code or 0)
    except typer.Abort:
        return 1
    except UsageError as e:  # a bad value, an unknown or a missing option: foxhunt's one line, not click's three
        if shows_help(e):
            e.show()  # type: ignore[attr-defined]
            return 2
        return fail(f"error: {usage_line(e, args)}", e, 2)
    except ClickException as e:  # the rest of click's own errors (none that foxhunt raises)
        e.show()
        return int(getattr(e, "exit_code", 1) or 1)
    except OSError as e:  # reading or writing outside the atomic writers (permissions, a vanished file)
        where = f"{e.filename}: " if e.filename else ""
        return fail(f"error: {where}{e.strerror or e}; check the path and its permissions", e, 1)
    except Exception as e:  # a bug: still one line, the traceback with --debug
        first = str(e).splitlines()[0] if str(e) else ""
        return fail(f"internal error: {type(e).__name__}: {first} (rerun with {DEBUG_FLAG} for the traceback)", e, 1)
