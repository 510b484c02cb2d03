"""The pipeline in pieces (data/prepare): a store prepared series group by series group on 2 worker processes, in
this process or on a Dask cluster, is the store of the panel prepared as one piece, array for array and key for
key: the stages' results merge exactly (the fit's sums, the grid's times, the bad rows, the reports, the facts)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from foxhunt.data.bars.grid import gap_counts
from foxhunt.data.bars.symbols import series_key
from foxhunt.data.config import DataConfig
from foxhunt.data.features.fitstats import column_moments, concat, pooled
from foxhunt.data.features.known import origin_rows, origin_table
from foxhunt.data.features.scaling import own_scalers
from foxhunt.data.io.read import rtype_sets
from foxhunt.data.prepare import driver, entry, prepare_store, read_stage, write_stage
from foxhunt.data.prepare import plan as pieces_module
from foxhunt.data.prepare.executor import may_piece, open_workers
from foxhunt.data.prepare.plan import plan_pieces, plan_sample, route_of
from foxhunt.data.prepare.read_stage import present
from foxhunt.data.prepare.splits import split_times
from foxhunt.data.util.median import counted_median, value_counts
from foxhunt.errors import InputError

ROOTS = {"ES": 1.0, "NQ": 3.7, "YM": 9.1}  # root -> price factor, so that every series has its own statistics


def _write_panel(es: pl.DataFrame, folder, shift_s: dict[str, int] | None = None):
    """`es` (ES bars) as the three ROOTS, each root's bars `shift_s` seconds later, one parquet file per UTC day."""
    frames = []
    for k, (root, factor) in enumerate(ROOTS.items()):
        frames.append(es.with_columns(
            ts_event=pl.col("ts_event") + pl.duration(seconds=(shift_s or {}).get(root, 0)),
            symbol=pl.col("symbol").str.replace_all("ES", root),
            instrument_id=pl.col("instrument_id") + 1000 * k,
            **{c: pl.col(c) * factor for c in ("open", "high", "low", "close")},
        ))
    frame = pl.concat(frames).sort("ts_event", "instrument_id").with_columns(day=pl.col("ts_event").dt.date())
    for (day,), part in frame.partition_by("day", as_dict=True, maintain_order=True).items():
        (folder / f"date={day}").mkdir(parents=True)
        part.drop("day").write_parquet(folder / f"date={day}" / "part-0.parquet")
    return folder


@pytest.fixture(scope="module")
def panel(tmp_path_factory, fixtures_dir):
    """The ES 1-minute fixture's first ten days as three roots (spreads included), one parquet file per UTC day."""
    es = pl.read_parquet(fixtures_dir / "es_fut_ohlcv1m_databento.parquet")
    es = es.filter(pl.col("ts_event") < pl.col("ts_event").min() + pl.duration(days=10))
    return _write_panel(es, tmp_path_factory.mktemp("pieces") / "panel")


@pytest.fixture(scope="module")
def whole(panel, tmp_path_factory):
    """The store of `panel` prepared in memory: (its folder, its manifest)."""
    out = tmp_path_factory.mktemp("whole") / "store"
    return out, prepare_store(_config(panel), out, workers=0)


def _config(panel) -> DataConfig:
    return DataConfig(paths=(str(panel),), encoder_length=16, horizon=3, val_fraction=0.2, test_fraction=0.2)


def _assert_same_store(a: tuple, b: tuple) -> None:
    """Two stores (folder, manifest) hold the same manifest, bar the time of creation, and the same arrays."""
    (a_dir, a_manifest), (b_dir, b_manifest) = a, b
    a_manifest, b_manifest = dict(a_manifest), dict(b_manifest)
    a_manifest.pop("created_utc"), b_manifest.pop("created_utc")
    assert b_manifest["transform"] == a_manifest["transform"]  # the fitted transform first: its diff is readable
    assert json.dumps(b_manifest, sort_keys=True) == json.dumps(a_manifest, sort_keys=True)
    for name, array in a_manifest["arrays"].items():
        x, y = np.load(a_dir / array["file"]), np.load(b_dir / array["file"])
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name


def _in_pieces(monkeypatch, cfg: DataConfig, out, **options) -> dict:
    """prepare_store(cfg, out, **options), failing the test where it falls back to one piece (entry.given): a store
    compared with the one of one piece must have been prepared in pieces, or the test compares that store with
    itself."""
    def one_piece(*args, **kwargs):
        raise AssertionError("prepared as one piece, not in pieces")

    with monkeypatch.context() as patched:
        patched.setattr(entry, "given", one_piece)
        return prepare_store(cfg, out, **options)


