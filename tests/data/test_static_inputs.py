"""data/features/static.py against hand-computed values: each series' one value (by series name, by contract, from an
unkeyed file), the varying-value and no-value errors, the real scaling and the categorical vocabulary over the
training series, the unknown code said once; the names --static and --categorical may take; the bar-file reader's
text columns; and batch() giving the static inputs at the origin."""

from __future__ import annotations

import logging

import numpy as np
import polars as pl
import pytest
import torch

from foxhunt.data.features import inputs, static
from foxhunt.data.features.covariate_files import CovariateTable, read_bar_columns
from foxhunt.errors import InputError

BARS = pl.DataFrame({"series": ["A", "A", "B", "B", "C"], "contract": ["AH4", "AM4", "BH4", "BH4", "CZ4"]})
NAMES = ["A", "B", "C"]


def table(keys: list[str] | None, **cols: list) -> CovariateTable:
    n = len(next(iter(cols.values())))
    data = {"ts": pl.Series(np.arange(n, dtype=np.int64)).cast(pl.Datetime("ns", "UTC"))}
    if keys is not None:
        data["key"] = keys
    return CovariateTable("s.csv", pl.DataFrame({**data, **cols}), keyed=keys is not None)


def values(t: CovariateTable, columns: list[str], categorical: tuple[str, ...] = ()) -> dict[str, list]:
    tables = dict.fromkeys(columns, t)
    return static.series_values(BARS, NAMES, columns, tables, static.kinds(columns, tables, categorical))


def test_each_series_takes_the_value_of_its_name_or_of_its_contracts():
    """A by its two contracts (the same value twice), B by its name, C by its contract; NaN rows do not count."""
    t = table(["AH4", "AM4", "B", "CZ4", "CZ4"], sector=["x", "x", "y", "x", None],
              tick=[1.0, 1.0, 3.0, 5.0, float("nan")])
    assert values(t, ["sector", "tick"]) == {"sector": ["x", "y", "x"], "tick": [1.0, 3.0, 5.0]}


def test_a_numeric_column_named_categorical_is_text_without_a_trailing_zero():
    t = table(["A", "B", "C"], tier=[1.0, 2.0, 1.0])
    assert values(t, ["tier"], categorical=("tier",)) == {"tier": ["1", "2", "1"]}


def test_an_unkeyed_file_gives_every_series_its_one_value():
    assert values(table(None, region=["us", "us"]), ["region"]) == {"region": ["us", "us", "us"]}


def test_a_value_that_varies_within_a_series_names_the_series_and_two_values():
    t = table(["AH4", "AM4", "B", "CZ4"], sector=["a", "b", "y", "x"])
    with pytest.raises(InputError) as info:
        values(t, ["sector"])
    assert str(info.value) == ("--static sector: series A has 2 values (a, b); a static input has one value per "
                               "series: use --observed for a value that changes")


def test_a_series_without_a_value_is_named():
    with pytest.raises(InputError, match="has no value for series C"):
        values(table(["A", "B"], sector=["a", "b"]), ["sector"])


def test_fit_scales_real_values_over_the_training_series_and_codes_their_categories(caplog):
    """Training series A, B: tick 1 and 3 (mean 2, std sqrt(2)); sectors x, y. C, not in training, has an unseen
    sector z: code 0, said once."""
    vals = {"tick": [1.0, 3.0, 5.0], "sector": ["y", "x", "z"]}
    kind = {"tick": "real", "sector": "categorical"}
    fit = static.fit(vals, NAMES, ["A", "B"], kind)
    assert fit["static_vocab"] == {"sector": ["x", "y"]}
    assert fit["static_scalers"]["tick"] == pytest.approx({"mean": 2.0, "std": 2**0.5})
    fitted = {"static": ["sector", "tick"], "static_kinds": kind, **fit}
    with caplog.at_level(logging.WARNING, logger="foxhunt.data"):
        cont, codes = static.arrays(fitted, vals, NAMES)
    np.testing.assert_allclose(cont[:, 0], [-1 / 2**0.5, 1 / 2**0.5, 3 / 2**0.5], rtol=1e-6)
    assert codes[:, 0].tolist() == [2, 1, 0]
    said = [r.getMessage() for r in caplog.records if "unseen in training" in r.getMessage()]
    assert said == ["--static sector: 1 series with a value unseen in training (C=z) get the unknown code 0"]


