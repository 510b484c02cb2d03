"""click's usage errors (a bad value, an unknown or a missing option) as the one line every other bad input gets.

click shows a usage error in three lines (usage, "Try ... --help", "Error: ..."), and typer >= 0.20 words a bad value
as its validator does ("Input should be a valid integer, unable to parse string as an integer") without the value.
A person needs the option, the value typed and what the option accepts, in the form foxhunt's own checks use
("--epochs must be a positive integer or 'auto', got 'one'"); `main` prints it with status 2.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import typer

_errors = importlib.import_module(typer.BadParameter.__module__)  # click's exceptions, vendored by typer >= 0.20
UsageError: type[Exception] = _errors.UsageError
BadParameter, MissingParameter, NoSuchOption = _errors.BadParameter, _errors.MissingParameter, _errors.NoSuchOption
NoArgsIsHelp: type[Exception] | None = getattr(_errors, "NoArgsIsHelpError", None)  # click >= 8.2: bare `foxhunt`

# What a value must be, by the error type of typer's validator (pydantic's error types, https://errors.pydantic.dev).
_ACCEPTED = {
    "int_parsing": "an integer", "int_type": "an integer", "int_from_float": "an integer",
    "float_parsing": "a number", "float_type": "a number", "bool_parsing": "true or false",
}
_BOUNDS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}


def shows_help(e: Exception) -> bool:
    """`foxhunt` alone: its help is the answer, not an error line."""
    return NoArgsIsHelp is not None and isinstance(e, NoArgsIsHelp)


def usage_line(e: Any, args: list[str]) -> str:
    """The one line for a click usage error `e` raised on the command line `args` (without the "foxhunt: error: "
    prefix)."""
    command = e.ctx.command_path if e.ctx is not None else " ".join(["foxhunt", *args[:1]]).split(" -")[0]
    see = f"see `{command} --help`"
    if isinstance(e, MissingParameter):
        return f"`{command}` needs {_flag(e.param, with_metavar=True) if e.param else e.format_message()}; {see}"
    if isinstance(e, BadParameter):
        return _bad_value(e)
    if isinstance(e, NoSuchOption):
        maybe = f" (did you mean {' or '.join(sorted(e.possibilities))}?)" if e.possibilities else ""
        return f"`{command}` has no option {e.option_name}{maybe}; {see}"
    text = re.sub(r"\. Did you mean (.+)\?$", r" (did you mean \1?)", e.format_message().strip()).rstrip(".")
    return f"{text[:1].lower()}{text[1:]}; {see}"


def _bad_value(e: Any) -> str:
    """"--flag must be WHAT, got VALUE": from the validator's error where typer validated the value; from the
    message where it names the option already (foxhunt's own parsers); click's own message otherwise (older
    typer, whose messages hold the value)."""
    flag = _flag(e.param) if e.param is not None else str(e.param_hint or "a value")
    if e.message.startswith(flag):
        return e.message
    cause = e.__cause__
    errors = cause.errors() if hasattr(cause, "errors") else []
    if errors:
        err = errors[0]
        bound = _BOUNDS.get(err["type"])
        what = (f"{bound} {next(iter(err.get('ctx', {}).values()), '')}".strip() if bound
                else _ACCEPTED.get(err["type"], str(err["msg"]).removeprefix("Input should be ")))
        return f"{flag} must be {what}, got {err['input']!r}"
    return f"{flag}: {e.message.rstrip('.')}"


def _flag(param: Any, with_metavar: bool = False) -> str:
    """An option's long name (--parquet-file, not -f), with its value's placeholder if asked; an argument's
    placeholder."""
    opts = getattr(param, "opts", None) or []
    if param.param_type_name == "argument" or not opts:
        return str(param.metavar or param.name).upper()
    name = max(opts, key=len)
    return f"{name} {param.metavar}" if with_metavar and param.metavar and not param.is_flag else name
