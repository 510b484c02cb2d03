"""The online form of the as-of join (data/features/covariates_live.py `AsOf`, one bar at a time, what
`Forecaster.update` reads a covariate file with) gives each bar what the batch form (covariates.asof_join, over a
whole history) gives it: the table's last row at or before the bar, by the series' name, else its contract, for a
keyed table; none before the first row or for a key the table lacks; numbers and text alike."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from foxhunt.data.features.covariate_files import CovariateTable
from foxhunt.data.features.covariates import UTC_NS, asof_join
from foxhunt.data.features.covariates_live import AsOf

H = 3600 * 10**9


def table(keyed: bool) -> CovariateTable:
    """Rows every 5 hours from hour 10; keyed: rows for the series ES and the contract NQH4 (not for CL)."""
    rng = np.random.default_rng(1)
    keys = ["ES", "NQH4"] if keyed else [None]
    rows = [(k, (10 + 5 * i) * H, float(rng.normal()), f"c{int(rng.integers(3))}") for k in keys for i in range(20)]
    frame = pl.DataFrame({"ts": pl.Series([r[1] for r in rows]).cast(UTC_NS),
                          **({"key": [r[0] for r in rows]} if keyed else {}),
                          "x": [r[2] for r in rows], "label": [r[3] for r in rows]})
    return CovariateTable("t.csv", frame.sort([*(["key"] if keyed else []), "ts"]), keyed=keyed)


@pytest.mark.parametrize("keyed", [True, False])
def test_each_bar_reads_what_the_as_of_join_gives_it(keyed):
    tab = table(keyed)
    rng = np.random.default_rng(2)
    ts = np.sort(rng.integers(0, 120, 60)) * H + rng.integers(0, 2, 60) * 7  # on a row's stamp, or just after
    ts[:3] = [0, 10 * H, 10 * H - 1]  # before the first row, on it, one ns before it
    bars = pl.concat([pl.DataFrame({"series": s, "contract": c, "ts": pl.Series(np.sort(ts)).cast(UTC_NS)})
                      for s, c in (("CL", "CLF5"), ("ES", "ESH4"), ("NQ", "NQH4"))])
    joined = asof_join(bars, [tab], ["x", "label"])
    x, label = AsOf(tab, "x"), AsOf(tab, "label", text=True)
    stamps = bars.get_column("ts").to_physical().to_list()
    for row, stamp in zip(joined.iter_rows(named=True), stamps, strict=True):
        assert x.at(row["series"], row["contract"], stamp) == row["x"], row
        assert label.at(row["series"], row["contract"], stamp) == row["label"], row
    assert joined.get_column("x").null_count() > 0  # the walk read "none" too (before the first row, CL when keyed)
