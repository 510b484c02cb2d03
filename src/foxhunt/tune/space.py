"""The search space: which `foxhunt train` options a trial draws, and from what.

A TOML file, one table per option (long flag names, dashes or underscores):

    [learning-rate]
    low = 1e-4
    high = 3e-3
    log = true            # float range, sampled on a log scale
    [encoder-length]
    low = 16
    high = 64
    step = 16             # int range (ints for low and high)
    [scaling]
    choices = ["series", "volatility"]   # categorical

DEFAULT_SPACE is the one used without --search (docs/forecasts.md shows it too; a test holds them equal). Options that choose the bars, the split
or what the validation loss measures (FIXED) are refused: every trial is scored on the same validation period, in
the same units, with the same test period held out. An option the user types is fixed too: `without_typed` takes it
out of the space, and `heads_that_fit` keeps the drawn attention heads and hidden sizes compatible with a fixed one."""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foxhunt.errors import InputError
from foxhunt.model.config import heads_fit

DEFAULT_SPACE = """\
[hidden-size]
choices = [8, 16, 32, 64]
[attention-heads]
choices = [1, 2, 4]
[dropout]
low = 0.0
high = 0.3
[learning-rate]
low = 1e-4
high = 1e-2
log = true
[encoder-length]
choices = [16, 32, 63, 126]
[scaling]
choices = ["series", "volatility"]
[vol-estimator]
choices = ["returns", "range"]
[vol-halflife]
choices = [5.0, 10.0, 20.0]
[vol-features]
choices = [false, true]
"""

# Options every trial must share. A trial drawing one would be scored on other bars or another period, or in
# other units, so its validation loss would not compare with the others', and the best trial could be the one whose
# split left the least (or no) test period, which `evaluate` then scores as if no choice had seen it.
FIXED = frozenset({
    # where the test period starts: the dates, the fractions of the time span, a rolling window's start
    "train_end", "val_end", "val_fraction", "test_fraction", "train_start",
    # which bars are read, hence the time span the fractions divide and the windows in each period
    "parquet_file", "features", "since", "until", "timestamp_col", "symbol_col", "timezone", "date_format", "calendar",
    "contracts", "roll_confirm", "adjust", "fill_gaps",
    # what the validation q-risk measures: its target, units, forecast steps and quantiles
    "target", "price_scale", "horizon", "quantiles",
})


@dataclass(frozen=True)
class Param:
    """One option's range: `choices` (categorical), or `low`..`high` (int when both are ints, else float), with
    `log` scale and an int `step`."""

    name: str  # the option's Python name (hidden_size)
    choices: tuple[Any, ...] | None = None
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: int | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def suggest(self, trial: Any) -> Any:
        if self.choices is not None:
            return trial.suggest_categorical(self.name, list(self.choices))
        if isinstance(self.low, int) and isinstance(self.high, int):
            return trial.suggest_int(self.name, self.low, self.high, step=self.step or 1, log=self.log)
        return trial.suggest_float(self.name, float(self.low), float(self.high), log=self.log)


