"""The static and categorical inputs (--static; categorical --observed / --known) of bars given one at a time to
`Forecaster.update`, coded by the functions `predict` codes them with, so that a live window is predict's.

- static: a series `predict` primed keeps the values predict gave it (its windows' `static_cat` after the series
  code and `static_cont`: static.arrays of the values read from the prediction's bars or covariate files). A series
  first seen by `update` gets static.arrays of the value static.series_values reads for it: from the model's
  covariate file (by its name or contract), or, for a column of the bar files, from the field of its first bar.
  A value unseen in training is code 0, a real one is standardized with the training series' mean and std.
- categorical observed: the bar's field by name, else (a column the model read from a --covariates file) the file's
  last row at or before the bar (covariates_live.py: the value predict's as-of join gives the bar, whichever other bars
  share the call); no value at all is code 0, as predict codes a bar without one.
- categorical known: the model's covariate file at the bar's time and its forecast steps
  (timed_categories.known_codes, as timed_categories.arrays codes them).

Codes are index + 1 in the saved vocabulary (timed_categories.codes); a value unseen in training is 0, said once
per column and value for the stream (not once a bar). A call's codes are read first and kept only by `commit`,
once nothing can refuse the call, so a refused bar leaves them as they were.

Legend: B bars of one call, E encoder steps, D forecast steps, Sc / Sr categorical / real static inputs (the user's,
after the series code), Kc / Oc categorical known / observed inputs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from foxhunt.data.features import static, timed_categories
from foxhunt.data.features.covariates import UTC_NS, CovariateTable
from foxhunt.data.features.covariates_live import AsOf
from foxhunt.data.features.fitted import FittedInputs
from foxhunt.data.features.inputs import Sources
from foxhunt.errors import InputError

if TYPE_CHECKING:
    from foxhunt.data.dataset.windows import WindowedData

UPDATE = "update"  # the source a bar's own fields are named by in static.series_values' messages


@dataclass(frozen=True)
class LiveCats:
    """A model's live inputs beyond the series code and the real rows: the user's static inputs and the categorical
    time inputs (`LiveCodes.cats`), for a model trained with --static or categorical --observed / --known."""

    static_cat: np.ndarray  # (B, Sc) int64: the --static categories' codes, after the series code
    static_cont: np.ndarray  # (B, Sr) float32: the real --static inputs, standardized
    enc_cat: np.ndarray  # (B, E, Kc + Oc) int64: known, then observed categorical codes of the encoder rows
    dec_cat: np.ndarray  # (B, D, Kc) int64: known categorical codes of the forecast steps


@dataclass(frozen=True)
class _Read:
    """One call's codes, read but not yet kept (`LiveCodes.commit`)."""

    names: list[str]
    time: np.ndarray  # (B, Kc + Oc) the bars' rows
    dec: np.ndarray  # (B, D, Kc) their forecast steps'
    ts: list[int]  # (B,) the bars' times: the origin the steps belong to
    statics: dict[str, tuple[np.ndarray, np.ndarray]]  # series first seen -> ((Sc,), (Sr,))


