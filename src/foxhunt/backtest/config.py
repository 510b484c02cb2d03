"""Backtest options, validated once at the edge."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from foxhunt.backtest.folds import Length, parse_length, parse_refit
from foxhunt.errors import InputError
from foxhunt.model.config import DEFAULT_METHOD, METHODS

WINDOWS = ("expanding", "rolling")


@dataclass(frozen=True)
class BacktestConfig:
    out_dir: Path
    folds: int = 5
    refit: int = 1  # a model is trained at folds 1, 1 + refit, ...; 0: only at fold 1 (--refit once)
    test_length: Length = Length(1, "y")
    val_length: Length = Length(1, "y")
    window: str = "expanding"
    train_length: Length | None = None  # rolling windows only
    jobs: int = 1
    predict_batch_size: int = 1024
    calibration: str = DEFAULT_METHOD  # how each fold's forecasts are calibrated (model/calibration.METHODS)

    @staticmethod
    def parse(out_dir: Path, folds: int, refit: str, test_length: str, val_length: str | None, window: str,
              train_length: str | None, jobs: int, calibration: str = DEFAULT_METHOD) -> BacktestConfig:
        if calibration not in METHODS:
            raise InputError(f"--calibration {calibration!r} is not one of {', '.join(METHODS)}")
        if window not in WINDOWS:
            raise InputError(f"--window {window!r} is not one of {', '.join(WINDOWS)}")
        if (window == "rolling") != (train_length is not None):
            raise InputError("--window rolling needs --train-length (and --train-length needs --window rolling)")
        if folds < 1:
            raise InputError(f"--folds must be at least 1, got {folds}")
        if jobs < 1:
            raise InputError(f"--jobs must be at least 1, got {jobs}")
        test = parse_length(test_length, "--test-length")
        return BacktestConfig(
            out_dir=Path(out_dir), folds=folds, refit=parse_refit(refit), test_length=test,
            val_length=parse_length(val_length, "--val-length") if val_length else test, window=window,
            train_length=parse_length(train_length, "--train-length") if train_length else None, jobs=jobs,
            calibration=calibration)

    def to_dict(self) -> dict[str, object]:
        return {"folds": self.folds, "refit": "once" if self.refit == 0 else "every" if self.refit == 1 else self.refit,
                "test_length": str(self.test_length), "val_length": str(self.val_length), "window": self.window,
                "train_length": None if self.train_length is None else str(self.train_length),
                "calibration": self.calibration}
