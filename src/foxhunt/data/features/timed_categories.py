"""Categorical observed and known inputs: an --observed or --known column of text (or one named by --categorical),
coded as static.py codes a categorical --static input.

Its vocabulary is the values training saw: an observed column's values at the bars before the train cut (joined as
of each bar, covariates.asof_join), a known column's values as of the training bars' times (covariates.
known_values_at). Code = index + 1; 0 for a value training never saw (counted, said once per column) and for no
value at all (an observed column with no row at or before a bar: the bar keeps its place, with code 0). A model
saves the vocabularies (FittedTransform.inputs "timed_vocab"), so prediction codes exactly as training did.

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


def codes(s: pl.Series, vocab: Sequence[str], what: str, said: set[str] | None = None) -> np.ndarray:
    """(len(s),) int64 codes of `s` under `vocab`: index + 1, 0 for no value and for a value not in `vocab`. The
    unseen values are counted and said once (`what` names the input: "--observed regime"). `said`: the unseen
    values already said (updated): a live stream codes a bar at a time and says each value once, not once a bar."""
    t = texts(s)
    code = t.replace_strict(list(vocab), list(range(1, len(vocab) + 1)), default=UNKNOWN, return_dtype=pl.Int64)
    unseen = t.filter(t.is_not_null() & ~t.is_in(list(vocab)))
    if said is not None:
        new = unseen.filter(~unseen.is_in(list(said)))
        said.update(new.to_list())
        unseen = new
    if unseen.len():
        shown = unseen.unique(maintain_order=True).head(SHOWN).to_list()
        log.warning("%s: %d rows with a value unseen in training (%s) get the unknown code 0", what, unseen.len(),
                    ", ".join(shown))
    return code.fill_null(UNKNOWN).to_numpy().astype(np.int64)


def observed_columns(inputs: dict | None) -> list[str]:
    return list((inputs or {}).get("observed_cat", ()))


def known_columns(inputs: dict | None) -> list[str]:
    return list((inputs or {}).get("known_cat", ()))


def fit(src: Sources, observed: dict[str, pl.Series], train: np.ndarray, ts_train: np.ndarray) -> dict[str, list]:
    """{column: vocabulary}: each categorical observed column's over its training rows (`observed` (N,) per column,
    `train` (N,) bool), each categorical known column's as of the training bars' times `ts_train` (int64 ns)."""
    vocab = {c: vocabulary(observed[c].filter(pl.Series(train))) for c in src.observed_cat}
    if src.known_cat:
        values = known_values_at(ts_train, src.of(src.known_cat), src.known_cat)
        vocab.update({c: vocabulary(v) for c, v in zip(src.known_cat, values, strict=True)})
    for c, v in vocab.items():
        log.info("%s: categorical, %d values in training (%s)", c, len(v), ", ".join(v[:SHOWN]) + (
            ", ..." if len(v) > SHOWN else ""))
        if len(v) < 2:
            log.warning("%s: training saw %s; the model cannot learn from an input that does not change",
                        c, f"only the value {v[0]}" if v else "no value")
    return vocab


def arrays(inputs: dict, src: Sources, observed: dict[str, pl.Series], ts: np.ndarray, real: np.ndarray,
           grid_ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, Kc + Oc) `time_cat` and (U, Kc) `known_cat` codes under the fitted `inputs`. Rows: timestamps `ts` (N,),
    `real` (N,) False on a prediction's appended rows (code 0: the encoder never reads them); `observed`: each
    categorical observed column's joined values of the real rows, in order; `grid_ts` (U,): the forecast grid."""
    vocab = inputs["timed_vocab"]
    kc, oc = known_columns(inputs), observed_columns(inputs)
    time_cat = np.zeros((len(ts), len(kc) + len(oc)), dtype=np.int64)  # (N, Kc + Oc)
    known_cat = np.zeros((len(grid_ts), len(kc)), dtype=np.int64)  # (U, Kc)
    if kc:  # the rows' times and the grid's at once: one warning per column
        at = np.concatenate([ts[real], grid_ts])
        n = int(real.sum())
        for j, (c, v) in enumerate(zip(kc, known_values_at(at, src.of(kc), kc), strict=True)):
            both = codes(v, vocab[c], f"--known {c}")
            time_cat[real, j], known_cat[:, j] = both[:n], both[n:]
    for j, c in enumerate(oc):
        time_cat[real, len(kc) + j] = codes(observed[c], vocab[c], f"--observed {c}")
    return time_cat, known_cat
