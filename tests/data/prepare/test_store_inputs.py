"""Your own inputs in pieces (prepare/fit.py, grid.py, read_stage.py): with an observed covariate (some bars dropped
for a NaN) and an observed column of the bar files, a known covariate, an events file and a real and a categorical
static column, the store prepared series group by series group is the store of the panel as one piece, array for
array and key for key, under per-series and global covariate scaling, locally and on a Dask cluster; so it is with
a categorical observed and a categorical known column (values unseen in training said once, with the panel's
counts) and with events keyed to a series and to a contract, and with --context series held by other pieces than
the series reading them; the bad-bars rule judges the whole panel."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import polars as pl
import pytest

from foxhunt.data.config import DataConfig
from foxhunt.data.features.covariate_files import held, merged
from foxhunt.data.features.covariates import coverage, read_bar_columns
from foxhunt.data.io.discover import expand_sources
from foxhunt.data.prepare import bar_columns, prepare_store
from foxhunt.data.prepare.plan import plan_pieces
from foxhunt.errors import InputError
from tests.data.prepare.test_store_pieces import _assert_same_store, _in_pieces

ROOTS = {"ES": 1.0, "NQ": 3.7, "YM": 9.1}  # root -> price factor
MINUTE = 60 * 10**9


@pytest.fixture(scope="module")
def files(tmp_path_factory, fixtures_dir) -> dict:
    """The ES 1-minute fixture's first six days as three roots with a `flow` column, one parquet file per UTC day; a
    10-minute `vix` file with one NaN (its 10 minutes of bars are dropped), an hourly known `sched` file running 5
    days past the bars, an events file and a static file keyed by series (`tick` real, `sector` text); a `regime`
    file keyed by series (text; YM's last days read `panic`, which training never saw), an hourly `session` file
    (text; `holiday` from the last day of bars on, unseen in training) and the events file with rows keyed to the
    series ES and to NQ's contract NQH4."""
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
    t10, t60 = stamps(10), stamps(60)
    late = int(ns.min()) + (int(ns.max()) - int(ns.min())) * 4 // 5  # in the test split
    regime = pl.concat([pl.DataFrame({"time": t10, "symbol": root, "regime": rng.choice(["calm", "storm"], len(t10))})
                        for root in ROOTS]).with_columns(
        regime=pl.when((pl.col("symbol") == "YM") & (pl.col("time").dt.epoch("ns") >= late)).then(pl.lit("panic"))
        .otherwise(pl.col("regime")))
    session = np.where(t60.dt.hour().to_numpy() % 3 == 0, "thin", "full").astype(object)
    session[t60.dt.epoch("ns").to_numpy() >= int(ns.max()) - 1440 * MINUTE] = "holiday"
    out |= {"regime": folder / "regime.parquet", "session": folder / "session.parquet", "keyed": folder / "keyed.csv"}
    regime.write_parquet(out["regime"])
    pl.DataFrame({"time": t60, "session": session.tolist()}).write_parquet(out["session"])
    times = t60[3::7]
    pl.DataFrame({"time": times, "name": ["FOMC decision", "expiry", "roll"] * (len(times) // 3)
                  + ["FOMC decision"] * (len(times) % 3),
                  "symbol": ["", "ES", "NQH4"] * (len(times) // 3) + [""] * (len(times) % 3)}).write_csv(out["keyed"])
    return out


def _config(files: dict, **options) -> DataConfig:
    return DataConfig(paths=(str(files["bars"]),), encoder_length=16, horizon=3, val_fraction=0.2,
                      test_fraction=0.2, observed=("vix", "flow"), known=("sched",), events=str(files["events"]),
                      covariates=(str(files["vix"]), str(files["sched"]), str(files["static"])),
                      static=("tick", "sector"), **options)


def _categorical(files: dict, keyed: bool = False, categorical: bool = True) -> DataConfig:
    """`_config` with the categorical observed `regime` and known `session` (`categorical`), and the keyed events
    (`keyed`)."""
    cfg = _config(files)
    more = {"observed": (*cfg.observed, "regime"), "known": (*cfg.known, "session"),
            "covariates": (*cfg.covariates, str(files["regime"]), str(files["session"]))} if categorical else {}
    return DataConfig(**{**cfg.__dict__, **more, **({"events": str(files["keyed"])} if keyed else {})})


def _unseen(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "unseen in training" in r.getMessage()]


@pytest.fixture(scope="module")
def wholes(files, tmp_path_factory) -> dict:
    """The in-memory store of each --covariate-scaling: {mode: (folder, manifest)}."""
    out = {}
    for mode in ("series", "global"):
        folder = tmp_path_factory.mktemp(f"whole_{mode}") / "store"
        out[mode] = folder, prepare_store(_config(files, covariate_scaling=mode), folder, workers=0)
    return out


@pytest.mark.parametrize(("mode", "workers"), [("series", 2), ("global", 1)])
def test_a_store_with_your_inputs_prepared_in_pieces_is_the_one_prepared_as_one_piece(files, wholes, tmp_path,
                                                                                   monkeypatch, mode, workers):
    cfg = _config(files, covariate_scaling=mode)
    assert len(plan_pieces(cfg, piece_rows=1, min_rows=0)) == 3
    pieces = _in_pieces(monkeypatch, cfg, tmp_path / "pieces", piece_rows=1, workers=workers, min_rows=0)
    whole = wholes[mode]
    _assert_same_store(whole, (tmp_path / "pieces", pieces))
    got = pieces["transform"]["inputs"]
    assert pieces["summary"]["inputs"]["dropped_bars"] > 0  # the NaN's bars went, in each piece
    assert got["known"][0] == "sched" and got["static_vocab"]["sector"] == ["equity", "tech"]
    assert pieces["arrays"]["static_cat"]["shape"][1] == 2 and pieces["arrays"]["static_cont"]["shape"][1] == 1
    scalers = pieces["transform"]["scalers"]
    assert scalers["user_observed"] == ["vix", "flow"] and "vix" in scalers["series"]["YM"]
    assert (scalers["series"]["ES"]["flow"] != scalers["series"]["NQ"]["flow"]) == (mode == "series")


@pytest.fixture(scope="module")
def dask():
    """`dask://HOST:PORT` of a LocalCluster of 2 worker processes, one for the module's tests."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as c:
        yield "dask://" + c.scheduler_address.removeprefix("tcp://")


def _on_dask(monkeypatch, cfg: DataConfig, out, dask: str) -> tuple:
    """The store of `cfg` prepared in pieces on the cluster `dask`: (folder, manifest)."""
    return out, _in_pieces(monkeypatch, cfg, out, piece_rows=1, workers=2, min_rows=0, executor=dask)


def test_the_bad_bars_rule_judges_the_whole_panel_of_the_pieces(files, tmp_path, monkeypatch):
    """A `vix` file of mostly NaN stops the pieced prepare with the in-memory prepare's one line."""
    vix = pl.read_parquet(files["vix"])
    bad = tmp_path / "bad.parquet"
    vix.with_columns(vix=pl.when(pl.int_range(pl.len()) % 3 == 0).then(pl.col("vix")).otherwise(None)).write_parquet(
        bad)
    cfg = _config(files)
    cfg = DataConfig(**{**cfg.__dict__, "covariates": (str(bad), *cfg.covariates[1:])})
    with pytest.raises(InputError) as one_piece:
        prepare_store(cfg, tmp_path / "a", workers=0)
    with pytest.raises(InputError) as pieced:
        _in_pieces(monkeypatch, cfg, tmp_path / "b", piece_rows=1, workers=1, min_rows=0)
    assert str(pieced.value) == str(one_piece.value) and "more than 1% of the bars" in str(pieced.value)


def _bar_inputs(files: dict, folder, numbers: range = range(4, 6), without: int | None = None) -> DataConfig:
    """`_config` of the bars with more columns of their own, read as inputs: an observed `phase` (text, numbers in the
    files `numbers`: a text column, theirs read as text too), a static `venue` (text) and `mult` (real), each
    root's; the file `without` lacks `phase`."""
    venue, mult = {"ES": "CME", "NQ": "CME", "YM": "CBOT"}, {"ES": 50.0, "NQ": 20.0, "YM": 5.0}
    days = sorted(files["bars"].iterdir())
    for i, day in enumerate(days):
        part = pl.read_parquet(day / "part-0.parquet")
        root = pl.col("symbol").str.slice(0, 2)
        part = part.with_columns(
            (pl.col("ts_event").dt.hour() % 3 + 1).cast(pl.Float64).alias("phase") if i in numbers else
            pl.when(pl.col("ts_event").dt.hour() % 3 == 0).then(pl.lit("thin")).otherwise(pl.lit("full")).alias("phase"),
            root.replace_strict(venue).alias("venue"), root.replace_strict(mult).alias("mult"))
        (folder / day.name).mkdir(parents=True)
        (part.drop("phase") if i == without else part).write_parquet(folder / day.name / "part-0.parquet")
    cfg = _config(files)
    return DataConfig(**{**cfg.__dict__, "paths": (str(folder),), "observed": (*cfg.observed, "phase"),
                         "static": (*cfg.static, "venue", "mult")})


def test_bar_file_columns_prepared_in_pieces_are_the_ones_prepared_as_one_piece(files, tmp_path, monkeypatch):
    """The bar files' own columns, read by the pieces (features/bar_columns.py): a real observed one (`flow`), a
    categorical observed one (`phase`, numbers in the chunk of the last files, text in the other), a categorical
    (`venue`) and a real (`mult`) static one; the summary reports their rows and times as in one piece."""
    cfg = _bar_inputs(files, tmp_path / "bars")
    whole = prepare_store(cfg, tmp_path / "a", workers=0)
    pieces = _in_pieces(monkeypatch, cfg, tmp_path / "b", piece_rows=1, workers=2, min_rows=0)
    _assert_same_store((tmp_path / "a", whole), (tmp_path / "b", pieces))
    got = pieces["transform"]["inputs"]
    assert got["observed_cat"] == ["phase"] and got["static_kinds"] == {"tick": "real", "sector": "categorical",
                                                                        "venue": "categorical", "mult": "real"}
    assert got["static_vocab"]["venue"] == ["CBOT", "CME"]
    assert got["bar_columns"] == ["flow", "phase", "venue", "mult"]
    rows = {c["name"]: c for c in pieces["summary"]["inputs"]["columns"]}
    assert rows["phase"]["rows"] == rows["venue"]["rows"] == 3 * 14536  # every bar's (the manifests are equal)


def test_a_piece_reads_a_column_that_is_text_in_another_piece_as_text(tmp_path):
    """A piece whose files hold a column as numbers reads it as text where another piece's files hold text, as the
    whole table does (`empty_table`'s schema); the pieces' facts merge into the whole table's."""
    t0 = np.datetime64("2024-03-01T14:30", "ns").astype(np.int64)
    for name, symbol, phase in (("a", "ESH4", [1.0, 2.5]), ("b", "NQH4", ["thin", "2"])):
        pl.DataFrame({"ts_event": pl.Series([t0, t0 + MINUTE]).cast(pl.Datetime("ns", "UTC")), "symbol": symbol,
                      **{c: [1.0, 2.0] for c in ("open", "high", "low", "close", "volume")}, "phase": phase}).write_parquet(tmp_path / f"{name}.parquet")
    paths = [str(tmp_path / "*.parquet")]
    whole = read_bar_columns(paths, ["phase"])
    chunks = [bar_columns.chunk_columns([dataclasses.replace(source, files=[f])], ["phase"], None, None, None, ())
              for source in expand_sources(paths) for f in source.files]
    empty = bar_columns.empty_table([c.clear() for c in chunks], ["phase"], whole.source)
    tables = [bar_columns.piece_table(empty, [c]) for c in chunks]
    assert empty.frame.height == 0 and empty.frame.schema == whole.frame.schema
    assert pl.concat([t.frame for t in tables]).equals(whole.frame)
    assert tables[0].frame["phase"].to_list() == ["1.0", "2.5"]
    assert merged([held(t) for t in tables]) == held(whole)
    table = dataclasses.replace(empty, held=held(whole))
    assert coverage([table], ["phase"]) == coverage([whole], ["phase"])


@pytest.mark.parametrize(("numbers", "without", "says"), [(range(6), 3, "no column 'phase'"),
                                                          (range(5), None, "holds numbers and some text")])
def test_a_bad_bar_file_column_stops_the_pieces_as_in_one_piece(files, tmp_path, monkeypatch, numbers, without, says):
    """A bar file without a declared column, and a column of mostly numbers with some text, stop the pieced prepare
    with the in-memory prepare's one line."""
    cfg = _bar_inputs(files, tmp_path / "bars", numbers, without)
    with pytest.raises(InputError) as one_piece:
        prepare_store(cfg, tmp_path / "a", workers=0)
    with pytest.raises(InputError) as pieced:
        _in_pieces(monkeypatch, cfg, tmp_path / "b", piece_rows=1, workers=2, min_rows=0)
    assert str(pieced.value) == str(one_piece.value) and says in str(pieced.value)
    assert "\n" not in str(pieced.value)


def _context(files: dict, context: tuple[str, ...], observed: bool = True, bars=None, **options) -> DataConfig:
    """`_config` with --context `context` (without its observed columns unless `observed`; of the bars `bars`)."""
    cfg = _config(files, **options)
    return DataConfig(**{**cfg.__dict__, "context": context, **({} if observed else {"observed": ()}),
                         **({} if bars is None else {"paths": (str(bars),)})})


def _late_ym(files: dict, folder):
    """The bars (a copy in `folder`) with YM's first day and every third of its other bars left out: YM starts a
    day after ES and NQ, whose first bars read none of it, and not every series has a bar at each of its times."""
    parts = sorted(files["bars"].glob("date=*/part-0.parquet"))
    for i, part in enumerate(parts):
        bars = pl.read_parquet(part)
        ym = bars["symbol"].str.starts_with("YM")
        drop = ym & ((i == 0) | (pl.int_range(bars.height, eager=True) % 3 == 0))
        (folder / part.parent.name).mkdir(parents=True)
        bars.filter(~drop).write_parquet(folder / part.parent.name / part.name)
    return folder


@pytest.mark.parametrize(("mode", "observed"), [("series", True), ("global", False)])
def test_context_prepared_in_pieces_is_the_one_prepared_as_one_piece(files, tmp_path, monkeypatch, mode, observed):
    """--context ES,YM on three pieces (ES, NQ, YM): each series reads ES's and YM's inputs, NQ's piece holding
    neither; the context columns' scalers, under per-series and global scaling, after the observed ones or alone,
    and every row are the in-memory ones."""
    cfg = _context(files, ("ES", "YM"), observed, bars=_late_ym(files, tmp_path / "bars"), covariate_scaling=mode)
    whole = prepare_store(cfg, tmp_path / "whole", workers=0)
    pieces = _in_pieces(monkeypatch, cfg, tmp_path / "pieces", piece_rows=1, workers=2, min_rows=0)
    _assert_same_store((tmp_path / "whole", whole), (tmp_path / "pieces", pieces))
    scalers = pieces["transform"]["scalers"]
    assert scalers["user_observed"] == [*(("vix", "flow") if observed else ()), "ES_log_return", "ES_log_range",
                                        "ES_log_volume", "ES_log_vol", "YM_log_return", "YM_log_range",
                                        "YM_log_volume", "YM_log_vol"]
    same = scalers["series"]["ES"]["YM_log_vol"] == scalers["series"]["YM"]["YM_log_vol"]
    assert same == (mode == "global")
    ym = np.load(tmp_path / "pieces" / "cont.npy")[:, -4:]  # (N, 4) YM's inputs as each row reads them
    ts, series = (np.load(tmp_path / "pieces" / f"{a}.npy") for a in ("ts_ns", "series_idx"))
    before = ts < ts[series == 2].min()  # ES's and NQ's rows before YM's first bar: 0
    assert before.sum() > 10 and (ym[before] == 0).all() and (ym[~before] != 0).any(axis=1).all()
    assert pieces["transform"]["inputs"]["context"] == ["ES", "YM"]


def test_a_context_series_not_in_the_data_stops_the_pieces_as_in_one_piece(files, tmp_path, monkeypatch):
    cfg = _context(files, ("ZN",))
    with pytest.raises(InputError) as one_piece:
        prepare_store(cfg, tmp_path / "a", workers=0)
    with pytest.raises(InputError) as pieced:
        _in_pieces(monkeypatch, cfg, tmp_path / "b", piece_rows=1, workers=1, min_rows=0)
    assert str(pieced.value) == str(one_piece.value) and "--context ZN: no such series" in str(pieced.value)


def test_categorical_inputs_prepared_in_pieces_are_the_ones_prepared_as_one_piece(files, tmp_path, monkeypatch, caplog):
    """A categorical observed column (YM's `panic`, in its own piece, unseen in training) and a categorical known
    column (`holiday`, unseen, at the last bars and on the grid past them): the pieces' codes and the grid's are the
    in-memory ones, and the values unseen in training are said once per column with the panel's counts."""
    cfg = _categorical(files)
    with caplog.at_level(logging.WARNING, logger="foxhunt.data"):
        whole = prepare_store(cfg, tmp_path / "whole", workers=0)
        said = _unseen(caplog)
        caplog.clear()
        pieces = _in_pieces(monkeypatch, cfg, tmp_path / "pieces", piece_rows=1, workers=2, min_rows=0)
    _assert_same_store((tmp_path / "whole", whole), (tmp_path / "pieces", pieces))
    assert _unseen(caplog) == said and len(said) == 2
    assert said[0].startswith("--known session: ") and "(holiday)" in said[0]
    assert said[1].startswith("--observed regime: ") and "(panic)" in said[1]
    got = pieces["transform"]["inputs"]
    assert got["timed_vocab"] == {"regime": ["calm", "storm"], "session": ["full", "thin"]}
    assert pieces["arrays"]["time_cat"]["shape"][1] == 2 and pieces["windows"]["n_known_cat"] == 1
    time_cat = np.load(tmp_path / "pieces" / "time_cat.npy")
    assert (time_cat > 0).any(axis=0).all() and (time_cat == 0).any(axis=0).all()


def test_keyed_events_prepared_in_pieces_are_the_ones_prepared_as_one_piece(files, tmp_path, monkeypatch):
    """Events keyed to the series ES and to NQ's contract NQH4: the grid's table holds a block per key after the
    panel's, and the pieces' rows read their key's, as in one piece."""
    cfg = _categorical(files, keyed=True, categorical=False)
    whole = prepare_store(cfg, tmp_path / "whole", workers=0)
    pieces = _in_pieces(monkeypatch, cfg, tmp_path / "pieces", piece_rows=1, workers=2, min_rows=0)
    _assert_same_store((tmp_path / "whole", whole), (tmp_path / "pieces", pieces))
    assert sorted(pieces["transform"]["inputs"]["events"]["keyed"]) == ["ES", "NQH4"]
    ts = np.load(tmp_path / "pieces" / "known_ts.npy")
    assert len(np.unique(ts)) < len(ts)  # the keys' blocks repeat the panel's steps


def test_every_kind_of_input_prepared_on_a_dask_cluster_is_the_one_piece_store(files, tmp_path, monkeypatch, dask):
    """Categorical observed and known columns, events keyed to a series and a contract, real and categorical static
    columns and a --context series, on a cluster's 2 worker processes."""
    cfg = dataclasses.replace(_categorical(files, keyed=True), context=("YM",))
    whole = prepare_store(cfg, tmp_path / "whole", workers=0)
    _assert_same_store((tmp_path / "whole", whole), _on_dask(monkeypatch, cfg, tmp_path / "dask", dask))


def test_keyed_events_naming_no_series_stop_the_pieces_as_in_one_piece(files, tmp_path, monkeypatch):
    """Keys that name no series or contract of the panel stop the pieced prepare with the in-memory one's line."""
    keyed = tmp_path / "nowhere.csv"
    pl.read_csv(files["keyed"]).with_columns(symbol=pl.lit("ZZ")).write_csv(keyed)
    cfg = DataConfig(**{**_config(files).__dict__, "events": str(keyed)})
    with pytest.raises(InputError) as one_piece:
        prepare_store(cfg, tmp_path / "a", workers=0)
    with pytest.raises(InputError) as pieced:
        _in_pieces(monkeypatch, cfg, tmp_path / "b", piece_rows=1, workers=1, min_rows=0)
    assert str(pieced.value) == str(one_piece.value) and "no symbol in the events file" in str(pieced.value)
