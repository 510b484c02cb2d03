"""The options of the commands that forecast with a trained model (`foxhunt predict`, `foxhunt evaluate`), declared
on the fields of their records as the run commands' are (foxhunt/flags.py): cli/forecasts.py builds the commands'
flags from them and validates the values once, here. The bars read (--parquet-file), the threads and the console's
verbosity are the CLI's; --since, --until, --timezone and --device are the training run's options again, the
model's own by default."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from foxhunt.data.config import DataConfig
from foxhunt.errors import InputError
from foxhunt.flags import DATA, FORECASTS, INPUTS, MODEL, OUTPUT, again, option
from foxhunt.model.config import DEFAULT_METHOD, METHODS
from foxhunt.train.config import TrainConfig


@dataclass(frozen=True, kw_only=True)
class ForecastConfig:
    """What predict and evaluate share: the model, the bars' window or a feature store, the origins forecast, the
    forward pass and the calibration, the user's inputs in place of the training run's."""

    model: Path = option(dataclasses.MISSING, "A run directory written by `foxhunt train`.", MODEL, metavar="PATH",
                         flags=("--model",))
    features: Path | None = option(None, "Forecast a `foxhunt prepare` store's windows.", DATA, metavar="PATH")
    since: str | None = again(DataConfig, "since", show_default="the model's")
    until: str | None = again(DataConfig, "until", show_default="the last bar")
    timezone: str | None = again(DataConfig, "timezone", show_default="the model's")
    # Both select origins by their first forecast step (select_origins): start <= step < end, a bare --end date
    # taking its whole day.
    start: str | None = option(None, "Earliest first forecast step: ISO date/time.", FORECASTS, metavar="DATE")
    end: str | None = option(None, "First forecast step before ISO time / through date.", FORECASTS, metavar="DATE")
    batch_size: int = option(1024, "Windows per forward pass.", FORECASTS, metavar="N", minimum=1)
    device: str = again(TrainConfig, "device", default="cpu", switch=None)
    # How the forecasts are calibrated (model/config.py METHODS); backtest takes the same flag.
    calibration: str = option(DEFAULT_METHOD, f"Calibration: {' | '.join(METHODS)}.", FORECASTS,
                              metavar="HOW", flags=("--calibration",))
    no_calibration: bool = option(False, "Use the model's own quantiles, uncalibrated.", FORECASTS,
                                  flags=("--no-calibration",))
    covariates: tuple[str, ...] | None = option(None, "Your --covariates files (repeatable).", INPUTS,
                                                metavar="PATH", repeat=True, show_default="the training run's")
    events: str | None = option(None, "Your --events calendar.", INPUTS, metavar="PATH", show_default="the model's")

    def __post_init__(self) -> None:
        given = [f for f, v in (("--since", self.since), ("--until", self.until), ("--timezone", self.timezone)) if v]
        if self.features is not None and given:
            raise InputError(f"{' / '.join(given)}: --since / --until bound the bars read and --timezone reads their "
                             "naive times, and --features reads a store's windows, prepared with its own; drop "
                             f"{'it' if len(given) == 1 else 'them'}, or read the bars with --parquet-file")
        check_method(self.calibration)
        if self.no_calibration and self.calibration not in (DEFAULT_METHOD, "none"):
            raise InputError(f"--calibration {self.calibration} and --no-calibration contradict each other; pass one of "
                             "them (--no-calibration is --calibration none)")
        if not self.covariates:
            object.__setattr__(self, "covariates", None)  # none given: the training run's

    @property
    def method(self) -> str:
        """The calibration applied: --calibration, or "none" with --no-calibration."""
        return "none" if self.no_calibration else self.calibration


def check_method(calibration: str) -> None:
    """An unknown --calibration stops here, before a model is read."""
    if calibration not in METHODS:
        raise InputError(f"--calibration {calibration!r} is not one of {', '.join(METHODS)}")


@dataclass(frozen=True, kw_only=True)
class PredictConfig(ForecastConfig):
    """`foxhunt predict`'s options: the forecasts' parquet file besides the shared ones."""

    out: Path = option(dataclasses.MISSING, "Forecasts parquet to write.", OUTPUT, metavar="PATH",
                       flags=("--out", "-o"))
