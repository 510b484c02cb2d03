"""Reading: every supported layout of the same bars gives the same raw frame."""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.io.discover import expand_paths
from foxhunt.data.io.read import FileFormat, read_bars
from foxhunt.errors import InputError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
ES_1M = FIXTURES / "es_fut_ohlcv1m_databento.parquet"
ES_RAW = FIXTURES / "es_fut_ohlcv1m_databento_raw.parquet"
VALUES = ["open", "high", "low", "close", "volume"]
UTC = dt.UTC


def _ts(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def test_generic_csv_with_mixed_case_headers_gives_hand_values(tmp_path):
    path = tmp_path / "bars.csv"
    path.write_text(
        "Date,Symbol,Open,HIGH,low,Close,Volume\n2024-01-02,AAA,10,12,9,11,100\n2024-01-03,AAA,11,13,10.5,12.5,200\n"
    )
    raw, files = read_bars([str(path)])
    assert files == [{"path": str(path), "size_bytes": path.stat().st_size, "rows": 2, "timestamps": "naive"}]
    assert raw.schema["ts"] == pl.Datetime("ns", "UTC")
    assert raw.get_column("ts").to_list() == [_ts(2024, 1, 2), _ts(2024, 1, 3)]
    assert raw.select(VALUES).rows() == [(10.0, 12.0, 9.0, 11.0, 100.0), (11.0, 13.0, 10.5, 12.5, 200.0)]
    assert raw.get_column("symbol").to_list() == ["AAA", "AAA"]
    assert raw.get_column("row").to_list() == [0, 1]


def test_time_parsing_variants_all_give_utc_ns(tmp_path):
    """tz-aware text, naive text, epoch seconds and date + time columns."""
    cases = {
        "aware.csv": "timestamp,open,high,low,close,volume\n2024-03-08T08:30:00-06:00,1,1,1,1,1\n",
        "naive.csv": "datetime,open,high,low,close,volume\n2024-03-08 14:30:00,1,1,1,1,1\n",
        "epoch.csv": "time,open,high,low,close,volume\n1709908200,1,1,1,1,1\n",
        "split.csv": "date,time,open,high,low,close,volume\n2024-03-08,14:30:00,1,1,1,1,1\n",
        "epoch_ns.csv": "ts_event,open,high,low,close,volume\n1709908200000000000,1,1,1,1,1\n",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        raw, _ = read_bars([str(tmp_path / name)])
        assert raw.get_column("ts").to_list() == [_ts(2024, 3, 8, 14, 30)], name
        assert raw.get_column("symbol").to_list() == [
            name.removesuffix(".csv")
        ]  # no symbol column: file stem


def test_yyyymmdd_integer_dates(tmp_path):
    path = tmp_path / "ymd.csv"
    path.write_text("date,open,high,low,close,volume\n20240308,1,1,1,1,1\n20240311,1,1,1,1,1\n")
    raw, _ = read_bars([str(path)])
    assert raw.get_column("ts").to_list() == [_ts(2024, 3, 8), _ts(2024, 3, 11)]


def test_timestamp_and_symbol_overrides(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("when,date,name,open,high,low,close,volume\n2024-01-02 10:00,1999-01-01,ZZ,1,2,1,2,5\n")
    raw, _ = read_bars([str(path)], FileFormat(timestamp_col="WHEN", symbol_col="name"))
    assert raw.get_column("ts").to_list() == [_ts(2024, 1, 2, 10)]
    assert raw.get_column("symbol").to_list() == ["ZZ"]


@pytest.mark.parametrize("column", ["Contract", "contract", "Local_Symbol", "Instrument", "RIC", "ts_code"])
def test_vendor_symbol_columns_are_recognised(tmp_path, column):
    """A front-month export whose symbol column has another vendor's name: its two contracts roll, as they do when
    the column is named `symbol`, rather than reading as one series with the roll gap as a return."""
    path = tmp_path / "front.csv"
    rows = [("AAH4", 4, 100.0), ("AAH4", 5, 101.0), ("AAM4", 6, 104.0), ("AAM4", 7, 105.0)]
    path.write_text(f"DateTime,{column},Open,High,Low,Close,Volume\n" + "".join(
        f"2024-03-0{d} 15:00:00,{s},{c},{c + 1},{c - 1},{c},10\n" for s, d, c in rows))
    raw, _ = read_bars([str(path)])
    assert raw.get_column("symbol").to_list() == ["AAH4", "AAH4", "AAM4", "AAM4"]
    loaded = load_bars(DataConfig(paths=(str(path),)))
    assert [(r["from"], r["to"]) for r in loaded.rolls] == [("AAH4", "AAM4")]


def test_symbol_is_preferred_to_other_vendor_names(tmp_path):
    path = tmp_path / "both.csv"
    path.write_text("date,contract,symbol,open,high,low,close,volume\n2024-01-02,AAH4,AA,1,2,1,2,5\n")
    raw, _ = read_bars([str(path)])
    assert raw.get_column("symbol").to_list() == ["AA"]


@pytest.mark.parametrize("header", ["Date,Time,Contract,Open,High,Low,Last,Vol",  # CQG, IQFeed, Sierra Chart
                                    "Date,Time,Contract,Open,High,Low,Settle,Volume",  # settlement files
                                    "Date,Time,Contract,Open,High,Low,Price,Vol.",  # Investing.com
                                    "date,time,contract,o,h,l,c,v"])  # Polygon aggregates
def test_vendor_names_of_close_and_volume_read_as_close_and_volume(tmp_path, header):
    rows = "2024-03-08,14:30:00,ESH4,10,12,9,11,100\n2024-03-08,14:31:00,ESH4,11,13,10.5,12.5,200\n"
    (tmp_path / "std.csv").write_text("Date,Time,Contract,Open,High,Low,Close,Volume\n" + rows)
    (tmp_path / "vendor.csv").write_text(header + "\n" + rows)
    vendor, _ = read_bars([str(tmp_path / "vendor.csv")])
    std, _ = read_bars([str(tmp_path / "std.csv")])
    assert vendor.equals(std)
    assert vendor.select(VALUES).rows() == [(10.0, 12.0, 9.0, 11.0, 100.0), (11.0, 13.0, 10.5, 12.5, 200.0)]


def test_close_is_preferred_to_other_names_of_it(tmp_path):
    path = tmp_path / "both.csv"
    path.write_text("date,open,high,low,last,close,settle,volume\n2024-01-02,1,3,1,2.5,2,2.25,5\n")
    raw, _ = read_bars([str(path)])
    assert raw.get_column("close").to_list() == [2.0]


def test_generic_parquet_and_csv_give_identical_bars():
    a = load_bars(DataConfig(paths=(str(FIXTURES / "generic_ohlcv_daily.parquet"),)))
    b = load_bars(DataConfig(paths=(str(FIXTURES / "generic_ohlcv_daily.csv"),)))
    assert a.bars.equals(b.bars)
    assert a.bars.height == 600
    assert sorted(a.report["series"]) == ["ES", "NQ"]
    assert a.report["contracts_mode"] == "symbols"
    assert a.report["bar_interval"] == "1d"


def test_fixed_point_raw_file_matches_float_file():
    raw, _ = read_bars([str(ES_RAW)])
    flt, _ = read_bars([str(ES_1M)])
    assert raw.height == 8902
    joined = raw.join(flt, on=["instrument_id", "ts"], how="left", suffix="_f")
    assert joined.height == raw.height
    for c in VALUES:  # equal up to float rounding of the fixture's own float prices (spreads like -51.9)
        assert (joined.get_column(c) - joined.get_column(f"{c}_f")).abs().max() < 1e-9, c
    assert raw.get_column("open").max() < 6000  # scaled from 1e-9 units


def test_undef_fixed_price_becomes_null(tmp_path):
    t = pq.read_table(ES_RAW).slice(0, 4)
    close = t.column("close").to_pylist()
    close[1] = 2**63 - 1
    t = t.set_column(t.schema.get_field_index("close"), "close", pa.array(close, pa.int64()))
    pq.write_table(t, tmp_path / "undef.parquet")
    raw, _ = read_bars([str(tmp_path / "undef.parquet")])
    assert raw.get_column("close").is_null().to_list() == [False, True, False, False]


def test_reset_index_without_pandas_metadata_and_polars_variants(tmp_path):
    """Files saved after to_df().reset_index(), or from polars with us resolution / a converted tz, read the same."""
    base, _ = read_bars([str(ES_1M)])
    table = pq.read_table(ES_1M).replace_schema_metadata(None)
    pq.write_table(table.select(["ts_event", *table.column_names[:-1]]), tmp_path / "reset.parquet")
    frame = pl.read_parquet(ES_1M)
    frame.with_columns(pl.col("ts_event").dt.cast_time_unit("us")).write_parquet(tmp_path / "us.parquet")
    frame.with_columns(pl.col("ts_event").dt.convert_time_zone("America/Chicago")).write_parquet(
        tmp_path / "ct.parquet"
    )
    for name in ("reset", "us", "ct"):
        got, _ = read_bars([str(tmp_path / f"{name}.parquet")])
        assert got.drop("file_idx").equals(base.drop("file_idx")), name


def test_uint64_ns_timestamps_and_int_volume():
    raw, _ = read_bars([str(ES_RAW)])
    assert raw.get_column("ts").min() == _ts(2024, 3, 6, 23)
    assert raw.schema["volume"] == pl.Float64


def test_directory_and_glob_read_all_files_in_order(tmp_path):
    frame = pl.read_parquet(FIXTURES / "generic_ohlcv_daily.parquet").drop("symbol").head(30)
    folder = tmp_path / "ESc1"
    folder.mkdir()
    for i in range(3):
        frame.slice(10 * i, 10).write_parquet(folder / f"day{i}.parquet")
    (folder / "notes.txt").write_text("ignored")
    by_dir, files = read_bars([str(folder)])
    by_glob, _ = read_bars([str(folder / "day*.parquet")])
    assert [Path(f["path"]).name for f in files] == ["day0.parquet", "day1.parquet", "day2.parquet"]
    assert by_dir.equals(by_glob)
    assert by_dir.height == 30
    assert by_dir.get_column("symbol").unique().to_list() == ["ESc1"]  # the folder names the series


def test_a_databento_batch_folder_reads_its_bars_and_says_what_it_left_out(tmp_path, caplog):
    """A batch download: the bars, a definition file and the JSON metadata. The folder and a glob read as the bars
    file alone, and one info line names the rest; the definition file named on its own still stops, naming it."""
    pytest.importorskip("databento")
    batch = tmp_path / "GLBX-20240318-ABC"
    batch.mkdir()
    bars = batch / "glbx-mdp3-20240218-20240315.ohlcv-1m.dbn.zst"
    definition = batch / "glbx-mdp3-20240218.definition.dbn.zst"
    shutil.copy(FIXTURES / "es_fut_ohlcv1m_databento.dbn.zst", bars)
    shutil.copy(FIXTURES / "es_fut_definition_databento.dbn.zst", definition)
    for name in ("metadata.json", "condition.json", "manifest.json", "symbology.json"):
        (batch / name).write_text("{}")
    alone, _ = read_bars([str(bars)])
    for given in (str(batch), str(batch / "*.dbn.zst")):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="foxhunt.data"):
            raw, files = read_bars([given])
        assert [f["path"] for f in files] == [str(bars)] and raw.equals(alone)
        sidecars = ", and Databento's condition.json, manifest.json, metadata.json, symbology.json"
        assert caplog.messages[0] == (f"{given}: left out {definition.name} (Databento records that are not bars)"
                                      f"{sidecars if given == str(batch) else ''}")
    with pytest.raises(InputError, match="holds definition records, not OHLCV bars"):
        read_bars([str(definition)])


def test_expand_paths_single_file_uses_stem():
    assert expand_paths([str(ES_1M)]) == [(ES_1M, "es_fut_ohlcv1m_databento")]


def test_missing_symbol_with_instrument_id_stays_null_for_resolution(tmp_path):
    pl.read_parquet(ES_RAW).drop("symbol").write_parquet(tmp_path / "nosym.parquet")
    raw, _ = read_bars([str(tmp_path / "nosym.parquet")])
    assert raw.get_column("symbol").null_count() == raw.height
    assert raw.get_column("instrument_id").unique().sort().to_list() == [4001, 4002, 4003, 4501]


def test_dbn_file_equals_parquet():
    pytest.importorskip("databento")
    dbn = load_bars(DataConfig(paths=(str(FIXTURES / "es_fut_ohlcv1m_databento.dbn.zst"),)))
    par = load_bars(DataConfig(paths=(str(ES_1M),)))
    assert dbn.bars.equals(par.bars)
    assert dbn.rolls == par.rolls
    raw_dbn, _ = read_bars([str(FIXTURES / "es_fut_ohlcv1m_databento.dbn.zst")])
    raw_par, _ = read_bars([str(ES_1M)])
    assert raw_dbn.equals(raw_par)


def test_symbols_are_stripped_and_an_empty_one_is_refused_or_left_to_instrument_id(tmp_path):
    ts = [_ts(2024, 1, 2), _ts(2024, 1, 3), _ts(2024, 1, 4)]
    bars = {"ts_event": ts, **{c: [1.0, 1.0, 1.0] for c in VALUES}}
    spaced = tmp_path / "spaced.parquet"
    pl.DataFrame({**bars, "symbol": [" ESH4", "ESH4 ", "ESH4"]}).write_parquet(spaced)
    assert read_bars([str(spaced)])[0].get_column("symbol").to_list() == ["ESH4"] * 3
    empty = tmp_path / "empty.parquet"
    pl.DataFrame({**bars, "symbol": ["ESH4", " ", "ESH4"]}).write_parquet(empty)
    with pytest.raises(InputError, match=r"empty.parquet: column 'symbol' row 2 is empty; give every row a symbol"):
        read_bars([str(empty)])
    databento = tmp_path / "ids.parquet"  # with instrument ids, an empty symbol is resolved from the id later
    pl.DataFrame({**bars, "symbol": ["ESH4", "", None], "instrument_id": [1, 1, 1], "rtype": [33, 33, 33]}).write_parquet(
        databento
    )
    raw = read_bars([str(databento)])[0]
    assert raw.get_column("symbol").to_list() == ["ESH4", None, None]
    assert raw.schema["rtype"] == pl.UInt8 and raw.schema["row"] == pl.UInt32


def test_uint64_volume_past_int64_is_missing_and_the_rest_exact(tmp_path):
    path = tmp_path / "v.parquet"
    big = pl.Series([3, 2**53 + 1, 2**63 + 5], dtype=pl.UInt64)
    pl.DataFrame({"ts_event": [_ts(2024, 1, d) for d in (2, 3, 4)], **{c: [1.0] * 3 for c in VALUES[:4]}, "volume": big})\
        .write_parquet(path)
    assert read_bars([str(path)])[0].get_column("volume").to_list() == [3.0, float(2**53), None]
    path2 = tmp_path / "v2.parquet"
    pl.DataFrame({"ts_event": [_ts(2024, 1, 2)], **{c: [1.0] for c in VALUES[:4]}, "volume": big[1:2]}).write_parquet(path2)
    assert read_bars([str(path2)])[0].get_column("volume").to_list() == [float(2**53)]


def test_files_with_their_own_row_and_file_idx_columns_are_read(tmp_path):
    bars = {"row": [5, 6], "file_idx": [9, 9], "ts_event": [_ts(2024, 1, 2), _ts(2024, 1, 3)]}
    bars |= {c: [1.0, 2.0] for c in VALUES}
    folder = tmp_path / "days"
    folder.mkdir()
    for name in ("a.parquet", "b.parquet"):
        pl.DataFrame(bars).write_parquet(folder / name)
    one = read_bars([str(folder / "a.parquet")])[0]
    assert one.get_column("row").to_list() == [0, 1] and one.get_column("file_idx").to_list() == [0, 0]
    both = read_bars([str(folder)])[0]
    assert both.get_column("row").to_list() == [0, 1, 0, 1] and both.get_column("file_idx").to_list() == [0, 0, 1, 1]