class LiveCodes:
    """Per series of the stream: its static inputs, the codes of its last E rows and of its forecast steps."""

    def __init__(self, fitted: FittedInputs, src: Sources | None, encoder_length: int):
        self.fitted, self.src, self.e = fitted, src, encoder_length
        self.kc = timed_categories.known_columns(fitted)
        self.oc = timed_categories.observed_columns(fitted)
        self.static = list(fitted.static)
        self.kinds: dict[str, str] = dict(fitted.static_kinds)
        bar_columns = set(fitted.bar_columns)
        self.static_from_bars = [c for c in self.static if c in bar_columns]
        self.oc_from_files = {c for c in self.oc if c not in bar_columns}
        self.files = {c: AsOf(src.tables[c], c, text=True) for c in self.oc_from_files} if src is not None else {}
        self.vocab: dict[str, tuple[str, ...]] = fitted.timed_vocab
        self.said: dict[str, set[str]] = {c: set() for c in (*self.kc, *self.oc)}
        self.rows: dict[str, deque[np.ndarray]] = {}  # series -> its last E rows' codes, (Kc + Oc,) each
        self.statics: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # series -> ((Sc,) codes, (Sr,) values)
        self.dec: dict[str, tuple[int, np.ndarray]] = {}  # series -> (origin ns, (D, Kc) its steps' codes)

    @property
    def fields(self) -> tuple[str, ...]:
        """The bar fields read here, after the real --observed ones: categorical observed, static of the bar files."""
        return (*self.oc, *self.static_from_bars)

    # -- priming from predict ----------------------------------------------------------------------------------
    def prime(self, w: WindowedData) -> None:
        """(Re)start the series of a prediction's windows `w` from its real rows: their static inputs and the codes
        of their last E rows, as predict gave them."""
        real = w.real.numpy()
        sidx = w.series_idx.numpy()[real]  # (N,) sorted by series
        time_cat = w.time_cat.numpy()[real]  # (N, Kc + Oc)
        static_cat, static_cont = w.static_cat.numpy()[real, 1:], w.static_cont.numpy()[real]  # (N, Sc), (N, Sr)
        first = np.searchsorted(sidx, np.arange(len(w.series_names)))  # (S,) each series' first row
        end = np.searchsorted(sidx, np.arange(len(w.series_names)), side="right")
        for s, name in enumerate(w.series_names):
            if end[s] == first[s]:
                continue
            # copies: views would keep predict's whole (N, Kc + Oc) array alive with the stream
            self.rows[name] = deque(time_cat[max(first[s], end[s] - self.e):end[s]].copy(), maxlen=self.e)
            self.statics[name] = (static_cat[first[s]].copy(), static_cont[first[s]].copy())
            self.dec.pop(name, None)

    # -- a call's bars -----------------------------------------------------------------------------------------
    def read(self, names: Sequence[str], contracts: Sequence[str | None], ts_ns: Sequence[int],
             given: Sequence[Sequence[object]], at: np.ndarray) -> _Read:
        """The codes of a call's bars, nothing kept: `given` (B, len(fields)) the bars' fields (None: not given),
        `at` (B, 1 + D) each bar's time and its forecast steps. InputError (one line naming the series, the column
        and what to do) for a value that is not a category or a static value update cannot find."""
        b = len(names)
        oc_given = [list(row[:len(self.oc)]) for row in given]
        static_given = [list(row[len(self.oc):]) for row in given]
        time = np.zeros((b, len(self.kc) + len(self.oc)), np.int64)  # (B, Kc + Oc)
        both = self._known(at.ravel()).reshape(b, at.shape[1], len(self.kc))  # (B, 1 + D, Kc)
        time[:, :len(self.kc)], dec = both[:, 0], both[:, 1:]
        for j, c in enumerate(self.oc):
            values = self._observed(c, [row[j] for row in oc_given], names, contracts, ts_ns)
            time[:, len(self.kc) + j] = timed_categories.codes(values, self.vocab[c], f"--observed {c}", self.said[c])
        statics = {n: self._static_of(n, c, row) for n, c, row in zip(names, contracts, static_given, strict=True)
                   if n not in self.statics}
        return _Read(list(names), time, dec, [int(t) for t in ts_ns], statics)

    def commit(self, got: _Read) -> None:
        """Keep a call's codes (`read`): each bar's row after its series' last E - 1, its steps' codes."""
        self.statics.update(got.statics)
        for i, name in enumerate(got.names):
            self.rows.setdefault(name, deque(maxlen=self.e)).append(got.time[i])
            self.dec[name] = (got.ts[i], got.dec[i])

    def _observed(self, column: str, values: list[object], names: Sequence[str], contracts: Sequence[str | None],
                  ts_ns: Sequence[int]) -> pl.Series:
        """(B,) the values of a categorical observed column as text: each bar's own, else its file's as of the bar."""
        missing = [i for i, v in enumerate(values) if v is None]
        if missing and column not in self.oc_from_files:
            raise InputError(f"update: the bar of {names[missing[0]]!r} has no {column!r}; the model takes it as an "
                             "observed input (--observed) of the bar files: pass it in the bar")
        for i in missing:  # the file's cell as of the bar, as predict's as-of join gives it
            values[i] = self.files[column].at(names[i], contracts[i], int(ts_ns[i]))
        return _texts(column, values, names)

    def _static_of(self, name: str, contract: str | None, given: list[object]) -> tuple[np.ndarray, np.ndarray]:
        """((Sc,), (Sr,)) the static inputs of a series first seen by `update`: static.series_values of the model's
        covariate files, or of its bar's fields for columns of the bar files, coded by static.arrays."""
        tables: dict[str, CovariateTable] = {}
        for c in self.static:
            if c in self.static_from_bars:
                v = given[self.static_from_bars.index(c)]
                if v is None:
                    raise InputError(f"update: the bar of {name!r} has no {c!r}; the model takes it as a static input "
                                     "(--static) of the bar files: pass it in the series' first bar, or call "
                                     "predict(history) on the series' bars")
                value = _texts(c, [v], [name]) if self.kinds[c] == "categorical" else _number(c, v, name)
                tables[c] = CovariateTable(UPDATE, pl.DataFrame({"ts": pl.Series([0]).cast(UTC_NS), "key": [name],
                                                                 c: value}), keyed=True)
            else:
                assert self.src is not None
                tables[c] = self.src.tables[c]
        bars = pl.DataFrame({"series": [name], "contract": [contract if contract is not None else name]})
        values = static.series_values(bars, [name], self.static, tables, self.kinds)
        cont, cat = static.arrays(self.fitted, values, [name])  # (1, Sr), (1, Sc)
        return cat[0], cont[0]

    # -- the model's inputs ------------------------------------------------------------------------------------
    def cats(self, names: Sequence[str], origins: Sequence[int], steps: np.ndarray) -> LiveCats:
        """The live windows' LiveCats of series `names` (B,) whose last bars are at `origins` (B,); `steps`
        (B, D) the forecast steps after them, read for a series whose steps' codes are not kept (a primed one)."""
        for i, (name, ts) in enumerate(zip(names, origins, strict=True)):
            kept = self.dec.get(name)
            if kept is None or kept[0] != ts:
                self.dec[name] = (int(ts), self._known(steps[i]))
        statics = [self.statics[n] for n in names]
        return LiveCats(static_cat=np.stack([s[0] for s in statics]).astype(np.int64),  # (B, Sc)
                        static_cont=np.stack([s[1] for s in statics]).astype(np.float32),  # (B, Sr)
                        enc_cat=np.stack([np.stack(self.rows[n]) for n in names]),  # (B, E, Kc + Oc)
                        dec_cat=np.stack([self.dec[n][1] for n in names]))  # (B, D, Kc)

    def _known(self, at: np.ndarray) -> np.ndarray:
        """(len(at), Kc) the known categorical codes at the times `at`, each unseen value said once a stream."""
        return timed_categories.known_codes(self.fitted, self.src, at, said=self.said)


