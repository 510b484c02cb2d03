"""Categorical observed and known inputs: an --observed or --known column of text (or one named by --categorical),
coded as static.py codes a categorical --static input.

Its vocabulary is the values training saw: an observed column's values at the bars before the train cut (joined as
of each bar, covariates.asof_join), a known column's values as of the training bars' times (covariates.
known_values_at). Code = index + 1; 0 for a value training never saw (counted, said once per column) and for no
value at all (an observed column with no row at or before a bar: the bar keeps its place, with code 0). A model
saves the vocabularies (FittedInputs.timed_vocab), so prediction codes exactly as training did.

The codes go where the model reads them (dataset/windows.py): `time_cat` (N, Kc + Oc), the known columns as of each
row's own time then the observed ones, for the encoder; `known_cat` (U, Kc), the known columns as of each time of
the forecast grid, for the decoder.

Legend: N rows, U grid rows, Kc categorical known inputs, Oc categorical observed inputs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from foxhunt.data.features.covariates import known_values_at

if TYPE_CHECKING:
    from foxhunt.data.features.fitted import FittedInputs
    from foxhunt.data.features.inputs import Sources

log = logging.getLogger("foxhunt.data")
UNKNOWN = 0  # the code of a value unseen in training, or of none
SHOWN = 5  # unseen values named in the warning


def texts(s: pl.Series) -> pl.Series:
    """A category column as text: text as it is; numbers as text (whole ones without a trailing .0, as
    static._text writes them); NaN and null as null (no value)."""
    if s.dtype == pl.Utf8:
        return s
    x = pl.col("x")
    return pl.DataFrame({"x": s.cast(pl.Float64).fill_nan(None)}).select(
        pl.when(x == x.floor()).then(x.cast(pl.Int64, strict=False).cast(pl.Utf8)).otherwise(x.cast(pl.Utf8))
    ).to_series().alias(s.name)


def vocabulary(s: pl.Series) -> list[str]:
    """The distinct values of `s` as text (`texts`), sorted: code = index + 1."""
    return sorted(texts(s).drop_nulls().unique().to_list())


Unseen = dict[str, tuple[int, list[str]]]  # what (the input) -> rows with a value unseen in training, the first ones


def codes(s: pl.Series, vocab: Sequence[str], what: str, said: set[str] | None = None,
          unseen: Unseen | None = None) -> np.ndarray:
    """(len(s),) int64 codes of `s` under `vocab`: index + 1, 0 for no value and for a value not in `vocab`. The
    unseen values are counted and said once (`what` names the input: "--observed regime"). `said`: the unseen
    values already said (updated): a live stream codes a bar at a time and says each value once, not once a bar.
    `unseen`: where given, the unseen values are added to it and not said: a piece of a panel counts its rows, and
    `tell` says the panel's sums once."""
    t = texts(s)
    code = t.replace_strict(list(vocab), list(range(1, len(vocab) + 1)), default=UNKNOWN, return_dtype=pl.Int64)
    unseen_rows = t.filter(t.is_not_null() & ~t.is_in(list(vocab)))
    if said is not None:
        new = unseen_rows.filter(~unseen_rows.is_in(list(said)))
        said.update(new.to_list())
        unseen_rows = new
    if unseen_rows.len():
        part = (unseen_rows.len(), unseen_rows.unique(maintain_order=True).head(SHOWN).to_list())
        if unseen is None:
            _say(what, *part)
        else:
            unseen[what] = _merged([unseen[what], part] if what in unseen else [part])
    return code.fill_null(UNKNOWN).to_numpy().astype(np.int64)


def tell(fitted: FittedInputs | None, parts: Sequence[Unseen]) -> None:
    """Say the unseen values of the `parts` (`codes`' counts of consecutive rows: the pieces of a panel, then its
    grid) once per input, in the order `arrays` codes them: as `codes` says them over all the rows at once."""
    for what in (*(f"--known {c}" for c in known_columns(fitted)), *(f"--observed {c}" for c in
                                                                     observed_columns(fitted))):
        if got := [p[what] for p in parts if what in p]:
            _say(what, *_merged(got))


def _merged(parts: list[tuple[int, list[str]]]) -> tuple[int, list[str]]:
    """Counts of consecutive rows as one: the rows summed, the first SHOWN distinct values in order (each part's
    first SHOWN hold them)."""
    return sum(n for n, _ in parts), list(dict.fromkeys(v for _, shown in parts for v in shown))[:SHOWN]


