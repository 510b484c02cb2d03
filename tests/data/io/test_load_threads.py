"""Loading on two threads (data/util/parallel.py) gives what one thread gives: the sort plan found beside the checks, the
checks beside build_series, and their errors in the order they would come one after the other."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from foxhunt.data.bars import load, series
from foxhunt.data.bars.validate import _ready_to_gather, _sort_dedup, clean_bars, sort_plan, submit_sort_plan
from foxhunt.data.config import DataConfig
from foxhunt.data.io.read import read_bars
from foxhunt.data.util import parallel
from foxhunt.data.util.order import Declined
from foxhunt.errors import InputError
from tests.data.io.test_load_fast_paths import _clean_reference, _in_time_order, _messy


@pytest.fixture(params=["1", "2"])
def threads(request, monkeypatch):
    monkeypatch.setenv(parallel.ENV, request.param)
    return int(request.param)


def _with_bad_rows(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with a few rows (under the 1% that is dropped) whose prices are NaN or contradict each other."""
    bad = np.zeros(df.height, bool)
    bad[[5, 500, 2500]] = True
    return df.with_columns(
        close=pl.when(pl.Series(bad)).then(float("nan")).otherwise("close"),
        high=pl.when(pl.int_range(pl.len()) == 1000).then(pl.col("low") - 1).otherwise("high"),
    )


@pytest.mark.parametrize("shape", ["messy", "in time order", "bad rows"])
@pytest.mark.parametrize("given", [False, True])
def test_clean_bars_with_a_plan_found_beside_the_checks_matches(threads, shape, given):
    df = {"messy": _messy, "in time order": lambda: _in_time_order(_messy()),
          "bad rows": lambda: _with_bad_rows(_in_time_order(_messy()))}[shape]()
    want, stats = clean_bars(df, ["f.parquet"])
    # a plan of the rows as they came: dropped rows make clean_bars find its own
    plan = submit_sort_plan(df) if given else None
    got, got_stats = clean_bars(df.clone(), ["f.parquet"], consume=True, plan=plan)
    assert got.equals(want, null_equal=True) and got_stats == stats
    if shape != "bad rows":
        assert got.equals(_clean_reference(df)[0], null_equal=True)
    else:
        assert stats["nan_rows_dropped"] == 3 and stats["inconsistent_rows_dropped"] == 1


def test_sort_plan_keeps_no_keys_beside_the_grouped_order():
    df = _in_time_order(_messy()).with_columns(instrument_id=pl.col("instrument_id").fill_null(3))
    keys, grouped = sort_plan(*(df.get_column(c) for c in ("symbol", "instrument_id", "ts")))
    assert grouped is not None and keys == []  # the sorted keys travel in `grouped`: none held twice
    keys, grouped = sort_plan(*(_messy().get_column(c) for c in ("symbol", "instrument_id", "ts")))
    assert grouped is None and len(keys) == 2  # rows out of order: np.lexsort of the keys


# spreads dropped (the plan of the file's rows is stale), raw symbols resolved, Sunday stubs merged, plain symbols
@pytest.mark.parametrize("name", ["es_fut_ohlcv1h_databento.parquet", "es_fut_ohlcv1m_databento.parquet",
                                  "es_fut_ohlcv1m_databento_raw.parquet", "es_fut_ohlcv1d_databento.parquet",
                                  "generic_ohlcv_daily.csv"])
def test_load_raw_on_two_threads_loads_what_one_loads(fixtures_dir, monkeypatch, name):
    cfg = DataConfig(paths=(str(fixtures_dir / name),))
    raw, files = read_bars(cfg.paths)
    monkeypatch.setenv(parallel.ENV, "1")
    want = load.load_raw(raw, files, cfg)
    monkeypatch.setenv(parallel.ENV, "2")
    got = load.load_raw(raw, files, cfg, consume=True)
    assert got.bars.equals(want.bars, null_equal=True) and got.rolls == want.rolls and got.report == want.report


def test_a_check_error_comes_before_build_series_error(fixtures_dir, monkeypatch, threads):
    cfg = DataConfig(paths=(str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"),))
    raw, files = read_bars(cfg.paths)

    def fails(*args, **kwargs):
        raise InputError("build_series failed")

    monkeypatch.setattr(load, "build_series", fails)
    with pytest.raises(InputError, match="build_series failed"):  # the checks pass: build_series' own error
        load.load_raw(raw, files, cfg)
    negative = raw.with_columns(low=pl.lit(-1.0))
    with pytest.raises(InputError, match="is not positive"):  # --adjust ratio's check fails first
        load.load_raw(negative, files, cfg)


def test_build_series_waits_for_the_checks_before_it_gathers(fixtures_dir, monkeypatch):
    cfg = DataConfig(paths=(str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"),))
    seen = []
    front_bars = series._front_bars

    def gathered(*args, **kwargs):
        seen.append("gather")
        return front_bars(*args, **kwargs)

    monkeypatch.setattr(series, "_front_bars", gathered)
    monkeypatch.setattr(load, "build_series", lambda *a, **k: series.build_series(
        *a, **{**k, "ready": lambda: seen.append("ready")}))
    load.load_bars(cfg)
    assert seen[:2] == ["ready", "gather"]


@pytest.mark.parametrize("files", [1, 2])
def test_a_gather_readied_while_the_plan_is_found_gives_the_same_frame(threads, files):
    df = _in_time_order(_messy()).with_columns(file_idx=(pl.int_range(pl.len()) % files).cast(pl.UInt32))
    parts = pl.concat([df.slice(0, 1000), df.slice(1000, 1000), df.slice(2000)], rechunk=False)  # a scan's chunks
    want, want_stats = clean_bars(parts, ["a.parquet", "b.parquet"])
    mine = parts.clone()
    kinds = _ready_to_gather(mine, consume=True)
    assert kinds == {"row": "rows", "rtype": "same", **({"file_idx": "same"} if files == 1 else {})}
    assert all(mine.get_column(c).n_chunks() == 1 for c in ("open", "volume"))  # made one chunk in place
    got, duplicates, late = _sort_dedup(mine, sort_plan(*(mine.get_column(c) for c in ("symbol", "instrument_id", "ts"))),
                                        True, kinds)
    assert got.equals(want, null_equal=True) and (duplicates.dropped, late) == (want_stats["duplicates_dropped"], 0)


def test_a_plan_declined_by_its_symbols_test_leaves_clean_bars_its_own(threads):
    df = _in_time_order(_messy()).with_columns(instrument_id=pl.col("instrument_id").fill_null(3))
    columns = [df.get_column(c) for c in ("symbol", "instrument_id", "ts")]
    with pytest.raises(Declined):
        sort_plan(*columns, accept=lambda symbols: False)
    assert sort_plan(*columns, accept=lambda symbols: True)[1] is not None
    kept = submit_sort_plan(df, lambda symbols: not symbols.str.contains("-").any())  # no "spread": not declined
    assert kept.result() is not None
    declined = submit_sort_plan(df, lambda symbols: not symbols.str.contains("ES").any())
    assert declined.result() is None
    got, stats = clean_bars(df.clone(), ["f.parquet"], consume=True, plan=declined)
    want, want_stats = clean_bars(df, ["f.parquet"])
    assert got.equals(want, null_equal=True) and stats == want_stats
