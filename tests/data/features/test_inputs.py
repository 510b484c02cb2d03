"""data/features/inputs.py against hand-computed values: the names a run may declare, the scalers of observed user
columns, the known values (scaled covariates, then events), the context join, and two inputs of one table."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from foxhunt.data.features import inputs
from foxhunt.data.features.covariate_files import CovariateTable
from foxhunt.data.features.events import EventCalendar
from foxhunt.data.features.fitted import Moments, Scalers, SeriesScalers
from foxhunt.errors import InputError

H = 3600 * 10**9


def table(ts: list[int], keyed: bool = False, **cols: list[float]) -> CovariateTable:
    data = {"ts": pl.Series(ts).cast(pl.Datetime("ns", "UTC"))}
    if keyed:
        data["key"] = cols.pop("key")
    return CovariateTable("t.csv", pl.DataFrame({**data, **{k: pl.Series(v, dtype=pl.Float64) for k, v in cols.items()}}),
                          keyed=keyed)


@pytest.mark.parametrize(("observed", "known", "needle"), [
    (("a", "a"), (), "names 'a' twice"),
    (("a",), ("a",), "both --observed and --known"),
    (("close",), (), "foxhunt's own"),
    ((" a",), (), "not a column name"),
])
def test_bad_names_stop(observed, known, needle):
    with pytest.raises(InputError, match=needle):
        inputs.check_names(observed, known)


def test_fit_observed_per_series_global_and_none():
    """Series A's training rows hold 1, 2, 3 (mean 2, std 1), B's 10, 20 (mean 15, std 7.07); the pooled five rows
    mean 7.2. A row outside `keep` never counts."""
    x = np.array([1.0, 2.0, 3.0, 99.0, 10.0, 20.0])
    sidx = np.array([0, 0, 0, 0, 1, 1])
    keep = np.array([True, True, True, False, True, True])
    feats = pl.DataFrame({"x": x})
    src = inputs.Sources(observed=("x",), known=(), tables={}, events=None)
    got = {}
    unit = SeriesScalers({}, 0.0, 1.0, 1.0)
    for mode in ("series", "global", "none"):
        got[mode] = inputs.fit_observed(feats, ["A", "B"], sidx, keep, src, mode, Scalers({"A": unit, "B": unit}, unit))
    s = got["series"]
    assert s.user_observed == ("x",)
    assert s.series["A"].moments["x"] == Moments(pytest.approx(2.0), pytest.approx(1.0))
    assert s.series["B"].moments["x"] == Moments(pytest.approx(15.0), pytest.approx(np.std([10, 20], ddof=1)))
    assert s.pooled.moments["x"].mean == pytest.approx(7.2)
    assert got["global"].series["A"].moments["x"] == got["global"].pooled.moments["x"] == s.pooled.moments["x"]
    assert got["none"].series["B"].moments["x"] == Moments(0.0, 1.0)


def test_known_values_scale_covariates_then_add_events():
    """sched rows at 0 h (1.0) and 2 h (3.0), mean 2 std 1 on training; one event at 3.5 h, bars of an hour, cap 4."""
    tab = table([0, 2 * H, 10 * H], sched=[1.0, 3.0, 5.0])
    cal = EventCalendar(source="e.csv", names=("cpi",), times=(np.array([int(3.5 * H)], dtype=np.int64),))
    src = inputs.Sources(observed=(), known=("sched",), tables={"sched": tab}, events=cal)
    fitted = inputs.fit_inputs(src, {"sched": Moments(2.0, 1.0)})
    assert fitted.known_names == ("sched", "cpi_until", "cpi_since", "cpi_in_bar")
    values = inputs.known_values(fitted, src, H, 4)
    got = values(np.array([0, H, 3 * H, 4 * H], dtype=np.int64))
    np.testing.assert_allclose(got[:, 0], [-1.0, -1.0, 1.0, 1.0])  # as of each time: 1, 1, 3, 3
    np.testing.assert_allclose(got[:, 1], [0.75, 0.5, 0.0, 1.0])  # floor(3.5, 2.5, 0.5 h) / 4; none after: 1
    np.testing.assert_allclose(got[:, 2], [1.0, 1.0, 1.0, 0.0])  # none before 3.5 h: 1; at 4 h floor(0.5) = 0
    np.testing.assert_allclose(got[:, 3], [0.0, 0.0, 1.0, 0.0])  # 3.5 h falls in the 3 h bar


def test_two_inputs_of_one_table_are_one_table():
    tab = table([0, H], a=[1.0, 2.0], b=[3.0, 4.0])
    src = inputs.Sources(observed=("a", "b"), known=(), tables={"a": tab, "b": tab}, events=None)
    assert src.of(["a", "b"]) == [tab]
    bars = pl.DataFrame({"series": ["S", "S"], "contract": ["S", "S"],
                         "ts": pl.Series([0, H]).cast(pl.Datetime("ns", "UTC"))})
    joined, dropped = inputs.observe(bars, src)
    assert dropped == 0 and joined["a"].to_list() == [1.0, 2.0] and joined["b"].to_list() == [3.0, 4.0]
    assert [c["name"] for c in inputs.summary(src, 0)["columns"]] == ["a", "b"]


def test_observe_drops_bars_without_a_finite_value_and_stops_past_one_percent():
    n = 300
    tab = table(list(range(0, n * H, H)), a=[np.nan if i == 150 else float(i) for i in range(n)])
    src = inputs.Sources(observed=("a",), known=(), tables={"a": tab}, events=None)
    bars = pl.DataFrame({"series": ["S"] * n, "contract": ["S"] * n,
                         "ts": pl.Series(list(range(0, n * H, H))).cast(pl.Datetime("ns", "UTC"))})
    joined, dropped = inputs.observe(bars, src)
    assert dropped == 1 and joined.height == n - 1
    bad = table(list(range(0, n * H, H)), a=[np.nan if i % 50 == 0 else 1.0 for i in range(n)])  # 2%
    with pytest.raises(InputError, match="more than 1% of the bars"):
        inputs.observe(bars, inputs.Sources(observed=("a",), known=(), tables={"a": bad}, events=None))
    late = table([5 * H], a=[1.0])
    with pytest.raises(InputError, match="no value at or before the first bar of series S.*--since"):
        inputs.observe(bars, inputs.Sources(observed=("a",), known=(), tables={"a": late}, events=None))


def test_a_keyed_file_without_a_series_says_so_rather_than_suggest_since():
    """A keyed file that holds the series' rows but only after its first bar suggests --since from the series' own
    first row (not the file's); one without a row for the series (by name or contract) says that, as no --since
    helps."""
    two = [pl.DataFrame({"series": [s] * 3, "contract": [c] * 3,
                         "ts": pl.Series([0, H, 2 * H]).cast(pl.Datetime("ns", "UTC"))}) for s, c in
           (("S", "SH4"), ("T", "TH4"))]
    bars = pl.concat(two)
    late = table([0, 2 * H], keyed=True, key=["S", "T"], a=[1.0, 2.0])  # T's first row after its first bar
    with pytest.raises(InputError, match="first bar of series T .*its first row is at 1970-01-01T02:00:00Z"):
        inputs.observe(bars, inputs.Sources(observed=("a",), known=(), tables={"a": late}, events=None))
    only_s = table([0], keyed=True, key=["S"], a=[1.0])
    with pytest.raises(InputError, match="has no row for series T \\(by its name or its contract TH4\\); add") as err:
        inputs.observe(bars, inputs.Sources(observed=("a",), known=(), tables={"a": only_s}, events=None))
    assert "--since" not in str(err.value)


def test_context_takes_the_other_series_last_bar_at_or_before():
    """B's bars at 1 h and 3 h; A's rows at 0, 1, 2, 3 h read B's 1 h bar from 1 h, its 3 h bar from 3 h: its
    move, range, volume and the log_vol it is given (the trailing input of each row), never a later one's."""
    names = ["A", "B"]
    sidx = np.array([0, 0, 0, 0, 1, 1])
    ts = np.array([0, H, 2 * H, 3 * H, H, 3 * H], dtype=np.int64)
    feats = pl.DataFrame({"log_return": [0.0, 0.1, 0.2, 0.3, 5.0, 7.0], "log_range": [1.0] * 4 + [2.0, 3.0],
                          "log_volume": [0.0] * 4 + [8.0, 9.0]})
    log_vol = np.array([-1.0, -2.0, -3.0, -4.0, -5.5, -6.5])
    src = inputs.Sources(observed=(), known=(), tables={}, events=None, context=("B",),
                         context_columns=inputs.context_names(("B",), "log_return"))
    assert src.context_columns == ("B_log_return", "B_log_range", "B_log_volume", "B_log_vol")
    out = inputs.with_context(feats, names, sidx, ts, src, "log_return", log_vol)
    np.testing.assert_array_equal(out["B_log_return"].to_numpy(), [np.nan, 5.0, 5.0, 7.0, 5.0, 7.0])
    np.testing.assert_array_equal(out["B_log_volume"].to_numpy(), [np.nan, 8.0, 8.0, 9.0, 8.0, 9.0])
    np.testing.assert_array_equal(out["B_log_vol"].to_numpy(), [np.nan, -5.5, -5.5, -6.5, -5.5, -6.5])
    with pytest.raises(InputError, match="--context C: no such series"):
        inputs.with_context(feats, names, sidx, ts, inputs.Sources((), (), {}, None, context=("C",)), "log_return",
                            log_vol)


def test_a_column_of_numbers_with_a_stray_text_cell_stops_naming_it():
    """Mostly numbers and one "n/a": not silently a category per number."""
    from foxhunt.data.features.static import kinds

    frame = pl.DataFrame({"ts": pl.Series([0, H, 2 * H]).cast(pl.Datetime("ns", "UTC")), "vix": ["14.1", "n/a", "15.0"]})
    tab = CovariateTable("vix.csv", frame, keyed=False)
    with pytest.raises(InputError, match=r"vix.csv: column 'vix' holds numbers and some text \('n/a' at "
                                         r"1970-01-01T01:00:00Z\).*--categorical"):
        kinds(["vix"], {"vix": tab}, ())
    assert kinds(["vix"], {"vix": tab}, ("vix",)) == {"vix": "categorical"}
    words = CovariateTable("r.csv", frame.with_columns(pl.Series("vix", ["calm", "n/a", "busy"])), keyed=False)
    assert kinds(["vix"], {"vix": words}, ()) == {"vix": "categorical"}
