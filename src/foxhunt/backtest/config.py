"""Backtest options, validated once at the edge: each declared on its field (foxhunt/flags.py), so that the flag,
the `--config` key and the default are written once. The fold lengths they hold are `Length`s."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foxhunt.durations import MONTHS, UNIT_NS, read_duration
from foxhunt.errors import InputError
from foxhunt.flags import BACKTEST, OUTPUT, again, option
from foxhunt.predict.config import ForecastConfig, check_method

WINDOWS = ("expanding", "rolling")


@dataclass(frozen=True)
class Length:
    """A span of time: `n` fixed units (s, min, h, d, w) or `n` calendar months / years (mo, y)."""

    n: int
    unit: str

    def __str__(self) -> str:
        return f"{self.n}{self.unit}"

    @property
    def calendar(self) -> bool:
        return self.unit in MONTHS

    def back(self, t_ns: int, times: int = 1) -> int:
        """`t_ns` moved `times` spans into the past (calendar units keep the offset inside the month)."""
        if not self.calendar:
            return t_ns - times * self.n * UNIT_NS[self.unit]
        import numpy as np  # calendar arithmetic; the options are read without numpy (the CLI imports this module)

        month = np.datetime64(int(t_ns), "ns").astype("datetime64[M]")
        offset = t_ns - int(month.astype("datetime64[ns]").astype(np.int64))
        moved = month - np.timedelta64(times * self.n * MONTHS[self.unit], "M")
        return int(moved.astype("datetime64[ns]").astype(np.int64)) + offset

    def anchor(self, last_ns: int) -> int:
        """The first unit boundary after the last bar: where the last test period ends (calendar: the start of the
        period holding the last bar, from which the folds count back whole periods)."""
        if self.calendar:
            import numpy as np

            unit = "Y" if self.unit == "y" else "M"
            return int(np.datetime64(int(last_ns), "ns").astype(f"datetime64[{unit}]").astype("datetime64[ns]")
                       .astype(np.int64))
        step = UNIT_NS["d"] if self.unit in ("d", "w") else UNIT_NS[self.unit]
        return (last_ns // step + 1) * step


def parse_length(text: Any, flag: str) -> Length:
    """A whole count of a unit of foxhunt/durations.py, but `m`: minutes there, months to many here."""
    read = read_duration(str(text))
    if read is not None and read[1] == "m":
        raise InputError(f"{flag} {text!r} is ambiguous; write {read[0]:g}min for minutes or {read[0]:g}mo for months")
    if read is None or read[0] < 1 or read[0] != int(read[0]):
        raise InputError(f"{flag} {text!r} is not a length; write a positive whole count and a unit: 90min, 6h, 30d, "
                         "4w, 3mo or 1y")
    return Length(int(read[0]), read[1])


def parse_refit(text: Any, flag: str = "--refit") -> int:
    """every -> 1, once -> 0 (never again), K -> K: a model is trained at folds 1, 1 + K, 1 + 2K, ..."""
    t = str(text).strip().lower()
    if t == "every":
        return 1
    if t == "once":
        return 0
    if t.isdigit() and int(t) >= 1:
        return int(t)
    raise InputError(f"{flag} {text!r} is not every, once or a positive number of folds (e.g. 2)")


def refit_text(refit: int) -> str | int:
    """`refit` as --refit takes it."""
    return {0: "once", 1: "every"}.get(refit, refit)


@dataclass(frozen=True)
class BacktestConfig:
    """A walk-forward backtest's own options (the runs it trains take `foxhunt train`'s): each field with
    `option(...)` is a flag of `foxhunt backtest` and a key of its `--config` file."""

    out_dir: Path = option(dataclasses.MISSING, "Folds, forecasts and report go here (resumable).", OUTPUT,
                           metavar="PATH", flags=("--out-dir",))
    folds: int = option(5, "Test periods in a row, ending with the data.", BACKTEST)
    test_length: Length = option(Length(1, "y"), "Each fold's test period: N min|h|d|w|mo|y.", BACKTEST,
                                 metavar="SPAN", parse=parse_length, text=str)
    # None: --test-length (set by __post_init__).
    val_length: Length | None = option(None, "Each fold's validation period, before its test.", BACKTEST,
                                       metavar="SPAN", parse=parse_length, show_default="--test-length")
    # A model is trained at folds 1, 1 + refit, ...; 0: only at fold 1 (--refit once).
    refit: int = option(1, "every | once | K: which folds train a model.", BACKTEST, metavar="WHEN",
                        parse=parse_refit, text=refit_text)
    window: str = option("expanding", "Training window: expanding | rolling.", BACKTEST, metavar="MODE")
    # Rolling windows only.
    train_length: Length | None = option(None, "--window rolling: the training period's length.", BACKTEST,
                                         metavar="SPAN", parse=parse_length)
    jobs: int = option(1, "Fold models trained at once, if memory allows.", BACKTEST)
    # How each fold's forecasts are calibrated: predict's and evaluate's flag (predict/config.py).
    calibration: str = again(ForecastConfig, "calibration")
    predict_batch_size: int = 1024

    def __post_init__(self) -> None:
        check_method(self.calibration)
        if self.window not in WINDOWS:
            raise InputError(f"--window {self.window!r} is not one of {', '.join(WINDOWS)}")
        if (self.window == "rolling") != (self.train_length is not None):
            raise InputError("--window rolling needs --train-length (and --train-length needs --window rolling)")
        if self.folds < 1:
            raise InputError(f"--folds must be at least 1, got {self.folds}")
        if self.jobs < 1:
            raise InputError(f"--jobs must be at least 1, got {self.jobs}")
        if self.val_length is None:
            object.__setattr__(self, "val_length", self.test_length)  # derived: set once here

    def to_dict(self) -> dict[str, object]:
        return {"folds": self.folds, "refit": refit_text(self.refit), "test_length": str(self.test_length),
                "val_length": str(self.val_length), "window": self.window,
                "train_length": None if self.train_length is None else str(self.train_length),
                "calibration": self.calibration}