def test_a_store_prepared_in_pieces_is_the_store_prepared_in_memory(panel, whole, tmp_path, monkeypatch):
    cfg = _config(panel)
    plan = plan_pieces(cfg, piece_rows=1, min_rows=0)
    assert [{series_key(s, cfg.contracts) for s in p.symbols} for p in plan] == [{"ES"}, {"NQ"}, {"YM"}]
    assert plan[0].symbols == ("ESH4", "ESH4-ESM4", "ESM4", "ESU4")
    pieces = _in_pieces(monkeypatch, cfg, tmp_path / "pieces", piece_rows=1, workers=2, min_rows=0)
    assert len(whole[1]["windows"]["series_names"]) == 3 and whole[1]["transform"]["scalers"]["season"]
    _assert_same_store(whole, (tmp_path / "pieces", pieces))
    assert pieces["arrays"]["own_log_range"]["shape"] == [pieces["summary"]["rows"]]  # written by the trails


def test_symbols_the_plans_sample_missed_go_to_the_piece_of_their_series_key(tmp_path, fixtures_dir, monkeypatch):
    """The plan counts the symbols of 2 of the 10 daily files here (days 3 and 8). The spreads trade on day 5 only,
    and a root 6E (whose key sorts before every piece's) on day 6 only: the chunks holding them spill strings, the
    spreads join their roots' pieces and 6E the first piece, and the store is the one prepared in memory."""
    es = pl.read_parquet(fixtures_dir / "es_fut_ohlcv1m_databento.parquet")
    es = es.filter(pl.col("ts_event") < pl.col("ts_event").min() + pl.duration(days=10))
    day = pl.col("ts_event").dt.date().rank("dense") - 1  # 0..9
    spread = pl.col("symbol").str.contains("-")
    euro = es.filter((day == 6) & (pl.col("symbol") == "ESH4")).with_columns(
        symbol=pl.lit("6EH4"), instrument_id=pl.col("instrument_id") + 9000,
        **{c: pl.col(c) / 4000 for c in ("open", "high", "low", "close")})
    folder = _write_panel(es.filter(~spread | (day == 5)), tmp_path / "panel")
    euro_file = folder / f"date={euro['ts_event'].dt.date()[0]}" / "part-0.parquet"
    bars = pl.read_parquet(euro_file)
    pl.concat([bars, euro.select(bars.columns).cast(dict(bars.schema))]).sort("ts_event", "instrument_id").write_parquet(
        euro_file)
    cfg = _config(folder)
    monkeypatch.setattr(pieces_module, "PLAN_FILES", 2)
    plan = plan_pieces(cfg, piece_rows=1, min_rows=0)
    planned = {s for p in plan for s in p.symbols}
    assert [p.symbols[0] for p in plan] == ["ESH4", "NQH4", "YMH4"] and not planned & {"6EH4", "ESH4-ESM4"}
    route = route_of(plan, cfg.contracts)
    assert [route.piece_of(s) for s in ("6EH4", "ESH4-ESM4", "NQH4-NQM4", "YMM4", "ZZH4")] == [0, 0, 1, 2, 2]
    whole = prepare_store(cfg, tmp_path / "whole", workers=0)
    assert {"6E", "ES", "NQ", "YM"} <= set(whole["windows"]["series_names"])
    pieces = _in_pieces(monkeypatch, cfg, tmp_path / "pieces", piece_rows=1, workers=2, min_rows=0)
    _assert_same_store((tmp_path / "whole", whole), (tmp_path / "pieces", pieces))


def test_the_plan_weighs_the_symbols_of_evenly_spaced_files_by_their_share_of_the_bytes(panel, monkeypatch):
    files = sorted(panel.rglob("*.parquet"))
    assert plan_sample(files) == files  # 10 files: all of them
    monkeypatch.setattr(pieces_module, "PLAN_FILES", 4)
    assert plan_sample(files) == [files[1], files[3], files[6], files[8]]
    rows = pl.scan_parquet(files).select(pl.len()).collect().item()
    plan = plan_pieces(_config(panel), piece_rows=1, min_rows=0)
    assert len(plan) == 3 and abs(sum(p.rows for p in plan) / rows - 1) < 0.2  # about all the bars


