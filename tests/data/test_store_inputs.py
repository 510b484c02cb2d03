"""A pieced `foxhunt prepare` with your own inputs (store/declared.py): with an observed covariate (some bars
dropped for a NaN) and an observed column of the bar files, a known covariate, an events file and a real and a
categorical static column, the store prepared series group by series group is the store prepared in memory, array
for array and key for key, under per-series and global covariate scaling, locally and on a Dask cluster; the
bad-bars rule judges the whole panel; --context is prepared in memory."""

from __future__ import annotations

import json
import logging

import numpy as np
import polars as pl
import pytest

from foxhunt.data.config import DataConfig
from foxhunt.data.store import build
from foxhunt.data.store.build import prepare_store
from foxhunt.data.store.pieces import plan_pieces
from foxhunt.errors import InputError

ROOTS = {"ES": 1.0, "NQ": 3.7, "YM": 9.1}  # root -> price factor
MINUTE = 60 * 10**9


@pytest.fixture(scope="module")
def files(tmp_path_factory, fixtures_dir) -> dict:
    """The ES 1-minute fixture's first six days as three roots with a `flow` column, one parquet file per UTC day; a
    10-minute `vix` file with one NaN (its 10 minutes of bars are dropped), an hourly known `sched` file running 5
    days past the bars, an events file and a static file keyed by series (`tick` real, `sector` text)."""
    folder = tmp_path_factory.mktemp("store_inputs")
    es = pl.read_parquet(fixtures_dir / "es_fut_ohlcv1m_databento.parquet")
    es = es.filter(pl.col("ts_event") < pl.col("ts_event").min() + pl.duration(days=6))
    frames = [es.with_columns(symbol=pl.col("symbol").str.replace_all("ES", root),
                              instrument_id=pl.col("instrument_id") + 1000 * k,
                              **{c: pl.col(c) * factor for c in ("open", "high", "low", "close")})
              for k, (root, factor) in enumerate(ROOTS.items())]
    frame = pl.concat(frames).sort("ts_event", "instrument_id").with_columns(day=pl.col("ts_event").dt.date())
    frame = frame.with_columns(flow=pl.Series(np.random.default_rng(1).normal(0, 1, frame.height)))
    bars = folder / "bars"
    for (day,), part in frame.partition_by("day", as_dict=True, maintain_order=True).items():
        (bars / f"date={day}").mkdir(parents=True)
        part.drop("day").write_parquet(bars / f"date={day}" / "part-0.parquet")
    ns = frame["ts_event"].dt.epoch("ns")
    lo, hi = int(ns.min()) - 60 * MINUTE, int(ns.max()) + 5 * 1440 * MINUTE
    rng = np.random.default_rng(0)

    def stamps(step: int) -> pl.Series:
        return pl.Series(np.arange(lo, hi, step * MINUTE, dtype=np.int64)).cast(pl.Datetime("ns", "UTC"))

    vix = 15 + np.abs(rng.normal(0, 5, len(stamps(10))))
    vix[(int(ns.mean()) - lo) // (10 * MINUTE)] = np.nan  # amid the bars
    out = {"bars": bars, "vix": folder / "vix.parquet", "sched": folder / "sched.parquet",
           "events": folder / "events.csv", "static": folder / "static.csv"}
    pl.DataFrame({"time": stamps(10), "vix": vix}).write_parquet(out["vix"])
    pl.DataFrame({"time": stamps(60), "sched": rng.normal(0, 2, len(stamps(60)))}).write_parquet(out["sched"])
    pl.DataFrame({"time": stamps(60)[5::17], "name": ["FOMC decision"] * len(stamps(60)[5::17])}).write_csv(
        out["events"])
    pl.DataFrame({"time": [stamps(60)[0]] * 3, "symbol": list(ROOTS), "tick": [0.25, 0.5, 1.0],
                  "sector": ["equity", "tech", "equity"]}).write_csv(out["static"])
    return out


def _config(files: dict, **options) -> DataConfig:
    return DataConfig(paths=(str(files["bars"]),), encoder_length=16, horizon=3, val_fraction=0.2,
                      test_fraction=0.2, observed=("vix", "flow"), known=("sched",), events=str(files["events"]),
                      covariates=(str(files["vix"]), str(files["sched"]), str(files["static"])),
                      static=("tick", "sector"), **options)


def _assert_same_store(a: tuple, b: tuple) -> None:
    """Two stores (folder, manifest) hold the same manifest, bar the time of creation, and the same arrays."""
    (a_dir, a_manifest), (b_dir, b_manifest) = a, b
    a_manifest, b_manifest = dict(a_manifest), dict(b_manifest)
    a_manifest.pop("created_utc"), b_manifest.pop("created_utc")
    assert b_manifest["transform"] == a_manifest["transform"]
    assert json.dumps(b_manifest, sort_keys=True) == json.dumps(a_manifest, sort_keys=True)
    for name, entry in a_manifest["arrays"].items():
        x, y = np.load(a_dir / entry["file"]), np.load(b_dir / entry["file"])
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name


def _in_pieces(monkeypatch, cfg: DataConfig, out, **options) -> dict:
    """prepare_store in pieces, failing the test where it falls back to the in-memory path."""
    def in_memory(cfg):
        raise AssertionError("prepared in memory, not in pieces")

    with monkeypatch.context() as patched:
        patched.setattr(build, "prepare_data", in_memory)
        return prepare_store(cfg, out, **options)


@pytest.fixture(scope="module")
def wholes(files, tmp_path_factory) -> dict:
    """The in-memory store of each --covariate-scaling: {mode: (folder, manifest)}."""
    out = {}
    for mode in ("series", "global"):
        folder = tmp_path_factory.mktemp(f"whole_{mode}") / "store"
        out[mode] = folder, prepare_store(_config(files, covariate_scaling=mode), folder, workers=0)
    return out


@pytest.mark.parametrize(("mode", "workers"), [("series", 2), ("global", 1)])
def test_a_store_with_your_inputs_prepared_in_pieces_is_the_one_prepared_in_memory(files, wholes, tmp_path,
                                                                                   monkeypatch, mode, workers):
    cfg = _config(files, covariate_scaling=mode)
    assert len(plan_pieces(cfg, piece_rows=1, min_rows=0)) == 3
    pieces = _in_pieces(monkeypatch, cfg, tmp_path / "pieces", piece_rows=1, workers=workers, min_rows=0)
    whole = wholes[mode]
    _assert_same_store(whole, (tmp_path / "pieces", pieces))
    got = pieces["transform"]["inputs"]
    assert pieces["summary"]["inputs"]["dropped_bars"] > 0  # the NaN's bars went, in each piece
    assert got["known_names"][0] == "sched" and got["static_vocab"]["sector"] == ["equity", "tech"]
    assert pieces["arrays"]["static_cat"]["shape"][1] == 2 and pieces["arrays"]["static_cont"]["shape"][1] == 1
    scalers = pieces["transform"]["scalers"]
    assert scalers["user_observed"] == ["vix", "flow"] and "vix" in scalers["series"]["YM"]
    assert (scalers["series"]["ES"]["flow"] != scalers["series"]["NQ"]["flow"]) == (mode == "series")


def test_a_store_with_your_inputs_prepared_on_a_dask_cluster_is_the_one_prepared_in_memory(files, wholes, tmp_path,
                                                                                           monkeypatch):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as c:
        address = "dask://" + c.scheduler_address.removeprefix("tcp://")
        remote = _in_pieces(monkeypatch, _config(files, covariate_scaling="series"), tmp_path / "dask",
                            piece_rows=1, workers=2, min_rows=0, executor=address)
    _assert_same_store(wholes["series"], (tmp_path / "dask", remote))


def test_the_bad_bars_rule_judges_the_whole_panel_of_the_pieces(files, tmp_path, monkeypatch):
    """A `vix` file of mostly NaN stops the pieced prepare with the in-memory prepare's one line."""
    vix = pl.read_parquet(files["vix"])
    bad = tmp_path / "bad.parquet"
    vix.with_columns(vix=pl.when(pl.int_range(pl.len()) % 3 == 0).then(pl.col("vix")).otherwise(None)).write_parquet(
        bad)
    cfg = _config(files)
    cfg = DataConfig(**{**cfg.__dict__, "covariates": (str(bad), *cfg.covariates[1:])})
    with pytest.raises(InputError) as in_memory:
        prepare_store(cfg, tmp_path / "a", workers=0)
    with pytest.raises(InputError) as pieced:
        _in_pieces(monkeypatch, cfg, tmp_path / "b", piece_rows=1, workers=1, min_rows=0)
    assert str(pieced.value) == str(in_memory.value) and "more than 1% of the bars" in str(pieced.value)


def test_context_is_prepared_in_memory_and_refused_on_a_cluster(files, wholes, tmp_path, caplog):
    cfg = DataConfig(**{**_config(files).__dict__, "context": ("ES",)})
    with pytest.raises(InputError, match="does not take --context"):
        prepare_store(cfg, tmp_path / "a", executor="dask://127.0.0.1:9", min_rows=0, piece_rows=1)
    with caplog.at_level(logging.INFO, logger="foxhunt.data"):
        manifest = prepare_store(cfg, tmp_path / "b", piece_rows=1, workers=1, min_rows=0)
    assert "--context: the store is prepared in memory" in caplog.text
    assert manifest["transform"]["inputs"]["context"] == ["ES"]


def test_categorical_observed_inputs_are_prepared_in_memory(files, tmp_path, caplog):
    """A text --observed column (`sector` of the static file, as of each bar) gives codes the pieced build does not
    write yet: the store is prepared in memory, says so, and holds the codes."""
    cfg = DataConfig(**{**_config(files).__dict__, "observed": ("vix", "sector"), "static": ("tick",)})
    with caplog.at_level(logging.INFO, logger="foxhunt.data"):
        manifest = prepare_store(cfg, tmp_path / "s", piece_rows=1, workers=1, min_rows=0)
    assert "categorical --observed / --known inputs: the store is prepared in memory" in caplog.text
    assert manifest["transform"]["inputs"]["observed_cat"] == ["sector"]
    assert manifest["arrays"]["time_cat"]["shape"][1] == 1


def test_keyed_events_are_prepared_in_memory(files, tmp_path, caplog):
    """Events keyed to a series read a block of the known grid per key, which the pieces' shared grid does not hold
    yet: the store is prepared in memory, says so, and keeps the keys."""
    ev = pl.read_csv(files["events"])
    keyed = tmp_path / "keyed.csv"
    ev.with_columns(symbol=pl.Series(["ES", ""] * (ev.height // 2) + [""] * (ev.height % 2))).write_csv(keyed)
    cfg = DataConfig(**{**_config(files).__dict__, "events": str(keyed)})
    with caplog.at_level(logging.INFO, logger="foxhunt.data"):
        manifest = prepare_store(cfg, tmp_path / "s", piece_rows=1, workers=1, min_rows=0)
    assert "--events with a symbol column: the store is prepared in memory" in caplog.text
    assert list(manifest["transform"]["inputs"]["events"]["keyed"]) == ["ES"]
