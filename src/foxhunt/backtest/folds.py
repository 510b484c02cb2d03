"""Fold dates of a walk-forward backtest, and which fold's model forecasts each fold.

Every date is a boundary in ns UTC; a window belongs to the period holding its first forecast bar (data/dataset/windows.py).
Fold k's test period is [test_start, test_end); its validation period is the `val_length` before it and its
training period everything before that (expanding) or the `train_length` before that (rolling). The splits purge a
training window whose forecast bars reach into validation, and a validation window whose forecast bars reach into
the test period, exactly as `foxhunt train --train-end VAL_START --val-end TEST_START` does, so no fold's training
targets overlap its test period.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from foxhunt.backtest.config import Length
from foxhunt.errors import InputError


@dataclass(frozen=True)
class Fold:
    index: int  # 1-based
    train_start: int | None  # ns; None: from the first bar (expanding window)
    val_start: int
    test_start: int
    test_end: int | None  # exclusive; None: to the end of the data (the last fold)
    model_fold: int  # the fold whose model forecasts this one (itself when it trains)

    @property
    def trains(self) -> bool:
        return self.model_fold == self.index

    @property
    def name(self) -> str:
        return f"fold-{self.index:02d}"

    def to_dict(self) -> dict[str, object]:
        return {"index": self.index, "train_start": iso(self.train_start), "val_start": iso(self.val_start),
                "test_start": iso(self.test_start), "test_end": iso(self.test_end), "model_fold": self.model_fold}


def plan_folds(first_ns: int, last_ns: int, folds: int, test_length: Length, val_length: Length, refit: int,
               train_length: Length | None = None) -> list[Fold]:
    """`folds` consecutive test periods of `test_length` ending with the data (the last one runs to the last bar),
    each after its validation period; raises InputError when the first fold would have no training time."""
    if folds < 1:
        raise InputError(f"--folds must be at least 1, got {folds}")
    anchor = test_length.anchor(last_ns)
    # calendar units: the last fold is the (partial) period holding the last bar; fixed ones end just after it
    back = folds - (1 if test_length.calendar else 0)
    starts = [test_length.back(anchor, back - k) for k in range(folds)]
    ends: list[int | None] = [*starts[1:], None]
    out = []
    for k, (t0, t1) in enumerate(zip(starts, ends, strict=True), start=1):
        v0 = val_length.back(t0)
        model_fold = 1 if refit == 0 else 1 + (k - 1) // refit * refit
        out.append(Fold(k, train_length.back(v0) if train_length else None, v0, t0, t1, model_fold))
    first = out[0]
    if first.val_start <= first_ns or (first.train_start is not None and first.train_start < first_ns):
        raise InputError(f"{folds} folds of --test-length {test_length} after --val-length {val_length}"
                         + (f" and --train-length {train_length}" if train_length else "")
                         + f" start before the data ({iso(first_ns)[:10]} .. {iso(last_ns)[:10]}) leaving no "
                         "training time; use fewer --folds or shorter lengths")
    return out


def short_folds(folds: list[Fold], last_ns: int) -> list[dict[str, Any]]:
    """The folds whose test period is under half the median of the others' (a calendar `--test-length 1y` ends with
    the part of a year the data reach into): their scores rest on far fewer origins."""
    days = [((f.test_end if f.test_end is not None else last_ns + 1) - f.test_start) / 86_400e9 for f in folds]
    out = []
    for f, d in zip(folds, days, strict=True):
        others = [x for g, x in zip(folds, days, strict=True) if g is not f]
        if others and d < 0.5 * float(np.median(others)):
            out.append({"index": f.index, "name": f.name, "days": round(d, 1),
                        "others_days": round(float(np.median(others)), 1)})
    return out


def short_line(short: list[dict[str, Any]]) -> str:
    """`fold-05 tests 17.0 days, under half the others' 365.0 (median): its scores rest on few origins`."""
    return "; ".join(f"{s['name']} tests {s['days']:g} days, under half the others' {s['others_days']:g} (median)"
                     for s in short) + ": scores on so few origins are noisy, read them with their p-values"


def iso(ns: int | None) -> str | None:
    """ns UTC -> '2016-01-01T00:00:00+00:00' (what --train-end / --val-end parse back to the same instant)."""
    if ns is None:
        return None
    return str(np.datetime64(int(ns), "ns").astype("datetime64[s]")) + "+00:00"