@pytest.mark.parametrize("keyed", [False, True])
def test_pieces_map_their_rows_onto_a_grid_that_is_not_one_lattice_as_in_memory(tmp_path, fixtures_dir,
                                                                                   monkeypatch, keyed):
    """NQ's bars 30 s after the others': the forecast steps of an origin are then not consecutive grid rows, and
    the store keeps every step's row (known_index), which the pieces look up in the panel's tables; with events
    keyed to ES and to NQ's contract NQH4 (`keyed`), the keyed rows' steps move into their key's block."""
    es = pl.read_parquet(fixtures_dir / "es_fut_ohlcv1m_databento.parquet")
    es = es.filter(pl.col("ts_event") < pl.col("ts_event").min() + pl.duration(days=4))
    cfg = _config(_write_panel(es, tmp_path / "panel", {"NQ": 30}))
    if keyed:
        times = pl.datetime_range(es["ts_event"].min(), es["ts_event"].max(), "5h", eager=True)
        pl.DataFrame({"time": times, "name": "expiry", "symbol": (["ES", "NQH4", ""] * len(times))[:len(times)]}
                     ).write_csv(tmp_path / "events.csv")
        cfg = dataclasses.replace(cfg, events=str(tmp_path / "events.csv"))
    whole = prepare_store(cfg, tmp_path / "whole", workers=0)
    pieces = _in_pieces(monkeypatch, cfg, tmp_path / "pieces", piece_rows=1, workers=1, min_rows=0)
    assert "known_index" in pieces["arrays"]
    _assert_same_store((tmp_path / "whole", whole), (tmp_path / "pieces", pieces))


def test_pieces_are_fitted_again_when_cleaning_moves_the_expected_cuts(panel, whole, tmp_path, monkeypatch):
    """The cuts expected from the raw bars' span (the training statistics are gathered under them as the pieces
    load) differ from the cleaned bars' here: the statistics are gathered again under the true cuts. In this
    process (workers=1), so that the expected cuts can be moved."""
    cuts, fits, refit = [], [], driver.fit

    def moved(cfg, lo, hi):
        cuts.append(split_times(cfg, lo, hi))
        return (cuts[-1][0] - 1, cuts[-1][1]) if len(cuts) == 1 else cuts[-1]

    def fit(*args):
        fits.append(args[1])
        return refit(*args)

    monkeypatch.setattr(read_stage, "split_times", moved)
    monkeypatch.setattr(driver, "split_times", moved)
    monkeypatch.setattr(driver, "fit", fit)
    pieces = _in_pieces(monkeypatch, _config(panel), tmp_path / "pieces", piece_rows=1, workers=1, min_rows=0)
    assert len(cuts) == 2 and fits == [0, 1, 2]
    _assert_same_store(whole, (tmp_path / "pieces", pieces))


def test_a_small_panel_a_bounded_read_and_fill_gaps_are_prepared_in_one_piece(panel):
    cfg = DataConfig(paths=(str(panel),))
    assert len(plan_pieces(cfg)) == 1 and len(plan_pieces(cfg, piece_rows=1, min_rows=0)) == 3
    for other in (DataConfig(paths=(str(panel),), since="2024-02-20"), DataConfig(paths=(str(panel),), fill_gaps=True)):
        assert len(plan_pieces(other, piece_rows=1, min_rows=0)) == 1
        assert not may_piece(other, min_rows=0)  # so no worker is started before planning either


def test_workers_start_before_planning_only_where_the_files_may_hold_min_rows_bars(panel):
    size = sum(f.stat().st_size for f in panel.rglob("*.parquet"))
    cfg = DataConfig(paths=(str(panel),))
    assert may_piece(cfg, min_rows=size) and not may_piece(cfg, min_rows=size + 1) and not may_piece(cfg)


def test_workers_0_prepares_in_memory_even_with_the_workers_the_cli_opened(panel, whole, tmp_path, monkeypatch):
    """`foxhunt prepare --workers 0` opens its (in-process) workers before it plans, as every `prepare` does: the
    panel is still prepared whole, in memory, not in pieces."""
    called = []
    monkeypatch.setattr(entry, "plan_pieces", lambda *args, **kwargs: called.append(args) or [])
    with open_workers("local", 0) as pool:
        manifest = prepare_store(_config(panel), tmp_path / "store", piece_rows=1, workers=0, min_rows=0, pool=pool)
    assert called == []
    _assert_same_store(whole, (tmp_path / "store", manifest))


