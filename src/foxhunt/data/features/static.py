"""Static inputs (--static): one value per series, read from a column of the bar files or of a --covariates file,
fed to the model's static variable selection beside the series code.

A series' value is the one distinct value of the column over its rows: its bars' rows for a bar-file column (keyed
by contract), the rows of a keyed file that name the series (or else its contracts), every row of an unkeyed file
(the same value for every series: allowed, but a model cannot learn from a value no series differs in). A column
with two values for one series stops the run: a value that changes is an --observed input.

A column of text (or one named by --categorical) is categorical: its vocabulary is the values of the series with
training rows, code = index + 1, and 0 for a value training never saw (counted and said once). Any other is real:
standardized with the mean and std over the training series (one value each; std 1 for fewer than two series or
no spread). A model saves both (fitted.FittedInputs), so prediction codes and scales exactly as training did.

Legend: S series, Sr real static inputs, Sc categorical ones.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from foxhunt.data.features.covariate_files import CovariateTable, text_cells
from foxhunt.data.features.fitted import FittedInputs, Moments
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")
UNKNOWN = 0  # the code of a category unseen in training


def kinds(columns: Sequence[str], tables: dict[str, CovariateTable], categorical: Sequence[str]) -> dict[str, str]:
    """{column: "categorical" | "real"}: categorical when named in `categorical` or not numbers in its file. A
    column of numbers with a few cells of text (a stray "n/a") is an InputError naming the first such cell rather
    than a silent category per number: fix the cells, or name the column in --categorical."""
    out = {}
    for c in columns:
        frame = tables[c].frame
        if c in categorical or frame.schema[c] == pl.Float64:
            out[c] = "categorical" if c in categorical else "real"
            continue
        cells = text_cells(tables[c], c)
        if cells.numbers * 2 > cells.given:  # mostly numbers
            _, _, ts, value = cells.first
            raise InputError(f"{tables[c].source}: column {c!r} holds numbers and some text ({value!r} at "
                             f"{ts:%Y-%m-%dT%H:%M:%SZ}); fix those cells, or name the column in "
                             "--categorical to take its values as categories")
        out[c] = "categorical"
    return out


def series_values(bars: pl.DataFrame, names: list[str], columns: Sequence[str], tables: dict[str, CovariateTable],
                  kind: dict[str, str]) -> dict[str, list]:
    """{column: [the value of each series of `names`]} (text for a categorical column, float for a real one), read
    from `tables` for the series and contracts of `bars` (series, contract). InputError naming the column and the
    series where a series has no value, or more than one. One join and one group-by per column: O(rows)."""
    if not columns:
        return {}
    pairs = bars.select(pl.col("series").cast(pl.Utf8), pl.col("contract").cast(pl.Utf8)).unique()
    out = {}
    for c in columns:
        table = tables[c]
        frame = table.frame.select(*(("key",) if table.keyed else ()), c)
        col = pl.col(c)
        frame = frame.filter(col.is_not_null() & (col.is_not_nan() if frame.schema[c] == pl.Float64 else True))
        if kind[c] == "real" and frame.schema[c] != pl.Float64:
            bad = frame.get_column(c)[0] if frame.height else None
            raise InputError(f"--static {c}: {table.source} holds text ({bad!r}) where the model reads a number; "
                             "give the column as numbers, as in training")
        if table.keyed:  # a series' rows: those keyed by its name where the file names it, else by its contracts
            keys = frame.get_column("key").unique().implode()
            by_name = pl.DataFrame({"series": names}).filter(pl.col("series").is_in(keys))
            lookup = pl.concat([by_name.with_columns(key=pl.col("series")),
                                pairs.filter(~pl.col("series").is_in(by_name["series"].implode()))
                                .rename({"contract": "key"})], how="vertical")
            rows = lookup.join(frame, on="key", how="inner").select("series", c)
        else:  # the same rows for every series: their distinct values (at most two) for each
            rows = pl.DataFrame({"series": names}).join(frame.select(c).unique(maintain_order=True).head(2),
                                                        how="cross")
        distinct = rows.unique(maintain_order=True).group_by("series", maintain_order=True).agg(
            pl.col(c).head(2).alias("values"), pl.len().alias("n"))
        got = {s: (v, n) for s, v, n in distinct.iter_rows()}
        values = []
        for n in names:
            if n not in got:
                raise InputError(f"--static {c}: {table.source} has no value for series {n} (by its name or its "
                                 "contracts); give every series a value")
            v, count = got[n]
            if count > 1:
                raise InputError(f"--static {c}: series {n} has {count} values ({_show(v[0])}, {_show(v[1])}); a "
                                 "static input has one value per series: use --observed for a value that changes")
            values.append(_text(v[0]) if kind[c] == "categorical" else float(v[0]))
        out[c] = values
    return out


@dataclass(frozen=True)
class StaticFit:
    """The static inputs' fit: each real column's Moments over the training series, each categorical one's
    vocabulary (code = index + 1)."""

    scalers: dict[str, Moments]
    vocab: dict[str, tuple[str, ...]]


def fit(values: dict[str, list], names: list[str], trained: Sequence[str], kind: dict[str, str]) -> StaticFit:
    """The StaticFit of the static `values` of the series `names` over those in `trained` (with training rows)."""
    train = [i for i, n in enumerate(names) if n in set(trained)]
    scalers, vocab = {}, {}
    for c, v in values.items():
        x = [v[i] for i in train]
        if len(train) > 1 and len(set(x)) == 1:
            log.warning("--static %s: every training series has the value %s; the model cannot learn from an input "
                        "no series differs in", c, _show(x[0]))
        if kind[c] == "categorical":
            vocab[c] = tuple(sorted(set(x)))
            continue
        a = np.asarray(x, dtype=np.float64)
        std = float(a.std(ddof=1)) if len(a) > 1 else 0.0
        scalers[c] = Moments(float(a.mean()) if len(a) else 0.0, std if np.isfinite(std) and std > 0 else 1.0)
    return StaticFit(scalers, vocab)


def real_columns(fitted: FittedInputs | None) -> list[str]:
    """The fitted real static inputs, in the order of `--static` (the schema's and the tensor's)."""
    return [] if fitted is None else [c for c in fitted.static if fitted.static_kinds[c] == "real"]


def categorical_columns(fitted: FittedInputs | None) -> list[str]:
    return [] if fitted is None else [c for c in fitted.static if fitted.static_kinds[c] == "categorical"]


def arrays(fitted: FittedInputs | None, values: dict[str, list], names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(S, Sr) float32 standardized real values and (S, Sc) int64 codes of the series `names` under the fitted
    inputs. A value unseen in training gets code 0: counted, and said once per column."""
    real, cat = real_columns(fitted), categorical_columns(fitted)
    cont = np.zeros((len(names), len(real)), dtype=np.float32)
    codes = np.zeros((len(names), len(cat)), dtype=np.int64)
    if fitted is None:
        return cont, codes
    for j, c in enumerate(real):
        s = fitted.static_scalers[c]
        cont[:, j] = (np.asarray(values[c], dtype=np.float64) - s.mean) / s.std
    for j, c in enumerate(cat):
        index = {v: i + 1 for i, v in enumerate(fitted.static_vocab[c])}
        codes[:, j] = [index.get(v, UNKNOWN) for v in values[c]]
        unseen = [n for n, code in zip(names, codes[:, j], strict=True) if code == UNKNOWN]
        if unseen:
            log.warning("--static %s: %d series with a value unseen in training (%s) get the unknown code 0",
                        c, len(unseen), ", ".join(f"{n}={values[c][names.index(n)]}" for n in unseen[:5]))
    return cont, codes


def _text(v) -> str:
    """A category as text: whole numbers without a trailing .0 (a numeric --categorical column)."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _show(v) -> str:
    return _text(v)
