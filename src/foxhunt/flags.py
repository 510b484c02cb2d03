"""Options declared once, on the fields of the configuration dataclasses (data/, model/, train/, backtest/, tune/).

A field made with `option(...)` is an option wherever a run is described: a flag of the command line
(`--name-with-dashes`: cli/options.py builds the typer options from this metadata), a key of a `--config` TOML file
and a keyword of `foxhunt.fit` (settings.py reads values into the dataclasses through `Option.read`). Its help is
one line at 80 columns (the docs tell the longer story); its panel places it in --help. Plain data and functions
only, so that the layers below the CLI declare their options without importing typer or the CLI.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foxhunt.errors import InputError

# The panels of --help, in the order a command shows them (foxhunt.cli.help); options without one are "Options".
DATA, INPUTS, MODEL, TRAINING, FORECASTS, BACKTEST, SEARCH, WORKERS, DEVICE, MEMORY, OUTPUT = (
    "Data", "Your inputs", "Model", "Training", "Forecasts", "Backtest", "Search", "Workers", "Device", "Memory",
    "Output")
PANELS = (DATA, INPUTS, MODEL, TRAINING, FORECASTS, BACKTEST, SEARCH, WORKERS, DEVICE, MEMORY, OUTPUT)
KEY = "foxhunt.option"  # the key of an option's record in its field's metadata


@dataclass(frozen=True)
class Switch:
    """A second flag that sets an option's field (--use-gpu sets --device): `on(value)` is the field's value when
    the switch is given beside `value` (the option's own, or its default); it raises InputError where they
    contradict."""

    name: str
    help: str
    panel: str
    on: Callable[[Any], Any]


@dataclass(frozen=True)
class Option:
    """An option as its field declares it: the help line and panel, and where the field's name and type do not
    say it, the value's placeholder in --help (`metavar`), the flag names (`flags`: a short alias, or a switch
    without a --no- form), the option's name (`name`: --threads for `num_threads`), a parser from what a flag or a
    file holds to the field's value (`parse(value, flag)`, raising InputError naming the flag), how the default is
    written as text (`text`), whether the flag repeats, the default in words (`show_default`, where the field's is
    None), a `switch` and the least value a number takes (`minimum`). `field`, `kind` and `default` are the field's (filled in by `options`)."""

    help: str
    panel: str
    metavar: str | None = None
    flags: tuple[str, ...] = ()
    name: str = ""
    parse: Callable[[Any, str], Any] | None = None
    text: Callable[[Any], Any] | None = None
    repeat: bool = False
    show_default: str | None = None
    switch: Switch | None = None
    minimum: int | None = None  # the least value a number option takes (a flag below it stops at parsing)
    field: str = ""
    kind: Any = None
    default: Any = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING

    @property
    def text_default(self) -> Any:
        """The default as a flag or a config file writes it: a tuple as comma-separated text (None when empty)."""
        if self.text is not None and not self.required:
            return self.text(self.default)
        if isinstance(self.default, tuple):
            return ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in self.default) or None
        return self.default

    def read(self, value: Any) -> Any:
        """The field's value for `value` given by a flag, a config file or a keyword (text or the value itself);
        None, and "" for a field whose default is None, is the default. A value that does not read is an InputError
        naming the flag: "--horizon must be an integer, got 'x'"."""
        if value is None or (isinstance(value, str) and value == "" and self.default is None):
            if self.required:
                raise InputError(f"{self.flag} is needed")
            return self.default
        if self.parse is not None:
            return self.parse(value, self.flag)
        try:
            read = reader(self.kind, self.repeat, self.text_default)(value)
        except ValueError as e:
            raise InputError(f"{self.flag} must be {e}, got {value!r}") from None
        if self.minimum is not None and isinstance(read, int | float) and read < self.minimum:
            raise InputError(f"{self.flag} must be >= {self.minimum}, got {value!r}")
        return read


def option(default: Any, help: str, panel: str, **how: Any) -> Any:
    """A dataclass field that is an option (see `Option` for `how`); `dataclasses.MISSING` for one that is needed."""
    return dataclasses.field(default=default, metadata={KEY: Option(help, panel, **how)})


def again(cls: type, name: str, **changes: Any) -> Any:
    """A field that is the option `name` of the dataclass `cls` once more: its help, panel and flags stay that one
    declaration's; `changes` give another `default` or another `show_default` (a command reading a trained model
    takes the model's --since), or drop its `switch`."""
    o = next(o for o in options(cls) if o.name == name)
    default = changes.pop("default", o.default)
    return dataclasses.field(default=default, metadata={KEY: dataclasses.replace(o, **changes)})


@functools.cache
def options(cls: type) -> tuple[Option, ...]:
    """The options declared on the fields of the dataclass `cls`, in field order."""
    hints = typing.get_type_hints(cls)
    return tuple(dataclasses.replace(o, field=f.name, name=o.name or f.name, kind=hints[f.name], default=f.default)
                 for f in dataclasses.fields(cls) if (o := f.metadata.get(KEY)) is not None)


def names(*classes: type) -> tuple[str, ...]:
    """Every option name of these dataclasses, switches included: the flags' long names with underscores."""
    return tuple(n for cls in classes for o in options(cls) for n in (o.name, *([o.switch.name] if o.switch else [])))


def read_fields(cls: type, values: typing.Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `cls` given in `values` (option name -> a flag's, a file's or a keyword's value), read; a
    switch given applies to the option's value given beside it, or to its default."""
    out: dict[str, Any] = {}
    for o in options(cls):
        if o.name in values or o.required:
            out[o.field] = o.read(values.get(o.name))
        if o.switch is not None and values.get(o.switch.name) is not None:
            switch = dataclasses.replace(o, name=o.switch.name, kind=bool, parse=None, default=False)
            if switch.read(values[o.switch.name]):
                out[o.field] = o.switch.on(out.get(o.field, o.default))
    return out


def reader(kind: Any, repeat: bool = False, example: Any = None) -> Callable[[Any], Any]:
    """How a value of the field type `kind` is read (None is dealt with before): a number from a number or its text,
    a switch from a bool or true/false, a tuple from a list or comma-separated text (a repeated flag's values are
    taken whole: paths may hold commas)."""
    base = [a for a in typing.get_args(kind) if a is not type(None)] if isinstance(kind, types.UnionType) else [kind]
    kind = base[0] if len(base) == 1 else kind
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        if item is float:
            what = f"comma-separated numbers like {example}" if example else "comma-separated numbers"
            return lambda v: tuple(_number(float, x, what) for x in _items(v, split=True))
        return lambda v: _items(v, split=not repeat)
    if kind is bool:
        return _switch
    if kind in (int, float):
        what = "an integer" if kind is int else "a number"
        return lambda v: _number(kind, v, what)
    if kind in (str, Path):
        return kind
    raise TypeError(f"no reader for options of type {kind}; give the option a parse= of its own")


def _items(value: Any, split: bool) -> tuple[str, ...]:
    """One item or several ("a,b" split at commas when `split`; a list or tuple of them) as a tuple of text."""
    items = list(value) if isinstance(value, list | tuple | set | frozenset) else [value]
    parts = [p for x in items for p in (str(x).split(",") if split else [str(x)])]
    return tuple(p.strip() for p in parts if p.strip())


def _number(kind: type, value: Any, what: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(what)
    if kind is int and isinstance(value, float):
        if not value.is_integer():
            raise ValueError(what)
        return int(value)
    try:
        return kind(value.strip() if isinstance(value, str) else value)
    except ValueError:
        raise ValueError(what) from None


def _switch(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError("true or false")