def _say(what: str, rows: int, shown: list[str]) -> None:
    log.warning("%s: %d rows with a value unseen in training (%s) get the unknown code 0", what, rows,
                ", ".join(shown))


def observed_columns(fitted: FittedInputs | None) -> list[str]:
    return [] if fitted is None else list(fitted.observed_cat)


def known_columns(fitted: FittedInputs | None) -> list[str]:
    return [] if fitted is None else list(fitted.known_cat)


def seen(observed: dict[str, pl.Series], train: np.ndarray) -> dict[str, list[str]]:
    """Each categorical observed column's vocabulary over its training rows (`observed` (N,) per column, `train` (N,)
    bool): what a piece of a panel sends back, the panel's being the vocabulary of the pieces' together (`fit_seen`)."""
    return {c: vocabulary(s.filter(pl.Series(train))) for c, s in observed.items()}


def fit(src: Sources, observed: dict[str, pl.Series], train: np.ndarray, ts_train: np.ndarray
        ) -> dict[str, tuple[str, ...]]:
    """{column: vocabulary}: each categorical observed column's over its training rows (`observed` (N,) per column,
    `train` (N,) bool), each categorical known column's as of the training bars' times `ts_train` (int64 ns)."""
    return fit_seen(src, [seen(observed, train)], ts_train)


def fit_seen(src: Sources, parts: Sequence[dict[str, list[str]]], ts_train: np.ndarray) -> dict[str, tuple[str, ...]]:
    """`fit` from the `seen` vocabularies of the parts of the rows (the pieces of a panel) and the training bars'
    times `ts_train` (or their distinct ones: a vocabulary is of the distinct values)."""
    vocab = {c: tuple(vocabulary(pl.Series(c, [v for p in parts for v in p[c]], dtype=pl.Utf8)))
             for c in src.observed_cat}
    if src.known_cat:
        values = known_values_at(ts_train, src.of(src.known_cat), src.known_cat)
        vocab.update({c: tuple(vocabulary(v)) for c, v in zip(src.known_cat, values, strict=True)})
    for c, v in vocab.items():
        log.info("%s: categorical, %d values in training (%s)", c, len(v), ", ".join(v[:SHOWN]) + (
            ", ..." if len(v) > SHOWN else ""))
        if len(v) < 2:
            log.warning("%s: training saw %s; the model cannot learn from an input that does not change",
                        c, f"only the value {v[0]}" if v else "no value")
    return vocab


def arrays(fitted: FittedInputs, src: Sources, observed: dict[str, pl.Series], ts: np.ndarray, real: np.ndarray,
           grid_ts: np.ndarray, unseen: Unseen | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(N, Kc + Oc) `time_cat` and (U, Kc) `known_cat` codes under the `fitted` inputs. Rows: timestamps `ts` (N,),
    `real` (N,) False on a prediction's appended rows (code 0: the encoder never reads them); `observed`: each
    categorical observed column's joined values of the real rows, in order; `grid_ts` (U,): the forecast grid.
    `unseen`: as `codes`' (a piece of a panel, whose grid is coded apart: `known_codes`)."""
    vocab = fitted.timed_vocab
    kc, oc = known_columns(fitted), observed_columns(fitted)
    time_cat = np.zeros((len(ts), len(kc) + len(oc)), dtype=np.int64)  # (N, Kc + Oc)
    n = int(real.sum())
    both = known_codes(fitted, src, np.concatenate([ts[real], grid_ts]), unseen)  # one warning per column
    time_cat[real, :len(kc)], known_cat = both[:n], both[n:]
    for j, c in enumerate(oc):
        time_cat[real, len(kc) + j] = codes(observed[c], vocab[c], f"--observed {c}", unseen=unseen)
    return time_cat, known_cat


def known_codes(fitted: FittedInputs | None, src: Sources | None, at: np.ndarray, unseen: Unseen | None = None,
                said: dict[str, set[str]] | None = None) -> np.ndarray:
    """(len(at), Kc) the categorical known columns' codes as of the times `at` (`codes`' `unseen`, and its `said`
    per column: a live stream's)."""
    kc = known_columns(fitted)
    out = np.zeros((len(at), len(kc)), dtype=np.int64)
    if kc:
        assert src is not None and fitted is not None
        for j, (c, v) in enumerate(zip(kc, known_values_at(at, src.of(kc), kc), strict=True)):
            out[:, j] = codes(v, fitted.timed_vocab[c], f"--known {c}", None if said is None else said[c],
                              unseen=unseen)
    return out
