"""The command line's options: those of the configurations, built from the declarations on their fields
(foxhunt/flags.py), and the few that belong to the CLI alone (the console, --config, export's).

A group is the options of one configuration (data, model, training, backtest, tune, predict, evaluate) or the
console's; `attach(...)` extends a command's signature with the groups it takes, so `train`, `prepare`, `inspect`
and `plan-memory` show the very same data options, and `backtest` / `tune` take their own and pass train's through
`train`'s parser. The commands read the values from `ctx.params` and build the configurations with
foxhunt.settings (with --config filling what was not typed).
"""

from __future__ import annotations

import copy
import inspect
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from foxhunt.backtest.config import BacktestConfig
from foxhunt.data.config import DataConfig
from foxhunt.errors import InputError
from foxhunt.evaluate.config import EvaluateConfig
from foxhunt.flags import OUTPUT, Option, options
from foxhunt.model.config import ModelConfig
from foxhunt.predict.config import PredictConfig
from foxhunt.train.config import SessionConfig, TrainConfig
from foxhunt.tune.config import TuneConfig

F = TypeVar("F", bound=Callable[..., Any])
Group = tuple[inspect.Parameter, ...]
# A value's placeholder in --help by its type: short, so that a flag and its help share a line at 80 columns.
METAVARS: dict[Any, str] = {int: "N", float: "X", str: "TEXT", Path: "PATH"}


def opt(name: str, kind: Any, default: Any, help: str, panel: str | None = None, *decls: str,
        **extra: Any) -> inspect.Parameter:
    """One option as a signature parameter: `--name-with-dashes` unless `decls` name it; its help is one line at
    80 columns (tests/cli/test_help_width.py), the longer story is in the docs."""
    base = next((a for a in getattr(kind, "__args__", (kind,)) if a is not type(None)), kind)
    extra.setdefault("metavar", METAVARS.get(getattr(base, "__origin__", base), "TEXT"))
    info = typer.Option(*decls, help=help, rich_help_panel=panel, **extra)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, info])


def shown(p: inspect.Parameter, default: str) -> inspect.Parameter:
    """Option `p` with another default in words in --help (a command that reads a trained model defaults to it)."""
    kind, info = typing.get_args(p.annotation)
    info = copy.copy(info)
    info.show_default = default
    return p.replace(annotation=Annotated[kind, info])


def declared(cls: type) -> Group:
    """The options declared on the fields of `cls`, each followed by its switch, as signature parameters."""
    group = []
    for o in options(cls):
        extra = {k: v for k, v in (("metavar", o.metavar), ("show_default", o.show_default), ("min", o.minimum))
                 if v is not None}
        kind = flag_kind(o)
        if kind is Any:
            extra["parser"] = parser(o)
        default = inspect.Parameter.empty if o.required else o.text_default
        group.append(opt(o.name, kind, default, o.help, o.panel, *o.flags, **extra))
        if o.switch is not None:
            s = o.switch
            group.append(opt(s.name, bool, False, s.help, s.panel, "--" + s.name.replace("_", "-")))
    return tuple(group)


def flag_kind(o: Option) -> Any:
    """What the flag takes, by its field's type: a value typer reads as it is (a number, text, a switch); text for
    a tuple (comma-separated) or a field with its own parser (read by settings.py, as a config file's value is), a
    list of texts for a repeated flag; a union typer cannot read (int | str) read at once by the field's parser."""
    args = [a for a in typing.get_args(o.kind) if a is not type(None)]
    if isinstance(o.kind, types.UnionType) and len(args) > 1:
        return Any
    if o.repeat:
        return list[str] | None
    if typing.get_origin(o.kind) is tuple or o.parse is not None:
        return str | None if o.text_default is None else str
    return o.kind


def parser(o: Option) -> Callable[[str], Any]:
    """The field's own reading of a flag's text (--epochs 3 is 3, not "3"), a bad value being click's usage error
    (foxhunt's one line, exit 2)."""

    def parse(text: str) -> Any:
        try:
            return o.read(text)
        except InputError as e:
            raise typer.BadParameter(str(e)) from None

    return parse


