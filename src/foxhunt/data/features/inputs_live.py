"""The user's own inputs (--observed, --known, --events, --static) of bars given one at a time to `Forecaster.update`.

Training joins them to whole histories (data/features/inputs.py); a live bar needs the same values at one time:

- observed: the bar carries each --observed column by name, or, for a column the model read from a --covariates file
  (not the bar files), may leave it out: the value is then the file's last row at or before the bar's time, as the
  as-of join gives it (covariates.asof_join: a keyed file by the series' name, else by its contract).
- known: the known covariates and the event features of the bar's time and of its forecast steps
  (inputs.known_values, from the model's covariate source: the training run's --covariates, or the files
  `Forecaster.load` names), the same function the prepared rows were filled with; keyed events under the key the
  bar's series and contract read (events.key_of), as prepared rows read theirs.

- static and categorical inputs: coded by data/features/codes_live.py with the functions predict codes them with.

`LiveInputs` reads the files once and answers a call's bars with one `known_values` call; its values are checked
before the stream moves (a refused bar leaves the state as it was).

Legend: B bars of one call, D forecast steps, Ou observed user columns, Ku known user columns.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from foxhunt.data.config import DataConfig
from foxhunt.data.features import inputs, static
from foxhunt.data.features.codes_live import LiveCodes
from foxhunt.data.features.covariates_live import AsOf
from foxhunt.data.features.events import key_of
from foxhunt.data.features.fitted import FittedInputs
from foxhunt.errors import InputError

if TYPE_CHECKING:
    from foxhunt.data.dataset.types import FittedTransform


class LiveInputs:
    """The user's inputs of a model's live bars: raw observed values (read from the bar or its covariate file), the
    standardized known values of the bars' times and forecast steps, and (`codes`) the static and categorical ones."""

    def __init__(self, tf: FittedTransform, cfg: DataConfig):
        got = tf.inputs or FittedInputs()
        self.observed: tuple[str, ...] = got.observed
        self.bar_columns = frozenset(got.bar_columns)
        from_files = [c for c in self.observed if c not in self.bar_columns]
        observed_cat, known_cat = got.observed_cat, got.known_cat
        cat_files = [c for c in observed_cat if c not in self.bar_columns]
        static_files = [c for c in got.static if c not in self.bar_columns]
        # The bar files' own columns come with each bar: only the covariate files and the calendar are read here.
        names = inputs.InputNames((*from_files, *cat_files), (*got.known, *known_cat), tuple(static_files),
                                  (*observed_cat, *known_cat, *static.categorical_columns(got)), target=tf.target)
        src = inputs.load_sources(cfg, names, got.events, fitted=True)  # a saved model's real inputs: numbers
        self.n_known = len(got.known_names)
        self.known = None if src is None else inputs.known_values(got, src, max(int(tf.bar_spacing_ns), 1),
                                                                  tf.event_cap)
        self.files = {c: AsOf(src.tables[c], c) for c in from_files} if src is not None else {}
        self.events = None if src is None else src.events
        self.codes = LiveCodes(got, src, cfg.encoder_length) if (got.static or observed_cat or known_cat) else None

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields a bar may carry by name: the real --observed columns, then those `codes` reads."""
        return self.observed + (self.codes.fields if self.codes is not None else ())

    def observed_values(self, names: Sequence[str], contracts: Sequence[str | None], ts_ns: Sequence[int],
                        given: Sequence[Sequence[object]]) -> list[list[float]]:
        """(B, Ou) raw observed values: each bar's own (`given`, None where the bar has no such field), else its
        covariate file's as of the bar's time. InputError naming the series and the column when a bar has none
        or a value is not a finite number (`predict` drops such a bar from a history)."""
        out = []
        for name, contract, ts, row in zip(names, contracts, ts_ns, given, strict=True):
            vals = []
            for col, v in zip(self.observed, row, strict=True):
                if v is None:
                    if col not in self.files:
                        raise InputError(f"update: the bar of {name!r} has no {col!r}; the model takes it as an "
                                         "observed input (--observed): pass it in the bar")
                    v = self.files[col].at(name, contract, ts)
                    if v is None:
                        raise InputError(f"update: the bar of {name!r} has no {col!r}, and "
                                         f"{self.files[col].table.source} has no value at or before "
                                         f"{np.datetime64(int(ts), 'ns')}Z; pass it in the bar")
                try:
                    x = float(v)  # type: ignore[arg-type]
                except (TypeError, ValueError):
                    raise InputError(f"update: the bar of {name!r} has {col!r} = {v!r}, not a number") from None
                if not math.isfinite(x):
                    raise InputError(f"update: the bar of {name!r} has a non-finite {col!r} ({x}); predict drops "
                                     "such a bar from a history: pass a finite value or leave the bar out")
                vals.append(x)
            out.append(vals)
        return out

    def of_bars(self, names: Sequence[str], contracts: Sequence[str | None], ts_ns: Sequence[int],
                observed: list[list[object]] | None, steps: Callable[[int], Sequence[int]],
                ) -> tuple[list[list[float]] | None, np.ndarray | None]:
        """A call's bars' raw observed values (B, Ou) (`observed_values`; `observed` (B, len(fields)), None: none
        given) and the known values (B, 1 + D, Ku) of each bar's time and its forecast steps (`steps(ts)`: the D
        grid times after it); None for what the model does not take. The bars' static and categorical codes are
        read too, and kept (`codes`) once every value of the call is checked."""
        given = observed if observed is not None else [[None] * len(self.fields)] * len(names)
        obs = None
        if self.observed:
            obs = self.observed_values(names, contracts, ts_ns, [row[:len(self.observed)] for row in given])
        if not (self.n_known or self.codes is not None):
            return obs, None
        at = np.array([[ts, *steps(ts)] for ts in ts_ns], dtype=np.int64)  # (B, 1 + D)
        read = None if self.codes is None else self.codes.read(
            names, contracts, ts_ns, [row[len(self.observed):] for row in given], at)
        known = self.known_of(names, contracts, at) if self.n_known else None
        if read is not None:
            self.codes.commit(read)  # type: ignore[union-attr]
        return obs, known

    def known_of(self, names: Sequence[str], contracts: Sequence[str | None], at: np.ndarray) -> np.ndarray:
        """(B, 1 + D, Ku) the known values of each bar's times `at` (B, 1 + D), under its events' key."""
        keys = [self.key(n, c) for n, c in zip(names, contracts, strict=True)]
        if not any(keys):  # every bar reads the unkeyed events: one call
            return self.known_at(at.ravel()).reshape(len(names), at.shape[1], -1)
        return np.stack([self.known_at(row, k) for row, k in zip(at, keys, strict=True)])

    def key(self, name: str, contract: str | None) -> str | None:
        """The events' key a bar of series `name` holding `contract` reads (events.key_of; None: the unkeyed
        events)."""
        return None if self.events is None else key_of(self.events, name, contract)

    def known_at(self, ts_ns: np.ndarray, key: str | None = None) -> np.ndarray:
        """(U, Ku) float32 standardized known covariates, then event features under the events' `key`, at ts_ns
        (U,): InputError (one line naming the column and the time) where a known covariate's file does not cover a
        time."""
        assert self.known is not None
        return self.known(np.asarray(ts_ns, dtype=np.int64), key)