def test_series_keys_group_a_root_with_its_spreads():
    assert [series_key(s, "continuous") for s in ("ESH4", "ESH4-ESM4", " NQZ24", "SPY", "1H4")] == [
        "ES", "ES", "NQ", "SPY", "1H4"]
    assert series_key("ESH4", "each") == "ESH4"


def test_moments_merge_exactly_and_the_median_of_counted_gaps_is_numpys():
    rng = np.random.default_rng(0)
    x, g = rng.normal(3.0, 2.0, 1000), np.sort(rng.integers(0, 4, 1000))
    whole = column_moments(x, np.ones(1000, bool), g, 4, "x")
    cut = int(np.searchsorted(g, 2))
    parts = concat([column_moments(x[:cut], np.ones(cut, bool), g[:cut], 2, "x"),
                    column_moments(x[cut:], np.ones(1000 - cut, bool), g[cut:] - 2, 2, "x")])
    assert all(np.array_equal(whole[k], parts[k]) for k in whole)
    n, mean, m2 = pooled(whole["x:n"], whole["x:mean"], whole["x:m2"])
    assert n == 1000 and np.isclose(mean, x.mean(), rtol=1e-14) and np.isclose(m2, ((x - x.mean()) ** 2).sum())
    for gaps in (np.array([60, 60, 120, 60, 30]), np.array([60, 120, 120, 60]), np.array([5])):
        halves = [np.unique(gaps[:2], return_counts=True), np.unique(gaps[2:], return_counts=True)]
        assert counted_median([h for h in halves if len(h[0])]) == int(np.median(gaps))


def test_rows_find_their_origin_through_the_lattice_table_as_by_binary_search():
    rng = np.random.default_rng(1)
    minutes = np.unique(rng.integers(0, 5000, 700)) * 60 * 10**9 + 1_700_000_000 * 10**9  # (O,) with gaps
    for origins in (minutes, np.sort(np.r_[minutes, minutes[-1] + 1])):  # a lattice; one 1 ns off it: none
        ts = rng.choice(origins, 3000)  # (n,)
        table = origin_table(origins)
        assert (table is None) == (origins is not minutes)
        lattice, slots = (None, None) if table is None else table
        assert np.array_equal(origin_rows(lattice, slots, None if table is not None else origins, ts),
                              np.searchsorted(origins, ts))


def test_a_piece_of_daily_bars_in_an_intraday_panel_is_refused():
    minute, day = (np.array([60 * 10**9]), np.array([9])), (np.array([86_400 * 10**9]), np.array([9]))

    def load(gaps, name):
        return SimpleNamespace(gaps=gaps, names=[name])

    driver.check_intraday([load(minute, "ES"), load((day[0][:0], day[1][:0]), "NQ")], True)  # no gap: not judged
    with pytest.raises(InputError, match="YM .. YM hold daily bars"):
        driver.check_intraday([load(minute, "ES"), load(day, "YM")], True)


def test_the_cli_can_start_the_prepare_worker_before_it_imports_polars():
    """`foxhunt prepare` starts its worker processes (executor.open_workers) before it imports the command's libraries, so
    that they import while it does: the CLI and the executor import no polars, numpy or torch."""
    code = ("import sys; import foxhunt.cli, foxhunt.data.prepare.executor, foxhunt.settings; "
            "print(sorted(m for m in ('polars', 'numpy', 'torch', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]"]