def parse_space(text: str, where: str, options: Iterable[str]) -> tuple[Param, ...]:
    """The space in `text` (TOML), each table checked against this command's train `options`."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{where}: not valid TOML ({e})") from e
    fixed = [key for key in raw if key.replace("-", "_") in FIXED]
    if fixed:
        raise InputError(f"{where}: {', '.join(f'[{k}]' for k in fixed)} cannot be searched: they choose the bars, the "
                         "split or what the validation loss measures, which every trial must share; pass them as "
                         "flags of `foxhunt tune` (the fixed settings of every trial)")
    known = set(options)
    params = []
    for key, spec in raw.items():
        name = key.replace("-", "_")
        if name not in known:
            raise InputError(f"{where}: [{key}] is not an option of `foxhunt train`; use its long flag names")
        if not isinstance(spec, dict):
            raise InputError(f"{where}: [{key}] must be a table with choices = [...] or low/high")
        params.append(_param(name, spec, f"{where}: [{key}]"))
    if not params:
        raise InputError(f"{where}: the search space is empty; add a table per option to search")
    return tuple(params)


def _param(name: str, spec: dict[str, Any], where: str) -> Param:
    unknown = sorted(set(spec) - {"choices", "low", "high", "log", "step"})
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r}; use choices, or low, high, log, step")
    if "choices" in spec:
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices or len(spec) > 1:
            raise InputError(f"{where}: choices must be a non-empty list, alone in its table")
        return Param(name, choices=tuple(choices))
    low, high = spec.get("low"), spec.get("high")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high)) or not low < high:
        raise InputError(f"{where}: needs numbers low < high (or choices = [...]), got low={low!r} high={high!r}")
    log, step = bool(spec.get("log", False)), spec.get("step")
    if log and low <= 0:
        raise InputError(f"{where}: log = true needs low > 0, got {low}")
    if step is not None and (not isinstance(step, int) or step < 1 or not isinstance(low, int)):
        raise InputError(f"{where}: step must be a positive int, on an int range (int low and high)")
    return Param(name, low=low, high=high, log=log, step=step)


def space_name(path: Path | None) -> str:
    """How errors name the space: its --search file, or the default one."""
    return "the default search space" if path is None else str(path)


def load_space(path: Path | None, options: Iterable[str]) -> tuple[Param, ...]:
    if path is None:
        return parse_space(DEFAULT_SPACE, space_name(path), options)
    if not path.exists():
        raise InputError(f"{path}: --search file not found")
    return parse_space(path.read_text(encoding="utf-8"), space_name(path), options)


def without_typed(space: tuple[Param, ...], typed: Iterable[str], where: str) -> tuple[Param, ...]:
    """The space less the options in `typed`: an option the user typed is every trial's fixed setting, so a trial
    never draws it (and best.toml holds the typed value)."""
    names = set(typed)
    left = tuple(p for p in space if p.name not in names)
    if not left:
        raise InputError(f"{where}: every option it searches is typed ({', '.join(p.flag for p in space)}), which "
                         "fixes it for every trial: nothing is left to search; drop one of those flags, or pass "
                         "--search with other options")
    return left


def heads_that_fit(space: tuple[Param, ...], hidden_size: int, attention_heads: int, where: str) -> tuple[Param, ...]:
    """Attention heads must divide the hidden size (model/attention.py). With one of the two not searched (typed,
    or its default), the other is drawn only among the values that fit it, so no trial fails on the pair; a range
    becomes the choices left in it. With both searched a trial whose pair does not fit fails, as any bad draw."""
    names = {p.name for p in space}
    if "attention_heads" in names and "hidden_size" not in names:
        return _keep(space, "attention_heads", lambda n: heads_fit(hidden_size, n),
                     f"divides --hidden-size {hidden_size}", where)
    if "hidden_size" in names and "attention_heads" not in names:
        return _keep(space, "hidden_size", lambda h: heads_fit(h, attention_heads),
                     f"is a multiple of --attention-heads {attention_heads}", where)
    return space


def _keep(space: tuple[Param, ...], name: str, fits: Callable[[int], bool], rule: str,
          where: str) -> tuple[Param, ...]:
    """`space` with `name`'s values cut to the positive ints that fit; a float range is left for the model to
    refuse."""
    p = next(p for p in space if p.name == name)
    if p.choices is not None:
        values = p.choices
    elif isinstance(p.low, int) and isinstance(p.high, int):
        values = tuple(range(p.low, p.high + 1, p.step or 1))
    else:
        return space
    kept = tuple(v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0 and fits(v))
    if not kept:
        raise InputError(f"{where}: no [{name.replace('_', '-')}] value {rule} (the fixed setting of every trial); "
                         f"give {p.flag} a value that does, or other choices")
    if kept == values:
        return space
    return tuple(Param(name, choices=kept) if q is p else q for q in space)