def _texts(column: str, values: Sequence[object], names: Sequence[str]) -> pl.Series:
    """(B,) bar fields of a category as the bar reader gives a cell (covariate_files: text stripped, empty is no
    value) and timed_categories.texts writes a number: text. InputError for a value neither text nor a number."""
    out: list[str | None] = [None] * len(values)
    numbers: dict[int, float] = {}
    for i, v in enumerate(values):
        if isinstance(v, str):
            out[i] = v.strip() or None
        elif isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool | np.bool_):
            numbers[i] = float(v)
        elif v is not None:
            raise InputError(f"update: the bar of {names[i]!r} has {column!r} = {v!r}, not a category; pass its "
                             "value as text (or a number)")
    if numbers:
        coded = timed_categories.texts(pl.Series(list(numbers.values()), dtype=pl.Float64)).to_list()
        for i, t in zip(numbers, coded, strict=True):
            out[i] = t
    return pl.Series(column, out, dtype=pl.Utf8)


def _number(column: str, v: object, name: str) -> pl.Series:
    """A real static bar field as the one-row column static.series_values reads (text stays text: it says so)."""
    if isinstance(v, str):
        return pl.Series(column, [v], dtype=pl.Utf8)
    try:
        return pl.Series(column, [float(v)], dtype=pl.Float64)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"update: the bar of {name!r} has {column!r} = {v!r}, not a number; pass the series' "
                         "static value as a number") from None