def test_prepare_in_pieces_never_imports_torch(panel, tmp_path):
    """`foxhunt prepare` needs no torch (2.4 s and ~190 MiB to import): neither the CLI's modules nor a store
    prepared in pieces, summary and manifest included, import it in the preparing process."""
    code = (
        "import sys\n"
        "import foxhunt.cli, foxhunt.settings\n"
        "from foxhunt.data.config import DataConfig\n"
        "from foxhunt.data.prepare.entry import prepare_store\n"
        f"cfg = DataConfig(paths=({str(panel)!r},), encoder_length=16, horizon=3, val_fraction=0.2, test_fraction=0.2)\n"
        f"m = prepare_store(cfg, {str(tmp_path / 'store')!r}, piece_rows=1, workers=2, min_rows=0)\n"
        "print(len(m['windows']['series_names']), 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["3", "False"]


@pytest.mark.parametrize("own", [True, False])
def test_pieces_are_written_by_the_trail_jobs_or_after_them_alike(panel, whole, tmp_path, monkeypatch, own):
    """A piece's trail job writes the piece when its series' own statistics complete the scalers; otherwise a write
    job does, with the whole panel's scalers. Either way the store is the one prepared in memory."""
    written, original = [], driver.write

    def write(*args):
        written.append(args[1].k)
        return original(*args)

    monkeypatch.setattr(driver, "write", write)
    if not own:
        monkeypatch.setattr(write_stage, "own_scalers", lambda *args: None)
    pieces = _in_pieces(monkeypatch, _config(panel), tmp_path / "pieces", piece_rows=1, workers=1, min_rows=0)
    assert written == ([] if own else [0, 1, 2])
    _assert_same_store(whole, (tmp_path / "pieces", pieces))


def test_own_scalers_are_the_panels_for_the_pieces_series_or_none_where_pooled_values_are_read():
    from foxhunt.data.features.fitted import Moments, Scalers, SeriesScalers
    from foxhunt.data.features.scaling import with_vol_stats

    def entry(x: float) -> SeriesScalers:
        return SeriesScalers({"x": Moments(x, 1.0)}, 0.0, 1.0, 1.0)

    cfg = DataConfig(vol_features=False)
    first = Scalers({"A": entry(1), "B": entry(2), "C": entry(3)}, entry(0))
    mom = {"log_vol:n": np.array([5, 4, 6]), "log_vol:mean": np.array([0.5, -0.2, 0.1]),
           "log_vol:m2": np.array([2.0, 1.5, 3.0])}
    panel = with_vol_stats(first, cfg, mom, ["A", "B", "C"], np.ones(3, dtype=bool))
    piece = {k: v[1:] for k, v in mom.items()}  # the piece of series B and C
    own = own_scalers(first, cfg, piece, ["B", "C"])
    assert own.series["B"] == panel.series["B"] and own.series["C"] == panel.series["C"]
    assert own.series["A"] == entry(1) and first.series["B"] == entry(2)  # the first scalers are untouched
    assert own_scalers(first, cfg, piece, ["B", "D"]) is None  # D has no training rows: pooled values
    for n, m2 in (([1, 6], [0.0, 3.0]), ([4, 6], [0.0, 3.0])):  # one row, a constant: the pooled std is read
        bad = {**piece, "log_vol:n": np.array(n), "log_vol:m2": np.array(m2)}
        assert own_scalers(first, cfg, bad, ["B", "C"]) is None


@pytest.mark.parametrize("options", [{"vol_features": True, "scaling": "volatility"},
                                     {"target": "log_range", "scaling": "volatility", "anchor": "auto"},
                                     {"vol_estimator": "range", "vol_features": True}])
def test_trail_jobs_write_the_in_memory_rows_under_other_scalers(panel, tmp_path, options, monkeypatch):
    """The trailing inputs a piece standardizes with its own statistics (vol features, log_range's EWMA center and
    scale, the range estimator) are the whole panel's, bit for bit."""
    cfg = dataclasses.replace(_config(panel), **options)
    whole = prepare_store(cfg, tmp_path / "whole", workers=0)
    pieces = _in_pieces(monkeypatch, cfg, tmp_path / "pieces", piece_rows=1, workers=1, min_rows=0)
    _assert_same_store((tmp_path / "whole", whole), (tmp_path / "pieces", pieces))
    # the contracts' own moves the baselines read: log returns too for a range target (GARCH-t on the range)
    own = {k for k in pieces["arrays"] if k.startswith("own_")}
    assert own == ({"own_log_range", "own_log_return"} if cfg.target == "log_range" else {"own_log_range"})


def test_a_piece_that_fails_is_the_error_reported_and_nothing_is_left(tmp_path, fixtures_dir):
    """NQ's bars (the middle piece of three) hold a price of zero, which its load refuses in a worker process: the
    error is NQ's, raised once the other pieces' jobs have ended, nothing is left under --out or beside it, and no
    process hangs."""
    es = pl.read_parquet(fixtures_dir / "es_fut_ohlcv1m_databento.parquet")
    es = es.filter(pl.col("ts_event") < pl.col("ts_event").min() + pl.duration(days=4))
    folder = _write_panel(es, tmp_path / "panel")
    day = sorted(folder.glob("date=*/part-0.parquet"))[1]
    bars = pl.read_parquet(day)
    first_nq = (pl.col("symbol").str.starts_with("NQ") & ~pl.col("symbol").str.contains("-")).arg_true().first()
    bars.with_columns(low=pl.when(pl.int_range(pl.len()) == first_nq).then(0.0).otherwise(pl.col("low"))
                      ).write_parquet(day)
    out = tmp_path / "out" / "store"
    with pytest.raises(InputError, match="NQ"):
        prepare_store(_config(folder), out, piece_rows=1, workers=2, min_rows=0)
    assert not out.parent.exists() or not any(out.parent.iterdir())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([60, 60, 60, 120, 3600, 7, 0, -60]), max_size=300), st.integers(0, 3))