def alias(p: inspect.Parameter) -> Any:
    """The `Annotated[...]` of a shared option, for a command that declares it in its own signature."""
    return p.annotation


def moved(group: Group, name: str, before: str) -> Group:
    """`group` with the option `name` just before the option `before`: its place in their --help panel, where a
    subclass's own field would come after every inherited one."""
    rest = [p for p in group if p.name != name]
    at = next(i for i, p in enumerate(rest) if p.name == before)
    return (*rest[:at], *[p for p in group if p.name == name], *rest[at:])


OWN = object()  # in attach(...): where the command's own parameters go among the groups


def attach(*groups: Group | object) -> Callable[[F], F]:
    """Extend the decorated command's signature with these option groups (typer reads `__signature__`); the
    command takes them as `**options` and reads them, with the rest, from `ctx.params`."""

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn, eval_str=True)
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in sig.parameters.values()
               if p.kind is not inspect.Parameter.VAR_KEYWORD]
        layout = groups if OWN in groups else (OWN, *groups)
        params = [p for g in layout for p in (own if g is OWN else g)]  # type: ignore[union-attr]
        names = [p.name for p in params]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise TypeError(f"{fn.__name__}: options declared twice: {sorted(dup)}")
        fn.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        fn.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
        return fn

    return decorate


# The options of the configurations. Every command that reads bars takes the data options; only `train` reads a
# feature store (predict and evaluate declare their own --features: a store to forecast, not to train from).
TRAIN_DATA_OPTIONS = declared(DataConfig)
DATA_OPTIONS: Group = tuple(p for p in TRAIN_DATA_OPTIONS if p.name != "features")
MODEL_OPTIONS = declared(ModelConfig)
TRAINING_OPTIONS = declared(TrainConfig) + declared(SessionConfig)
_BY_NAME = {p.name: p for p in TRAIN_DATA_OPTIONS + TRAINING_OPTIONS}
DEVICE_OPTION, THREADS = (_BY_NAME[n] for n in ("device", "threads"))
BACKTEST_OPTIONS = declared(BacktestConfig)
TUNE_OPTIONS = declared(TuneConfig)
# The device and memory options of `plan-memory`, which plans for a 4 GiB budget unless told another.
MEMORY_OPTIONS: Group = (_BY_NAME["memory_budget"].replace(default="4GiB"), DEVICE_OPTION,
                         _BY_NAME["optimizer_state"], _BY_NAME["precision"])

CONFIG = opt("config", Path | None, None, "TOML file supplying any option; flags override.", None, "--config")
CONSOLE_OPTIONS: Group = (
    opt("verbose", bool, False, "Also show the memory plan and every [MEMORY] line.", OUTPUT, "--verbose", "-v"),
    opt("quiet", bool, False, "Show only warnings, errors and the result.", OUTPUT, "--quiet", "-q"),
)
CONSOLE_FLAGS = {p.name for p in CONSOLE_OPTIONS}
CLI_ONLY = CONSOLE_FLAGS | {CONFIG.name}  # how the command runs, not what it runs: never passed on

# The commands that read a trained model: predict's and evaluate's own options are their records' fields
# (predict/config.py, evaluate/config.py); they and export take the bars, the threads and -v / -q as train does.
PREDICT_OPTIONS = declared(PredictConfig)
EVALUATE_OPTIONS = moved(declared(EvaluateConfig), "forecasts", before="batch_size")  # after --start / --end
PARQUET_FILE = shown(DATA_OPTIONS[0], "the bars the model was trained on")  # predict's and evaluate's bars
Verbose, Quiet = (alias(p) for p in CONSOLE_OPTIONS)
Threads = alias(THREADS)
ModelDir = alias(PREDICT_OPTIONS[0])
Timezone = alias(next(p for p in PREDICT_OPTIONS if p.name == "timezone"))  # export's: its parity bars'
ConfigFile = alias(CONFIG)
