"""A covariate table's column as of a live bar's time: what covariates.asof_join gives a bar of a history, read
for one bar at a time without a join (the table is split by key and sorted once).

A keyed table applies to a bar by its series' name where the table has that key, else by its contract, as
asof_join's keys do; a bar neither names reads no value, as a bar of a history whose key the table lacks.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from foxhunt.data.features.covariates import UTC_NS, CovariateTable


class AsOf:
    """A covariate table's column as of a time: its stamps and values, per key for a keyed table (read once).
    `text`: the column's raw values (a category's text, or its numbers) rather than floats."""

    def __init__(self, table: CovariateTable, column: str, text: bool = False):
        self.table, self.column, self.text = table, column, text
        frame = table.frame
        if table.keyed:
            self.keys: dict[str, tuple[np.ndarray, np.ndarray]] = {}
            for (key,), part in frame.group_by("key"):
                self.keys[str(key)] = _columns(part, column, text)
        else:
            self.all = _columns(frame, column, text)

    def at(self, series: str, contract: str | None, ts: int) -> object:
        """The last value stamped at or before ts for this bar (None: the file has none): a float, or with `text`
        the cell as the table holds it."""
        if self.table.keyed:
            got = self.keys.get(series) or (self.keys.get(contract) if contract is not None else None)
            if got is None:
                return None
        else:
            got = self.all
        stamps, values = got
        i = int(np.searchsorted(stamps, ts, side="right")) - 1
        if i < 0:
            return None
        return values[i] if self.text else float(values[i])


def _columns(frame: pl.DataFrame, column: str, text: bool) -> tuple[np.ndarray, np.ndarray]:
    part = frame.sort("ts")
    values = part.get_column(column)
    return (part.get_column("ts").cast(UTC_NS).to_physical().to_numpy().astype(np.int64),
            np.array(values.to_list(), dtype=object) if text else values.cast(pl.Float64).to_numpy())