def test_value_counts_and_gap_counts_are_the_sorted_distinct_values_and_their_counts(steps, cut):
    ts = np.cumsum(np.array([0, *steps], dtype=np.int64)) * 10**9  # (N,) with repeats and steps back
    sidx = np.sort(np.arange(len(ts)) * 4 // len(ts) + cut) if len(ts) else np.zeros(0, np.int64)
    gaps = np.diff(ts)[sidx[1:] == sidx[:-1]]
    gaps = gaps[gaps > 0]
    want = np.unique(gaps, return_counts=True)
    for values, counts in (value_counts(gaps), gap_counts(ts, sidx, 0)[0]):
        assert values.dtype == np.int64 and counts.dtype == np.int64
        assert np.array_equal(values, want[0]) and np.array_equal(counts, want[1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([60, 60, 60, 120, 3600, 7, 0]), max_size=300), st.integers(0, 3),
       st.integers(0, 100 * 60))
def test_training_gap_counts_are_those_of_the_rows_before_the_cut(steps, first, at):
    """Rows sorted by series and time, as a loaded piece holds them: the gaps of the rows before the cut, each
    series' first rows, are the gaps whose later bar is before it."""
    sidx = np.sort(np.arange(len(steps) + 1) * 4 // (len(steps) + 1) + first)  # (N,) four series
    ts = np.cumsum(np.array([0, *steps], dtype=np.int64)) * 10**9
    starts = np.r_[0, np.flatnonzero(np.diff(sidx)) + 1]  # each series' first row
    ts = ts - np.repeat(ts[starts], np.diff(np.r_[starts, len(ts)]))  # (N,) each series from 0: the cut falls in all
    cut_ns = at * 10**9
    before = ts < cut_ns
    want = gap_counts(ts[before], sidx[before], cut_ns)[0]
    got = gap_counts(ts, sidx, cut_ns)[1]
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_rtype_sets_per_file_with_missing_rtypes():
    frame = pl.DataFrame({"file_idx": pl.Series([0, 0, 2, 2, 2, 3], dtype=pl.UInt32),
                          "rtype": pl.Series([33, 33, None, 34, 33, None], dtype=pl.UInt8)})
    assert rtype_sets(frame, 5) == [{33}, set(), {33, 34}, set(), set()]
    assert rtype_sets(frame.with_columns(pl.lit(None, pl.UInt8).alias("rtype")), 2) == [set(), set()]


def test_present_symbols_are_the_codes_in_use_as_strings():
    codes = pl.Series("symbol", ["NQM4", "ESH4", "NQM4"]).cast(pl.Enum(["A", "ESH4", "NQM4", "ZZ"]))
    got = present(codes)
    assert got.name == "symbol" and got.dtype == pl.String
    assert sorted(got.to_list()) == sorted(codes.cast(pl.String).unique().to_list()) == ["ESH4", "NQM4"]


def test_a_store_prepared_on_a_dask_cluster_is_the_local_one(panel, tmp_path, monkeypatch):
    """`--executor dask://HOST:PORT`: the pieces run on a cluster's 2 worker processes, the store array for array
    and key for key the one the local worker processes write."""
    distributed = pytest.importorskip("distributed")
    cfg = _config(panel)
    local = _in_pieces(monkeypatch, cfg, tmp_path / "local", piece_rows=1, workers=2, min_rows=0)
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as c:
        address = "dask://" + c.scheduler_address.removeprefix("tcp://")
        remote = _in_pieces(monkeypatch, cfg, tmp_path / "dask", piece_rows=1, workers=2, min_rows=0,
                            executor=address)
    _assert_same_store((tmp_path / "local", local), (tmp_path / "dask", remote))


def test_an_executor_that_is_not_one_or_does_not_answer_is_an_error_for_people(panel, tmp_path):
    cfg = _config(panel)
    with pytest.raises(InputError, match="is not an executor"):
        prepare_store(cfg, tmp_path / "a", executor="spark://x")
    pytest.importorskip("distributed")
    with pytest.raises(InputError, match="no Dask scheduler answers"):
        prepare_store(cfg, tmp_path / "b", executor="dask://127.0.0.1:9", min_rows=0, piece_rows=1)


def test_a_daily_panel_on_the_xshg_calendar_in_pieces_is_the_one_in_memory(xshg_daily_file, xshg_days, tmp_path,
                                                                           monkeypatch):
    """Daily bars of three commodities on XSHG's trading days with --calendar XSHG: both paths cut on the same
    trading day (the pieces find it among their own distinct times) and keep the same holiday grid, array for
    array."""
    pytest.importorskip("pandas_market_calendars")
    cfg = DataConfig(paths=(str(xshg_daily_file),), calendar="XSHG", encoder_length=16, horizon=5)
    whole = prepare_store(cfg, tmp_path / "whole", workers=0)
    pieces = _in_pieces(monkeypatch, cfg, tmp_path / "pieces", piece_rows=1, workers=1, min_rows=0)
    _assert_same_store((tmp_path / "whole", whole), (tmp_path / "pieces", pieces))
    summary = whole["summary"]
    for cut in (summary["train_end"], summary["val_end"]):  # a trading day's bar
        assert cut.endswith("T00:00:00Z") and np.datetime64(cut[:10]) in xshg_days
    assert summary["windows_with_gaps"] == 0 and "2016-10-03" in whole["transform"]["session"]["holidays"]


# A panel like the Chinese "main contract" one (bars/chains.py): AU0 reads as a contract of root A, CF0 and CU0 as
# contracts of root C, but each is a market of its own, and the series names A0 < AU0 < C0 < CF0 < CS0 < CU0 do not
# sort as their keys A < A0 < C < C0 < CS0 do.
CN = {"A0": 4_000.0, "AU0": 300.0, "C0": 2_000.0, "CF0": 15_000.0, "CS0": 2_500.0, "CU0": 40_000.0, "M0": 3_000.0}


def _cn_panel(path, bad: dict[str, int] | None = None):
    """A year of daily bars (naive midnight stamps, as the vendor's) of each CN symbol, a seeded random walk; `bad`:
    symbol -> how many of its bars, every 7th from its 10th, have a low above their close."""
    rng = np.random.default_rng(3)
    days = pl.date_range(dt.date(2014, 1, 1), dt.date(2014, 12, 31), eager=True)
    days = days.filter(days.dt.weekday() <= 5).cast(pl.Datetime("us"))
    frames = []
    for symbol, level in CN.items():
        close = level * np.exp(np.cumsum(rng.normal(0, 0.01, len(days))))
        low = close * 0.99
        low[10:10 + 7 * (bad or {}).get(symbol, 0):7] = close[10:10 + 7 * (bad or {}).get(symbol, 0):7] * 1.01
        frames.append(pl.DataFrame({"timestamp": days, "symbol": symbol, "open": close, "high": close * 1.01,
                                    "low": low, "close": close, "volume": rng.uniform(1e4, 2e4, len(days))}))
    pl.concat(frames).sort("timestamp", "symbol").write_parquet(path)
    return path


def _daily(path) -> DataConfig:
    return DataConfig(paths=(str(path),), encoder_length=16, horizon=3, val_fraction=0.2, test_fraction=0.2)


def test_symbols_kept_apart_are_prepared_in_pieces_of_whole_name_ranges(tmp_path, monkeypatch):
    """--contracts auto keeps AU0, CF0 and CU0 their own series: the pieces are made of the roots and symbols whose
    names' ranges overlap (A .. AU0 holds A0; C .. CU0 holds C0 and CS0), so they stay in name order and the panel
    is prepared in pieces, not in memory, into the store prepared in memory."""
    cfg = _daily(_cn_panel(tmp_path / "cn.parquet"))
    plan = plan_pieces(cfg, piece_rows=1, min_rows=0)
    assert [sorted(p.symbols) for p in plan] == [["A0", "AU0"], ["C0", "CF0", "CS0", "CU0"], ["M0"]]
    assert route_of(plan, cfg.contracts).first_keys == ("A", "C", "M0")
    whole = prepare_store(cfg, tmp_path / "whole", workers=0)
    assert whole["windows"]["series_names"] == sorted(CN)
    pieces = _in_pieces(monkeypatch, cfg, tmp_path / "pieces", piece_rows=1, workers=1, min_rows=0)
    _assert_same_store((tmp_path / "whole", whole), (tmp_path / "pieces", pieces))


def test_pieces_out_of_name_order_are_prepared_in_memory_with_a_warning(tmp_path, monkeypatch, caplog):
    """Pieces made key by key (as the plan made them before name ranges) come out of name order: the panel is then
    prepared in memory, correctly, and one warning says that the memory bound is lost."""
    cfg = _daily(_cn_panel(tmp_path / "cn.parquet"))
    monkeypatch.setattr(pieces_module, "_groups", lambda by_key, contracts: [(k, [k]) for k in sorted(by_key)])
    whole = prepare_store(cfg, tmp_path / "whole", workers=0)
    manifest = prepare_store(cfg, tmp_path / "fallback", piece_rows=1, workers=1, min_rows=0)
    _assert_same_store((tmp_path / "whole", whole), (tmp_path / "fallback", manifest))
    said = [r for r in caplog.records if "name order" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"
    assert "(A0 after AU0)" in said[0].getMessage() and "not a piece's" in said[0].getMessage()


def test_the_share_of_bad_bars_is_judged_over_the_panel_in_pieces_as_in_memory(tmp_path, monkeypatch):
    """6 bad bars of M0's 261 (2.3%) are 0.3% of the panel's 1,827: dropped, in pieces as in memory; 31 of
    C0's (2.0% of the panel) stop both with the same line, naming the first bad bar read and the panel's share."""
    cfg = _daily(_cn_panel(tmp_path / "cn.parquet", {"M0": 6}))
    whole = prepare_store(cfg, tmp_path / "whole", workers=0)
    assert whole["summary"]["checks"]["inconsistent_rows_dropped"] == 6
    pieces = _in_pieces(monkeypatch, cfg, tmp_path / "pieces", piece_rows=1, workers=1, min_rows=0)
    _assert_same_store((tmp_path / "whole", whole), (tmp_path / "pieces", pieces))
    cfg = _daily(_cn_panel(tmp_path / "worse.parquet", {"M0": 6, "C0": 31}))
    with pytest.raises(InputError) as in_memory:
        prepare_store(cfg, tmp_path / "w1", workers=0)
    with pytest.raises(InputError) as in_pieces:
        _in_pieces(monkeypatch, cfg, tmp_path / "w2", piece_rows=1, workers=1, min_rows=0)
    assert str(in_pieces.value) == str(in_memory.value)
    assert "37 of 1827 rows (2.0%)" in str(in_memory.value) and "data row 73 (C0 at 2014-01-15" in str(in_memory.value)


def test_a_piece_whose_bars_are_all_bad_is_prepared_in_memory_as_the_panel_is(tmp_path, monkeypatch, caplog):
    """ZZ0's 15 bars all have a low above their close: 0.8% of the panel, dropped in memory with its series; its
    piece would hold nothing, so the panel is prepared in memory, into the same store, with a warning."""
    path = _cn_panel(tmp_path / "cn.parquet")
    bars = pl.read_parquet(path)
    zz = bars.filter(pl.col("symbol") == "M0").head(15).with_columns(symbol=pl.lit("ZZ0"), low=pl.col("close") * 1.02)
    pl.concat([bars, zz]).write_parquet(path)
    cfg = _daily(path)
    whole = prepare_store(cfg, tmp_path / "whole", workers=0)
    assert "ZZ0" not in whole["windows"]["series_names"]
    manifest = prepare_store(cfg, tmp_path / "fallback", piece_rows=1, workers=1, min_rows=0)
    _assert_same_store((tmp_path / "whole", whole), (tmp_path / "fallback", manifest))
    said = [r.getMessage() for r in caplog.records if "every bar of the piece" in r.getMessage()]
    assert said == ["every bar of the piece of ZZ0 is a bad row: preparing the panel in memory, where its memory is "
                    "the whole panel's, not a piece's"]


def test_an_anchored_store_prepared_in_pieces_is_the_one_prepared_in_memory(panel, tmp_path, monkeypatch):
    """--anchor garch_t: each series' GARCH-t is fitted in the load stage of its piece (a worker process, one BLAS
    thread) or here (every core); the fits, saved with the store, and so the anchor rows, are the same bit for bit."""
    pytest.importorskip("arch")
    cfg = dataclasses.replace(_config(panel), anchor="garch_t")
    whole = prepare_store(cfg, tmp_path / "whole", workers=0)
    pieces = _in_pieces(monkeypatch, cfg, tmp_path / "pieces", piece_rows=1, workers=2, min_rows=0)
    assert set(whole["transform"]["anchor"]["params"]) == {"ES", "NQ", "YM"}  # fitted, none on the fallback
    _assert_same_store((tmp_path / "whole", whole), (tmp_path / "pieces", pieces))
    assert "anchor" in pieces["arrays"]
