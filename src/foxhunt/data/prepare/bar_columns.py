"""The bar files' own columns (the --observed and --static names no --covariates file has) in a pieced `foxhunt
prepare`: read beside the bars by each chunk's read job and held by the pieces their symbols go to, never by one
process (a table the size of the panel's bars).

The reading and the table are covariate_files' (`bar_parts` file by file, `bar_table`), so that a piece's table
(`piece_table`) is the rows of its keys of the table read_bar_columns makes of the whole panel. The `prepare` process
holds a table without rows of the panel's schema (`empty_table`: a column that is text in one file is text in all),
which decides each column's kind, and the facts its checks and the data summary read of the whole table
(covariate_files.Held), merged from the pieces' (`held_sources`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

import polars as pl

from foxhunt.data.features import static
from foxhunt.data.features.covariate_files import CovariateTable, Held, bar_parts, bar_table, merged, unified
from foxhunt.data.features.inputs import Sources
from foxhunt.data.io.discover import Source


def chunk_columns(sources: Sequence[Source], columns: Sequence[str], timestamp_col: str | None,
                  symbol_col: str | None, timezone: str | None, real: Collection[str],
                  date_format: str | None = None) -> pl.DataFrame:
    """The `columns` of a chunk's files (`sources`: expand_sources' of just those files) as one frame of
    `bar_parts`' columns (ts, symbol, instrument_id, `columns`), in file order."""
    return pl.concat(unified(bar_parts(sources, columns, timestamp_col, symbol_col, timezone, real, date_format)),
                     how="vertical")


def empty_table(schemas: Sequence[pl.DataFrame], columns: Sequence[str], source: str) -> CovariateTable:
    """The table of the bar files' `columns` without its rows, of the panel's schema: `schemas` are every chunk's
    `chunk_columns` without rows; `source` what the user named (cfg.paths joined, as read_bar_columns names it)."""
    return bar_table(list(schemas), columns, 1.0, source)  # load_sources reads bar columns at price scale 1


def piece_table(table: CovariateTable, parts: Sequence[pl.DataFrame]) -> CovariateTable:
    """The table of a piece's rows `parts` (its shares of the chunks' `chunk_columns`, in read order), of the schema
    of `table` (`empty_table`'s)."""
    if not parts:
        return table
    return bar_table(unified([table.frame, *parts])[1:], table.columns, 1.0, table.source)


def bar_table_of(src: Sources | None) -> CovariateTable | None:
    """The table of the bar files' own columns among `src`'s, if any."""
    return src.tables[src.from_bars[0]] if src is not None and src.from_bars else None


def with_table(src: Sources, table: CovariateTable) -> Sources:
    """`src` with `table` for every column the bar files give."""
    old = bar_table_of(src)
    return dataclasses.replace(src, tables={c: table if t is old else t for c, t in src.tables.items()})


def held_sources(src: Sources, pieces: Sequence[Held], categorical: Sequence[str]) -> Sources:
    """`src` (its bar-file table `empty_table`'s) with the facts of the pieces' tables `pieces` merged into that
    table (covariate_files.Held: for inputs.summary), and its text columns judged as load_sources judges them
    (static.kinds: InputError naming the first text cell of a column that is mostly numbers)."""
    src = with_table(src, dataclasses.replace(bar_table_of(src), held=merged(pieces)))
    static.kinds(src.from_bars, src.tables, categorical)
    return src