def test_one_training_series_or_no_spread_scales_by_one(caplog):
    with caplog.at_level(logging.WARNING, logger="foxhunt.data"):
        assert static.fit({"t": [4.0, 9.0, 1.0]}, NAMES, ["A"], {"t": "real"})["static_scalers"]["t"] == {
            "mean": 4.0, "std": 1.0}
        assert static.fit({"t": [4.0, 4.0, 1.0]}, NAMES, ["A", "B"], {"t": "real"})["static_scalers"]["t"] == {
            "mean": 4.0, "std": 1.0}
    assert any("cannot learn" in r.getMessage() for r in caplog.records)  # the same value for every series


@pytest.mark.parametrize(("observed", "known", "static_cols", "categorical", "needle"), [
    (("a",), (), ("a",), (), "both --observed and --static"),
    ((), ("a",), ("a",), (), "both --known and --static"),
    ((), (), ("s",), ("t",), "--categorical t: not a --static, --observed or --known column"),
    ((), (), ("series",), (), "foxhunt's own"),
])
def test_bad_static_names_stop(observed, known, static_cols, categorical, needle):
    with pytest.raises(InputError, match=needle):
        inputs.check_names(observed, known, static_cols, categorical)


def test_bar_columns_keep_text_and_refuse_it_only_for_a_real_input(tmp_path):
    path = tmp_path / "bars.csv"
    path.write_text("timestamp,symbol,open,high,low,close,volume,sector\n2024-03-01,ES,1,1,1,1,5,equity\n"
                    "2024-03-02,ES,2,2,2,2,5,equity\n")
    got = read_bar_columns([str(path)], ["sector"])
    assert got.frame.schema["sector"] == pl.Utf8 and got.frame["sector"].to_list() == ["equity", "equity"]
    with pytest.raises(InputError, match=r"column 'sector' row 1: 'equity' is not a number"):
        read_bar_columns([str(path)], ["sector"], real=["sector"])


def test_batch_gives_the_static_inputs_at_each_origin():
    from tests.data.test_windows import E, make_windowed

    w = make_windowed([12, 9])
    w.static_cont = w.series_idx[:, None].float() * torch.tensor([[1.0, -2.0]])  # (N, 2): constant per series
    ids = torch.tensor([0, w.n_windows - 1])
    b = w.batch(ids)
    origin = w.starts[ids] + E - 1
    assert torch.equal(b.static_cont, w.static_cont[origin]) and b.static_cont.shape == (2, 2)
    assert make_windowed([10]).batch(torch.tensor([0])).static_cont.shape == (1, 0)  # none: zero-width


def test_a_store_carries_the_static_inputs_and_an_older_store_reads_as_zero_width(daily_path, tmp_path):
    """Prepared in memory from bars with a text and a numeric static column, written, mapped back: the static
    tensors and a pread batch equal the prepared ones; a store without static_cont (written before it) opens with
    a zero-width one."""
    import json

    from foxhunt.data.config import DataConfig
    from foxhunt.data.prepare import prepare_data
    from foxhunt.data.store import open_store, write_store

    bars = tmp_path / "bars.parquet"
    pl.read_parquet(daily_path).with_columns(
        sector=pl.col("symbol").replace_strict({"ES": "equity", "NQ": "tech"}),
        tick_value=pl.col("symbol").replace_strict({"ES": 12.5, "NQ": 5.0})).write_parquet(bars)
    cfg = DataConfig(paths=(str(bars),), encoder_length=16, horizon=3, static=("sector", "tick_value"))
    data = prepare_data(cfg)
    w = data.windows
    es = w.series_idx == w.series_names.index("ES")
    assert w.static_cat.shape[1] == 2 and w.static_cont.shape[1] == 1
    assert set(w.static_cat[es, 1].tolist()) == {1} and set(w.static_cat[~es, 1].tolist()) == {2}  # equity, tech
    sd = 7.5 / 2**0.5  # 12.5 and 5.0: mean 8.75
    torch.testing.assert_close(w.static_cont[es, 0], torch.full((int(es.sum()),), 3.75 / sd))
    store = tmp_path / "store"
    write_store(data, cfg, store)
    back = open_store(store)
    assert torch.equal(back.windows.static_cont, w.static_cont) and torch.equal(back.windows.static_cat, w.static_cat)
    ids = data.splits["val"][:5]
    assert torch.equal(back.windows.batch(ids).static_cont, w.batch(ids).static_cont)
    manifest = json.loads((store / "manifest.json").read_text())
    del manifest["arrays"]["static_cont"]
    (store / "manifest.json").write_text(json.dumps(manifest))
    old = open_store(store)
    assert old.windows.static_cont.shape == (w.n_rows, 0) and old.windows.batch(ids).static_cont.shape == (5, 0)


def test_an_unkeyed_file_with_two_values_names_the_first_series():
    with pytest.raises(InputError, match=r"series A has 2 values \(us, eu\)"):
        values(table(None, region=["us", "eu", "us"]), ["region"])
